"""OTLP traces through the OpenTelemetry SDK, with SGLang's span names and attributes (§3).

Each engine node is its own `sglang` service (its own `TracerProvider`, resource `host.name` =
node); the router is the `smg` service. Per request and server: a root span
`"{role} Req {rid[:8]}"` (attributes `rid`, `module`, `bootstrap_room` as a hex string, and the
`gen_ai.*` usage and latency attributes on finish), one thread span per process visited, and
slice spans under it, consecutive slices linked. The router's `http_request` span is the parent
of both roots (W3C `traceparent`), so prefill and decode roots are siblings in one trace.
Span times are simulated times. Ids are 64-bit, as SGLang's custom generator makes them.
"""

from __future__ import annotations

import json
import random
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Link, Span, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from simulator.request import SimRequest

TRACER_NAME = "sglang server"
_PROPAGATOR = TraceContextTextMapPropagator()


def _ns(t: float) -> int:
    return int(t * 1e9)


class Id64Generator(IdGenerator):
    """64-bit trace and span ids (SGLang's tracer uses custom 64-bit ids)."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._rng.getrandbits(64) or 1


def traces_url(endpoint: str) -> str:
    """Accept `http://host:4318` or the full `.../v1/traces` URL."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


def extract(headers: dict[str, str]) -> Context:
    return _PROPAGATOR.extract(headers)


def inject(span: Span) -> dict[str, str]:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


class Tracing:
    """The providers of one live deployment; `shutdown()` flushes every exporter."""

    def __init__(self, endpoint: str, *, seed: int = 0, schedule_delay_ms: int = 500) -> None:
        self.url = traces_url(endpoint)
        self.seed = seed
        self.delay = schedule_delay_ms
        self.providers: list[TracerProvider] = []

    def _provider(self, service: str, host: str) -> TracerProvider:
        resource = Resource.create({"service.name": service, "host.name": host})
        provider = TracerProvider(
            resource=resource, id_generator=Id64Generator(self.seed + len(self.providers))
        )
        provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=self.url),
                schedule_delay_millis=self.delay,
                max_export_batch_size=64,
            )
        )
        self.providers.append(provider)
        return provider

    def node(self, name: str, role: str, host_id: str, pid: int) -> NodeTracer:
        return NodeTracer(
            self._provider("sglang", name).get_tracer(TRACER_NAME), role, host_id, pid
        )

    def router(self) -> trace.Tracer:
        return self._provider("smg", "router").get_tracer("smg")

    def shutdown(self) -> None:
        for provider in self.providers:
            provider.force_flush()
            provider.shutdown()


class NodeTracer:
    """Builds one node's spans for a finished request, after the fact, with simulated times."""

    def __init__(self, tracer: trace.Tracer, role: str, host_id: str, pid: int) -> None:
        self.tracer = tracer
        self.role = role
        self.host_id = host_id
        self.pid = pid

    def _thread(self, root: Span, label: str, start: float) -> Span:
        """A thread span under `root`, named and attributed as SGLang names its threads."""
        return self.tracer.start_span(
            f"{label} [TP 0]  [PP 0]  [DP 0] (host:{self.host_id[:8]} | pid:{self.pid})",
            context=trace.set_span_in_context(root),
            start_time=_ns(start),
            attributes={
                "tp_rank": 0,
                "pp_rank": 0,
                "dp_rank": 0,
                "host_id": self.host_id,
                "pid": self.pid,
                "thread_label": label,
            },
        )

    @staticmethod
    def _end_thread(thread: Span, t: float, error: str | None) -> None:
        if error is not None:
            thread.set_status(Status(StatusCode.ERROR, error))
            thread.set_attribute("reason", error)
        thread.end(end_time=_ns(t))

    def _root(self, req: SimRequest, rid: str, parent: Any, start: float) -> Span:
        return self.tracer.start_span(
            f"{self.role} Req {rid[:8]}",
            context=parent if isinstance(parent, Context) else None,
            start_time=_ns(start),
            attributes={
                "rid": rid,
                "module": "sglang::request",
                "bootstrap_room": hex(req.room),
            },
        )

    def _slices(self, thread: Span, slices: list[tuple[str, float, float]]) -> None:
        ctx = trace.set_span_in_context(thread)
        prev: Span | None = None
        for name, start, end in slices:
            links = [Link(prev.get_span_context())] if prev is not None else None
            span = self.tracer.start_span(name, context=ctx, start_time=_ns(start), links=links)
            span.end(end_time=_ns(max(start, end)))
            prev = span

    def _finish_root(
        self,
        root: Span,
        req: SimRequest,
        rid: str,
        t: float,
        *,
        prompt: int,
        completion: int,
        cached: int,
        reason: str,
        ttft: float | None,
        prefill_s: float,
        decode_s: float,
        status: int,
    ) -> None:
        attrs: dict[str, Any] = {
            "gen_ai.usage.prompt_tokens": prompt,
            "gen_ai.usage.completion_tokens": completion,
            "gen_ai.usage.cached_tokens": cached,
            "gen_ai.request.id": rid,
            "gen_ai.request.max_tokens": req.max_tokens,
            "gen_ai.request.top_p": 1.0,
            "gen_ai.request.top_k": -1,
            "gen_ai.request.temperature": req.temperature,
            "gen_ai.request.n": 1,
            "gen_ai.response.finish_reasons": json.dumps([reason]),
            "gen_ai.latency.time_in_model_prefill": prefill_s,
            "gen_ai.latency.time_in_model_decode": decode_s,
            "gen_ai.latency.time_in_model_inference": prefill_s + decode_s,
        }
        start = req.t_p_recv if self.role == "prefill" else req.t_d_recv
        attrs["gen_ai.latency.e2e"] = t - start
        if ttft is not None:
            attrs["gen_ai.latency.time_to_first_token"] = ttft
        root.set_attributes(attrs)
        if status >= 400:
            root.set_status(Status(StatusCode.ERROR, reason))
        root.end(end_time=_ns(t))

    def prefill_done(self, req: SimRequest, t: float, status: int) -> None:
        root = self._root(req, req.p_rid, req.p_trace, req.t_p_recv)
        tok = self._thread(root, "PrefillTokenizer", req.t_p_recv)
        self._slices(tok, [("tokenize", req.t_p_recv, req.t_p_recv + 0.0003)])
        self._end_thread(tok, req.t_p_recv + 0.0005, None)
        sched = self._thread(root, "Prefill Scheduler", req.t_p_recv)
        forward = (
            "chunked_prefill"
            if req.p_len > (req.p_node.spec.chunked_prefill_size if req.p_node else 0)
            else "prefill_forward"
        )
        self._slices(
            sched,
            [
                ("prefill_bootstrap", req.t_p_recv, req.t_bootstrapped),
                ("prefill_waiting", req.t_bootstrapped, req.t_pf_start),
                (forward, req.t_pf_start, req.t_pf_end),
                ("prefill_transfer_kv_cache", req.t_pf_end, t),
            ],
        )
        self._end_thread(sched, t, (req.refusal or "abort") if status >= 400 else None)
        self._finish_root(
            root,
            req,
            req.p_rid,
            t,
            prompt=req.p_len,
            completion=1 if status < 400 else 0,
            cached=req.cached,
            reason="length" if status < 400 else "abort",
            ttft=None,
            prefill_s=req.t_pf_end - req.t_pf_start,
            decode_s=0.0,
            status=status,
        )

    def decode_done(self, req: SimRequest, t: float, status: int, t_first: float | None) -> None:
        root = self._root(req, req.d_rid, req.d_trace, req.t_d_recv)
        sched = self._thread(root, "Decode Scheduler", req.t_d_recv)
        slices: list[tuple[str, float, float]] = [("decode_prepare", req.t_d_recv, req.t_d_alloc)]
        if req.t_bootstrapped:
            slices.append(("decode_bootstrap", req.t_d_alloc, req.t_bootstrapped))
        if status == 200:
            slices += [
                ("decode_waiting", req.t_bootstrapped, req.t_tx_end),
                ("decode_transferred", req.t_tx_end, req.t_dec_start),
                ("decode_forward", req.t_dec_start, t),
            ]
        self._slices(sched, [s for s in slices if s[1] > 0])
        self._end_thread(sched, t, "abort" if status >= 400 else None)
        self._finish_root(
            root,
            req,
            req.d_rid,
            t,
            prompt=req.tokens,
            completion=req.out_tokens if status == 200 else 0,
            cached=req.cached,
            reason="stop" if status == 200 else "abort",
            ttft=(t_first - req.t_d_recv) if t_first is not None else None,
            prefill_s=0.0,
            decode_s=(t - req.t_dec_start) if status == 200 else 0.0,
            status=status,
        )
