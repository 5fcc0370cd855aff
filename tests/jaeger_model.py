"""Spans as Jaeger saves them, written from OTLP/JSON by Jaeger's documented JSON model and its
translation of OTLP (the query API's `{"data": [trace, ...]}`): a test's reference, written
apart from kvwatch's reader so that the two can disagree."""

from __future__ import annotations

import base64
import json
from typing import Any

_STATUS_NAMES = {1: "OK", 2: "ERROR", "STATUS_CODE_OK": "OK", "STATUS_CODE_ERROR": "ERROR"}
_SPAN_KINDS = {
    "SPAN_KIND_INTERNAL": "internal",
    "SPAN_KIND_SERVER": "server",
    "SPAN_KIND_CLIENT": "client",
    "SPAN_KIND_PRODUCER": "producer",
    "SPAN_KIND_CONSUMER": "consumer",
}


def jaeger_answer(exports: list[dict[str, Any]]) -> dict[str, Any]:
    """OTLP/JSON exports (hex ids) as Jaeger's query API answers for their traces: one trace
    per trace id, each with its processes (`p1`, `p2`, ...)."""
    traces: dict[str, dict[str, Any]] = {}
    for export in exports:
        for resource_spans in export["resourceSpans"]:
            attributes = resource_spans.get("resource", {}).get("attributes", [])
            service = next(
                (a["value"]["stringValue"] for a in attributes if a["key"] == "service.name"),
                "OTLPResourceNoServiceName",
            )
            process = {
                "serviceName": service,
                "tags": [_tag(a) for a in attributes if a["key"] != "service.name"],
            }
            for scope_spans in resource_spans.get("scopeSpans", []):
                scope = scope_spans.get("scope", {})
                for span in scope_spans.get("spans", []):
                    trace_id = span["traceId"]
                    trace = traces.setdefault(
                        trace_id,
                        {"traceID": trace_id, "spans": [], "processes": {}, "warnings": None},
                    )
                    process_id = _process_id(trace["processes"], process)
                    trace["spans"].append(_span(span, scope, process_id))
    return {"data": list(traces.values()), "total": 0, "limit": 0, "offset": 0, "errors": None}


def _process_id(processes: dict[str, Any], process: dict[str, Any]) -> str:
    for key, known in processes.items():
        if known == process:
            return key
    key = f"p{len(processes) + 1}"
    processes[key] = process
    return key


def _span(span: dict[str, Any], scope: dict[str, Any], process_id: str) -> dict[str, Any]:
    start = int(span["startTimeUnixNano"])
    end = int(span["endTimeUnixNano"])
    references = []
    if span.get("parentSpanId"):
        references.append(
            {"refType": "CHILD_OF", "traceID": span["traceId"], "spanID": span["parentSpanId"]}
        )
    for link in span.get("links", []):
        references.append(
            {"refType": "FOLLOWS_FROM", "traceID": link["traceId"], "spanID": link["spanId"]}
        )
    tags = [_tag(a) for a in span.get("attributes", [])]
    if scope.get("name"):
        tags.append({"key": "otel.scope.name", "type": "string", "value": scope["name"]})
    kind = _SPAN_KINDS.get(span.get("kind", ""))
    if kind is not None:
        tags.append({"key": "span.kind", "type": "string", "value": kind})
    status = span.get("status", {})
    code = _STATUS_NAMES.get(status.get("code"))
    if code is not None:
        tags.append({"key": "otel.status_code", "type": "string", "value": code})
    if code == "ERROR":
        tags.append({"key": "error", "type": "bool", "value": True})
        if status.get("message"):
            tags.append(
                {"key": "otel.status_description", "type": "string", "value": status["message"]}
            )
    logs = [
        {
            "timestamp": int(event["timeUnixNano"]) // 1000,
            "fields": [
                {"key": "event", "type": "string", "value": event["name"]},
                *(_tag(a) for a in event.get("attributes", [])),
            ],
        }
        for event in span.get("events", [])
    ]
    return {
        "traceID": span["traceId"],
        "spanID": span["spanId"],
        "operationName": span["name"],
        "references": references,
        "startTime": start // 1000,
        "duration": (end - start) // 1000,
        "tags": tags,
        "logs": logs,
        "processID": process_id,
        "warnings": None,
    }


def _tag(attribute: dict[str, Any]) -> dict[str, Any]:
    """An OTLP attribute as a Jaeger tag: strings, bools, 64-bit ints and doubles keep their
    type; bytes are binary (base64 in JSON); arrays and maps become their JSON text."""
    key, value = attribute["key"], attribute["value"]
    if "stringValue" in value:
        return {"key": key, "type": "string", "value": value["stringValue"]}
    if "boolValue" in value:
        return {"key": key, "type": "bool", "value": value["boolValue"]}
    if "intValue" in value:
        return {"key": key, "type": "int64", "value": int(value["intValue"])}
    if "doubleValue" in value:
        return {"key": key, "type": "float64", "value": float(value["doubleValue"])}
    if "bytesValue" in value:
        raw = base64.b64decode(value["bytesValue"])
        return {"key": key, "type": "binary", "value": base64.b64encode(raw).decode()}
    return {"key": key, "type": "string", "value": json.dumps(_plain(value))}


def _plain(value: dict[str, Any]) -> Any:
    """An OTLP `AnyValue` as the plain JSON value Jaeger's text of it holds."""
    if "arrayValue" in value:
        return [_plain(item) for item in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {p["key"]: _plain(p["value"]) for p in value["kvlistValue"].get("values", [])}
    if "intValue" in value:
        return int(value["intValue"])
    return next(iter(value.values()), None)
