"""The deployment: router, prefill and decode nodes, and the rendezvous that pairs them.

Both modes drive this one model. Offline, `route()` takes generated arrivals and the event
queue runs flat out; live, the HTTP servers deliver each half (`receive_prefill`,
`receive_decode`) and a runner sleeps between events. Requests are paired across the two sides
by `bootstrap_room`, each side giving the request its own rid.

The router plays SMG's PD mode for non-streaming requests: it sends the request to a prefill
and a decode node at once and answers the client with the decode node's response; prefill's
own status is only logged (that is why the incident's clients saw HTTP 200).
"""

from __future__ import annotations

import random
from typing import Any

from simulator.clock import EventQueue
from simulator.content import PromptSpec, marker_for
from simulator.decode import DecodeNode
from simulator.ground_truth import Cause, GroundTruth
from simulator.latency import LatencyModel
from simulator.node import EngineNode
from simulator.prefill import PrefillNode
from simulator.request import Reply, SimRequest
from simulator.scenario import (
    AbortStormFault,
    BootstrapTimeoutFault,
    LostConnectionFault,
    MetadataCollisionFault,
    OverLengthFault,
    RestartSpec,
    Scenario,
    role_at_restart,
)
from simulator.telemetry.logfmt import iso_utc
from simulator.telemetry.sink import TelemetrySink
from simulator.traffic import Arrival, RequestFault

ROUTER_HOST = "10.0.0.2"
STARTUP_LEAD_S = 150.0


class Deployment:
    def __init__(
        self,
        scenario: Scenario,
        sink: TelemetrySink,
        *,
        seed: int | None = None,
        shift: float = 0.0,
        snapshots: bool = True,
    ) -> None:
        self.scenario = scenario
        self.sink = sink
        self.seed = scenario.seed if seed is None else seed
        self.shift = shift
        self.snapshots = snapshots
        self.queue = EventQueue()
        self.latency = LatencyModel.from_specs(scenario.model, scenario.hardware)
        self.ids = random.Random(self.seed * 31 + 5)
        self.rng = random.Random(self.seed * 131 + 9)
        self.marker_salt = random.Random(self.seed).getrandbits(64)
        self.start = scenario.start_epoch + shift
        self.end = scenario.end_epoch + shift
        self.truth = GroundTruth(scenario.name, self.seed, self.start, self.end)
        self.active: dict[int, SimRequest] = {}
        self.rooms: dict[int, SimRequest] = {}
        self.markers: dict[int, tuple[str, ...]] = {}
        self.doc_ids: dict[str, int] = {}
        self.serial = 0
        dep = scenario.deployment
        self.prefills = [
            PrefillNode(self, f"prefill-{i}", i, f"10.0.1.{10 + i}", dep.prefill)
            for i in range(dep.prefill.count)
        ]
        self.decodes = [
            DecodeNode(self, f"decode-{i}", i, f"10.0.2.{10 + i}", dep.decode)
            for i in range(dep.decode.count)
        ]
        self.nodes: dict[str, EngineNode] = {n.name: n for n in [*self.prefills, *self.decodes]}
        self._rr_p = 0
        self._rr_d = 0
        self._record_constants()

    # -- setup ----------------------------------------------------------------------------
    def _record_constants(self) -> None:
        sc = self.scenario
        self.truth.constants = {
            "model": sc.model.model_dump(),
            "hardware": sc.hardware.model_dump(),
            "prefill": {
                "version": sc.deployment.prefill.version,
                "max_total_num_tokens": sc.deployment.prefill.max_total_num_tokens,
                "context_len": sc.deployment.prefill.context_len,
            },
            "decode": {
                "version": sc.deployment.decode.version,
                "max_total_num_tokens": sc.deployment.decode.max_total_num_tokens,
                "context_len": sc.deployment.decode.context_len,
            },
        }

    def boot(self, *, restarts: bool = True, lead: float = STARTUP_LEAD_S) -> None:
        """Start every node (their startup logs begin `lead` seconds before the scenario)."""
        for node in self.nodes.values():
            node.start(self.start - lead, self.rng)
        if self.snapshots:
            interval = self.scenario.snapshots.interval_s
            first = self.start + interval - (self.start % interval)
            self.queue.at(first, self._snapshot_tick)
        for fault in self.scenario.faults:
            if isinstance(fault, LostConnectionFault):
                at = fault.at.timestamp() + self.shift
                self.queue.at(at, self._lost_connection, fault.prefill)
                detect = self._heartbeat_s()
                self.truth.add_phase("lost_connection", at, at + detect, prefill=fault.prefill)
            elif isinstance(
                fault,
                OverLengthFault | AbortStormFault | BootstrapTimeoutFault | MetadataCollisionFault,
            ):
                params = fault.model_dump(mode="json", exclude={"start", "stop", "kind"})
                self.truth.add_phase(
                    fault.kind,
                    fault.start.timestamp() + self.shift,
                    fault.stop.timestamp() + self.shift,
                    **params,
                )
        if restarts:
            for restart in self.scenario.restarts:
                at = restart.at.timestamp() + self.shift
                back = restart.back.timestamp() + self.shift
                self.queue.at(at, self._go_down, restart)
                self.queue.at(back, self._come_back, restart)
                self.truth.add_phase("downtime", at, back, nodes=restart.nodes)

    def _heartbeat_s(self) -> float:
        d = self.scenario.deployment
        return d.heartbeat_interval_s * d.heartbeat_max_failure

    def _restart_nodes(self, restart: RestartSpec) -> list[EngineNode]:
        if restart.nodes == "all":
            return list(self.nodes.values())
        return [self.nodes[n] for n in restart.nodes if n in self.nodes]

    def _go_down(self, t: float, restart: RestartSpec) -> None:
        for node in self._restart_nodes(restart):
            self.snapshot_node(node, t)
            node.down = True

    def _come_back(self, t: float, restart: RestartSpec) -> None:
        restarting = self._restart_nodes(restart)
        for node in restarting:
            overrides = restart.prefill if node.role == "prefill" else restart.decode
            spec = role_at_restart(node.spec, overrides)
            for req in [r for r in self.active.values() if node in (r.p_node, r.d_node)]:
                self._orphan(t, req, node, restarting)
            node.reconfigure(spec)
            node.start(t, self.rng)
            self.truth.restarts.append(
                {
                    "node": node.name,
                    "time": iso_utc(t),
                    "version": spec.profile.version,
                    "max_total_num_tokens": spec.max_total_num_tokens,
                    "context_len": spec.context_len,
                }
            )

    def _orphan(
        self, t: float, req: SimRequest, gone: EngineNode, restarting: list[EngineNode]
    ) -> None:
        """A request whose node restarted: the surviving half fails as the engine would."""
        p, d = req.p_node, req.d_node
        if gone is p and d is not None and d not in restarting:
            reason = (
                f"Lost connection with prefill instance (bootstrap_addr: {gone.bootstrap_addr})"
            )
            d.transfer_failed(t, req, reason, ack_lost=True)
        elif gone is d and p is not None and p not in restarting:
            p.abort(t, req, "Failed due to an unknown reason from another rank")
        self._forget(req)

    def _snapshot_tick(self, t: float) -> None:
        if t > self.end:
            return
        for node in self.nodes.values():
            if not node.down:
                self.snapshot_node(node, t)
        self.queue.at(t + self.scenario.snapshots.interval_s, self._snapshot_tick)

    def snapshot_node(self, node: EngineNode, t: float) -> None:
        if self.snapshots:
            self.sink.snapshot(node.name, t, node.metrics.exposition(), node.server_info())

    # -- routing --------------------------------------------------------------------------
    def pick(self) -> tuple[PrefillNode, DecodeNode] | None:
        ps = [p for p in self.prefills if not p.down]
        ds = [d for d in self.decodes if not d.down]
        if not ps or not ds:
            return None
        p = ps[self._rr_p % len(ps)]
        d = ds[self._rr_d % len(ds)]
        self._rr_p += 1
        self._rr_d += 1
        return p, d

    def new_rid(self) -> str:
        return f"{self.ids.getrandbits(128):032x}"

    def new_room(self) -> int:
        return self.ids.getrandbits(63)

    def doc_cid(self, name: str) -> int:
        if not name:
            return 0
        cid = self.doc_ids.get(name)
        if cid is None:
            cid = self.doc_ids[name] = -(len(self.doc_ids) + 1)
        return cid

    def _client(self) -> str:
        return f"{ROUTER_HOST}:{32768 + self.rng.randrange(28000)}"

    def create(
        self,
        t: float,
        spec: PromptSpec,
        *,
        room: int,
        max_tokens: int,
        temperature: float = 0.7,
        stream: bool = False,
        fault: RequestFault | None = None,
    ) -> SimRequest:
        self.serial += 1
        req = SimRequest(
            serial=self.serial,
            room=room,
            cid=self.serial,
            spec=spec,
            max_tokens=max_tokens,
            temperature=temperature,
            stream=stream,
            fault=fault,
            doc_cid=self.doc_cid(spec.doc_name),
            out_tokens=max(1, min(max_tokens, spec.natural_output)),
            t_route=t,
        )
        if spec.markers:
            self.markers[req.cid] = spec.markers
        self.active[req.serial] = req
        self.rooms[room] = req
        self.truth.requests_total += 1
        return req

    def route(self, t: float, arrival: Arrival) -> SimRequest | None:
        """Offline: the router sends one generated arrival to a prefill and a decode node."""
        pair = self.pick()
        if pair is None:
            self.truth.requests_rejected_by_router += 1
            return None
        p, d = pair
        markers: tuple[str, ...] = ()
        if arrival.marker:
            markers = (marker_for(self.serial + 1, self.marker_salt),)
        spec = PromptSpec(
            tokens=arrival.tokens,
            natural_output=arrival.natural_output,
            doc_name=arrival.doc_name,
            doc_tokens=arrival.doc_tokens,
            markers=markers,
        )
        req = self.create(
            t, spec, room=self.new_room(), max_tokens=arrival.max_tokens, fault=arrival.fault
        )
        req.p_rid = self.new_rid()
        req.d_rid = self.new_rid()
        req.p_client = self._client()
        req.d_client = self._client()
        req.p_node = p
        arrive = t + self.latency.network_s
        p.receive(arrive, req)
        d.receive(arrive, req)
        return req

    # -- the PD protocol between the halves -----------------------------------------------
    def try_bootstrap(self, req: SimRequest, t: float) -> None:
        p, d = req.p_node, req.d_node
        if p is None or d is None or req.d_status != "allocated":
            return
        boot = self.latency.bootstrap_s
        if req.p_status == "refused" and req.refusal:
            self.queue.at(t + boot, d.retire_refused, req, d.generation)
            return
        if req.p_status != "bootstrapping":
            return
        if req.fault is not None and req.fault.bootstrap_timeout == "bootstrap":
            return
        d.start_transfer(req)
        d.metrics.observe("sglang:kv_transfer_bootstrap_ms", boot * 1000.0)
        self.queue.at(t + boot, p.bootstrapped, req, p.generation)

    def transfer_done(self, req: SimRequest, t: float) -> None:
        d = req.d_node
        if d is None:
            return
        if req.fault is not None and req.fault.bootstrap_timeout == "waiting":
            timeout = self.scenario.deployment.waiting_timeout_s
            at = max(t, req.t_bootstrapped + timeout)
            self.queue.at(at, d.waiting_timeout, req, d.generation)
            return
        d.transfer_done(t, req)
        self._maybe_forget(req)

    def decode_transfer_failed(self, req: SimRequest, t: float, reason: str) -> None:
        d = req.d_node
        if d is not None:
            self.queue.at(t, self._transfer_failed_at, req, reason)

    def _transfer_failed_at(self, t: float, req: SimRequest, reason: str) -> None:
        if req.d_node is not None:
            req.d_node.transfer_failed(t, req, reason, ack_lost=False)
            self._maybe_forget(req)

    def decode_bootstrap_failed(self, req: SimRequest, t: float, reason: str) -> None:
        if req.d_node is not None:
            req.d_node.bootstrap_failed(t, req, reason)
        self._maybe_forget(req)

    def decode_refused(self, req: SimRequest, t: float) -> None:
        """Decode refused the request outright: prefill waits for a bootstrap that never comes."""
        p = req.p_node
        if p is not None and req.p_status == "bootstrapping":
            timeout = self.scenario.deployment.bootstrap_timeout_s
            req.fault = req.fault or RequestFault()
            req.fault.bootstrap_timeout = "bootstrap"
            self.queue.at(req.t_p_recv + timeout, p._bootstrap_timeout, req, p.generation)

    def client_abort(self, t: float, req: SimRequest) -> None:
        """The client disconnected mid-flight; both halves are told to abort."""
        if req.aborted:
            return
        req.aborted = True
        fault = req.fault
        d, p = req.d_node, req.p_node
        land_t: float | None = None
        if d is not None and req.d_status == "transfer" and req.d_pages is not None:
            delay = fault.late_write_delay_s if fault is not None else None
            pages = self._inflight_pages(req, d)
            if delay is not None and pages is not None and len(pages):
                land_t = t + delay
                self.queue.at(land_t, d.late_write, req, pages, d.generation)
        ack_lost = bool(fault is not None and fault.ack_lost)
        if d is not None:
            d.client_abort(t, req, ack_lost=ack_lost, land_t=land_t)
        if p is not None:
            p.abort(t, req)
        self._maybe_forget(req)

    def _inflight_pages(self, req: SimRequest, d: DecodeNode) -> Any:
        p = req.p_node
        if p is None or req.d_pages is None:
            return None
        page = d.pool.page_size
        n_total = d.pool.pages_for(req.p_len)
        chunk = max(1, p.spec.chunked_prefill_size // page)
        if req.fault is not None and req.fault.inflight_pages:
            chunk = req.fault.inflight_pages
        if req.p_status == "transferring":
            lo, hi = max(0, n_total - chunk), n_total
        elif req.p_status == "prefilling":
            lo = min(n_total - 1, (req.cached + req.progress) // page)
            hi = min(n_total, lo + chunk)
        else:
            return None
        return req.d_pages[lo:hi].copy()

    def _lost_connection(self, t: float, prefill_name: str) -> None:
        node = self.nodes.get(prefill_name)
        if not isinstance(node, PrefillNode):
            return
        affected = node.lose_connection(t)
        self.queue.at(t + self._heartbeat_s(), self._connection_lost, node, affected)

    def _connection_lost(self, t: float, p: PrefillNode, affected: list[SimRequest]) -> None:
        reason = f"Lost connection with prefill instance (bootstrap_addr: {p.bootstrap_addr})"
        for d in self.decodes:
            mine = [r for r in affected if r.d_node is d and r.d_status == "transfer"]
            if not mine:
                continue
            d.log(t, d.fmt.lost_connection(t, p.bootstrap_addr, len(mine)))
            for req in mine:
                d.transfer_failed(t, req, reason, ack_lost=True)
                if req.p_status in ("waiting", "prefilling", "transferring", "bootstrapping"):
                    p.abort(t, req, "Failed due to an unknown reason from another rank")
                self._maybe_forget(req)

    # -- replies and bookkeeping ----------------------------------------------------------
    def reply_p(self, req: SimRequest, status: int, body: dict[str, Any]) -> None:
        cb = req.on_p_done
        req.on_p_done = None
        if cb is not None:
            cb(status, body)
        self._maybe_forget(req)

    def reply_d(self, req: SimRequest, status: int, body: dict[str, Any]) -> None:
        cb: Reply | None = req.on_d_done
        req.on_d_done = None
        if cb is not None:
            cb(status, body)
        self._maybe_forget(req)

    def _maybe_forget(self, req: SimRequest) -> None:
        if req.p_status in ("done", "refused", "failed") and req.d_status in ("done", "failed"):
            self._forget(req)

    def _forget(self, req: SimRequest) -> None:
        self.active.pop(req.serial, None)
        if self.rooms.get(req.room) is req:
            del self.rooms[req.room]

    # -- ground truth ---------------------------------------------------------------------
    def _entry(
        self, req: SimRequest, t: float, cause: Cause, status: int, n: int
    ) -> dict[str, Any]:
        d = req.d_node
        return self.truth.response(
            rid=req.d_rid,
            room=req.room,
            node=d.name if d is not None else "",
            t=t,
            prompt_tokens=req.tokens,
            cause=cause,
            http_status=status,
            foreign_marker_count=n,
        )

    def record_exposed(self, req: SimRequest, t: float, foreign_markers: int) -> None:
        cause: Cause = "over_length_stub" if req.stub else "late_write"
        self.truth.exposed.append(self._entry(req, t, cause, 200, foreign_markers))

    def record_caught(self, req: SimRequest, t: float, cause: Cause = "late_write") -> None:
        """A corruption the engine itself caught (the client got HTTP 500, not foreign data)."""
        self.truth.caught.append(self._entry(req, t, cause, 500, 0))

    def record_stub_without_foreign(self, req: SimRequest, t: float) -> None:
        entry = self._entry(req, t, "over_length_stub", 200, 0)
        self.truth.stub_served_without_foreign_content.append(entry)

    def record_deferred_timeout(self, req: SimRequest, t: float, node: str) -> None:
        self.truth.deferred_release_timeouts.append(
            {"bootstrap_room": str(req.room), "time": iso_utc(t), "node": node}
        )
