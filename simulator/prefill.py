"""The prefill server: admission by version, bootstrap, chunked prefill, KV transfer.

The over-length path is the incident: the scheduler refuses a prompt longer than
`max_req_input_len`, logs it, and swaps the prompt for a one-token stub. What happens next is
the engine release's business (`EngineProfile.over_length`):

* `stub_leak` (<= 0.5.19): the stub is bootstrapped, prefilled (1 token) and its one page sent
  to decode as if nothing happened; decode attends over every page it reserved.
* `retire_after_bootstrap` (0.5.20): the request is retired once bootstrapped; decode's
  transfer fails (HTTP 500 to the client), no KV is sent.
* `refuse_before_bootstrap` (>= 0.5.21): retired before bootstrap; decode learns of the
  refusal through the bootstrap server and answers 400.

Scheduling: one waiting queue, batches of new requests up to `chunked_prefill_size` tokens,
the last one possibly chunked (one chunked request at a time). The KV of each chunk is sent as
soon as it is computed.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from simulator.node import EngineNode, RequestHalf, error_body
from simulator.pool import RadixCache
from simulator.request import SimRequest
from simulator.scenario import RoleSpec
from simulator.telemetry import server_info as info
from simulator.telemetry.logfmt import input_too_long_message

ABORTED_BY_CLIENT = "Aborted by AbortReq."


class PrefillNode(EngineNode):
    role = "prefill"

    def _configure(self, spec: RoleSpec) -> None:
        super()._configure(spec)
        self.cache = RadixCache(self.pool)
        self._reset_state()

    def _reset_state(self) -> None:
        self.waiting: deque[SimRequest] = deque()
        self.current: SimRequest | None = None
        self.busy = False
        self.bootstrap_q = 0
        self.inflight = 0
        self.pending_tokens = 0
        self.last_log_t = 0.0
        self.advised_bootstrap = False
        self.hit_tokens = 0
        self.seen_tokens = 0
        self.last_speed = 0.0
        self.last_latency_ms = 0.0

    def _started(self, t: float) -> None:
        self.last_log_t = t

    def half(self, req: SimRequest) -> RequestHalf:
        return RequestHalf(req.p_rid, req.p_obj, req.t_p_recv, req.p_client)

    def reply(self, req: SimRequest, status: int, body: dict[str, Any]) -> None:
        self.dep.reply_p(req, status, body)

    # -- arrival --------------------------------------------------------------------------
    def receive(self, t: float, req: SimRequest) -> None:
        spec = self.spec
        req.p_node = self
        req.p_gen = self.generation
        req.t_p_recv = t
        if req.tokens >= spec.context_len:
            req.p_status = "refused"
            self.reject_over_context(t, req)
            return
        req.p_obj = self.log_receive(t, req, req.p_rid)
        limit = spec.max_req_input_len
        req.p_len = req.tokens
        if req.tokens > limit:
            self.log(t, self.fmt.input_too_long(t, req.tokens, limit, req.p_rid))
            req.refusal = input_too_long_message(req.tokens, limit)
            req.stub = True
            req.p_len = 1
            if self.profile.over_length == "refuse_before_bootstrap":
                self._retire(t, req)
                self.dep.try_bootstrap(req, t)
                return
        req.p_status = "bootstrapping"
        self.bootstrap_q += 1
        fault = req.fault
        if fault is not None and fault.bootstrap_timeout == "bootstrap":
            timeout = self.dep.scenario.deployment.bootstrap_timeout_s
            self.dep.queue.at(t + timeout, self._bootstrap_timeout, req, self.generation)
        self.dep.try_bootstrap(req, t)

    def _retire(self, t: float, req: SimRequest) -> None:
        """Finish a refused request with the engine's abort (400), as the client sees it."""
        req.p_status = "refused"
        self.finish_aborted(
            t,
            req,
            req.refusal,
            400,
            "BadRequestError",
            prompt_tokens=1,
            cached_tokens=0,
            forward_entry=t,
        )

    # -- bootstrap ------------------------------------------------------------------------
    def bootstrapped(self, t: float, req: SimRequest, generation: int) -> None:
        if generation != self.generation or req.p_status != "bootstrapping":
            return
        self.bootstrap_q -= 1
        req.t_bootstrapped = t
        self.metrics.observe("sglang:kv_transfer_bootstrap_ms", (t - req.t_p_recv) * 1000.0)
        if req.refusal and self.profile.over_length == "retire_after_bootstrap":
            self._retire(t, req)
            self.dep.decode_transfer_failed(
                req,
                t + self.dep.latency.network_s,
                "Failed to get kvcache from prefill instance, it might be dead",
            )
            return
        req.p_status = "waiting"
        self.waiting.append(req)
        self.pending_tokens += req.p_len
        self.kick(t)

    def _bootstrap_timeout(self, t: float, req: SimRequest, generation: int) -> None:
        if generation != self.generation or req.p_status != "bootstrapping":
            return
        self.bootstrap_q -= 1
        timeout = self.dep.scenario.deployment.bootstrap_timeout_s
        reason = f"Request {req.room} timed out after {timeout:.1f}s in KVPoll.Bootstrapping"
        self.log(t, self.fmt.prefill_bootstrap_failed(t, req.p_rid, req.room, reason))
        if not self.advised_bootstrap:
            self.advised_bootstrap = True
            self.log(t, self.fmt.bootstrap_advice(t))
        self.metrics.inc("sglang:num_bootstrap_failed_reqs_total")
        self._fail(t, req, self.fmt.kv_error(req.room, reason), 500)
        self.dep.decode_bootstrap_failed(req, t, reason)

    # -- scheduling -----------------------------------------------------------------------
    def kick(self, t: float) -> None:
        if not self.busy:
            self._step(t)

    def _admit(self, t: float, req: SimRequest) -> bool:
        page = self.pool.page_size
        n_total = self.pool.pages_for(req.p_len)
        entry = None
        if req.doc_cid and not req.stub:
            entry = self.cache.match(req.doc_cid)
        cached_pages = 0
        if entry is not None:
            cached_pages = min(len(entry.pages), (req.p_len - 1) // page)
        own = self.cache.alloc(n_total - cached_pages, req.serial)
        if own is None:
            return False
        if entry is not None and cached_pages:
            entry.refs += 1
            req.p_entry = entry
        req.cached = cached_pages * page
        req.p_own = own
        req.t_pf_start = t
        req.tx_cursor = t
        req.p_status = "prefilling"
        if not req.stub and req.doc_cid and entry is None:
            req.p_doc_pages = min(req.spec.prefix_tokens // page, n_total - 1)
        self.pending_tokens -= req.p_len
        self.hit_tokens += req.cached
        self.seen_tokens += req.p_len
        if req.fault is not None and req.fault.abort_at_fraction is not None:
            lat = self.dep.latency
            est = lat.chunk_compute_s(req.p_len - req.cached, req.cached) + lat.transfer_s(
                req.p_len
            )
            self.dep.queue.at(t + est * req.fault.abort_at_fraction, self.dep.client_abort, req)
        return True

    def _step(self, t: float) -> None:
        if self.busy or self.down:
            return
        spec = self.spec
        budget = min(spec.chunked_prefill_size, spec.max_prefill_tokens)
        items: list[tuple[SimRequest, int]] = []
        new_seq = 0
        cached_token = 0
        cur = self.current
        if cur is not None:
            remaining = cur.p_len - cur.cached - cur.progress
            n = min(remaining, budget)
            items.append((cur, n))
            budget -= n
            if n == remaining:
                self.current = None
        while budget > 0 and self.waiting and self.current is None:
            if len(items) >= spec.max_running_requests:
                break
            req = self.waiting[0]
            if req.p_status != "waiting":
                self.waiting.popleft()
                continue
            if not self._admit(t, req):
                break
            self.waiting.popleft()
            new_seq += 1
            cached_token += req.cached
            remaining = req.p_len - req.cached
            n = min(remaining, budget)
            items.append((req, n))
            budget -= n
            if n < remaining:
                self.current = req
        if not items:
            return
        lat = self.dep.latency
        compute = lat.batch_overhead_s
        new_token = 0
        for req, n in items:
            compute += lat.chunk_compute_s(n, req.cached + req.progress)
            new_token += n
        gap = max(t - self.last_log_t, compute)
        self.last_log_t = t
        usage = self._usage()
        running = len(items) if self.profile.prefill_reports_running else 0
        self.log(
            t,
            self.fmt.prefill_batch(
                t,
                new_seq=new_seq,
                new_token=new_token,
                cached_token=cached_token,
                usage=usage,
                running=running,
                queue=len(self.waiting),
                pending_token=max(0, self.pending_tokens),
                bootstrap_req=self.bootstrap_q,
                inflight_req=self.inflight,
                throughput=new_token / gap if gap > 0 else 0.0,
            ),
        )
        m = self.metrics
        m.inc("sglang:realtime_tokens_total", float(new_token), "prefill_compute")
        if cached_token:
            m.inc("sglang:realtime_tokens_total", float(cached_token), "prefill_cache")
        m.set("sglang:num_running_reqs", float(running))
        m.set("sglang:num_queue_reqs", float(len(self.waiting)))
        m.set("sglang:token_usage", round(usage, 2))
        m.set("sglang:full_token_usage", usage)
        if self.seen_tokens:
            m.set("sglang:cache_hit_rate", self.hit_tokens / self.seen_tokens)
        self._pool_gauges()
        self.busy = True
        self.dep.queue.at(t + compute, self._step_done, items, self.generation)

    def _usage(self) -> float:
        evictable = self.cache.evictable_pages
        used = self.pool.num_pages - self.pool.free_pages - evictable
        return used / self.pool.num_pages

    def _pool_gauges(self) -> None:
        m = self.metrics
        page = self.pool.page_size
        evictable = self.cache.evictable_pages * page
        used = self.pool.used_tokens - evictable
        m.set("sglang:num_used_tokens", float(used))
        m.set("sglang:kv_used_tokens", float(used))
        m.set("sglang:kv_evictable_tokens", float(evictable))
        m.set("sglang:kv_available_tokens", float(self.pool.free_pages * page))
        m.set("sglang:num_prefill_bootstrap_queue_reqs", float(self.bootstrap_q))
        m.set("sglang:num_prefill_inflight_queue_reqs", float(self.inflight))

    def _step_done(self, t: float, items: list[tuple[SimRequest, int]], generation: int) -> None:
        if generation != self.generation:
            return
        self.busy = False
        lat = self.dep.latency
        for req, n in items:
            if req.p_status != "prefilling":
                continue
            first = req.progress == 0
            req.progress += n
            sent = n + (req.cached if first else 0)
            dur = lat.transfer_s(sent)
            req.tx_busy += dur
            req.tx_cursor = max(req.tx_cursor, t) + dur
            if req.progress >= req.p_len - req.cached:
                self._prefilled(t, req)
        self._step(t)

    def _prefilled(self, t: float, req: SimRequest) -> None:
        """All chunks computed: write the pages, cache the document, finish the transfer."""
        req.t_pf_end = t
        req.p_status = "transferring"
        self.inflight += 1
        own = req.p_own
        assert own is not None
        n_doc = req.p_doc_pages
        if n_doc and self.cache.match(req.doc_cid) is None:
            doc_pages = own[:n_doc]
            self.pool.write(doc_pages, req.doc_cid)
            entry = self.cache.insert(req.doc_cid, doc_pages)
            entry.refs += 1
            req.p_entry = entry
            req.p_own = own = own[n_doc:]
            content = np.concatenate(
                (
                    np.full(n_doc, req.doc_cid, dtype=np.int64),
                    np.full(len(own), req.cid, dtype=np.int64),
                )
            )
        else:
            if n_doc:
                self.pool.write(own[:n_doc], req.doc_cid)
                self.pool.write(own[n_doc:], req.cid)
            else:
                self.pool.write(own, req.cid)
            cached_pages = req.cached // self.pool.page_size
            head = np.full(cached_pages + n_doc, req.doc_cid, dtype=np.int64)
            content = np.concatenate((head, np.full(len(own) - n_doc, req.cid, dtype=np.int64)))
        req.p_content = content
        self.dep.queue.at(req.tx_cursor, self._tx_done, req, self.generation)

    def _release_pages(self, req: SimRequest) -> None:
        if req.p_own is not None:
            self.pool.free(req.p_own)
            req.p_own = None
        if req.p_entry is not None:
            req.p_entry.refs -= 1
            req.p_entry = None

    def _tx_done(self, t: float, req: SimRequest, generation: int) -> None:
        if generation != self.generation or req.p_status != "transferring":
            return
        req.t_tx_end = t
        req.p_status = "done"
        self.inflight -= 1
        self._release_pages(req)
        lat = self.dep.latency
        nbytes = lat.kv_bytes(req.p_len)
        speed = nbytes / req.tx_busy / 1e9 if req.tx_busy > 0 else 0.0
        total_mb = nbytes / 1e6
        m = self.metrics
        m.observe("sglang:kv_transfer_speed_gb_s", speed)
        m.observe("sglang:kv_transfer_latency_ms", req.tx_busy * 1000.0)
        m.observe("sglang:kv_transfer_total_mb", total_mb)
        self.last_speed = speed
        self.last_latency_ms = req.tx_busy * 1000.0
        if self.spec.request_time_stats:
            self.log(
                t,
                self.fmt.req_stats_prefill(
                    t,
                    rid=req.p_rid,
                    room=req.room,
                    input_len=req.p_len,
                    cached_input_len=req.cached,
                    bootstrap_ms=(req.t_bootstrapped - req.t_p_recv) * 1000.0,
                    queue_ms=(req.t_pf_start - req.t_bootstrapped) * 1000.0,
                    forward_ms=(req.t_pf_end - req.t_pf_start) * 1000.0,
                    entry_time=req.t_p_recv,
                    speed_gb_s=speed,
                    total_mb=total_mb,
                ),
            )
        if req.stub:
            # <= 0.5.19: the refusal was parked in `to_finish`; the stub was served anyway and
            # only now finishes, as the abort it always was.
            reason = self.abort_reason(req.refusal, 400, "BadRequestError")
            status = 400
            body = error_body(req.refusal, "BadRequestError", 400)
            completion = 0
        else:
            reason = {"type": "length", "length": 1}
            status = 200
            completion = 1
            body = {}
        meta = self.meta(
            req,
            t,
            finish_reason=reason,
            prompt_tokens=req.p_len,
            completion_tokens=completion,
            cached_tokens=req.cached,
            first_token_at=req.t_pf_end,
            forward_entry=req.t_pf_start,
            prefill_finished=req.t_pf_end,
        )
        self.log_finish(t, req, "", meta)
        self.access(t, req.p_client, status)
        self.count_request(req, req.p_len, completion, req.cached, t - req.t_p_recv)
        if self.tracer is not None:
            self.tracer.prefill_done(req, t, status)
        if status == 200:
            body = {"id": req.p_rid, "object": "chat.completion", "meta_info": meta}
        self.dep.reply_p(req, status, body)
        self.dep.transfer_done(req, t)
        self._pool_gauges()
        self.kick(t)

    # -- failures -------------------------------------------------------------------------
    def abort(self, t: float, req: SimRequest, reason: str = ABORTED_BY_CLIENT) -> None:
        """Decode told us to stop (client abort, or a failed transfer)."""
        status = req.p_status
        if status in ("none", "done", "refused", "failed"):
            return
        if status == "bootstrapping":
            self.bootstrap_q -= 1
        elif status == "waiting":
            self.pending_tokens -= req.p_len
        elif status == "prefilling":
            if self.current is req:
                self.current = None
        elif status == "transferring":
            self.inflight -= 1
        if status in ("prefilling", "transferring"):
            self.log(t, self.fmt.prefill_transfer_failed(t, req.p_rid, req.room, reason))
            self.metrics.inc("sglang:num_transfer_failed_reqs_total")
        self.metrics.inc("sglang:num_aborted_requests_total")
        self._fail(t, req, reason, None)
        self.kick(t)

    def _fail(self, t: float, req: SimRequest, message: str, status: int | None) -> None:
        """`status` None: the client is gone (see `finish_aborted`)."""
        self._release_pages(req)
        req.p_status = "failed"
        self.finish_aborted(
            t,
            req,
            message,
            status,
            None,
            prompt_tokens=req.p_len,
            cached_tokens=req.cached,
            forward_entry=req.t_pf_start if req.t_pf_start >= 0 else t,
        )
        self._pool_gauges()

    def lose_connection(self, t: float) -> list[SimRequest]:
        """Requests whose decode side waits on this prefill when its link drops."""
        return [
            r for r in self.dep.active.values() if r.p_node is self and r.d_status == "transfer"
        ]

    # -- reporting ------------------------------------------------------------------------
    def load_view(self) -> info.LoadView:
        page = self.pool.page_size
        used = self.pool.used_tokens - self.cache.evictable_pages * page
        return info.LoadView(
            running=1 if self.busy else 0,
            waiting=len(self.waiting),
            waiting_uncached_tokens=max(0, self.pending_tokens),
            used_tokens=used,
            token_usage=used / max(1, self.pool.capacity_tokens),
            gen_throughput=0.0,
            cache_hit_rate=self.hit_tokens / self.seen_tokens if self.seen_tokens else 0.0,
            bootstrap_queue=self.bootstrap_q,
            inflight_queue=self.inflight,
            transfer_speed_gb_s=self.last_speed,
            transfer_latency_ms=self.last_latency_ms,
        )
