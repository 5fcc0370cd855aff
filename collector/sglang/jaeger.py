"""Traces as Jaeger saves them (UI "Download JSON", query API `/api/traces`) → the span form the
OTLP readers produce (`trace_spans.SpanRef`), so that `otlp.parse_otlp_traces` judges them.

Why: a responder often holds the request spans only as Jaeger gave them, and one such file
among logs was an exposure's only record (blind review 24). Jaeger's JSON is OTLP translated
by Jaeger's rules, read back here by the same rules: the process is the resource (its
`serviceName` is `service.name`, its tags the other attributes); tags are typed attributes
(binary ones base64 text, read as the bytes OTLP readers give as hex); times are microseconds;
the parent is the `CHILD_OF` reference; a span's status is its `otel.status_code` tag (or an
`error` tag), its message `otel.status_description`, and these bookkeeping tags are not
attributes, as they are not in OTLP. Span logs (OTLP's events) are not read: no OTLP reader
reads events either, SGLang puts what an abort says in attributes.

One span no reader takes is dropped alone (`malformed_span`), one trace whose own shape is not
Jaeger's alone (`malformed_jaeger_trace`). Never raises on any JSON value.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Final

from collector.sglang.outcome import MALFORMED_JAEGER_TRACE, MALFORMED_SPAN, ParseOutcome
from collector.sglang.trace_spans import SpanRef, SpanView

_HEX: Final = re.compile(r"[0-9a-fA-F]{1,32}")
_INTEGER: Final = re.compile(r"-?[0-9]{1,20}")
_INT64: Final = 1 << 63
_UINT64: Final = 1 << 64
_NS_PER_US: Final = 1000
# OTLP's status codes (`Status.StatusCode`), by the names Jaeger's tags spell them.
_STATUS_CODES: Final = {"UNSET": 0, "OK": 1, "ERROR": 2}
_STATUS_CODE_TAG: Final = "otel.status_code"
_STATUS_MESSAGE_TAG: Final = "otel.status_description"
_ERROR_TAG: Final = "error"
# Tags Jaeger's translation adds for what OTLP holds outside a span's attributes.
_BOOKKEEPING_TAGS: Final = frozenset(
    {
        _STATUS_CODE_TAG,
        _STATUS_MESSAGE_TAG,
        "span.kind",
        "otel.scope.name",
        "otel.scope.version",
        "otel.library.name",
        "otel.library.version",
        "w3c.tracestate",
        "internal.span.format",
    }
)
_TRACE_KEYS: Final = ("traceID", "spans", "processes")


class _Malformed(Exception):
    """Something in a span (or its process) that is not Jaeger's JSON model."""


def is_jaeger_document(doc: dict[str, Any]) -> bool:
    """Whether `doc` is traces as Jaeger saves them: the API's answer (`{"data": [trace, ...],
    "total": ..., "errors": ...}`) or one trace alone (`{"traceID", "spans", "processes"}`)."""
    traces = doc.get("data")
    if type(traces) is list:
        if not traces:
            return "errors" in doc and "total" in doc  # an answer that found no trace
        return any(type(t) is dict and "spans" in t and "traceID" in t for t in traces)
    return type(doc.get("spans")) is list and ("traceID" in doc or "processes" in doc)


def jaeger_spans(doc: dict[str, Any], out: ParseOutcome) -> list[SpanRef]:
    """The spans of every trace in a Jaeger document (`is_jaeger_document`)."""
    traces = doc.get("data") if "data" in doc else [doc]
    spans: list[SpanRef] = []
    for trace in traces if type(traces) is list else []:
        if (
            type(trace) is not dict
            or type(trace.get("spans")) is not list
            or type(trace.get("processes", {})) not in (dict, type(None))
        ):
            out.drop(MALFORMED_JAEGER_TRACE)
            continue
        processes = trace.get("processes") or {}
        resources: dict[str, dict[str, Any]] = {}
        for span in trace["spans"]:
            try:
                spans.append(_span(span, trace.get("traceID"), processes, resources))
            except (_Malformed, RecursionError):
                out.drop(MALFORMED_SPAN)
    return spans


def _span(
    span: Any,
    trace_id: Any,
    processes: dict[str, Any],
    resources: dict[str, dict[str, Any]],
) -> SpanRef:
    if type(span) is not dict:
        raise _Malformed
    own_trace = span.get("traceID", trace_id)
    trace = _id(own_trace, 16)
    tags = _tags(span.get("tags"))
    code, message = _status(tags)
    start = _micros(span.get("startTime"))
    end = start + _micros(span.get("duration"))
    if end * _NS_PER_US >= _UINT64:
        raise _Malformed
    view = SpanView(
        trace,
        _id(span.get("spanID"), 8),
        _parent(span, trace),
        _text(span.get("operationName")),
        start * _NS_PER_US,
        end * _NS_PER_US,
        code,
        message,
    )
    attributes = {k: v for k, v in tags.items() if k not in _BOOKKEEPING_TAGS}
    if code and type(attributes.get(_ERROR_TAG)) is bool:
        del attributes[_ERROR_TAG]
    return SpanRef(view, _resource(span, processes, resources), attributes)


def _status(tags: dict[str, Any]) -> tuple[int, str]:
    """OTLP's status code and message from the tags Jaeger wrote them as."""
    message = tags.get(_STATUS_MESSAGE_TAG)
    message = message if type(message) is str else ""
    said = tags.get(_STATUS_CODE_TAG)
    if type(said) is str and said.upper() in _STATUS_CODES:
        return _STATUS_CODES[said.upper()], message
    if tags.get(_ERROR_TAG) is True:
        return _STATUS_CODES["ERROR"], message
    return _STATUS_CODES["UNSET"], message


def _resource(
    span: dict[str, Any], processes: dict[str, Any], resources: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The span's process as OTLP resource attributes: its tags, and its service name."""
    process = span.get("process")  # a span may carry its process inline
    if process is None:
        process_id = span.get("processID")
        if process_id is None:
            return {}
        if type(process_id) is not str:
            raise _Malformed
        if process_id in resources:
            return resources[process_id]
        process = processes.get(process_id)
        if process is None:
            return {}  # a process the file does not hold: a server unnamed, as in OTLP
        resources[process_id] = _process(process)
        return resources[process_id]
    return _process(process)


def _process(process: Any) -> dict[str, Any]:
    if type(process) is not dict:
        raise _Malformed
    resource = _tags(process.get("tags"))
    service = process.get("serviceName")
    if service is not None:
        resource["service.name"] = _text(service)
    return resource


def _parent(span: dict[str, Any], trace: bytes) -> bytes:
    """The span a `CHILD_OF` reference in the same trace names (OTLP's parent); older Jaeger
    wrote it as `parentSpanID`. `FOLLOWS_FROM` references are OTLP's links, not parents."""
    references = span.get("references")
    if references is None:
        references = []
    if type(references) is not list:
        raise _Malformed
    for reference in references:
        if type(reference) is not dict:
            raise _Malformed
        kind = reference.get("refType")
        if type(kind) is not str:
            raise _Malformed
        if kind.upper() != "CHILD_OF":
            continue
        referenced_trace = reference.get("traceID")
        if referenced_trace is None or _id(referenced_trace, 16) == trace:
            return _id(reference.get("spanID"), 8)
    return _id(span.get("parentSpanID"), 8)


def _tags(value: Any) -> dict[str, Any]:
    """Typed tags (`{"key", "type", "value"}`) as the values OTLP attributes give."""
    if value is None:
        return {}
    if type(value) is not list:
        raise _Malformed
    attributes: dict[str, Any] = {}
    for tag in value:
        if type(tag) is not dict or type(tag.get("key")) is not str:
            raise _Malformed
        attributes[tag["key"]] = _tag_value(tag.get("type"), tag.get("value"))
    return attributes


def _tag_value(kind: Any, value: Any) -> Any:
    if kind is None:  # untyped: as its JSON says
        if type(value) in (str, bool, int, float):
            return value
        raise _Malformed
    if type(kind) is not str:
        raise _Malformed
    kind = kind.lower()
    if kind == "string" and type(value) is str:
        return value
    if kind == "bool":
        if type(value) is bool:
            return value
        if type(value) is str and value in ("true", "false"):
            return value == "true"
    elif kind == "int64":
        if type(value) is str and _INTEGER.fullmatch(value):
            value = int(value)
        if type(value) is int and -_INT64 <= value < _INT64:
            return value
    elif kind == "float64" and type(value) in (int, float):
        return float(value)
    elif kind == "binary" and type(value) is str:
        try:
            return base64.b64decode(value, validate=True).hex()
        except (binascii.Error, ValueError):
            pass
    raise _Malformed


def _id(value: Any, size: int) -> bytes:
    """A hex id as OTLP's bytes (`size` of them). Jaeger writes a 128-bit trace id whose high
    half is zero as 16 digits, and older releases dropped leading zeros."""
    if value is None or value == "":
        return b""
    if type(value) is not str or _HEX.fullmatch(value) is None or len(value) > 2 * size:
        raise _Malformed
    return int(value, 16).to_bytes(size, "big")


def _micros(value: Any) -> int:
    if value is None:
        return 0
    if type(value) is str and _INTEGER.fullmatch(value):
        value = int(value)
    if type(value) is not int or not 0 <= value < _UINT64 // _NS_PER_US:
        raise _Malformed
    return value


def _text(value: Any) -> str:
    if value is None:
        return ""
    if type(value) is not str:
        raise _Malformed
    return value
