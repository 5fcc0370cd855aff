"""OTLP traces (protobuf or OTLP/JSON, or Jaeger's JSON) → one `request_trace` event per SGLang
request span.

SGLang's request root span (`"{role} Req {rid[:8]}"`, `module=sglang::request`) carries what
the timing detector needs — prompt and cached tokens, time to first token, prefill time — and
`bootstrap_room`, which joins a prefill request to its decode twin. The thread spans under it
mark aborts (status ERROR), and the slice spans (`prefill_forward`,
`prefill_transfer_kv_cache`, ...) give per-stage durations when they arrive in the same export.

Both encodings give the same few facts per span (`SpanView`). Protobuf is decoded by protobuf.
OTLP/JSON, as the collector's file exporter writes it, is read straight from its dicts:
protobuf's `json_format` converts each field through reflection and read 6.8 MB/s. An export
the direct reader does not vouch for (base64 ids, a number written as text, two spellings of one
field) goes through `json_format` as before: OTLP/JSON differs from protobuf's canonical JSON
only in hex (not base64) trace and span ids, which are rewritten first.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from collector.events import REQUEST_TRACE, Event
from collector.sglang.jaeger import is_jaeger_document, jaeger_spans
from collector.sglang.outcome import (
    MALFORMED_OTLP_JSON,
    MALFORMED_SPAN,
    MISSING_FIELD,
    NOT_PROTOBUF,
    ParseOutcome,
    json_object,
)
from collector.sglang.refusals import refusal_in
from collector.sglang.request_log import abort_code
from collector.sglang.trace_spans import OTHER_SPANS, SpanRef, SpanView
from collector.sglang.values import finite_number, whole_number

# Stats keys: every span is counted under exactly one of these, or dropped.
SPANS: Final = "spans"
REQUEST_SPANS: Final = "request_spans"
THREAD_SPANS: Final = "thread_spans"
SLICE_SPANS: Final = "slice_spans"
ROUTER_SPANS: Final = "router_spans"
BAD_BOOTSTRAP_ROOM: Final = "bad_bootstrap_room"

REQUEST_MODULE: Final = "sglang::request"
# Slice span names documented for 0.5.23; unknown names under a request are kept too.
SLICE_NAMES: Final = frozenset(
    {
        "tokenize",
        "api_server_dispatch",
        "dpc_dispatch",
        "request_process",
        "prefill_waiting",
        "prefill_forward",
        "chunked_prefill",
        "decode_forward",
        "decode_loop",
        "mm_encode",
        "prefill_prepare",
        "prefill_bootstrap",
        "prefill_transfer_kv_cache",
        "decode_prepare",
        "decode_bootstrap",
        "decode_waiting",
        "decode_transferred",
        "fake_output",
        "quick_finish",
        "spec_draft",
        "spec_verify",
        "run_batch_cpu",
        "mooncake_send",
        "mooncake_recv",
        "mooncake_worker_send",
        "mooncake_worker_send_session",
        "mooncake_worker_recv",
    }
)

_ROOT_NAME: Final = re.compile(r"(\w*) ?Req \S+")
_THREAD_NAME: Final = re.compile(r".*\(host:[^|]*\| pid:\d+\)")
_HEX: Final = re.compile(r"[0-9a-fA-F]+")
_INTEGER: Final = re.compile(r"-?[0-9]{1,20}")
_JSON_TYPES: Final = ("application/json", "text/json")
_PROTOBUF_TYPES: Final = ("application/x-protobuf", "application/protobuf")
_MAX_DEPTH: Final = 64
_UINT64: Final = 1 << 64
_NS: Final = 1_000_000_000  # int / int divides with correct rounding; int / 1e9 may not


class SpanCarry:
    """Spans of one request split across exports, kept for the exports after them.

    Why: SGLang's batch exporter sends up to 64 spans every 500 ms, so a request's spans may
    leave in different exports. Its thread spans carry an abort's ERROR status and reason (a
    refusal among them) and its server's host. Thread spans whose request span has not come yet
    wait for it; a request span that came without any thread span waits `hold_exports` exports
    for them before it is read as it is. Bounded: the oldest are let go first.
    """

    def __init__(self, limit: int = 10_000, hold_exports: int = 4) -> None:
        self.limit = limit
        self.hold_exports = hold_exports
        self._waiting: OrderedDict[tuple[bytes, bytes], list[SpanRef]] = OrderedDict()
        self._count = 0
        # Request spans held for their thread spans: id -> (export number, span, node, source).
        self._held: OrderedDict[tuple[bytes, bytes], tuple[int, SpanRef, str | None, str]] = (
            OrderedDict()
        )
        self._exports = 0

    def keep(self, ref: SpanRef) -> None:
        span = ref.span
        held = self._held.get((span.trace_id, span.parent_span_id))
        if held is not None:
            held[1].threads.append(ref)
            return
        self._waiting.setdefault((span.trace_id, span.parent_span_id), []).append(ref)
        self._count += 1
        while self._count > self.limit:
            _, forgotten = self._waiting.popitem(last=False)
            self._count -= len(forgotten)

    def take(self, root: SpanRef) -> list[SpanRef]:
        threads = self._waiting.pop((root.span.trace_id, root.span.span_id), [])
        self._count -= len(threads)
        return threads

    def hold(self, root: SpanRef, node: str | None, source: str) -> None:
        self._held[(root.span.trace_id, root.span.span_id)] = (self._exports, root, node, source)

    def released(self, *, everything: bool = False) -> list[tuple[SpanRef, str | None, str]]:
        """Held request spans that are done waiting: their thread spans came, or they waited
        their exports (all of them at the end of the input). Counts an export when not at the
        end."""
        if not everything:
            self._exports += 1
        out = []
        for key, (since, root, node, source) in list(self._held.items()):
            waited = self._exports - since > self.hold_exports
            if everything or root.threads or waited or len(self._held) > self.limit:
                del self._held[key]
                out.append((root, node, source))
        return out

    def flush(self) -> ParseOutcome:
        """The request spans still held at the end of the input, read as they are."""
        out = ParseOutcome()
        for root, node, source in self.released(everything=True):
            _emit(root, node, source, out)
        return out


def parse_otlp_traces(
    payload: bytes | str,
    *,
    content_type: str,
    node: str | None = None,
    source: str = "otlp",
    carry: SpanCarry | None = None,
) -> ParseOutcome:
    """Parse one OTLP/HTTP trace export body.

    `content_type` picks the decoder (`application/x-protobuf` or `application/json`;
    anything else is sniffed). `node` overrides the node name, which is otherwise
    `service.name` (with the span's role when the name lacks it, plus `@host` when the resource
    or a thread span names a host).
    Drops: `not_protobuf`, `not_json`, `not_json_object`, `malformed_otlp_json` (whole
    payload), `malformed_span` (one span, the others read) and `missing_field` (a request
    span without `rid`). Tempo's answers (`{"trace": ...}`, `{"batches": ...}`) are read as
    the exports they hold, and Jaeger's JSON (`{"data": [trace, ...]}`) span by span as the
    same spans in OTLP would be (`jaeger`; `malformed_jaeger_trace` for a trace in it that is
    not one). With `carry`, thread spans
    whose request span is not in this export wait there for a later one (`SpanCarry`).
    """
    out = ParseOutcome()
    data = payload.encode("utf-8", "replace") if isinstance(payload, str) else bytes(payload)
    spans = _decode(data, content_type, out)
    if spans is None:
        return out
    out.note(SPANS, len(spans))
    by_id = {(s.span.trace_id, s.span.span_id): s for s in spans if s.span.span_id}
    roots: list[SpanRef] = []
    for ref in spans:
        ref.kind = _classify(ref)
        if ref.kind == REQUEST_SPANS:
            roots.append(ref)
    for ref in spans:
        if ref.kind in (REQUEST_SPANS, ROUTER_SPANS):
            continue
        root = _find_root(ref, by_id)
        if ref.kind == THREAD_SPANS:
            if root is not None:
                root.threads.append(ref)
            elif carry is not None and ref.span.parent_span_id:
                carry.keep(ref)
            continue
        if root is not None or ref.span.name in SLICE_NAMES:
            ref.kind = SLICE_SPANS
            if root is not None:
                seconds = _duration(ref.span)
                root.stages[ref.span.name] = root.stages.get(ref.span.name, 0.0) + seconds
        else:
            ref.kind = OTHER_SPANS
    for ref in spans:
        if ref.kind != REQUEST_SPANS:
            out.note(ref.kind)
    for root in roots:
        if carry is not None:
            root.threads.extend(carry.take(root))
            if not root.threads:
                carry.hold(root, node, source)
                continue
        _emit(root, node, source, out)
    if carry is not None:
        for root, held_node, held_source in carry.released():
            _emit(root, held_node, held_source, out)
    return out


def _emit(root: SpanRef, node: str | None, source: str, out: ParseOutcome) -> None:
    event = _request_event(root, node, source, out)
    if event is None:
        out.drop(MISSING_FIELD)
    else:
        out.note(REQUEST_SPANS)
        out.events.append(event)


def _decode(payload: bytes, content_type: str, out: ParseOutcome) -> list[SpanRef] | None:
    media = content_type.split(";", 1)[0].strip().lower()
    if media in _JSON_TYPES or media.endswith("+json"):
        as_json = True
    elif media in _PROTOBUF_TYPES:
        as_json = False
    else:
        as_json = payload.lstrip()[:1] in (b"{", b"[")
    request = ExportTraceServiceRequest()
    if not as_json:
        try:
            request.ParseFromString(payload)
        except (DecodeError, RecursionError, ValueError):
            out.drop(NOT_PROTOBUF)
            return None
        return list(_spans(request))
    doc = json_object(payload, out)
    if doc is None:
        return None
    if is_jaeger_document(doc):
        return jaeger_spans(doc, out)
    doc = _unwrapped(doc)
    spans = _json_export_spans(doc)
    if spans is not None:
        return spans
    # One span no reader takes must not cost the export's others (blind review 24: a bad
    # timestamp in one span of each export lost 6 exposures, and the run was an all-clear).
    salvaged = _span_by_span(doc, out)
    if salvaged is None:
        out.drop(MALFORMED_OTLP_JSON)
    return salvaged


def _unwrapped(doc: dict[str, Any]) -> dict[str, Any]:
    """The OTLP export inside a trace backend's answer: Tempo's `{"trace": {...}}` (API v2) and
    `{"batches": [...]}` (v1), each a list of resource spans as OTLP/JSON writes them."""
    if "resourceSpans" in doc or "resource_spans" in doc:
        return doc
    trace = doc.get("trace")
    if type(trace) is dict and ("resourceSpans" in trace or "resource_spans" in trace):
        return trace
    batches = doc.get("batches")
    if type(batches) is list:
        return {"resourceSpans": batches}
    return doc


def _json_export_spans(doc: dict[str, Any]) -> list[SpanRef] | None:
    """The spans of an OTLP/JSON export, read directly or by `json_format`; None when
    neither takes it."""
    try:
        return _json_spans(doc)
    except (_Unfamiliar, RecursionError):
        pass
    request = ExportTraceServiceRequest()
    try:
        _otlp_json_ids(doc)
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError):
        return None
    return list(_spans(request))


def _span_by_span(doc: dict[str, Any], out: ParseOutcome) -> list[SpanRef] | None:
    """The spans of an export one of whose spans no reader takes, each read as an export of its
    own (with its resource and scope), the unreadable counted (`malformed_span`); None when
    the export's own shape (its lists of resources, scopes, spans) is not OTLP's."""
    resources = doc.get("resourceSpans", doc.get("resource_spans"))
    if type(resources) is not list:
        return None
    spans: list[SpanRef] = []
    for resource in resources:
        if type(resource) is not dict:
            return None
        scopes_key = next(
            (
                k
                for k in ("scopeSpans", "scope_spans", "instrumentationLibrarySpans")
                if k in resource
            ),
            None,
        )
        scopes = resource.get(scopes_key) if scopes_key else []
        if type(scopes) is not list:
            return None
        for scope in scopes:
            if type(scope) is not dict or type(scope.get("spans", [])) is not list:
                return None
            for span in scope.get("spans", []):
                alone = {
                    "resourceSpans": [
                        {**resource, scopes_key or "scopeSpans": [{**scope, "spans": [span]}]}
                    ]
                }
                read = _json_export_spans(alone)
                if read is None:
                    out.drop(MALFORMED_SPAN)
                else:
                    spans.extend(read)
    return spans


class _Unfamiliar(Exception):
    """Something in an OTLP/JSON export the direct reader leaves to `json_format`."""


_STATUS_CODES: Final = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_ANY_VALUE_KEYS: Final = (
    ("stringValue", "string_value"),
    ("intValue", "int_value"),
    ("doubleValue", "double_value"),
    ("boolValue", "bool_value"),
    ("arrayValue", "array_value"),
    ("kvlistValue", "kvlist_value"),
    ("bytesValue", "bytes_value"),
)


def _json_spans(doc: dict[str, Any]) -> list[SpanRef]:
    """The spans of an OTLP/JSON export read from its dicts, as `json_format` would read them
    (both spellings of a field, pre-1.0 `instrumentationLibrary*` keys, unknown keys ignored);
    `_Unfamiliar` for anything it would read differently or refuse."""
    refs: list[SpanRef] = []
    for resource_spans in _json_list(_json_field(doc, "resourceSpans", "resource_spans")):
        resource_spans = _json_dict(resource_spans)
        resource = _json_dict(_json_field(resource_spans, "resource", "resource"))
        resource_attributes = _json_attributes(_json_field(resource, "attributes", "attributes"))
        scopes = _json_field(resource_spans, "scopeSpans", "scope_spans")
        if "scopeSpans" not in resource_spans and "instrumentationLibrarySpans" in resource_spans:
            scopes = resource_spans["instrumentationLibrarySpans"]
        for scope_spans in _json_list(scopes):
            for span in _json_list(_json_field(_json_dict(scope_spans), "spans", "spans")):
                span = _json_dict(span)
                status = _json_dict(_json_field(span, "status", "status"))
                view = SpanView(
                    _json_id(_json_field(span, "traceId", "trace_id"), 32),
                    _json_id(_json_field(span, "spanId", "span_id"), 16),
                    _json_id(_json_field(span, "parentSpanId", "parent_span_id"), 16),
                    _json_text(_json_field(span, "name", "name")),
                    _json_nanos(_json_field(span, "startTimeUnixNano", "start_time_unix_nano")),
                    _json_nanos(_json_field(span, "endTimeUnixNano", "end_time_unix_nano")),
                    _json_status(_json_field(status, "code", "code")),
                    _json_text(_json_field(status, "message", "message")),
                )
                attributes = _json_attributes(_json_field(span, "attributes", "attributes"))
                refs.append(SpanRef(view, resource_attributes, attributes))
    return refs


_ABSENT: Final = object()


def _json_field(obj: dict[str, Any], camel: str, snake: str) -> Any:
    if camel != snake and camel in obj and snake in obj:
        raise _Unfamiliar
    value = obj.get(camel, obj.get(snake, _ABSENT))
    if value is None:
        raise _Unfamiliar  # `json_format` has its own rules for null
    return value


def _json_list(value: Any) -> list[Any]:
    if value is _ABSENT:
        return []
    if type(value) is not list:
        raise _Unfamiliar
    return value


def _json_dict(value: Any) -> dict[str, Any]:
    if value is _ABSENT:
        return {}
    if type(value) is not dict:
        raise _Unfamiliar
    return value


def _json_text(value: Any) -> str:
    if value is _ABSENT:
        return ""
    if type(value) is not str:
        raise _Unfamiliar
    return value


def _json_id(value: Any, size: int) -> bytes:
    """OTLP/JSON's hex id (base64, protobuf's own spelling, is left to `json_format`)."""
    if value is _ABSENT or value == "":
        return b""
    if type(value) is not str or len(value) != size or _HEX.fullmatch(value) is None:
        raise _Unfamiliar
    return bytes.fromhex(value)


def _json_nanos(value: Any) -> int:
    if value is _ABSENT:
        return 0
    if type(value) is str and _INTEGER.fullmatch(value):
        value = int(value)
    if type(value) is not int or not 0 <= value < _UINT64:
        raise _Unfamiliar
    return value


def _json_status(value: Any) -> int:
    if value is _ABSENT:
        return 0
    if type(value) is str and value in _STATUS_CODES:
        return _STATUS_CODES[value]
    if type(value) is int and value in (0, 1, 2):
        return value
    raise _Unfamiliar


def _json_attributes(value: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for pair in _json_list(value):
        pair = _json_dict(pair)
        attributes[_json_text(_json_field(pair, "key", "key"))] = _json_value(
            _json_field(pair, "value", "value")
        )
    return attributes


def _json_value(value: Any) -> Any:
    """An `AnyValue` as `_value` gives it."""
    value = _json_dict(value)
    found = [
        (camel, value[camel] if camel in value else value[snake])
        for camel, snake in _ANY_VALUE_KEYS
        if camel in value or snake in value
    ]
    if not found:
        return None
    if len(found) > 1 or any(v is None for _, v in found):
        raise _Unfamiliar
    which, inner = found[0]
    if which == "stringValue" and type(inner) is str:
        return inner
    if which == "intValue":
        if type(inner) is str and _INTEGER.fullmatch(inner):
            inner = int(inner)
        if type(inner) is int and -(1 << 63) <= inner < (1 << 63):
            return inner
    elif which == "doubleValue" and type(inner) in (int, float):
        return float(inner)
    elif which == "boolValue" and type(inner) is bool:
        return inner
    elif which == "arrayValue" and type(inner) is dict:
        return [_json_value(item) for item in _json_list(inner.get("values", _ABSENT))]
    elif which == "kvlistValue" and type(inner) is dict:
        return _json_attributes(inner.get("values", _ABSENT))
    raise _Unfamiliar


def _otlp_json_ids(doc: dict[str, Any]) -> None:
    """OTLP/JSON → protobuf JSON: hex ids to base64, pre-1.0 `instrumentationLibrary*` keys."""
    for resource_spans in _items(doc.get("resourceSpans", doc.get("resource_spans"))):
        if not isinstance(resource_spans, dict):
            continue
        legacy = resource_spans.pop("instrumentationLibrarySpans", None)
        if legacy is not None and "scopeSpans" not in resource_spans:
            resource_spans["scopeSpans"] = legacy
        scopes = resource_spans.get("scopeSpans", resource_spans.get("scope_spans"))
        for scope_spans in _items(scopes):
            if not isinstance(scope_spans, dict):
                continue
            library = scope_spans.pop("instrumentationLibrary", None)
            if library is not None and "scope" not in scope_spans:
                scope_spans["scope"] = library
            for span in _items(scope_spans.get("spans")):
                if isinstance(span, dict):
                    _rewrite_ids(span)
                    for link in _items(span.get("links")):
                        if isinstance(link, dict):
                            _rewrite_ids(link)


def _rewrite_ids(obj: dict[str, Any]) -> None:
    for camel, snake, size in (
        ("traceId", "trace_id", 32),
        ("spanId", "span_id", 16),
        ("parentSpanId", "parent_span_id", 16),
    ):
        for key in (camel, snake):
            value = obj.get(key)
            if isinstance(value, str) and len(value) == size and _HEX.fullmatch(value):
                obj[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _spans(request: ExportTraceServiceRequest) -> Iterable[SpanRef]:
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                view = SpanView(
                    span.trace_id,
                    span.span_id,
                    span.parent_span_id,
                    span.name,
                    span.start_time_unix_nano,
                    span.end_time_unix_nano,
                    span.status.code,
                    span.status.message,
                )
                yield SpanRef(view, resource, _attributes(span.attributes))


def _classify(ref: SpanRef) -> str:
    name = ref.span.name
    attrs = ref.attributes
    if "thread_label" in attrs or _THREAD_NAME.fullmatch(name):
        return THREAD_SPANS
    if name == "http_request" or attrs.get("module") == "smg":
        return ROUTER_SPANS
    if _ROOT_NAME.fullmatch(name) and (attrs.get("module") == REQUEST_MODULE or "rid" in attrs):
        return REQUEST_SPANS
    return OTHER_SPANS


def _find_root(ref: SpanRef, by_id: dict[tuple[bytes, bytes], SpanRef]) -> SpanRef | None:
    span = ref.span
    for _ in range(_MAX_DEPTH):
        if not span.parent_span_id:
            return None
        parent = by_id.get((span.trace_id, span.parent_span_id))
        if parent is None:
            return None
        if parent.kind == REQUEST_SPANS:
            return parent
        span = parent.span
    return None


def _request_event(root: SpanRef, node: str | None, source: str, out: ParseOutcome) -> Event | None:
    attrs = root.attributes
    span = root.span
    rid = _text(attrs.get("rid")) or _text(attrs.get("gen_ai.request.id"))
    if rid is None:
        return None
    match = _ROOT_NAME.fullmatch(span.name)
    role = (match.group(1) if match else "") or "unified"
    room_raw = attrs.get("bootstrap_room")
    room = room_to_decimal(room_raw)
    if room_raw is not None and room is None:
        out.note(BAD_BOOTSTRAP_ROOM)
    status, reason = _status(root)
    service = _text(root.resource.get("service.name"))
    start = span.start_time_unix_nano / _NS if span.start_time_unix_nano else None
    end = span.end_time_unix_nano / _NS if span.end_time_unix_nano else None
    fields: dict[str, Any] = {
        "rid": rid,
        "bootstrap_room": room,
        "role": role,
        "prompt_tokens": whole_number(attrs.get("gen_ai.usage.prompt_tokens")),
        "completion_tokens": whole_number(attrs.get("gen_ai.usage.completion_tokens")),
        "cached_tokens": whole_number(attrs.get("gen_ai.usage.cached_tokens")),
        "ttft": finite_number(attrs.get("gen_ai.latency.time_to_first_token")),
        "e2e": finite_number(attrs.get("gen_ai.latency.e2e")),
        "time_in_model_prefill": finite_number(attrs.get("gen_ai.latency.time_in_model_prefill")),
        "time_in_model_decode": finite_number(attrs.get("gen_ai.latency.time_in_model_decode")),
        "time_in_model_inference": finite_number(
            attrs.get("gen_ai.latency.time_in_model_inference")
        ),
        "finish_reasons": _finish_reasons(attrs.get("gen_ai.response.finish_reasons")),
        "status": status,
        # A code, never the message: an error can echo what the user sent.
        "error_reason": abort_code(reason),
        "service": service,
        "model": _text(attrs.get("gen_ai.response.model")),
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "start": start,
        "end": end,
    }
    if root.stages:
        fields["stage_seconds"] = dict(root.stages)
    refusal = refusal_in(reason) if status == "error" and reason else None
    if refusal is not None:
        # The engine refusing the request (prefill, an over-length prompt): what its refusal
        # line would have said, numbers only.
        fields["refusal"] = refusal
    ranks: dict[str, int] = {}
    for thread in root.threads:
        dp = whole_number(thread.attributes.get("dp_rank"))
        if dp is not None:
            ranks["dp"] = dp
            break
    return Event(REQUEST_TRACE, node or _node_name(root, role), end, source, fields, ranks)


def _status(root: SpanRef) -> tuple[str, str | None]:
    """`error` when the request span or any of its thread spans has status ERROR."""
    for ref in [root, *root.threads]:
        if ref.span.status_code == Status.STATUS_CODE_ERROR:
            reason = _text(ref.attributes.get("reason")) or _text(ref.span.status_message)
            return "error", reason
    return "ok", None


def _node_name(root: SpanRef, role: str) -> str:
    """`service.name`, with the role when the name does not say it (every server of a
    deployment is `sglang` unless `--otlp-service-name` tells them apart, and a prefill and a
    decode server may share a host), then `@host` when the resource or a thread span names one."""
    service = _text(root.resource.get("service.name")) or "otlp"
    if role in ("prefill", "decode") and role not in service:
        service = f"{service}-{role}"
    host = _text(root.resource.get("host.name")) or _text(root.resource.get("host.id"))
    if host is None:
        for thread in root.threads:
            host = _text(thread.attributes.get("host_id"))
            if host is not None:
                break
    return f"{service}@{host}" if host else service


def room_to_decimal(value: Any) -> str | None:
    """A trace's `bootstrap_room` (hex string, `0x` optional; or an int) → decimal string.

    Negative ints are uint64 rooms that overflowed OTLP's int64. A prefix-less string of more
    than 16 digits cannot be a uint64 in hex, so it is taken as already decimal.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value % _UINT64)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return str(int(value) % _UINT64)
        return None
    if not isinstance(value, str):
        return None
    text = value.strip()
    prefixed = text[:2].lower() == "0x"
    digits = text[2:] if prefixed else text
    if not digits or not digits.isascii():
        return None
    if not prefixed and len(digits) > 16 and digits.isdigit():
        return str(int(digits))
    if len(digits) > 16 or _HEX.fullmatch(digits) is None:
        return None
    return str(int(digits, 16))


def _finish_reasons(value: Any) -> list[Any] | None:
    """The JSON list of finish reasons, without the request text that stop strings and abort
    messages can carry."""
    if value is None:
        return None
    parsed: Any = value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            parsed = value
    if not isinstance(parsed, list):
        parsed = [parsed]
    return [_reason_names(item) for item in parsed]


# The finish reasons SGLang and the OpenAI API name, kept as they are; any other word a span
# holds in their place is "other": a client's text may be a single word (blind review 31b: a
# prompt's marker reached the Parquet table's finish_type column).
_REASON_NAMES: Final = frozenset(
    {"stop", "length", "abort", "eos", "tool_calls", "function_call", "content_filter"}
)
# An error's class name (`BadRequestError`, `KVTransferError`): CamelCase, ending as one does.
_ERROR_NAME: Final = re.compile(r"[A-Z][A-Za-z]{0,40}(?:Error|Exception)")


def _reason_names(item: Any) -> Any:
    """A finish reason as names and numbers only: its `type` when a reason's name and its
    `err_type` when an error class's, `status_code` and a stop token's id (`matched`) when
    whole numbers, and its abort `message` as a code (`abort_code`). A stop string, a message,
    or anything else may carry the request's text."""
    if isinstance(item, dict):
        kept: dict[str, Any] = {}
        kind, error = item.get("type"), item.get("err_type")
        if isinstance(kind, str):
            kept["type"] = kind if kind in _REASON_NAMES else "other"
        if isinstance(error, str):
            kept["err_type"] = error if _ERROR_NAME.fullmatch(error) else "other"
        for key in ("matched", "status_code"):
            value = item.get(key)
            if type(value) is int:
                kept[key] = value
        if "message" in item:
            kept["message_code"] = abort_code(_text(item["message"]))
        return kept
    if isinstance(item, str) and item in _REASON_NAMES:
        return item
    if item is None or type(item) in (int, float, bool):
        return item
    return "other"  # free text, or a nested list, in place of a reason's name


def _duration(span: SpanView) -> float:
    if not span.start_time_unix_nano or span.end_time_unix_nano < span.start_time_unix_nano:
        return 0.0
    return (span.end_time_unix_nano - span.start_time_unix_nano) / _NS


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which == "bool_value":
        return value.bool_value
    if which == "array_value":
        return [_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if which == "bytes_value":
        return value.bytes_value.hex()
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
