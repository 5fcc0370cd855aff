"""What every engine node has: configuration, a KV pool, telemetry, and its startup.

`PrefillNode` and `DecodeNode` add their half of the PD protocol. A restart replaces the
configuration (version, pool, context) and bumps `generation`, so events scheduled by the old
process are ignored by the new one.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from simulator.content import LOG_TEXT_LIMIT, generated_text_head
from simulator.engine import EngineProfile
from simulator.pool import PagedKVPool
from simulator.request import SimRequest
from simulator.scenario import RoleSpec
from simulator.telemetry import server_info as info
from simulator.telemetry.logfmt import LogFormat, context_length_message
from simulator.telemetry.metrics import NodeMetrics

if TYPE_CHECKING:
    from simulator.deployment import Deployment

CHAT_PATH = "/v1/chat/completions"
EOS_TOKEN = 151329


def error_body(message: str, err_type: str, code: int) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


class RequestHalf(NamedTuple):
    """What one role knows a request by (each role keeps its own rid, client and times)."""

    rid: str
    obj: str  # the `obj=` repr logged at `Receive:`, reused in `Finish:`
    t_recv: float
    client: str


class EngineNode:
    role: Literal["prefill", "decode"] = "prefill"

    def __init__(self, dep: Deployment, name: str, index: int, host: str, spec: RoleSpec) -> None:
        self.dep = dep
        self.name = name
        self.index = index
        self.host = host
        self.generation = 0
        self.down = True
        self.started_at = 0.0
        self.tracer: Any = None
        self._configure(spec)

    # -- configuration --------------------------------------------------------------------
    def _configure(self, spec: RoleSpec) -> None:
        self.spec = spec
        self.profile: EngineProfile = spec.profile
        self.fmt = LogFormat(
            self.profile,
            tp_size=spec.tp_size,
            dp_size=spec.dp_size,
            ep_size=spec.ep_size,
            log_ms=spec.log_ms,
            utc_offset_seconds=spec.log_utc_offset_minutes * 60,
        )
        self.metrics = NodeMetrics(
            role=self.role,
            profile=self.profile,
            model_name=self.dep.scenario.model.name,
            dp_size=spec.dp_size,
            enabled=spec.enable_metrics,
        )
        self.pool = PagedKVPool(spec.max_total_num_tokens, spec.page_size)
        self.capacity = spec.max_total_num_tokens
        self.args = info.server_args(
            spec,
            self.role,
            self.dep.scenario.model,
            host="0.0.0.0",
            port=spec.http_port,
            seed=self.dep.seed,
        )
        self.bootstrap_addr = f"{self.host}:{spec.bootstrap_port}"
        model = self.dep.scenario.model
        hw = self.dep.scenario.hardware
        self.kv_gb = spec.max_total_num_tokens * model.kv_bytes_per_token / hw.gpus_per_node / 1e9
        self.weight_gb = model.weight_gb_per_gpu
        graph = 1.2 if self.role == "decode" else 0.0
        self.avail_after_pool = hw.gpu_mem_gb - 1.9 - self.weight_gb - self.kv_gb - graph

    def reconfigure(self, spec: RoleSpec) -> None:
        self.generation += 1
        self._reset_state()
        self._configure(spec)

    def _reset_state(self) -> None:
        """Drop in-flight work of the old process (overridden by roles)."""

    # -- this role's half of a request (overridden by roles) -------------------------------
    def half(self, req: SimRequest) -> RequestHalf:
        raise NotImplementedError

    def reply(self, req: SimRequest, status: int, body: dict[str, Any]) -> None:
        """Answer whoever waits on this role's half of `req`."""
        raise NotImplementedError

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, t: float, rng: random.Random) -> None:
        """Write the startup block; the node serves about a minute later (weights, pool, warmup)."""
        f = self.fmt
        spec = self.spec
        hw = self.dep.scenario.hardware
        model = self.dep.scenario.model
        avail0 = hw.gpu_mem_gb - 1.9
        load_s = 40.0 + rng.random() * 30.0
        out = [f.server_args(t, self.args)]
        t1 = t + 6.0 + rng.random() * 3
        out.append(f.load_weight_begin(t1, avail0))
        t2 = t1 + load_s
        out.append(
            f.load_weight_end(
                t2, load_s, model.architecture, avail0 - self.weight_gb, self.weight_gb
            )
        )
        v_gb = None if model.kv_layout == "mla" else self.kv_gb / 2
        k_gb = self.kv_gb if v_gb is None else self.kv_gb / 2
        t3 = t2 + 2.0
        out.append(f.kv_allocated(t3, self.capacity, model.kv_dtype, k_gb, v_gb))
        out.append(f.memory_pool_end(t3, avail0 - self.weight_gb - self.kv_gb))
        t4 = t3 + (25.0 if self.role == "decode" else 1.0)
        out.append(
            f.capacity(
                t4,
                max_total_num_tokens=self.capacity,
                chunked_prefill_size=spec.chunked_prefill_size,
                max_prefill_tokens=spec.max_prefill_tokens,
                max_running_requests=spec.max_running_requests,
                context_len=spec.context_len,
                available_gpu_mem=self.avail_after_pool,
            )
        )
        if self.profile.has_pool_below_context_warning and self.capacity < spec.context_len:
            out.append(f.pool_below_context(t4, self.capacity, spec.context_len))
        t5 = t4 + 1.0
        if self.role == "prefill":
            out.append(f.bootstrap_server(t5, self.host, spec.bootstrap_port))
        pid = 1000 + rng.randrange(60000)
        out.append(f.uvicorn(t5, f"Started server process [{pid}]"))
        out.append(f.uvicorn(t5, "Waiting for application startup."))
        out.append(f.uvicorn(t5, "Application startup complete."))
        out.append(
            f.uvicorn(
                t5, f"Uvicorn running on http://0.0.0.0:{spec.http_port} (Press CTRL+C to quit)"
            )
        )
        t6 = t5 + 1.0
        out.append(f.warmup_begin(t6))
        out.append(f.warmup_end(t6 + 1.5))
        out.append(f.ready(t6 + 2.0))
        self.dep.sink.write(self.name, t, "".join(out))
        self.started_at = t6 + 2.0
        self._started(self.started_at)
        self._set_constants()
        self.dep.queue.at(self.started_at, self._come_up, self.generation)

    def _started(self, t: float) -> None:
        """Hook for roles: the process is up at `t`."""

    def _come_up(self, t: float, generation: int) -> None:
        if generation != self.generation:
            return
        self.down = False
        self.dep.snapshot_node(self, t)

    def _set_constants(self) -> None:
        m = self.metrics
        m.set("sglang:max_total_num_tokens", float(self.capacity))
        m.set("sglang:context_len", float(self.spec.context_len))
        m.set("sglang:page_size", float(self.spec.page_size))
        m.set("sglang:num_pages", float(self.pool.num_pages))
        m.set("sglang:kv_cache_memory_usage_gb", round(self.kv_gb, 2))
        m.set("sglang:weight_memory_usage_gb", round(self.weight_gb, 2))
        m.set("sglang:kv_available_tokens", float(self.capacity))

    # -- what the node reports ------------------------------------------------------------
    def load_view(self) -> info.LoadView:
        raise NotImplementedError

    def server_info(self) -> dict[str, Any]:
        return info.server_info(
            self.args,
            self.spec,
            max_total_num_tokens=self.capacity,
            startup_time=self.started_at,
            load=self.load_view(),
            weight_gb=round(self.weight_gb, 2),
            kv_gb=round(self.kv_gb, 2),
            avail_gb=round(self.avail_after_pool, 2),
        )

    def models_card(self) -> dict[str, Any]:
        return info.models_card(
            self.dep.scenario.model, self.spec.context_len, int(self.started_at)
        )

    def loads(self, now: float) -> dict[str, Any]:
        return info.loads(
            self.spec, self.role, now=now, max_total_num_tokens=self.capacity, load=self.load_view()
        )

    # -- request logging helpers ----------------------------------------------------------
    def log(self, t: float, text: str) -> None:
        self.dep.sink.write(self.name, t, text)

    def _text_head(self, req: SimRequest) -> str:
        if not req.text_head:
            req.text_head = req.spec.text_head or generated_text_head(
                req.cid, req.spec.doc_name, req.spec.markers
            )
        return req.text_head

    def _obj_dict(self, req: SimRequest, rid: str) -> dict[str, Any]:
        level = self.spec.log_requests_level
        obj: dict[str, Any] = {"rid": rid}
        if level >= 2:
            obj["text"] = self._text_head(req)
        if level >= 1:
            obj["sampling_params"] = {
                "temperature": req.temperature,
                "max_new_tokens": req.max_tokens,
            }
        obj.update(
            {
                "stream": req.stream,
                "bootstrap_host": req.p_node.host if req.p_node else "",
                "bootstrap_port": self.spec.bootstrap_port,
                "bootstrap_room": req.room,
            }
        )
        return obj

    def log_receive(self, t: float, req: SimRequest, rid: str) -> str:
        """Log the `Receive:` record; returns the obj repr to reuse in `Finish:`."""
        if not self.spec.log_requests:
            return ""
        if self.spec.log_requests_format == "json":
            self.log(t, self.fmt.receive_json(t, rid, self._obj_dict(req, rid)))
            return ""
        level = self.spec.log_requests_level
        obj = self.fmt.gen_req_repr(
            rid=rid,
            text=self._text_head(req) if level >= 2 else None,
            max_new_tokens=req.max_tokens,
            temperature=req.temperature,
            stream=req.stream,
            bootstrap_host=req.p_node.host if req.p_node else "",
            bootstrap_port=self.spec.bootstrap_port,
            bootstrap_room=req.room,
            level=level,
        )
        self.log(t, self.fmt.receive(t, obj))
        return obj

    def log_finish(self, t: float, req: SimRequest, text: str, meta: dict[str, Any]) -> None:
        if not self.spec.log_requests:
            return
        out: dict[str, Any] = {}
        if self.spec.log_requests_level >= 2:
            out["text"] = text[:LOG_TEXT_LIMIT]
        out["meta_info"] = meta
        rid, obj, _, _ = self.half(req)
        if self.spec.log_requests_format == "json":
            self.log(t, self.fmt.finish_json(t, rid, self._obj_dict(req, rid), out))
        else:
            self.log(t, self.fmt.finish(t, obj, repr(out)))

    def access(self, t: float, client: str, status: int) -> None:
        self.log(t, self.fmt.access(t, client, "POST", CHAT_PATH, status))
        m = self.metrics
        m.inc("sglang:http_requests_total", 1.0, CHAT_PATH, "POST")
        m.inc("sglang:http_responses_total", 1.0, CHAT_PATH, "POST", str(status))

    def meta(
        self,
        req: SimRequest,
        t: float,
        *,
        finish_reason: dict[str, Any],
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int,
        first_token_at: float | None,
        forward_entry: float,
        prefill_finished: float,
    ) -> dict[str, Any]:
        rid, _, t_recv, _ = self.half(req)
        metrics: dict[str, float] | None = None
        if self.spec.enable_metrics:
            metrics = {
                "queue_time": round(max(0.0, forward_entry - t_recv), 6),
                "forward_entry_time": round(forward_entry, 6),
                "prefill_finished_time": round(prefill_finished, 6),
                "request_received_ts": round(t_recv, 6),
            }
            if first_token_at is not None:
                metrics["first_token_latency"] = round(first_token_at - t_recv, 6)
            metrics["response_sent_to_client_ts"] = round(t, 6)
            metrics["request_finished_ts"] = round(t, 6)
            if completion_tokens > 1 and first_token_at is not None and t > first_token_at:
                metrics["decode_throughput"] = round(
                    (completion_tokens - 1) / (t - first_token_at), 3
                )
        return self.fmt.meta_info(
            rid=rid,
            finish_reason=finish_reason,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached_tokens=cached_tokens,
            e2e_latency=round(t - t_recv, 6),
            metrics=metrics,
        )

    @staticmethod
    def abort_reason(message: str, status: int, err_type: str | None) -> dict[str, Any]:
        return {"type": "abort", "message": message, "status_code": status, "err_type": err_type}

    def reject_over_context(self, t: float, req: SimRequest) -> None:
        """The tokenizer refuses a prompt that does not fit the context: 400, no request log."""
        self.access(t, self.half(req).client, 400)
        message = context_length_message(req.tokens, self.spec.context_len)
        self.reply(req, 400, error_body(message, "BadRequestError", 400))

    def finish_aborted(
        self,
        t: float,
        req: SimRequest,
        message: str,
        status: int | None,
        err_type: str | None,
        *,
        prompt_tokens: int,
        cached_tokens: int,
        forward_entry: float,
    ) -> None:
        """Log, count and answer a request the engine ends as an abort.

        `status` None: the client went away, so there is no access line and the abort's
        `status_code` is null; the waiting handler still gets a 499.
        """
        reason = self.abort_reason(message, status or 0, err_type)
        if status is None:
            reason["status_code"] = None
        meta = self.meta(
            req,
            t,
            finish_reason=reason,
            prompt_tokens=prompt_tokens,
            completion_tokens=0,
            cached_tokens=cached_tokens,
            first_token_at=None,
            forward_entry=forward_entry,
            prefill_finished=t,
        )
        self.log_finish(t, req, "", meta)
        half = self.half(req)
        self.count_request(req, prompt_tokens, 0, cached_tokens, t - half.t_recv)
        if status is None:
            self.reply(req, 499, error_body(message, "ClientDisconnected", 499))
        else:
            self.access(t, half.client, status)
            self.reply(req, status, error_body(message, err_type or "InternalServerError", status))

    def count_request(
        self, req: SimRequest, prompt: int, completion: int, cached: int, e2e: float
    ) -> None:
        m = self.metrics
        streaming = "true" if req.stream else "false"
        m.inc("sglang:num_requests_total", 1.0, streaming)
        m.inc("sglang:prompt_tokens_total", float(prompt), streaming)
        m.inc("sglang:generation_tokens_total", float(completion), streaming)
        if cached:
            m.inc("sglang:cached_tokens_total", float(cached), "device")
        m.observe("sglang:e2e_request_latency_seconds", e2e, streaming)
