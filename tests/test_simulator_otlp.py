"""OTLP spans really leave the simulator through the OpenTelemetry SDK's HTTP exporter."""

from __future__ import annotations

import gzip
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from simulator.live import LiveDeployment
from simulator.scenario import load_scenario


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        length = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(length)
        if self.headers.get("Content-Encoding") == "gzip":
            data = gzip.decompress(data)
        if self.path == "/v1/traces":
            type(self).bodies.append(data)
        payload = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[bytes]]]:
    _Receiver.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Receiver.bodies
    finally:
        server.shutdown()
        server.server_close()


def _spans(bodies: list[bytes]) -> list[tuple[str, Any]]:
    out = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            service = next(
                a.value.string_value for a in rs.resource.attributes if a.key == "service.name"
            )
            for ss in rs.scope_spans:
                out.extend((service, span) for span in ss.spans)
    return out


def _attrs(span: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for a in span.attributes:
        v = a.value
        values[a.key] = getattr(v, v.WhichOneof("value"))
    return values


def test_request_spans_are_exported_with_sglang_names(
    tmp_path: Path, receiver: tuple[str, list[bytes]]
) -> None:
    endpoint, bodies = receiver
    live = LiveDeployment(
        load_scenario("incident-replay-small"),
        log_dir=tmp_path,
        speed=100,
        otlp_endpoint=endpoint,
    )
    with live, httpx.Client(timeout=30) as client:
        resp = client.post(
            live.router_url + "/v1/chat/completions",
            json={
                "model": "GLM-5.3",
                "max_tokens": 50,
                "messages": [{"role": "user", "content": "hello [[pad 20000]] [[reply 20]]"}],
            },
        )
        assert resp.status_code == 200
        d_rid = resp.json()["id"]
    prefill_log = (tmp_path / "prefill-0.log").read_text()
    p_rid = re.search(r"ReqTimeStats\(rid=([0-9a-f]{32}), bootstrap_room=(\d+)", prefill_log)
    assert p_rid is not None
    room = int(p_rid.group(2))

    spans = _spans(bodies)  # stop() flushed the batch processors
    by_name = {span.name: (service, span) for service, span in spans}
    p_service, p_root = by_name[f"prefill Req {p_rid.group(1)[:8]}"]
    d_service, d_root = by_name[f"decode Req {d_rid[:8]}"]
    r_service, router = by_name["http_request"]
    assert (p_service, d_service, r_service) == ("sglang", "sglang", "smg")
    for root in (p_root, d_root):
        attrs = _attrs(root)
        assert attrs["module"] == "sglang::request"
        assert int(attrs["bootstrap_room"], 16) == room
        # siblings under the router's span, in one trace (W3C traceparent across HTTP)
        assert root.trace_id == router.trace_id
        assert root.parent_span_id == router.span_id
    assert _attrs(d_root)["rid"] == d_rid
    d_attrs = _attrs(d_root)
    assert d_attrs["gen_ai.usage.prompt_tokens"] == 4 + 1 + 20000 + 2
    assert d_attrs["gen_ai.usage.completion_tokens"] == 20
    assert d_attrs["gen_ai.latency.time_to_first_token"] > 0
    names = {span.name for _, span in spans}
    assert {"prefill_bootstrap", "prefill_transfer_kv_cache", "decode_forward", "tokenize"} <= names
    assert "chunked_prefill" in names  # 20,000 tokens > chunked_prefill_size
    thread = re.compile(
        r"^Decode Scheduler \[TP 0\]  \[PP 0\]  \[DP 0\] \(host:[0-9a-f]{8} \| pid:\d+\)$"
    )
    assert any(thread.match(n) for n in names)
    assert d_root.end_time_unix_nano > d_root.start_time_unix_nano
    assert len(router.span_id) == 8 and int.from_bytes(router.trace_id, "big") < 2**64
