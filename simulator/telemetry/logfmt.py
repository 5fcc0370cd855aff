"""SGLang's log lines, formatted exactly as the engine prints them.

Format strings are taken from the telemetry reference (sglang-telemetry.md §2); which release
prints which variant is decided in `simulator.engine`. Every method returns one complete line
(or, for the multi-line kv-canary record, several) ending in a newline, ready to append to the
node's log file. Lines are built with f-strings: offline mode writes gigabytes of them.

Prefixes (§2.1): scheduler lines carry `[time DPn TPn EPn]` (`TPn` always on releases before
0.5.23, only with tp_size > 1 from 0.5.23); tokenizer, HTTP and request-logger lines carry only
`[time]`. Multi-line records (kv-canary) have the prefix on their first line only, because the
engine logs them as one record with embedded newlines.
"""

from __future__ import annotations

import json
import time
from typing import Any

from simulator.engine import EngineProfile

HTTP_PHRASES: dict[int, str] = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    499: "Client Closed Request",
    500: "Internal Server Error",
    503: "Service Unavailable",
}

BOOTSTRAP_ADVICE = (
    "Some requests timed out when bootstrapping, which means prefill instances fail to receive "
    "the KV indices from the decode instance of this request. If a greater mean TTFT is "
    "acceptable, you can 'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600' (10 minutes) to "
    "relax the timeout condition. "
)
WAITING_ADVICE = (
    "Some requests fail to receive KV Cache transfer done signal after bootstrapping. If a "
    "greater mean TTFT is acceptable, you can 'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' "
    "(10 minutes) to relax the timeout condition. "
)


def input_too_long_message(n_tokens: int, limit: int) -> str:
    return (
        f"Input length ({n_tokens} tokens) exceeds the maximum allowed length ({limit} tokens). "
        "Use a shorter input or enable --allow-auto-truncate."
    )


def context_length_message(n_tokens: int, context_len: int) -> str:
    """The tokenizer's refusal of a prompt that does not fit the context (§2.8)."""
    return (
        f"The input ({n_tokens} tokens) is longer than the model's context length "
        f"({context_len} tokens)."
    )


def exceeds_max_tokens_message(rid: str, length: int, limit: int) -> str:
    return f"Request {rid} exceeds the maximum number of tokens: {length} > {limit}"


def iso_utc(t: float) -> str:
    """ISO 8601 UTC with milliseconds and `Z` (for JSON request logs and ground truth)."""
    ms = int(round(t * 1000.0))
    secs, ms = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{ms:03d}Z"


def _py_repr(value: Any) -> str:
    return repr(value)


class LogFormat:
    """Line formatting for one node (its version, ranks and `SGLANG_LOG_MS` setting)."""

    def __init__(
        self,
        profile: EngineProfile,
        *,
        tp_size: int,
        dp_size: int = 1,
        ep_size: int = 1,
        log_ms: bool = False,
        utc_offset_seconds: int = 0,
    ) -> None:
        self.profile = profile
        self.log_ms = log_ms
        self.utc_offset_seconds = utc_offset_seconds
        ranks = ""
        if dp_size > 1:
            ranks += " DP0"
        if tp_size > 1 or profile.tp_prefix_always:
            ranks += " TP0"
        if ep_size > 1:
            ranks += " EP0"
        self.ranks = ranks
        self._sec = -1
        self._sec_text = ""

    # -- prefixes -------------------------------------------------------------------------
    def stamp(self, t: float) -> str:
        sec = int(t)
        if sec != self._sec:
            self._sec = sec
            local = sec + self.utc_offset_seconds  # the host's wall clock
            self._sec_text = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(local))
        if self.log_ms:
            return f"{self._sec_text}.{int((t - sec) * 1000):03d}"
        return self._sec_text

    def sched(self, t: float, message: str) -> str:
        return f"[{self.stamp(t)}{self.ranks}] {message}\n"

    def plain(self, t: float, message: str) -> str:
        return f"[{self.stamp(t)}] {message}\n"

    # -- startup (§2.2) -------------------------------------------------------------------
    def server_args(self, t: float, args: dict[str, Any]) -> str:
        if self.profile.server_args_dict:
            return self.plain(t, f"server_args={args!r}")
        inner = ", ".join(f"{k}={_py_repr(v)}" for k, v in args.items())
        return self.plain(t, f"server_args=ServerArgs({inner})")

    def load_weight_begin(self, t: float, avail_gb: float) -> str:
        return self.sched(t, f"Load weight begin. avail mem={avail_gb:.2f} GB")

    def load_weight_end(
        self, t: float, elapsed: float, model_class: str, avail_gb: float, usage_gb: float
    ) -> str:
        return self.sched(
            t,
            f"Load weight end. elapsed={elapsed:.2f} s, type={model_class}, "
            f"avail mem={avail_gb:.2f} GB, mem usage={usage_gb:.2f} GB.",
        )

    def kv_allocated(
        self, t: float, tokens: int, dtype: str, k_gb: float, v_gb: float | None
    ) -> str:
        """`v_gb` None means an MLA pool (one `KV size`)."""
        head = "KV Cache is allocated. "
        if self.profile.kv_alloc_has_dtype:
            head += f"dtype: {dtype}, "
        if v_gb is None:
            return self.sched(t, f"{head}#tokens: {tokens}, KV size: {k_gb:.2f} GB")
        return self.sched(
            t, f"{head}#tokens: {tokens}, K size: {k_gb:.2f} GB, V size: {v_gb:.2f} GB"
        )

    def memory_pool_end(self, t: float, avail_gb: float) -> str:
        return self.sched(t, f"Memory pool end. avail mem={avail_gb:.2f} GB")

    def capacity(
        self,
        t: float,
        *,
        max_total_num_tokens: int,
        chunked_prefill_size: int,
        max_prefill_tokens: int,
        max_running_requests: int,
        context_len: int,
        available_gpu_mem: float,
    ) -> str:
        return self.sched(
            t,
            f"max_total_num_tokens={max_total_num_tokens}, "
            f"chunked_prefill_size={chunked_prefill_size}, "
            f"max_prefill_tokens={max_prefill_tokens}, "
            f"max_running_requests={max_running_requests}, context_len={context_len}, "
            f"available_gpu_mem={available_gpu_mem:.2f} GB",
        )

    def pool_below_context(self, t: float, pool: int, context_len: int) -> str:
        return self.sched(
            t,
            f"KV pool holds {pool} tokens, fewer than --context-length {context_len}. "
            "One full-length request cannot fit, so long requests will be refused or "
            "truncated at serving time.",
        )

    def bootstrap_server(self, t: float, host: str, port: int) -> str:
        return self.plain(t, f"CommonKVBootstrapServer started successfully on {host}:{port}")

    def uvicorn(self, t: float, message: str) -> str:
        return self.plain(t, f"INFO:     {message}")

    def warmup_begin(self, t: float) -> str:
        return self.plain(t, "Start of pd disaggregation warmup ...")

    def warmup_end(self, t: float) -> str:
        return self.plain(t, "End of disaggregation warmup")

    def ready(self, t: float) -> str:
        return self.plain(t, "The server is fired up and ready to roll!")

    # -- batches (§2.3, §2.4) -------------------------------------------------------------
    def prefill_batch(
        self,
        t: float,
        *,
        new_seq: int,
        new_token: int,
        cached_token: int,
        usage: float,
        running: int,
        queue: int,
        pending_token: int,
        bootstrap_req: int,
        inflight_req: int,
        throughput: float,
    ) -> str:
        p = self.profile
        msg = (
            f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, "
            f"#cached-token: {cached_token}, token usage: {usage:.2f}, "
            f"#running-req: {running}, #queue-req: {queue}, "
        )
        if p.prefill_has_pending_token:
            msg += f"#pending-token: {pending_token}, "
        msg += f"{p.prefill_queue_field}: {bootstrap_req}, #inflight-req: {inflight_req}, "
        if p.prefill_has_optimistic:
            msg += "#optimistic-req: 0, "
        msg += f"cuda graph: False, input throughput (token/s): {throughput:.2f}"
        return self.sched(t, msg)

    def decode_batch(
        self,
        t: float,
        *,
        running: int,
        tokens: int,
        usage: float,
        prealloc_usage: float,
        prealloc_req: int,
        transfer_req: int,
        gen_throughput: float,
        queue: int,
    ) -> str:
        return self.sched(
            t,
            f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
            f"pre-allocated usage: {prealloc_usage:.2f}, #prealloc-req: {prealloc_req}, "
            f"#transfer-req: {transfer_req}, #retracted-req: 0, cuda graph: True, "
            f"gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue}",
        )

    # -- request logging (§2.5) -----------------------------------------------------------
    @staticmethod
    def gen_req_repr(
        *,
        rid: str,
        text: str | None,
        max_new_tokens: int,
        temperature: float,
        stream: bool,
        bootstrap_host: str,
        bootstrap_port: int,
        bootstrap_room: int,
        level: int,
    ) -> str:
        text_repr = repr(text) if level >= 2 and text is not None else "None"
        sampling = (
            f"{{'temperature': {temperature!r}, 'max_new_tokens': {max_new_tokens}}}"
            if level >= 1
            else "None"
        )
        return (
            f"GenerateReqInput(text={text_repr}, input_ids=None, input_embeds=None, "
            f"image_data=None, video_data=None, audio_data=None, sampling_params={sampling}, "
            f"rid='{rid}', return_logprob=False, logprob_start_len=-1, top_logprobs_num=0, "
            f"token_ids_logprob=None, return_text_in_logprobs=False, stream={stream}, "
            f"log_metrics=True, return_hidden_states=False, modalities=[], "
            f"session_params=None, lora_path=None, custom_logit_processor=None, "
            f"bootstrap_host='{bootstrap_host}', bootstrap_port={bootstrap_port}, "
            f"bootstrap_room={bootstrap_room}, bootstrap_pair_key=None, "
            f"data_parallel_rank=None, priority=None, extra_key=None, no_logs=False, "
            f"custom_labels=None, return_bytes=False)"
        )

    def receive(self, t: float, obj_repr: str) -> str:
        return self.plain(t, f"Receive: obj={obj_repr}")

    def finish(self, t: float, obj_repr: str, out_repr: str) -> str:
        return self.plain(t, f"Finish: obj={obj_repr}, out={out_repr}")

    def meta_info(
        self,
        *,
        rid: str,
        finish_reason: dict[str, Any],
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int,
        e2e_latency: float,
        metrics: dict[str, float] | None,
    ) -> dict[str, Any]:
        retr = "num_retractions" if self.profile.meta_num_retractions else "total_retractions"
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": finish_reason,
            "prompt_tokens": prompt_tokens,
            "weight_version": "default",
            retr: 0,
            "reasoning_tokens": 0,
            "completion_tokens": completion_tokens,
            "cached_tokens": cached_tokens,
            "cached_tokens_details": {"device": cached_tokens, "host": 0},
            "e2e_latency": e2e_latency,
        }
        if metrics:
            meta.update(metrics)
        return meta

    def receive_json(self, t: float, rid: str, obj: dict[str, Any]) -> str:
        record = {"timestamp": iso_utc(t), "event": "request.received", "rid": rid, "obj": obj}
        return json.dumps(record, separators=(", ", ": ")) + "\n"

    def finish_json(self, t: float, rid: str, obj: dict[str, Any], out: dict[str, Any]) -> str:
        record = {
            "timestamp": iso_utc(t),
            "event": "request.finished",
            "rid": rid,
            "obj": obj,
            "out": out,
        }
        return json.dumps(record, separators=(", ", ": ")) + "\n"

    # -- per-request time stats (§2.6) ----------------------------------------------------
    def req_stats_prefill(
        self,
        t: float,
        *,
        rid: str,
        room: int,
        input_len: int,
        cached_input_len: int,
        bootstrap_ms: float,
        queue_ms: float,
        forward_ms: float,
        entry_time: float,
        speed_gb_s: float,
        total_mb: float,
    ) -> str:
        attempts = "attempts=0, " if self.profile.req_stats_attempts else ""
        return self.sched(
            t,
            f"ReqTimeStats(rid={rid}, bootstrap_room={room}, input_len={input_len}, "
            f"cached_input_len={cached_input_len}, output_len=1, {attempts}type=prefill): "
            f"bootstrap_duration={bootstrap_ms:.2f}ms, queue_duration={queue_ms:.2f}ms, "
            f"forward_duration={forward_ms:.2f}ms, entry_time={entry_time:.3f}, "
            f"transfer_speed={speed_gb_s:.2f} GB/s, transfer_total={total_mb:.2f} MB",
        )

    def req_stats_decode(
        self,
        t: float,
        *,
        rid: str,
        room: int,
        input_len: int,
        cached_input_len: int,
        output_len: int,
        bootstrap_ms: float,
        alloc_wait_ms: float,
        transfer_ms: float,
        queue_ms: float,
        forward_ms: float,
        entry_time: float,
    ) -> str:
        p = self.profile
        attempts = "attempts=0, " if p.req_stats_attempts else ""
        head = (
            f"ReqTimeStats(rid={rid}, bootstrap_room={room}, input_len={input_len}, "
            f"cached_input_len={cached_input_len}, output_len={output_len}, {attempts}"
            f"type=decode): "
        )
        if p.req_stats_old_decode:
            pre = alloc_wait_ms + bootstrap_ms
            head += (
                f"prealloc_queue_duration({pre:.2f}ms) = alloc_wait({alloc_wait_ms:.2f}ms) + "
                f"bootstrap({bootstrap_ms:.2f}ms) + other(0.00ms); "
            )
        else:
            head += (
                f"bootstrap_duration={bootstrap_ms:.2f}ms, "
                f"alloc_wait_duration={alloc_wait_ms:.2f}ms, "
            )
        return self.sched(
            t,
            f"{head}transfer_duration={transfer_ms:.2f}ms, queue_duration={queue_ms:.2f}ms, "
            f"forward_duration={forward_ms:.2f}ms, entry_time={entry_time:.3f}",
        )

    # -- HTTP access (§2.7) ---------------------------------------------------------------
    def access(self, t: float, client: str, method: str, path: str, status: int) -> str:
        phrase = HTTP_PHRASES.get(status, "")
        return self.plain(
            t, f'INFO:     {client} - "{method} {path} HTTP/1.1" {status} {phrase}'.rstrip()
        )

    # -- refusals (§2.8) ------------------------------------------------------------------
    def input_too_long(self, t: float, n_tokens: int, limit: int, rid: str) -> str:
        return self.sched(t, f"{input_too_long_message(n_tokens, limit)}, self.rid='{rid}'")

    def exceeds_max_tokens(self, t: float, rid: str, length: int, limit: int) -> str:
        return self.sched(t, exceeds_max_tokens_message(rid, length, limit))

    def missing_room(self, t: float, rid: str) -> str:
        return self.sched(
            t,
            "Invalid request: Disaggregated request received without bootstrap room id. "
            f"req.rid='{rid}'",
        )

    # -- PD lines (§2.9) ------------------------------------------------------------------
    @staticmethod
    def kv_error(room: int, reason: str) -> str:
        return f"KVTransferError(bootstrap_room={room}): {reason}"

    def _pd_failed(
        self, t: float, what: str, req_expr: str, rid: str, room: int, reason: str
    ) -> str:
        """`{what} failed for request ...`: one template, four stages (§2.9)."""
        return self.sched(
            t,
            f"{what} failed for request rank=0 {req_expr}.rid='{rid}' "
            f"{req_expr}.bootstrap_room={room} with exception {self.kv_error(room, reason)}",
        )

    def decode_handshake_failed(self, t: float, rid: str, room: int, reason: str) -> str:
        return self._pd_failed(t, "Decode handshake", "decode_req.req", rid, room, reason)

    def decode_transfer_failed(self, t: float, rid: str, room: int, reason: str) -> str:
        return self._pd_failed(t, "Decode transfer", "decode_req.req", rid, room, reason)

    def prefill_bootstrap_failed(self, t: float, rid: str, room: int, reason: str) -> str:
        return self._pd_failed(t, "Prefill bootstrap", "req", rid, room, reason)

    def prefill_transfer_failed(self, t: float, rid: str, room: int, reason: str) -> str:
        return self._pd_failed(t, "Prefill transfer", "req", rid, room, reason)

    def bootstrap_advice(self, t: float) -> str:
        return self.sched(t, BOOTSTRAP_ADVICE)

    def waiting_advice(self, t: float) -> str:
        return self.sched(t, WAITING_ADVICE)

    def lost_connection(self, t: float, addr: str, n_requests: int) -> str:
        return self.sched(
            t,
            f"Lost connection with prefill instance (bootstrap_addr: {addr}), "
            f"{n_requests} requests affected",
        )

    def metadata_corruption(
        self, t: float, rid: str, expected_room: int, actual_room: int, index: int
    ) -> str:
        return self.sched(
            t,
            f"Context corruption detected: Request {rid} (bootstrap_room={expected_room}) "
            f"received metadata from bootstrap_room={actual_room}. Metadata buffer index: "
            f"{index}. This indicates metadata buffer index collision.",
        )

    def checksum_mismatch(self, t: float, rid: str, room: int, expected: int, got: int) -> str:
        return self.sched(
            t,
            f"KV checksum mismatch req={rid} bootstrap_room={room} "
            f"expected=0x{expected:08x} got=0x{got:08x}",
        )

    def checksum_skipped(self, t: float, prefill_sig: int, decode_sig: int) -> str:
        return self.sched(
            t,
            f"KV checksum skipped: prefill layout signature 0x{prefill_sig:08x} differs from "
            f"this decode's 0x{decode_sig:08x} (TP width, PP stage, or page size); its "
            "requests are admitted unverified.",
        )

    def deferred_release_timeout(self, t: float, room: int, timeout_s: float) -> str:
        return self.sched(
            t,
            f"Deferred KV release for room {room} timed out after {timeout_s}s without a full "
            "drain ack from prefill; releasing anyway.",
        )

    def kv_canary_violation(
        self,
        t: float,
        *,
        launch_tag: str,
        slot_idx: int,
        position: int,
        token: int,
        stored_hash: int,
        expected_aux: int,
        total_violations: int,
        step: int,
    ) -> str:
        first = self.sched(
            t,
            f"kv_canary violation: launch_tag={launch_tag} fail_reason=verify_chain_hash "
            f"slot_idx={slot_idx} position={position} stored_token={token} "
            f"expected_token={token} stored_chain_hash=0x{stored_hash:016x} "
            f"expected_aux=0x{expected_aux:016x}",
        )
        return (
            f"{first}KV cache canary violation detected (kernel_kind={launch_tag}, "
            f"slot_idx={slot_idx}, position={position})\n"
            f"canary_kind:       chain_hash\n"
            f"  fail_reasons: verify_chain_hash\n"
            f"  stored: token={token} chain_hash=0x{stored_hash:016x}\n"
            f"  expected: token={token} aux=0x{expected_aux:016x}\n"
            f"  total_violations={total_violations} ring_overflow=False step_when_pumped={step}\n"
        )

    def kv_canary_stats(
        self, t: float, step: int, protected: int, sweeps: int, violations: int
    ) -> str:
        return self.sched(
            t,
            f"[canary] step={step} protected_tokens={protected} sweep_passes={sweeps} "
            f"violations={violations} launch_tags_active=4/4",
        )
