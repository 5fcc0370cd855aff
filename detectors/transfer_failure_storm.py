"""KV transfer and bootstrap failures far above the deployment's own baseline.

Feeds the alert `KVWatchTransferFailureStorm`.

Every failed transfer is an abort mid-transfer on one side or the other: the condition of the
abort race, where RDMA writes still in flight land in pages decode has re-let. A few failures
are normal (client disconnects); a storm (a prefill node lost, a load balancer aborting) widens
the race window for everyone. Per window (event time) the count of failed requests is
compared with the baseline of earlier normal windows: score = failures / (`ratio` x
baseline), a warning at or above `threshold` once failures reach `min_failures`. One finding
per storm. Both sides log (and count) the same failed request, so failures are the larger of
the distinct rooms in `... transfer failed` / `... handshake failed` lines across the
deployment, and the increase of `sglang:num_transfer_failed_reqs_total` plus
`sglang:num_bootstrap_failed_reqs_total` summed over the nodes of one role (the larger role).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import Field

from collector.events import Event
from detectors.base import Detector, DetectorConfig
from detectors.context import DetectionContext
from detectors.finding import Finding
from detectors.windows import Baseline, CounterDeltas, WindowClock, series_key

_FAILURE_SIGNALS = frozenset({"transfer_failed_total", "bootstrap_failed_total"})
_NAME_SIGNAL = {
    "sglang:num_transfer_failed_reqs_total": "transfer_failed_total",
    "sglang:num_bootstrap_failed_reqs_total": "bootstrap_failed_total",
}


class TransferFailureStormConfig(DetectorConfig):
    # Window length (seconds of event time).
    window_seconds: float = Field(default=300.0, gt=0)
    # Normal windows remembered for the baseline.
    baseline_windows: int = Field(default=48, ge=1)
    # Baseline floor (failures per window), so a quiet history does not make 3 a storm.
    prior_failures: float = Field(default=2.0, gt=0)
    # "Far above": multiple of the baseline.
    ratio: float = Field(default=5.0, gt=1)
    # Volume floor.
    min_failures: int = Field(default=10, ge=1)
    # Score at or above which a window fires.
    threshold: float = Field(default=1.0, gt=0)


class _Window:
    __slots__ = ("rooms", "metric")

    def __init__(self) -> None:
        self.rooms: dict[str, set[str]] = {}
        # node -> (signal, dp_rank) -> largest increase across the other labels
        self.metric: dict[str, dict[tuple[str, str], float]] = {}

    def node_failures(self, node: str) -> float:
        return max(float(len(self.rooms.get(node, ()))), sum(self.metric.get(node, {}).values()))

    def failures(self, role_of: Callable[[str], str | None]) -> float:
        rooms: set[str] = set().union(*self.rooms.values()) if self.rooms else set()
        by_role: dict[str, float] = {}
        for node, per in self.metric.items():
            group = role_of(node) or node
            by_role[group] = by_role.get(group, 0.0) + sum(per.values())
        return max(float(len(rooms)), max(by_role.values(), default=0.0))

    def nodes(self) -> set[str]:
        return set(self.rooms) | set(self.metric)

    def to_state(self) -> dict[str, Any]:
        return {
            "rooms": {k: sorted(v) for k, v in self.rooms.items()},
            "metric": {
                node: [[signal, dp, value] for (signal, dp), value in sorted(per.items())]
                for node, per in self.metric.items()
            },
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _Window:
        window = cls()
        window.rooms = {k: set(v) for k, v in state["rooms"].items()}
        window.metric = {
            node: {(str(signal), str(dp)): float(value) for signal, dp, value in rows}
            for node, rows in state["metric"].items()
        }
        return window


class TransferFailureStorm(Detector[TransferFailureStormConfig]):
    """Transfer/bootstrap failures far above baseline; feeds `KVWatchTransferFailureStorm`.

    Examples
    --------
    >>> from collector.events import Event
    >>> from detectors.pipeline import DetectionPipeline
    >>> def failed(t, room):
    ...     return Event("transfer_failed", "decode-0", t, "d.log", {"rid": f"r{room}",
    ...         "bootstrap_room": str(room), "side": "decode", "stage": "transfer",
    ...         "reason": "Aborted by AbortReq."})
    >>> quiet = [failed(600.0 * i, i) for i in range(20)]
    >>> storm = [failed(12_000.0 + i, 1000 + i) for i in range(40)]
    >>> pipe = DetectionPipeline(detectors=[TransferFailureStorm()])
    >>> [f.severity for f in pipe.run(quiet + storm)]
    ['warning']
    """

    name: ClassVar[str] = "transfer_failure_storm"
    alert: ClassVar[str] = "KVWatchTransferFailureStorm"
    config_class: ClassVar[type[DetectorConfig]] = TransferFailureStormConfig
    event_kinds: ClassVar[frozenset[str]] = frozenset({"transfer_failed", "metric"})
    metric_signals: ClassVar[frozenset[str] | None] = _FAILURE_SIGNALS
    windowed: ClassVar[bool] = True

    @classmethod
    def _unit_test_params(cls) -> dict[str, Any]:
        return {"window_seconds": 60.0, "baseline_windows": 10}

    def _init_learned(self) -> None:
        cfg = self.config
        self.clock_ = WindowClock(cfg.window_seconds)
        self.window_ = _Window()
        self.counters_ = CounterDeltas()
        self.baseline_ = Baseline(cfg.baseline_windows)
        self.in_storm_ = False

    def _learned_state(self) -> dict[str, Any]:
        return {
            "clock_start": self.clock_.start,
            "window": self.window_.to_state(),
            "counters": self.counters_.to_state(),
            "baseline": self.baseline_.to_list(),
            "in_storm": self.in_storm_,
        }

    def _load_learned(self, state: dict[str, Any]) -> None:
        cfg = self.config
        self.clock_ = WindowClock(cfg.window_seconds, state.get("clock_start"))
        self.window_ = _Window.from_state(state["window"])
        self.counters_ = CounterDeltas(state.get("counters"))
        self.baseline_ = Baseline(cfg.baseline_windows, state["baseline"])
        self.in_storm_ = bool(state.get("in_storm"))

    def _on_event(self, event: Event, ctx: DetectionContext) -> list[Finding]:
        findings: list[Finding] = []
        time = event.time
        if time is not None:
            clock = self.clock_
            clock.place(time)
            start = clock.start
            # Nothing is due before the open window ends (the common case: skip the call).
            if start is not None and time >= start + clock.width:
                findings = self._on_flush(ctx, time)
        if event.kind == "transfer_failed":
            room = event.get("bootstrap_room") or f"{event.get('rid')}"
            self.window_.rooms.setdefault(event.node, set()).add(str(room))
        else:
            fields = event.fields
            signal = fields.get("signal") or _NAME_SIGNAL.get(str(fields.get("name")))
            if signal not in _FAILURE_SIGNALS:
                return findings
            value = fields.get("value")
            if not isinstance(value, int | float):
                return findings
            if isinstance(value, bool) or math.isnan(value):
                return findings
            delta = self.counters_.in_window(
                series_key(event.node, event.fields),
                float(value),
                event.time,
                self.config.window_seconds,
            )
            labels = event.get("labels") or {}
            key = (str(signal), str(labels.get("dp_rank", "")))
            per_node = self.window_.metric.setdefault(event.node, {})
            per_node[key] = max(per_node.get(key, 0.0), delta)
        return findings

    def _on_flush(self, ctx: DetectionContext, now: float) -> list[Finding]:
        if math.isinf(now) and self.clock_.start is None and self.window_.nodes():
            self.clock_.place(ctx.now if ctx.now is not None else 0.0)
        findings: list[Finding] = []
        for start in self.clock_.due(now, max_windows=self.config.baseline_windows):
            finding = self._close(start, ctx)
            if finding is not None:
                findings.append(finding)
        return findings

    def _close(self, start: float, ctx: DetectionContext) -> Finding | None:
        cfg = self.config
        window, self.window_ = self.window_, _Window()
        nodes = sorted(window.nodes())
        failures = window.failures(lambda node: ctx.timeline.role_at(node, start))
        base = self.baseline_.level(cfg.prior_failures)
        score = failures / (cfg.ratio * base) if failures >= cfg.min_failures else 0.0
        if score < cfg.threshold:
            self.baseline_.add(failures)
            self.in_storm_ = False
            return None
        if self.in_storm_:
            return None
        self.in_storm_ = True
        worst = max(nodes, key=window.node_failures, default=None)
        summary = (
            f"KV transfer failure storm: {failures:.0f} failed requests in "
            f"{cfg.window_seconds:.0f}s against a baseline of {base:.1f} across {len(nodes)} "
            f"nodes (most on {worst}): aborts mid-transfer widen the KV corruption window; "
            f"check prefill health and load-balancer aborts"
        )
        return self._finding(
            "warning",
            time=start + cfg.window_seconds,
            node=worst,
            summary=summary,
            subject=f"storm:{start}",
            evidence={
                "window_start": start,
                "window_seconds": cfg.window_seconds,
                "failures": failures,
                "baseline": base,
                "nodes": len(nodes),
                "score": round(score, 6),
                "threshold": cfg.threshold,
            },
        )
