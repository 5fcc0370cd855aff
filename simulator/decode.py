"""The decode server: page reservation, receiving KV, checks, decoding, deferred release.

Decode reserves pages for the whole prompt as the router reported it, receives the KV prefill
sends into them, and then attends over every reserved prompt page. If prefill sent one page of
a stub, the other pages still hold whatever earlier requests left there, and the reply says so.

Aborted transfers go through deferred release when it is on: the pages stay held until prefill
acknowledges the drain or the timeout passes. RDMA writes that were still in flight land on the
pages later (`late_write`): harmless while held, corrupting once the pages belong to someone
else. A late write landing on a page after the owner's own transfer wrote it and before the
owner's transfer completed is caught by the KV checksum (when on); one landing later, while the
owner decodes, is not — the checksum is a receive-time check.
"""

from __future__ import annotations

import zlib
from collections import deque
from typing import Any

import numpy as np

from simulator.content import render_reply
from simulator.node import EOS_TOKEN, EngineNode, RequestHalf
from simulator.pool import FREE, Pages
from simulator.prefill import ABORTED_BY_CLIENT
from simulator.request import SimRequest
from simulator.scenario import RoleSpec
from simulator.telemetry import server_info as info
from simulator.telemetry.logfmt import exceeds_max_tokens_message


def layout_signature(spec: RoleSpec) -> int:
    return zlib.adler32(f"tp={spec.tp_size};pp=1;page={spec.page_size}".encode())


class DecodeNode(EngineNode):
    role = "decode"

    def _configure(self, spec: RoleSpec) -> None:
        super()._configure(spec)
        self._reset_state()

    def _reset_state(self) -> None:
        self.prealloc: deque[SimRequest] = deque()
        self.transfer_q = 0
        self.running = 0
        self.ctx_sum = 0
        self.prealloc_tokens = 0
        self.held = 0
        self.ticking = False
        self.steps = 0
        self.canary_violations = 0
        self.skipped_signatures: set[int] = set()
        self.advised_waiting = False
        self.last_room = 0
        self.gen_throughput = 0.0

    def half(self, req: SimRequest) -> RequestHalf:
        return RequestHalf(req.d_rid, req.d_obj, req.t_d_recv, req.d_client)

    def reply(self, req: SimRequest, status: int, body: dict[str, Any]) -> None:
        self.dep.reply_d(req, status, body)

    # -- arrival and reservation ----------------------------------------------------------
    def receive(self, t: float, req: SimRequest) -> None:
        spec = self.spec
        req.d_node = self
        req.d_gen = self.generation
        req.t_d_recv = t
        if req.tokens >= spec.context_len:
            req.d_status = "failed"
            self.reject_over_context(t, req)
            return
        req.d_obj = self.log_receive(t, req, req.d_rid)
        if req.tokens > self.capacity:
            self.log(t, self.fmt.exceeds_max_tokens(t, req.d_rid, req.tokens, self.capacity))
            msg = exceeds_max_tokens_message(req.d_rid, req.tokens, self.capacity)
            self._finish_error(t, req, msg, 400, "BadRequestError")
            self.dep.decode_refused(req, t)
            return
        req.d_status = "prealloc"
        self.prealloc.append(req)
        self._try_alloc(t)

    def _reserve_pages(self, req: SimRequest) -> int:
        out = max(req.out_tokens, self.spec.num_reserved_decode_tokens)
        return self.pool.pages_for(req.tokens + out)

    def _try_alloc(self, t: float) -> None:
        while self.prealloc:
            req = self.prealloc[0]
            if req.d_status != "prealloc":
                self.prealloc.popleft()
                continue
            n = self._reserve_pages(req)
            pages = self.pool.alloc(n, req.serial)
            if pages is None:
                break
            self.prealloc.popleft()
            req.d_pages = pages
            req.t_d_alloc = t
            req.d_status = "allocated"
            self.prealloc_tokens += n * self.pool.page_size
            self.dep.try_bootstrap(req, t)

    def start_transfer(self, req: SimRequest) -> None:
        req.d_status = "transfer"
        self.transfer_q += 1

    # -- the KV arrives -------------------------------------------------------------------
    def _write_time(self, req: SimRequest, j: int, n: int) -> float:
        """When prefill's RDMA write of logical page `j` (of `n`) landed here."""
        span = max(0.0, req.t_pf_end - req.t_pf_start)
        return req.t_pf_start + span * (j + 1) / n + self.dep.latency.transfer_setup_s

    def transfer_done(self, t: float, req: SimRequest) -> None:
        if req.d_gen != self.generation or req.d_status != "transfer":
            return
        self.transfer_q -= 1
        assert req.d_pages is not None and req.p_content is not None
        n = len(req.p_content)
        pages = req.d_pages[:n]
        content = self.pool.content
        content[pages] = req.p_content
        hit = 0
        for j, cid, t_land in req.hits:
            if j < n and t_land >= self._write_time(req, j, n):
                content[req.d_pages[j]] = cid
                hit += 1
        req.hits.clear()
        fault = req.fault
        if fault is not None and fault.metadata_collision:
            other = self.last_room or self.dep.ids.getrandbits(63)
            idx = req.serial % self.spec.max_running_requests
            self.log(t, self.fmt.metadata_corruption(t, req.d_rid, req.room, other, idx))
            self.dep.record_caught(req, t, cause="metadata_corruption")
            self._fail_held(
                t, req, "Metadata corruption detected - bootstrap_room mismatch", hold=False
            )
            return
        self.last_room = req.room
        if self._checksum_on(t, req):
            expected = zlib.adler32(req.p_content.tobytes())
            got = zlib.adler32(content[pages].tobytes())
            if expected != got:
                self.log(t, self.fmt.checksum_mismatch(t, req.d_rid, req.room, expected, got))
                self.metrics.inc("sglang:num_transfer_failed_reqs_total")
                self.dep.record_caught(req, t)
                self._fail_held(t, req, "KV checksum mismatch", hold=False)
                return
        if hit and self.spec.kv_canary == "log":
            self._canary(t, req, req.d_pages[0])
        self._start_decode(t, req)

    def _checksum_on(self, t: float, req: SimRequest) -> bool:
        p = req.p_node
        if not (self.spec.kv_checksum and p is not None and p.spec.kv_checksum):
            return False
        sig_p, sig_d = layout_signature(p.spec), layout_signature(self.spec)
        if sig_p != sig_d:
            if sig_p not in self.skipped_signatures:
                self.skipped_signatures.add(sig_p)
                self.log(t, self.fmt.checksum_skipped(t, sig_p, sig_d))
            return False
        return True

    def _start_decode(self, t: float, req: SimRequest) -> None:
        req.d_status = "decoding"
        assert req.d_pages is not None
        self.prealloc_tokens -= len(req.d_pages) * self.pool.page_size
        req.t_dec_start = t + 0.0004
        self.running += 1
        self.ctx_sum += req.tokens
        step = self.dep.latency.decode_step(self.running, self.ctx_sum)
        req.step_s = step
        self.dep.queue.at(
            req.t_dec_start + req.out_tokens * step, self._finish, req, self.generation
        )
        self._ensure_tick(t)

    # -- the reply ------------------------------------------------------------------------
    def _finish(self, t: float, req: SimRequest, generation: int) -> None:
        if generation != self.generation or req.d_status != "decoding":
            return
        self.running -= 1
        self.ctx_sum -= req.tokens
        pages = req.d_pages
        assert pages is not None
        attended = pages[: self.pool.pages_for(req.tokens)]
        cids = np.unique(self.pool.content[attended]).tolist()
        markers = self.dep.markers
        own = [c for c in (req.cid, req.doc_cid) if c]
        foreign = [c for c in cids if c and c not in own]
        listed: list[str] = []
        for c in own:
            listed.extend(markers.get(c, ()))
        n_own = len(listed)
        for c in foreign:
            listed.extend(markers.get(c, ()))
        reply = render_reply(listed, req.out_tokens, req.cid)
        foreign_markers = max(0, min(len(listed), 64) - n_own)
        # the generated tokens' KV was written as decoding went on
        n_prompt = len(attended)
        n_out = self.pool.pages_for(req.tokens + req.out_tokens) - n_prompt
        if n_out > 0:
            self.pool.write(pages[n_prompt : n_prompt + n_out], req.cid)
        self.pool.free(pages)
        req.d_pages = None
        req.d_status = "done"
        t_first = req.t_dec_start + req.step_s
        if self.spec.request_time_stats:
            self.log(
                t,
                self.fmt.req_stats_decode(
                    t,
                    rid=req.d_rid,
                    room=req.room,
                    input_len=req.tokens,
                    cached_input_len=req.cached,
                    output_len=req.out_tokens,
                    bootstrap_ms=(req.t_bootstrapped - req.t_d_alloc) * 1000.0,
                    alloc_wait_ms=(req.t_d_alloc - req.t_d_recv) * 1000.0,
                    transfer_ms=(req.t_tx_end - req.t_bootstrapped) * 1000.0,
                    queue_ms=(req.t_dec_start - req.t_tx_end) * 1000.0,
                    forward_ms=(t - req.t_dec_start) * 1000.0,
                    entry_time=req.t_d_recv,
                ),
            )
        if req.out_tokens >= req.max_tokens:
            reason: dict[str, Any] = {"type": "length", "length": req.max_tokens}
            oai_reason = "length"
        else:
            reason = {"type": "stop", "matched": EOS_TOKEN}
            oai_reason = "stop"
        meta = self.meta(
            req,
            t,
            finish_reason=reason,
            prompt_tokens=req.tokens,
            completion_tokens=req.out_tokens,
            cached_tokens=req.cached,
            first_token_at=t_first,
            forward_entry=req.t_dec_start,
            prefill_finished=req.t_tx_end,
        )
        self.log_finish(t, req, reply, meta)
        self.access(t, req.d_client, 200)
        m = self.metrics
        streaming = "true" if req.stream else "false"
        m.observe("sglang:time_to_first_token_seconds", t_first - req.t_d_recv, streaming)
        if req.out_tokens > 1:
            m.observe("sglang:inter_token_latency_seconds", req.step_s)
        m.inc("sglang:realtime_tokens_total", float(req.out_tokens), "decode")
        self.count_request(req, req.tokens, req.out_tokens, req.cached, t - req.t_d_recv)
        if foreign:
            self.dep.record_exposed(req, t, foreign_markers)
        elif req.stub:
            self.dep.record_stub_without_foreign(req, t)
        if self.tracer is not None:
            self.tracer.decode_done(req, t, 200, t_first)
        body = {
            "id": req.d_rid,
            "object": "chat.completion",
            "created": int(t),
            "model": self.dep.scenario.model.name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "finish_reason": oai_reason,
                }
            ],
            "usage": {
                "prompt_tokens": req.tokens,
                "completion_tokens": req.out_tokens,
                "total_tokens": req.tokens + req.out_tokens,
                "prompt_tokens_details": {"cached_tokens": req.cached},
            },
        }
        self.dep.reply_d(req, 200, body)
        self._try_alloc(t)

    # -- failures -------------------------------------------------------------------------
    def _finish_error(
        self, t: float, req: SimRequest, message: str, status: int | None, err_type: str | None
    ) -> None:
        """`status` None: the client is gone (see `finish_aborted`)."""
        req.d_status = "failed"
        if self.tracer is not None:
            self.tracer.decode_done(req, t, 499 if status is None else status, None)
        self.finish_aborted(
            t,
            req,
            message,
            status,
            err_type,
            prompt_tokens=req.tokens,
            cached_tokens=req.cached,
            forward_entry=t,
        )

    def _drop_reservation(self, req: SimRequest) -> Pages | None:
        pages = req.d_pages
        if req.d_status in ("allocated", "transfer") and pages is not None:
            self.prealloc_tokens -= len(pages) * self.pool.page_size
        if req.d_status == "transfer":
            self.transfer_q -= 1
        if req.d_status == "decoding":
            self.running -= 1
            self.ctx_sum -= req.tokens
        req.d_pages = None
        return pages

    def _fail_held(
        self,
        t: float,
        req: SimRequest,
        message: str,
        *,
        hold: bool,
        ack_lost: bool = False,
        land_t: float | None = None,
    ) -> None:
        pages = self._drop_reservation(req)
        self._finish_error(t, req, message, 500, None)
        if pages is not None:
            self.hold(t, req, pages, hold=hold, ack_lost=ack_lost, land_t=land_t)
        self._try_alloc(t)

    def retire_refused(self, t: float, req: SimRequest, generation: int) -> None:
        """>= 0.5.21: the bootstrap server tells decode that prefill refused the request."""
        if generation != self.generation or req.d_status != "allocated":
            return
        pages = self._drop_reservation(req)
        if pages is not None:
            self.pool.free(pages)
        self._finish_error(t, req, req.refusal, 400, "BadRequestError")
        self._try_alloc(t)

    def transfer_failed(self, t: float, req: SimRequest, reason: str, *, ack_lost: bool) -> None:
        """Prefill could not deliver (retired stub, lost link, waiting timeout)."""
        if req.d_gen != self.generation or req.d_status not in ("allocated", "transfer"):
            return
        self.log(t, self.fmt.decode_transfer_failed(t, req.d_rid, req.room, reason))
        self.metrics.inc("sglang:num_transfer_failed_reqs_total")
        self._fail_held(t, req, self.fmt.kv_error(req.room, reason), hold=True, ack_lost=ack_lost)

    def waiting_timeout(self, t: float, req: SimRequest, generation: int) -> None:
        if generation != self.generation or req.d_status != "transfer":
            return
        timeout = self.dep.scenario.deployment.waiting_timeout_s
        reason = f"Request {req.room} timed out after {timeout:.1f}s in KVPoll.WaitingForInput"
        self.transfer_failed(t, req, reason, ack_lost=False)
        if not self.advised_waiting:
            self.advised_waiting = True
            self.log(t, self.fmt.waiting_advice(t))

    def bootstrap_failed(self, t: float, req: SimRequest, reason: str) -> None:
        if req.d_gen != self.generation or req.d_status not in (
            "prealloc",
            "allocated",
            "transfer",
        ):
            return
        self.log(t, self.fmt.decode_handshake_failed(t, req.d_rid, req.room, reason))
        self.metrics.inc("sglang:num_bootstrap_failed_reqs_total")
        pages = self._drop_reservation(req)
        if pages is not None:
            self.pool.free(pages)
        self._finish_error(t, req, self.fmt.kv_error(req.room, reason), 500, None)
        self._try_alloc(t)

    def client_abort(
        self, t: float, req: SimRequest, *, ack_lost: bool, land_t: float | None
    ) -> None:
        """The client went away; the tokenizer sends AbortReq to this scheduler."""
        if req.d_gen != self.generation or req.d_status in ("none", "done", "failed"):
            return
        self.metrics.inc("sglang:num_aborted_requests_total")
        in_transfer = req.d_status == "transfer"
        if in_transfer:
            self.log(t, self.fmt.decode_transfer_failed(t, req.d_rid, req.room, ABORTED_BY_CLIENT))
            self.metrics.inc("sglang:num_transfer_failed_reqs_total")
        pages = self._drop_reservation(req)
        self._finish_error(t, req, ABORTED_BY_CLIENT, None, None)
        if pages is not None:
            self.hold(t, req, pages, hold=in_transfer, ack_lost=ack_lost, land_t=land_t)
        self._try_alloc(t)

    # -- deferred release -----------------------------------------------------------------
    def hold(
        self,
        t: float,
        req: SimRequest,
        pages: Pages,
        *,
        hold: bool,
        ack_lost: bool,
        land_t: float | None,
    ) -> None:
        """Free now, or hold until prefill acknowledges the drain (or the timeout passes)."""
        if not (hold and self.spec.deferred_release_on):
            self.pool.free(pages)
            return
        self.held += 1
        self.metrics.set("sglang:num_decode_deferred_kv_release_reqs", float(self.held))
        rtt = 0.002 + 2 * self.dep.latency.network_s
        if ack_lost:
            when, outcome = t + self.spec.deferred_release_timeout_s, "timeout"
        else:
            when, outcome = t + rtt, "drained"
            p = req.p_node
            premature = p is not None and p.profile.premature_drain_ack(p.spec.transfer_backend)
            if land_t is not None and not premature:
                when = max(when, land_t + rtt)
        self.dep.queue.at(when, self._release, req, pages, t, outcome, self.generation)

    def _release(
        self, t: float, req: SimRequest, pages: Pages, since: float, outcome: str, generation: int
    ) -> None:
        if generation != self.generation:
            return
        self.pool.free(pages)
        self.held -= 1
        m = self.metrics
        m.set("sglang:num_decode_deferred_kv_release_reqs", float(self.held))
        m.observe("sglang:decode_deferred_kv_release_seconds", t - since)
        m.inc("sglang:decode_deferred_kv_release_total", 1.0, outcome)
        if outcome == "timeout":
            timeout = self.spec.deferred_release_timeout_s
            self.log(t, self.fmt.deferred_release_timeout(t, req.room, timeout))
            self.dep.record_deferred_timeout(req, t, self.name)
        self._try_alloc(t)

    def late_write(self, t: float, src: SimRequest, pages: Pages, generation: int) -> None:
        """RDMA writes of an aborted transfer land now on `pages`."""
        if generation != self.generation:
            return
        owners = self.pool.owner[pages].tolist()
        content = self.pool.content
        for page, owner in zip(pages.tolist(), owners, strict=True):
            if owner == FREE or owner == src.serial:
                content[page] = src.cid
                continue
            victim = self.dep.active.get(owner)
            if victim is None or victim.d_pages is None:
                content[page] = src.cid
                continue
            j = int(np.searchsorted(victim.d_pages, page))
            if victim.d_status in ("allocated", "transfer"):
                victim.hits.append((j, src.cid, t))
            elif victim.d_status == "decoding":
                if j < self.pool.pages_for(victim.tokens):
                    content[page] = src.cid
                    if not victim.late_corrupted and self.spec.kv_canary == "log":
                        self._canary(t, victim, page)
                    victim.late_corrupted = True

    def _canary(self, t: float, req: SimRequest, page: int) -> None:
        self.canary_violations += 1
        h = zlib.adler32(f"{req.room}:{page}".encode())
        self.log(
            t,
            self.fmt.kv_canary_violation(
                t,
                launch_tag="TAIL_K_FULL",
                slot_idx=int(page) * self.pool.page_size,
                position=(req.tokens - 1) % self.pool.page_size,
                token=1024,
                stored_hash=(h << 16) ^ 0xDEADBEEF,
                expected_aux=h,
                total_violations=self.canary_violations,
                step=self.steps,
            ),
        )

    # -- periodic batch line --------------------------------------------------------------
    def _ensure_tick(self, t: float) -> None:
        if not self.ticking:
            self.ticking = True
            step = self.dep.latency.decode_step(max(1, self.running), self.ctx_sum)
            self.dep.queue.at(t + self.spec.decode_log_interval * step, self._tick, self.generation)

    def _tick(self, t: float, generation: int) -> None:
        if generation != self.generation:
            return
        if self.running == 0:
            # no decode iterations, no batch line (and gauges stay as last reported)
            self.ticking = False
            self.gen_throughput = 0.0
            return
        step = self.dep.latency.decode_step(max(1, self.running), self.ctx_sum)
        interval = self.spec.decode_log_interval * step
        self.gen_throughput = self.running / step if self.running else 0.0
        cap = self.pool.capacity_tokens
        used = self.pool.used_tokens
        in_use = max(0, used - self.prealloc_tokens)
        self.log(
            t,
            self.fmt.decode_batch(
                t,
                running=self.running,
                tokens=in_use,
                usage=used / cap,
                prealloc_usage=self.prealloc_tokens / cap,
                prealloc_req=len(self.prealloc),
                transfer_req=self.transfer_q,
                gen_throughput=self.gen_throughput,
                queue=0,
            ),
        )
        before = self.steps
        self.steps += self.spec.decode_log_interval
        if self.spec.kv_canary == "log" and self.steps // 100 != before // 100:
            self.log(
                t,
                self.fmt.kv_canary_stats(
                    t, self.steps, self.ctx_sum, self.steps // 500, self.canary_violations
                ),
            )
        m = self.metrics
        m.set("sglang:num_running_reqs", float(self.running))
        m.set("sglang:num_queue_reqs", 0.0)
        m.set("sglang:gen_throughput", self.gen_throughput)
        m.set("sglang:token_usage", round(used / cap, 2))
        m.set("sglang:full_token_usage", used / cap)
        m.set("sglang:num_used_tokens", float(in_use))
        m.set("sglang:kv_used_tokens", float(used))
        m.set("sglang:kv_available_tokens", float(cap - used))
        m.set("sglang:num_decode_prealloc_queue_reqs", float(len(self.prealloc)))
        m.set("sglang:num_decode_transfer_queue_reqs", float(self.transfer_q))
        m.set("sglang:pending_prealloc_token_usage", self.prealloc_tokens / cap)
        self.dep.queue.at(t + interval, self._tick, self.generation)

    # -- reporting ------------------------------------------------------------------------
    def load_view(self) -> info.LoadView:
        cap = self.pool.capacity_tokens
        used = self.pool.used_tokens
        return info.LoadView(
            running=self.running,
            waiting=len(self.prealloc),
            waiting_uncached_tokens=0,
            used_tokens=used,
            token_usage=used / cap,
            gen_throughput=self.gen_throughput,
            cache_hit_rate=0.0,
            prealloc_queue=len(self.prealloc),
            transfer_queue=self.transfer_q,
        )
