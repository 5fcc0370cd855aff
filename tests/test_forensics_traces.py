"""Forensics over trace exports: the reference incident's two requests traced by the real
OpenTelemetry SDK and saved as SGLang's `opentelemetry.yaml` saves them (a collector's file
exporter, `/tmp/otel_trace.json`), beside the nodes' logs or instead of their request lines."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from collector import spill
from collector.files import describe
from collector.forensics.driver import run_forensics

LOGS = Path(__file__).parent / "testdata" / "reference_incident"
HONEST_ROOM, EXPOSED_ROOM = "7701188362211045501", "5523401987766512300"
REFUSAL = (
    "Input length (912384 tokens) exceeds the maximum allowed length (681274 tokens). "
    "Use a shorter input or enable --allow-auto-truncate."
)


class CollectorFileExporterStandIn(SpanExporter):
    """Stands in for the OpenTelemetry Collector's `file` exporter: each export it receives is
    appended as one line of OTLP/JSON (the protobuf JSON mapping with lowerCamelCase keys,
    64-bit integers as strings, and trace and span ids as hex, not base64)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        document = json_format.MessageToDict(encode_spans(spans))
        _hex_ids(document)
        with self.path.open("a") as out:
            out.write(json.dumps(document) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def _as_framed_protobuf(json_lines: str) -> bytes:
    """OTLP/JSON exports, one a line, as the collector's file exporter writes them with
    `format: proto`: each export's length (four bytes, big-endian), then its protobuf bytes."""
    framed = b""
    for line in json_lines.splitlines():
        document = json.loads(line)
        _base64_ids(document)
        export = json_format.ParseDict(document, ExportTraceServiceRequest()).SerializeToString()
        framed += len(export).to_bytes(4, "big") + export
    return framed


def _base64_ids(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            else:
                _base64_ids(value)
    elif isinstance(node, list):
        for item in node:
            _base64_ids(item)


def _hex_ids(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def _ns(stamp: str) -> int:
    when = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return int(when.timestamp()) * 1_000_000_000


PREFILL_RIDS = ("a1f0c3e2d4b5a6978877665544332211", "b2e1d4f3c5a6b7988877665544332222")
DECODE_RIDS = ("d1c0b3a2f4e5d6c7b8a9887766554433", "e5f4a3b2c1d0e9f8a7b6554433221100")


def _trace_the_incident(
    path: Path,
    prefill_rids: tuple[str, str] = PREFILL_RIDS,
    *,
    long_prompt_prefill_host: str = "4f1c9a7e11d2",
    long_prompt_prefilled: bool = False,
    refused_prompt_tokens: int | None = None,
    services: tuple[str, str] = ("sglang", "sglang"),
) -> None:
    """The two requests of `reference_incident` as SGLang's root and thread spans, every server
    the default service `sglang` (no `--otlp-service-name`), its machine in the thread spans.
    The long prompt's prefill may run on another machine, and may prefill it (88 s) instead of
    refusing it: a server with a pool that holds it. With `refused_prompt_tokens`, its refusal
    is spanned as 0.5.19 spans it (audit V): no error, finish `abort`, that prompt length (1,
    the refusal's stub)."""
    exporter = CollectorFileExporterStandIn(path)
    processors = []
    host_ids: dict[int, str] = {}

    def server(host_id: str, service: str = "sglang") -> trace.Tracer:
        provider = TracerProvider(resource=Resource({"service.name": service}))
        processor = BatchSpanProcessor(exporter)
        provider.add_span_processor(processor)
        processors.append(processor)
        tracer = provider.get_tracer("sglang server")
        host_ids[id(tracer)] = host_id
        return tracer

    prefill, decode = server("4f1c9a7e11d2", services[0]), server("9b2e6d0c55a8", services[1])
    long_prefill = (
        prefill if long_prompt_prefill_host == "4f1c9a7e11d2" else server(long_prompt_prefill_host)
    )

    def request(
        tracer: trace.Tracer,
        role: str,
        rid: str,
        room: str,
        times: tuple[str, str],
        usage: tuple[int, int, int],
        latency: dict[str, float],
        error: str | None = None,
        finish: str = "stop",
    ) -> None:
        start, end = map(_ns, times)
        root = tracer.start_span(
            f"{role} Req {rid[:8]}",
            start_time=start,
            attributes={"rid": rid, "module": "sglang::request", "bootstrap_room": hex(int(room))},
        )
        host_id = host_ids[id(tracer)]
        label = "Prefill Scheduler" if role == "prefill" else "Decode Scheduler"
        thread = tracer.start_span(
            f"{label} [TP 0]  [PP 0]  [DP 0] (host:{host_id[:8]} | pid:4242)",
            context=trace.set_span_in_context(root),
            start_time=start,
            attributes={"tp_rank": 0, "host_id": host_id, "pid": 4242, "thread_label": label},
        )
        if error is not None:
            thread.set_status(Status(StatusCode.ERROR, error))
            thread.set_attribute("reason", error)
        thread.end(end_time=end)
        prompt, completion, cached = usage
        root.set_attributes(
            {
                "gen_ai.usage.prompt_tokens": prompt,
                "gen_ai.usage.completion_tokens": completion,
                "gen_ai.usage.cached_tokens": cached,
                "gen_ai.request.id": rid,
                "gen_ai.response.finish_reasons": json.dumps([finish]),
                **{f"gen_ai.latency.{name}": seconds for name, seconds in latency.items()},
            }
        )
        root.end(end_time=end)

    honest = ("2026-08-27 10:12:01", "2026-08-27 10:12:03")
    request(
        prefill,
        "prefill",
        prefill_rids[0],
        HONEST_ROOM,
        honest,
        (4096, 1, 0),
        {"e2e": 1.9, "time_in_model_prefill": 0.39},
    )
    request(
        decode,
        "decode",
        "d1c0b3a2f4e5d6c7b8a9887766554433",
        HONEST_ROOM,
        ("2026-08-27 10:12:01", "2026-08-27 10:12:08"),
        (4096, 256, 0),
        {"e2e": 7.0, "time_to_first_token": 2.3, "time_in_model_decode": 4.2},
    )
    if long_prompt_prefilled:
        request(
            long_prefill,
            "prefill",
            prefill_rids[1],
            EXPOSED_ROOM,
            ("2026-08-27 10:14:38", "2026-08-27 10:16:07"),
            (912384, 1, 0),
            {"e2e": 89.0, "time_in_model_prefill": 88.0},
        )
        request(
            decode,
            "decode",
            "e5f4a3b2c1d0e9f8a7b6554433221100",
            EXPOSED_ROOM,
            ("2026-08-27 10:14:38", "2026-08-27 10:16:18"),
            (912384, 612, 0),
            {"e2e": 100.0, "time_to_first_token": 89.6, "time_in_model_decode": 10.4},
        )
    else:
        request(
            long_prefill,
            "prefill",
            prefill_rids[1],
            EXPOSED_ROOM,
            ("2026-08-27 10:14:38", "2026-08-27 10:14:40"),
            (refused_prompt_tokens or 912384, 0, 0),
            {"e2e": 1.6},
            error=REFUSAL if refused_prompt_tokens is None else None,
            finish="abort",
        )
        request(
            decode,
            "decode",
            "e5f4a3b2c1d0e9f8a7b6554433221100",
            EXPOSED_ROOM,
            ("2026-08-27 10:14:38", "2026-08-27 10:14:52"),
            (912384, 612, 0),
            {"e2e": 14.0, "time_to_first_token": 3.1, "time_in_model_decode": 10.4},
        )
    for processor in processors:
        processor.force_flush()


def _startup_only(folder: Path) -> None:
    """The nodes' logs with request logging off: start-up lines and batch lines only."""
    for log in LOGS.glob("*.log"):
        kept = [
            line
            for line in log.read_text().splitlines(keepends=True)
            if "Receive:" not in line and "Finish:" not in line and "ReqTimeStats" not in line
        ]
        (folder / log.name).write_text("".join(kept))


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    path = tmp_path / "otel" / "otel_trace.json"
    path.parent.mkdir()
    _trace_the_incident(path)
    return path


def _exposed_rooms(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["bootstrap_room"]: r for r in summary["exposure"]["requests"]}


def _assert_joined_to_the_logged_sides(summary: dict[str, Any]) -> None:
    """The exposed response named by the nodes whose logs say it: the spans' sides joined to
    theirs, not beside them (two requests, not four)."""
    exposed = _exposed_rooms(summary)
    assert set(exposed) == {EXPOSED_ROOM}
    assert (exposed[EXPOSED_ROOM]["node"], exposed[EXPOSED_ROOM]["prefill_node"]) == (
        "decode-0",
        "prefill-0",
    )
    assert summary["requests"]["total"] == 2


def _one_span_a_line(exports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each span in an export of its own, in their order: a request's thread spans (which carry
    its refusal) then leave before its root span, as batches cut between them do."""
    single = []
    for export in exports:
        for resource in export["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    alone = {**scope, "spans": [span]}
                    single.append({"resourceSpans": [{**resource, "scopeSpans": [alone]}]})
    return single


@pytest.mark.parametrize(
    "form",
    [
        "lines",
        "pretty",
        "gzip",
        "byte-order mark",
        "array",
        "one span a line",
        "request span first",
        "proto",
        "proto gzip",
    ],
)
def test_traces_alone_name_the_response_decode_served_past_the_prefill_pool(
    tmp_path: Path, traces: Path, form: str
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    if form == "pretty":  # the exports saved by hand as one indented document
        exports = [json.loads(line) for line in traces.read_text().splitlines()]
        spans = [resource for export in exports for resource in export["resourceSpans"]]
        traces.write_text(json.dumps({"resourceSpans": spans}, indent=2))
    elif form == "byte-order mark":
        traces.write_bytes(b"\xef\xbb\xbf" + traces.read_bytes())
    elif form == "array":  # the exports saved as one JSON array
        exports = [json.loads(line) for line in traces.read_text().splitlines()]
        traces.write_text(json.dumps(exports))
    elif form in ("one span a line", "request span first"):
        exports = [json.loads(line) for line in traces.read_text().splitlines()]
        single = [_one_span_a_line([export]) for export in exports]
        if form == "request span first":  # each request span exported before its thread span
            single = [
                [alone[i + 1], alone[i]] if i + 1 < len(alone) else [alone[i]]
                for alone in single
                for i in range(0, len(alone), 2)
            ]
        traces.write_text("".join(json.dumps(e) + "\n" for group in single for e in group))
    elif form == "gzip":
        gzip_path = traces.with_name("otel_trace.json.1.gz")
        gzip_path.write_bytes(gzip.compress(traces.read_bytes()))
        traces.unlink()
    elif form.startswith("proto"):  # the file exporter's `format: proto`, under any name
        framed = _as_framed_protobuf(traces.read_text())
        traces.unlink()
        if form == "proto gzip":
            traces.with_name("otel_trace.pb.gz").write_bytes(gzip.compress(framed))
        else:
            traces.with_name("otel_trace.pb").write_bytes(framed)
    summary = run_forensics([str(logs), str(traces.parent)], tmp_path / "out").summary

    exposed = _exposed_rooms(summary)
    assert set(exposed) == {EXPOSED_ROOM}  # the honest 4,096-token request is not accused
    # The pool and the prompt's length, and the refusal the prefill span's error states.
    assert {"over_length_answered", "rejected_then_served"} <= set(
        exposed[EXPOSED_ROOM]["evidence"]
    )
    assert exposed[EXPOSED_ROOM]["rid"] == "e5f4a3b2c1d0e9f8a7b6554433221100"
    assert exposed[EXPOSED_ROOM]["prompt_tokens"] == 912384
    assert summary["input"]["events_by_kind"]["request_trace"] == 4
    assert summary["requests"]["total"] == 2
    # Traces alone: the request's row holds the span's timings.
    rows = {r["key"]: r for r in pq.read_table(tmp_path / "out" / "requests.parquet").to_pylist()}
    assert (rows[EXPOSED_ROOM]["first_token_latency"], rows[EXPOSED_ROOM]["e2e_latency"]) == (
        3.1,
        14.0,
    )
    # Every server is `sglang`: the role tells the prefill and decode servers apart.
    roles = {node: info["role"] for node, info in summary["nodes"].items()}
    assert roles["sglang-prefill@4f1c9a7e11d2"] == "prefill"
    assert roles["sglang-decode@9b2e6d0c55a8"] == "decode"
    # The logs' nodes logged no request, but the spans judged requests on servers named by no
    # log: they may be any node's, so no node is said to be unjudged (nor a span's server to
    # be seen only in snapshots).
    assert summary["requests"]["nodes_not_judged"] == []


@pytest.mark.parametrize("workers", [1, 2])
def test_traces_beside_full_logs_join_the_logged_sides_and_accuse_nothing_more(
    tmp_path: Path, traces: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spill, "PARALLEL_MIN_BYTES", 0)  # two workers even for small files
    summary = run_forensics(
        [str(LOGS), str(traces.parent)], tmp_path / "out", workers=workers
    ).summary

    _assert_joined_to_the_logged_sides(summary)
    assert summary["input"]["events_by_kind"]["request_trace"] == 4
    assert summary["requests"]["late_lines"] == 0  # spans after their logs' verdict lose nothing
    # The spans' servers are known from the spans, not seen only in snapshots: none unjudged.
    assert summary["requests"]["nodes_not_judged"] == []


def test_only_json_that_opens_with_resource_spans_is_read_as_traces(
    tmp_path: Path, traces: Path
) -> None:
    described = describe(traces)
    assert described is not None and described.kind == "otlp"
    info = tmp_path / "prefill-0@20260827T100000Z.server_info.json"
    info.write_text(json.dumps({"version": "0.5.19", "max_total_num_tokens": 681280}))
    described = describe(info)
    assert described is not None and described.kind == "json"


def test_a_damaged_framed_trace_file_loses_only_its_damaged_exports_and_counts_them(
    tmp_path: Path, traces: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    prefill_export, decode_export = (
        _as_framed_protobuf(line) for line in traces.read_text().splitlines()
    )
    junk = b"\x00\x9f binary junk \xff"
    traces.unlink()
    (traces.parent / "otel_trace.pb").write_bytes(
        prefill_export
        + len(junk).to_bytes(4, "big")
        + junk  # framed, but no export
        + decode_export
        + decode_export[: len(decode_export) // 2]  # cut by a full disk
    )
    summary = run_forensics([str(logs), str(traces.parent)], tmp_path / "out").summary

    dropped = summary["input"]["dropped_by_reason"]
    assert (dropped.get("not_protobuf"), dropped.get("truncated_export")) == (1, 1)
    assert summary["input"]["events_by_kind"]["request_trace"] == 4
    assert set(_exposed_rooms(summary)) == {EXPOSED_ROOM}


def test_a_damaged_trace_file_loses_only_its_damaged_lines_and_counts_them(
    tmp_path: Path, traces: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    prefill_export, decode_export = traces.read_text().splitlines()
    traces.write_text(
        f"{prefill_export}\n"
        "\x00\x9f binary junk \xff\n"
        '{"resourceSpans": [{"scopeSpans": "not a list"}]}\n'
        f"{decode_export[: len(decode_export) // 2]}\n"  # cut by a full disk
        f"{decode_export}\n"
    )
    summary = run_forensics([str(logs), str(traces.parent)], tmp_path / "out").summary

    dropped = summary["input"]["dropped_by_reason"]
    assert dropped.get("not_json", 0) + dropped.get("malformed_otlp_json", 0) == 3
    assert summary["input"]["events_by_kind"]["request_trace"] == 4
    assert set(_exposed_rooms(summary)) == {EXPOSED_ROOM}


def test_a_rid_the_router_gave_both_halves_joins_each_span_to_its_own_half(tmp_path: Path) -> None:
    """A router may send prefill and decode the same rid: the rid then names both halves of a
    room, and each span joins the half of its own role."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for log in LOGS.glob("*.log"):
        text = log.read_text()
        for prefill_rid, decode_rid in zip(PREFILL_RIDS, DECODE_RIDS, strict=True):
            text = text.replace(prefill_rid, decode_rid)
        (logs / log.name).write_text(text)
    traces = tmp_path / "otel" / "otel_trace.json"
    traces.parent.mkdir()
    _trace_the_incident(traces, prefill_rids=DECODE_RIDS)
    summary = run_forensics([str(logs), str(traces.parent)], tmp_path / "out").summary

    _assert_joined_to_the_logged_sides(summary)


@pytest.mark.parametrize("cut_at", ["mid-string", "after an opening bracket"])
def test_a_cut_first_line_loses_only_itself(tmp_path: Path, traces: Path, cut_at: str) -> None:
    """A first line that does not end an export (cut by a rotation) is not taken for the
    opening of one indented document, which would lose every export after it."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    prefill_export, decode_export = traces.read_text().splitlines()
    if cut_at == "mid-string":
        cut = prefill_export[: len(prefill_export) // 3]
    else:
        cut = prefill_export[: prefill_export.index("[") + 1]
    traces.write_text(f"{cut}\n{prefill_export}\n{decode_export}\n")
    summary = run_forensics([str(logs), str(traces.parent)], tmp_path / "out").summary

    assert summary["input"]["dropped_by_reason"] == {"not_json": 1}
    assert summary["input"]["events_by_kind"]["request_trace"] == 4
    assert set(_exposed_rooms(summary)) == {EXPOSED_ROOM}


def test_a_span_that_prefilled_the_long_prompt_names_a_server_whose_pool_holds_it(
    tmp_path: Path,
) -> None:
    """The span says its server prefilled 912,384 tokens: whichever server it was, its pool
    held them, so the only pool read (681,280) is not the one the request met."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    traces = tmp_path / "otel" / "otel_trace.json"
    traces.parent.mkdir()
    _trace_the_incident(traces, long_prompt_prefill_host="bb22cc33dd44", long_prompt_prefilled=True)
    summary = run_forensics([str(logs), str(traces.parent)], tmp_path / "out").summary

    assert _exposed_rooms(summary) == {}
    assert not [f for f in summary["findings"] if f["detector"] == "over_length_answered"]


def test_spans_naming_more_prefill_servers_than_logged_leave_the_pool_unknown(
    tmp_path: Path,
) -> None:
    """Two prefill servers in the spans, one prefill node's logs: one server at least has no
    logs here, so the pool read is not taken for the request's; the refusal still names it."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    traces = tmp_path / "otel" / "otel_trace.json"
    traces.parent.mkdir()
    _trace_the_incident(traces, long_prompt_prefill_host="bb22cc33dd44")
    summary = run_forensics([str(logs), str(traces.parent)], tmp_path / "out").summary

    evidence = _exposed_rooms(summary)[EXPOSED_ROOM]["evidence"]
    assert "rejected_then_served" in evidence and "over_length_answered" not in evidence


def _shifted(node: Any, seconds: int) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("startTimeUnixNano", "endTimeUnixNano"):
                node[key] = str(int(value) + seconds * 1_000_000_000)
            else:
                _shifted(value, seconds)
    elif isinstance(node, list):
        for item in node:
            _shifted(item, seconds)


def test_request_lines_read_after_their_request_was_judged_are_counted_and_said(
    tmp_path: Path, traces: Path
) -> None:
    """Logs from a host two hours east of UTC, spans in UTC: each request is judged from its
    spans two hours before its log lines are read. Those lines are not used, and it is said."""
    exports = [json.loads(line) for line in traces.read_text().splitlines()]
    for export in exports:
        _shifted(export, -7200)
    traces.write_text("".join(json.dumps(export) + "\n" for export in exports))
    result = run_forensics([str(LOGS), str(traces.parent)], tmp_path / "out")

    late = result.summary["requests"]["late_lines"]
    assert late > 0
    by_node = result.summary["requests"]["late_lines_by_node"]
    assert sum(by_node.values()) == late and set(by_node) <= {"prefill-0", "decode-0"}
    report = (tmp_path / "out" / "report.md").read_text()
    named = ", ".join(f"{node} {n:,}" for node, n in sorted(by_node.items(), key=lambda i: -i[1]))
    assert f"{late:,} request lines ({named}) came after their request had been judged" in report
    assert "trace spans are stamped in UTC" in report
    clean = run_forensics([str(LOGS)], tmp_path / "out2")
    assert clean.summary["requests"]["late_lines"] == 0


@pytest.mark.parametrize(("prompt_tokens", "exposed"), [(1, True), (912384, False)])
def test_a_refusal_spanned_as_an_aborted_stub_is_a_refusal(
    tmp_path: Path, prompt_tokens: int, exposed: bool
) -> None:
    """Audit V: 0.5.19 spans an over-length refusal as a root span finishing `abort` with a
    one-token prompt (the refusal's stub) and no error; traces alone found nothing. An abort of
    the whole prompt is a client's abort, not a refusal: nothing is accused."""
    traces = tmp_path / "otel" / "otel_trace.json"
    traces.parent.mkdir()
    _trace_the_incident(traces, refused_prompt_tokens=prompt_tokens)
    summary = run_forensics([str(traces.parent)], tmp_path / "out").summary
    rooms = _exposed_rooms(summary)
    if exposed:
        assert set(rooms) == {EXPOSED_ROOM}
        assert rooms[EXPOSED_ROOM]["evidence"] == ["rejected_then_served"]
        assert rooms[EXPOSED_ROOM]["prompt_tokens"] == 912384
    else:
        assert rooms == {}


def test_what_spans_alone_cover_begins_at_the_first_span_s_start(
    tmp_path: Path, traces: Path
) -> None:
    """A span's time is its end: the covered time began at the first request's end."""
    summary = run_forensics([str(traces.parent)], tmp_path / "out").summary
    assert (summary["input"]["first_time"], summary["input"]["last_time"]) == (
        "2026-08-27T10:12:01.000Z",
        "2026-08-27T10:14:52.000Z",
    )


@pytest.mark.parametrize("refused_prompt_tokens", [None, 1])
def test_spans_a_collector_replays_after_newer_ones_are_put_back_in_time(
    tmp_path: Path, refused_prompt_tokens: int | None
) -> None:
    """A collector's queue sends an outage's spans after newer ones: the exposed answer's decode
    spans come last in the file, behind a request four hours later. Read in file order, they came
    after their room was judged, and the exposure went unnamed (blind review 8c)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    traces = tmp_path / "otel" / "otel_trace.json"
    traces.parent.mkdir()
    _trace_the_incident(traces, refused_prompt_tokens=refused_prompt_tokens)
    exports = [json.loads(line) for line in traces.read_text().splitlines()]
    spans = _one_span_a_line(exports)
    replayed = [span for span in spans if DECODE_RIDS[1] in json.dumps(span)]
    traced = {_only_span(span)["traceId"] for span in spans if _names_honest(span)}
    newer = [_renamed(span) for span in spans if _only_span(span)["traceId"] in traced]
    for span in newer:
        _shifted(span, 4 * 3600)
    in_file = [span for span in spans if span not in replayed] + newer + replayed
    traces.write_text("".join(json.dumps(span) + "\n" for span in in_file))
    summary = run_forensics([str(logs), str(traces.parent)], tmp_path / "out").summary

    exposed = _exposed_rooms(summary)
    assert set(exposed) == {EXPOSED_ROOM}
    assert exposed[EXPOSED_ROOM]["rid"] == DECODE_RIDS[1]
    assert summary["requests"]["total"] == 3


def _only_span(export: dict[str, Any]) -> dict[str, Any]:
    span: dict[str, Any] = export["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    return span


def _names_honest(export: dict[str, Any]) -> bool:
    text = json.dumps(export)
    return PREFILL_RIDS[0] in text or DECODE_RIDS[0] in text


def _renamed(export: dict[str, Any]) -> dict[str, Any]:
    """A span of the honest request as one of another request: its own trace, rids and room."""
    trace_id = _only_span(export)["traceId"]
    text = (
        json.dumps(export)
        .replace(trace_id, trace_id[::-1])
        .replace(PREFILL_RIDS[0], "c3" * 16)
        .replace(DECODE_RIDS[0], "c4" * 16)
        .replace(hex(int(HONEST_ROOM)), hex(int(HONEST_ROOM) + 1))
    )
    renamed: dict[str, Any] = json.loads(text)
    return renamed


def test_spans_of_a_server_named_as_a_node_read_are_that_node_s(tmp_path: Path) -> None:
    """`--otlp-service-name prefill-0` on each server: its spans, named `prefill-0@<host>`,
    are the node `prefill-0` whose log is read. Apart, the span's server had no pool ("POOL
    UNKNOWN") and the log's node none of its requests (blind review 8c)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    traces = tmp_path / "otel" / "otel_trace.json"
    traces.parent.mkdir()
    _trace_the_incident(traces, services=("prefill-0", "decode-0"))
    summary = run_forensics([str(logs), str(traces.parent)], tmp_path / "out").summary

    assert sorted(summary["nodes"]) == ["decode-0", "prefill-0"]
    exposed = _exposed_rooms(summary)
    assert set(exposed) == {EXPOSED_ROOM}
    assert (exposed[EXPOSED_ROOM]["node"], exposed[EXPOSED_ROOM]["prefill_node"]) == (
        "decode-0",
        "prefill-0",
    )
    assert "over_length_answered" in exposed[EXPOSED_ROOM]["evidence"]


def _node(role: str, pool: int | None, *, traced: bool = False) -> dict[str, Any]:
    point = {"max_total_num_tokens": pool, "max_req_input_len": None, "role": role}
    return {"role": role, **({"traced_only": True} if traced else {}), "config": [point]}


def _logs_and_spans(*servers: str) -> dict[str, Any]:
    """A run's summary: a PD pair's logs (pools stated) and the servers spans alone name."""
    nodes = {"prefill-0": _node("prefill", 681_280), "decode-0": _node("decode", 1_500_000)}
    for server in servers:
        nodes[server] = _node(server.split("@")[0].removeprefix("sglang-"), None, traced=True)
    return {"requests": {"total": 240}, "nodes": nodes}


def test_a_span_server_judged_by_the_pools_read_is_no_pool_unknown() -> None:
    """Blind review 24: POOL UNKNOWN named `sglang-prefill@a1b2c3d4`, a server only spans
    named, "judged by refusals and prefill times alone", while the findings judged its
    requests against prefill-0's 681,280-token pool, as they do when it may be that node."""
    from collector.forensics.report import pool_unknown_line

    summary = _logs_and_spans("sglang-prefill@a1b2c3d4")
    assert pool_unknown_line(summary) == ""
    # More span servers than prefill nodes read: one at least is none of them, its pool unknown.
    summary["nodes"]["sglang-prefill@0badcafe"] = _node("prefill", None, traced=True)
    assert pool_unknown_line(summary).startswith(
        "sglang-prefill@0badcafe, sglang-prefill@a1b2c3d4: no KV pool stated"
    )
    # A node with logs and no pool stated is said, spans or not.
    del summary["nodes"]["sglang-prefill@0badcafe"]
    summary["nodes"]["prefill-1"] = _node("prefill", None)
    said = pool_unknown_line(summary)
    assert said.startswith("prefill-1: no KV pool stated")
    # A limit of the exposures listed, said as one (blind review 43 D2).
    assert "the exposures listed may be fewer than there were" in said


def test_an_all_clear_counts_span_servers_apart_from_nodes() -> None:
    """Blind review 24: two engines, their logs and their spans, were "judged on 4 nodes"."""
    from collector.forensics.report import judged_line

    summary = _logs_and_spans("sglang-prefill@a1b2c3d4", "sglang-decode@e5f6a7b8")
    assert judged_line(summary) == ("240 requests judged on 2 nodes and 2 servers trace spans name")


def test_a_pool_known_only_from_a_later_restart_is_said_until_then() -> None:
    """Blind review 25: the start-up lines of 0.5.19's prefills rotated away, their pool known
    only from the fix's restart; 122 exposures fell before it, and POOL UNKNOWN named only an
    unrelated node."""
    from collector.forensics.report import pool_unknown_line

    rotated = _node("prefill", None)
    rotated["config"].append(
        {"time": "2026-09-09T19:31:15.000Z", "max_total_num_tokens": 2_043_904, "role": "prefill"}
    )
    summary: dict[str, Any] = {
        "requests": {"total": 25_000},
        "nodes": {"prefill-0": rotated, "decode-0": _node("decode", 1_245_184)},
    }
    assert pool_unknown_line(summary).startswith(
        "prefill-0 until 2026-09-09T19:31:15.000Z: no KV pool stated"
    )
    # Known from the start, later restarts with or without a capacity line say nothing new.
    summary["nodes"]["prefill-0"]["config"].reverse()
    assert pool_unknown_line(summary) == ""


def test_a_canary_violation_names_the_request_spans_alone_show_in_flight_there(
    tmp_path: Path, traces: Path
) -> None:
    """Blind review 29b: decode logged no request, its answers only in spans under SGLang's
    default service name (`sglang-decode@9b2e6d0c55a8`), and its canary violations were on
    `decode-0`: no violation was matched to the request in flight, 0 exposures, all clear. With
    one decode node read and one decode server spanned, they are one."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    with (logs / "decode-0.log").open("a") as log:
        log.write(  # at 10:12:05 the honest request held KV on decode from 10:12:01 to 10:12:08
            "[2026-08-27 10:12:05 TP0] kv_canary violation: launch_tag=TAIL_K_FULL "
            "fail_reason=verify_chain_hash slot_idx=18433 position=511 stored_token=7 "
            "expected_token=9 stored_chain_hash=0x0000000000000001 "
            "expected_aux=0x0000000000000002\n"
        )
    summary = run_forensics([str(logs), str(traces.parent)], tmp_path / "out").summary
    named = [
        f
        for f in summary["findings"]
        if f["detector"] == "kv_canary_violation" and f["bootstrap_room"] is not None
    ]
    assert [(f["bootstrap_room"], f["rid"], f["exposure"]) for f in named] == [
        (HONEST_ROOM, DECODE_RIDS[0], True)
    ]
    assert HONEST_ROOM in _exposed_rooms(summary)


@pytest.mark.parametrize("reasons", ["names", "objects"])
def test_a_request_known_from_spans_alone_has_its_span_s_counts_in_the_table(
    tmp_path: Path, traces: Path, reasons: str
) -> None:
    """Blind review 29b: the rows of span-only requests had no completion tokens and no
    finish type, though the spans carry both; the finish reasons may be names or the objects
    meta_info holds (`{"type": "stop", "matched": ...}`)."""
    if reasons == "objects":
        text = traces.read_text()
        assert '[\\"stop\\"]' in text
        traces.write_text(
            text.replace('[\\"stop\\"]', '[{\\"type\\": \\"stop\\", \\"matched\\": 7}]')
        )
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    run_forensics([str(logs), str(traces.parent)], tmp_path / "out")
    rows = {r["key"]: r for r in pq.read_table(tmp_path / "out" / "requests.parquet").to_pylist()}
    assert (rows[HONEST_ROOM]["completion_tokens"], rows[HONEST_ROOM]["finish_type"]) == (
        256,
        "stop",
    )


def test_half_missing_lists_a_node_spans_alone_stand_for_once(tmp_path: Path, traces: Path) -> None:
    """Blind review 29b: decode's log and decode's spans under SGLang's default service name,
    no prefill at all: HALF MISSING listed decode-0 and `sglang-decode@9b2e6d0c` as two decode
    nodes. With one decode node read and one decode server spanned, they are one."""
    exports = traces.read_text().splitlines(keepends=True)
    kept = [line for line in exports if "Prefill Scheduler" not in line]
    assert 0 < len(kept) < len(exports)
    traces.write_text("".join(kept))
    logs = tmp_path / "logs"
    logs.mkdir()
    _startup_only(logs)
    (logs / "prefill-0.log").unlink()
    summary = run_forensics([str(logs), str(traces.parent)], tmp_path / "out").summary
    missing = summary["requests"]["pd_role_missing"]
    assert (missing["role"], missing["present"]) == ("prefill", ["decode-0"])
