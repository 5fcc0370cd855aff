"""Traces saved from Jaeger are read as the same spans in OTLP are: spans made by the real
OpenTelemetry SDK as SGLang's servers make them, saved once as OTLP/JSON (a collector's file
exporter) and once as Jaeger's query API answers for them (`tests.jaeger_model`)."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.forensics.driver import run_forensics
from collector.forensics.report import unread_line
from collector.parse import ParseStats, events_by_node
from collector.sglang.jaeger import jaeger_spans
from collector.sglang.otlp import parse_otlp_traces
from collector.sglang.outcome import ParseOutcome
from tests.jaeger_model import jaeger_answer
from tests.test_forensics_traces import (
    EXPOSED_ROOM,
    _hex_ids,
    _startup_only,
    _trace_the_incident,
)
from tests.test_otlp_parser import _Deployment

JSON = "application/json"


def _otlp_json(payload: bytes) -> dict[str, Any]:
    """A protobuf export as OTLP/JSON writes it (hex ids)."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(payload)
    document = json_format.MessageToDict(request)
    _hex_ids(document)
    return document


def _events(outcome: ParseOutcome) -> list[tuple[Any, ...]]:
    return sorted(
        (e.node, e.time, e.kind, json.dumps(e.fields, sort_keys=True), e.ranks)
        for e in outcome.events
    )


def test_a_jaeger_trace_gives_the_events_its_spans_give_in_otlp() -> None:
    """Router, request, thread and slice spans, a rank, an abort's status: every field alike."""
    export = _otlp_json(_Deployment().exporter.batch())
    otlp = parse_otlp_traces(json.dumps(export), content_type=JSON)
    jaeger = parse_otlp_traces(json.dumps(jaeger_answer([export])), content_type=JSON)
    assert len(otlp.events) == 3 and not otlp.dropped
    assert _events(jaeger) == _events(otlp)
    assert jaeger.stats == otlp.stats
    assert not jaeger.dropped


def _jaeger_trace_ids_shortened(answer: dict[str, Any]) -> None:
    """As Jaeger writes a trace id whose high 64 bits are zero (SGLang's are 64-bit): 16 digits."""
    for trace in answer["data"]:
        for node in [trace, *trace["spans"], *(r for s in trace["spans"] for r in s["references"])]:
            node["traceID"] = node["traceID"][16:]


def test_a_64_bit_trace_id_written_short_is_the_same_trace() -> None:
    export = _otlp_json(_Deployment().exporter.batch())
    for resource in export["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                span["traceId"] = "0" * 16 + span["traceId"][16:]
    answer = jaeger_answer([export])
    _jaeger_trace_ids_shortened(answer)
    otlp = parse_otlp_traces(json.dumps(export), content_type=JSON)
    jaeger = parse_otlp_traces(json.dumps(answer), content_type=JSON)
    assert _events(jaeger) == _events(otlp)


def _two_requests_answer() -> dict[str, Any]:
    """A Jaeger answer of the SDK deployment's spans: three request spans among others."""
    return jaeger_answer([_otlp_json(_Deployment().exporter.batch())])


def _request_span_index(answer: dict[str, Any], role: str) -> int:
    spans = answer["data"][0]["spans"]
    return next(i for i, s in enumerate(spans) if s["operationName"].startswith(f"{role} Req"))


@pytest.mark.parametrize(
    "broken",
    [
        {"startTime": "yesterday"},
        {"startTime": -5},
        {"spanID": 12345},
        {"tags": {"rid": "x"}},
        {"tags": [{"key": "rid", "type": "int64", "value": "x"}]},
        {"references": [{"refType": "CHILD_OF", "spanID": 7}]},
        {"duration": 1.5},
    ],
)
def test_one_jaeger_span_no_reader_takes_costs_only_itself(broken: dict[str, Any]) -> None:
    answer = _two_requests_answer()
    answer["data"][0]["spans"][_request_span_index(answer, "prefill")].update(broken)
    out = parse_otlp_traces(json.dumps(answer), content_type=JSON)
    assert sorted(e.fields["role"] for e in out.events) == ["decode", "unified"]
    assert out.dropped == {"malformed_span": 1}


def test_a_trace_that_is_not_one_costs_only_itself() -> None:
    answer = _two_requests_answer()
    answer["data"] += [{"traceID": "ab", "spans": "none"}, 7]
    out = parse_otlp_traces(json.dumps(answer), content_type=JSON)
    assert len(out.events) == 3
    assert out.dropped == {"malformed_jaeger_trace": 2}
    said = unread_line({"input": {"lines": 1000, "dropped_by_reason": out.dropped}})
    assert "malformed_jaeger_trace 2" in said  # however few


def _json_ish(depth: int = 3) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(1 << 70), max_value=1 << 70),
        st.floats(allow_nan=False),
        st.text(max_size=8),
        st.sampled_from(["0af7651916cd43dd", "CHILD_OF", "int64", "binary", "AAEC", "ERROR"]),
    )
    keys = st.sampled_from(
        [
            "data", "traceID", "spanID", "spans", "processes", "processID", "process",
            "serviceName", "tags", "key", "type", "value", "references", "refType",
            "startTime", "duration", "operationName", "logs", "parentSpanID", "warnings",
        ]
    )  # fmt: skip
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=6)
        ),
        max_leaves=30,
    )


def _span_ish() -> st.SearchStrategy[Any]:
    """A span as Jaeger's model has it, any field missing or of any JSON value."""
    return st.fixed_dictionaries(
        {},
        optional={
            "traceID": st.one_of(st.just("0af7651916cd43dd0af7651916cd43dd"), _json_ish(1)),
            "spanID": st.one_of(st.just("00f067aa0ba902b7"), _json_ish(1)),
            "operationName": st.one_of(st.just("decode Req 9c8b7a65"), _json_ish(1)),
            "references": _json_ish(),
            "startTime": st.one_of(st.just(1788256860000000), _json_ish(1)),
            "duration": st.one_of(st.just(2000), _json_ish(1)),
            "tags": st.one_of(
                st.just([{"key": "rid", "type": "string", "value": "9c8b7a65"}]), _json_ish()
            ),
            "logs": _json_ish(),
            "processID": st.one_of(st.just("p1"), _json_ish(1)),
            "process": _json_ish(),
        },
    )


@settings(max_examples=400, deadline=None)
@given(
    spans=st.lists(st.one_of(_span_ish(), _json_ish(1)), max_size=5),
    processes=st.one_of(
        st.just({"p1": {"serviceName": "sglang", "tags": []}}),
        st.none(),
        _json_ish(),
    ),
    alone=st.booleans(),
)
def test_the_jaeger_reader_never_raises_and_accounts_for_every_span(
    spans: list[Any], processes: Any, alone: bool
) -> None:
    """Whatever a saved file holds where Jaeger's model has its fields, the reader does not
    raise, and each span of a trace is read or counted (`malformed_span`); a trace whose own
    shape is not Jaeger's is counted once."""
    trace = {"traceID": "0af7651916cd43dd0af7651916cd43dd", "spans": spans, "processes": processes}
    doc = trace if alone else {"data": [trace], "total": 1, "errors": None}
    out = ParseOutcome()
    read = jaeger_spans(doc, out)
    whole = parse_otlp_traces(json.dumps(doc), content_type=JSON)
    if processes is None or isinstance(processes, dict):
        assert len(read) + out.dropped.get("malformed_span", 0) == len(spans)
        assert whole.stats.get("spans", 0) + whole.dropped.get("malformed_span", 0) == len(spans)
    else:
        assert read == [] and out.dropped == {"malformed_jaeger_trace": 1}


# Forensics over the reference incident's two requests, traced and saved both ways.


def _exposed(summary: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (r["rid"], r["bootstrap_room"], r["node"], tuple(r["evidence"]))
        for r in summary["exposure"]["requests"]
    )


def _findings(summary: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (f["detector"], f["severity"], f["node"], f.get("bootstrap_room"))
        for f in summary["findings"]
    )


def _saved_both_ways(tmp_path: Path, **incident: Any) -> tuple[Path, Path, dict[str, Any]]:
    otlp, jaeger = tmp_path / "otel", tmp_path / "jaeger"
    otlp.mkdir()
    jaeger.mkdir()
    _trace_the_incident(otlp / "otel_trace.json", **incident)
    exports = [json.loads(line) for line in (otlp / "otel_trace.json").read_text().splitlines()]
    return otlp, jaeger, jaeger_answer(exports)


def _save(folder: Path, answer: dict[str, Any], form: str) -> None:
    text = json.dumps(answer, indent=2 if form == "pretty" else None)
    if form == "gzip":
        (folder / "traces-1788256860.json.gz").write_bytes(gzip.compress(text.encode()))
    elif form == "one trace a line":  # several query answers, one a line
        lines = [json.dumps({**answer, "data": [trace]}) for trace in answer["data"]]
        (folder / "traces.json").write_text("\n".join(lines) + "\n")
    elif form == "array of traces":  # each trace alone, in one JSON array
        (folder / "traces.json").write_text(json.dumps(answer["data"]))
    elif form == "sorted keys":
        (folder / "traces.json").write_text(json.dumps(answer, sort_keys=True))
    else:
        (folder / "traces-1788256860.json").write_text(text)


@pytest.mark.parametrize(
    "form", ["compact", "pretty", "gzip", "one trace a line", "array of traces", "sorted keys"]
)
def test_forensics_names_the_same_exposed_responses_from_jaeger_as_from_otlp(
    tmp_path: Path, form: str
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    otlp, jaeger, answer = _saved_both_ways(tmp_path)
    assert len(answer["data"]) == 4  # several traces in one document
    _save(jaeger, answer, form)
    from_otlp = run_forensics([str(logs), str(otlp)], tmp_path / "out-otlp").summary
    from_jaeger = run_forensics([str(logs), str(jaeger)], tmp_path / "out-jaeger").summary

    assert [r[:2] for r in _exposed(from_jaeger)] == [
        ("e5f4a3b2c1d0e9f8a7b6554433221100", EXPOSED_ROOM)
    ]
    assert _exposed(from_jaeger) == _exposed(from_otlp)
    assert _findings(from_jaeger) == _findings(from_otlp)
    assert from_jaeger["requests"]["total"] == from_otlp["requests"]["total"] == 2
    assert from_jaeger["input"]["events_by_kind"]["request_trace"] == 4
    assert not from_jaeger["input"]["dropped_by_reason"]


def test_a_healthy_deployment_traced_to_jaeger_finds_nothing_as_in_otlp(tmp_path: Path) -> None:
    """The long prompt prefilled by a server whose pool held it: nothing above info, either way."""
    otlp, jaeger, answer = _saved_both_ways(tmp_path, long_prompt_prefilled=True)
    _save(jaeger, answer, "compact")
    from_otlp = run_forensics([str(otlp)], tmp_path / "out-otlp").summary
    from_jaeger = run_forensics([str(jaeger)], tmp_path / "out-jaeger").summary

    assert from_jaeger["exposure"]["requests"] == from_otlp["exposure"]["requests"] == []
    assert [f for f in from_jaeger["findings"] if f["severity"] != "info"] == []
    assert _findings(from_jaeger) == _findings(from_otlp)
    assert from_jaeger["requests"]["total"] == from_otlp["requests"]["total"] == 2
    assert from_jaeger["verdict"]["outcome"] == from_otlp["verdict"]["outcome"] == "none_found"


def test_a_malformed_jaeger_span_costs_only_itself_and_is_said(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    _, jaeger, answer = _saved_both_ways(tmp_path)
    broken = copy.deepcopy(answer)
    # The honest request's decode span, with a timestamp Jaeger never writes.
    for trace in broken["data"]:
        for span in trace["spans"]:
            if span["operationName"] == "decode Req d1c0b3a2":
                span["startTime"] = "2026-08-27T10:12:01Z"
    _save(jaeger, broken, "compact")
    summary = run_forensics([str(logs), str(jaeger)], tmp_path / "out").summary

    assert [r[:2] for r in _exposed(summary)] == [
        ("e5f4a3b2c1d0e9f8a7b6554433221100", EXPOSED_ROOM)
    ]
    assert summary["input"]["events_by_kind"]["request_trace"] == 3
    assert summary["input"]["dropped_by_reason"] == {"malformed_span": 1}
    assert "malformed_span 1" in unread_line(summary)


def test_trace_files_from_tempo_and_jaeger_are_read(tmp_path: Path) -> None:
    """Blind review 24: beside request logs, a Tempo or Jaeger export holding 6 exposures was
    one `unrecognised_document` among 60 lines, under the UNREAD bar: an all-clear, exit 0.
    A Jaeger answer with its keys in another order is read too."""
    answer = _two_requests_answer()
    reordered = {"total": 1, "limit": 0, "offset": 0, "errors": None, "data": answer["data"]}
    (tmp_path / "traces-1788256860.json").write_text(json.dumps(reordered))
    stats = ParseStats()
    events = list(events_by_node([tmp_path], stats))
    assert sorted(e.fields["role"] for e in events if e.kind == "request_trace") == [
        "decode",
        "prefill",
        "unified",
    ]
    assert not stats.dropped and not stats.dropped_files


def test_a_jaeger_file_its_first_bytes_do_not_tell_is_named_never_an_all_clear(
    tmp_path: Path,
) -> None:
    """The guarantee kept from before Jaeger was read: a Jaeger answer whose first 4 KiB show no
    trace (its keys in an odd order, a process's tags first) reaches the snapshot reader, which
    does not read it, and it is named on the UNREAD line."""
    answer = _two_requests_answer()
    trace = answer["data"][0]
    trace["processes"]["p1"]["tags"].append(
        {"key": "k8s.pod.uid", "type": "string", "value": "u" * 5000}
    )
    odd = {"total": 1, "data": [{"processes": trace["processes"], **trace}]}
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(odd))
    stats = ParseStats()
    events = list(events_by_node([tmp_path], stats))
    assert events == []
    assert stats.dropped == {"trace_format_not_read": 1}
    assert stats.dropped_files == {"trace_format_not_read": [str(path)]}
    said = unread_line({"input": {"lines": 1, "dropped_by_reason": dict(stats.dropped)}})
    assert "trace_format_not_read 1" in said
