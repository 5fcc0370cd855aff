"""KV transfer and bootstrap failures far above the deployment's own baseline.

Feeds the alert `KVWatchTransferFailureStorm`.

Every failed transfer is an abort mid-transfer on one side or the other: the condition of the abort
race, where RDMA writes still in flight land in pages decode has re-let. A few failures are normal
(client disconnects); a storm (a prefill node lost, a load balancer aborting) widens the race window
for everyone. Per window (event time) the count of failed requests is compared with the baseline of
earlier normal windows: score = failures / (`ratio` x baseline), a warning at or above `threshold`
once failures reach `min_failures` (or of this window and the quiet one before it together against
twice the bar: a burst across their boundary). One finding per storm; a storm outlasts up to
`episode_gap_windows` quiet windows in a row. Both sides log (and count) the same failed request, so
failures are the larger of the distinct rooms in `... transfer failed` / `... handshake failed`
lines across the deployment, and the increase of `sglang:num_transfer_failed_reqs_total` plus
`sglang:num_bootstrap_failed_reqs_total` summed over the nodes of one role (the larger role).

A client's abort (`... Aborted by AbortReq.`) on an engine that holds an aborted transfer's pages
until it has drained opens no race: each such hold ends drained, or timed out and said so, which
`deferred_release_timeouts` judges. That is deferred release (on by default from 0.5.21, MORI from
0.5.22) with the backend's failed-send fix (Mooncake 0.5.22, NIXL and MORI 0.5.23,
`engine_version.holds_aborted_pages`): before it, a failed send is confirmed as drained at once,
the hold ends with no timeout said, and the aborts are the race's condition (blind review 34 D5:
a 0.5.21 Mooncake storm of them exposed 54 responses with not one warning). Held ones are no
storm here: a load test cancelled on a healthy fleet paged as one (audit H2, 0.5.23 `decode.py`
`resolve_deferred_releases`). On an engine that holds them the failure
counters, which count aborts with the rest, page nothing either; a storm that only the counters
of nodes whose logs show no failed transfer tell is said at `info`, a question the decode logs
answer (blind review 17: a storm in `.prom` snapshots alone went unreported). Transport and
bootstrap failure lines, and everything on engines before the fix or where deferred release is
off, still count. Where the release is unknown they count too, but a storm only with them is
`info`: a question a `/server_info` snapshot answers, not a page.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, Final

from pydantic import Field

from collector.events import Event, iso_time
from collector.state.config_timeline import NODE_WINDOW
from detectors.base import DetectorConfig
from detectors.context import DetectionContext
from detectors.engine_version import holds_aborted_pages
from detectors.finding import Finding, Severity
from detectors.storm import (
    Episode,
    Learned,
    StormConfig,
    StormDetector,
    baseline_said,
    metric_signal,
    normal_level,
    sample_value,
    settled_level,
    shifted,
)
from detectors.windows import Baseline

_FAILURE_SIGNALS = frozenset({"transfer_failed_total", "bootstrap_failed_total"})
_NAME_SIGNAL = {
    "sglang:num_transfer_failed_reqs_total": "transfer_failed_total",
    "sglang:num_bootstrap_failed_reqs_total": "bootstrap_failed_total",
}


class TransferFailureStormConfig(StormConfig):
    # Baseline floor (failures per window), so a quiet history does not make 3 a storm.
    prior_failures: float = Field(default=2.0, gt=0)
    # "Far above": multiple of the baseline.
    ratio: float = Field(default=5.0, gt=1)
    # Volume floor.
    min_failures: int = Field(default=10, ge=1)
    # Score at or above which a window fires.
    threshold: float = Field(default=1.0, gt=0)


# Whether `node`'s engine held an aborted transfer's pages at a time (`_holds_aborted_pages`).
Holds = Callable[[str, float], bool]


class _Window:
    """A window's failed requests. A client's abort, and a counter sample, count or not by
    whether the node's engine holds aborted pages, asked when the window is judged: a
    generation's version is often told only by a later `/server_info` snapshot, and asked as
    each line arrived, every abort before the first snapshot was a failure (blind review: the
    first five minutes of a healthy 0.5.22 fleet were a storm)."""

    __slots__ = ("rooms", "aborts", "metric", "metric_at", "excused")

    def __init__(self) -> None:
        self.rooms: dict[str, set[str]] = {}
        # node -> room -> when: clients' aborts (`Aborted by AbortReq.`).
        self.aborts: dict[str, dict[str, float]] = {}
        # node -> (signal, dp_rank) -> largest increase across the other labels
        self.metric: dict[str, dict[tuple[str, str], float]] = {}
        # node -> time of its latest counter sample in the window
        self.metric_at: dict[str, float] = {}
        # node -> failures taken out as a prefill restart's (`excuse`): its counters counted
        # them too.
        self.excused: dict[str, int] = {}

    def excuse(self, ctx: DetectionContext) -> None:
        """Take out the transfers lost to a prefill that was seen starting again: a restart
        fails what it had in flight, and the process that could have written late is gone
        (`collector.state.lost_transfers`). Idempotent: asked each time the window is read."""
        ctx.lost.take_restarted(self.rooms, ctx.timeline, self.excused)

    def restart_awaited(self, ctx: DetectionContext) -> float | None:
        return ctx.lost.restart_awaited(self.rooms, ctx.timeline)

    def node_rooms(self, node: str, holds: Holds) -> set[str]:
        aborted = self.aborts.get(node, {})
        return self.rooms.get(node, set()) | {r for r, t in aborted.items() if not holds(node, t)}

    def node_metric(self, node: str, holds: Holds, held_too: bool = False) -> float:
        """The node's counted failures; none where its engine holds failed transfers' pages,
        unless `held_too`."""
        per = self.metric.get(node)
        if not per or (not held_too and holds(node, self.metric_at[node])):
            return 0.0
        return max(sum(per.values()) - self.excused.get(node, 0), 0.0)

    def node_failures(self, node: str, holds: Holds) -> float:
        return max(float(len(self.node_rooms(node, holds))), self.node_metric(node, holds))

    def failures(
        self,
        role_of: Callable[[str], str | None],
        holds: Holds,
        held_too: frozenset[str] = frozenset(),
    ) -> float:
        """The larger of the distinct rooms the lines name and the counters' increase summed
        over one role's nodes (the counters of `held_too` counted wherever they hold)."""
        rooms: set[str] = set()
        for node in set(self.rooms) | set(self.aborts):
            rooms |= self.node_rooms(node, holds)
        by_role: dict[str, float] = {}
        for node in self.metric:
            group = role_of(node) or node
            counted = self.node_metric(node, holds, node in held_too)
            by_role[group] = by_role.get(group, 0.0) + counted
        return max(float(len(rooms)), max(by_role.values(), default=0.0))

    def nodes(self) -> set[str]:
        return set(self.rooms) | set(self.aborts) | set(self.metric)

    def take(self, node: str) -> _Window:
        part = _Window()
        if node in self.rooms:
            part.rooms[node] = self.rooms.pop(node)
        if node in self.aborts:
            part.aborts[node] = self.aborts.pop(node)
        if node in self.metric:
            part.metric[node] = self.metric.pop(node)
            part.metric_at[node] = self.metric_at.pop(node)
        if node in self.excused:
            part.excused[node] = self.excused.pop(node)
        return part

    def to_state(self) -> dict[str, Any]:
        return {
            "rooms": {k: sorted(v) for k, v in self.rooms.items()},
            "aborts": {k: sorted(v.items()) for k, v in self.aborts.items()},
            "metric": {
                node: [[signal, dp, value] for (signal, dp), value in sorted(per.items())]
                for node, per in self.metric.items()
            },
            "metric_at": dict(self.metric_at),
            "excused": dict(self.excused),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _Window:
        window = cls()
        window.rooms = {k: set(v) for k, v in state["rooms"].items()}
        window.aborts = {
            node: {str(room): float(t) for room, t in rows}
            for node, rows in (state.get("aborts") or {}).items()
        }
        window.metric = {
            node: {(str(signal), str(dp)): float(value) for signal, dp, value in rows}
            for node, rows in state["metric"].items()
        }
        # A window saved before: its counters were kept only where the engine did not hold.
        saved_at = state.get("metric_at") or {}
        window.metric_at = {node: float(saved_at.get(node, -math.inf)) for node in window.metric}
        window.excused = {str(k): int(v) for k, v in (state.get("excused") or {}).items()}
        return window


class TransferFailureStorm(StormDetector[TransferFailureStormConfig, _Window]):
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
    event_kinds: ClassVar[frozenset[str]] = frozenset({"transfer_failed", "metric", NODE_WINDOW})
    metric_signals: ClassVar[frozenset[str] | None] = _FAILURE_SIGNALS
    window_class: ClassVar[type[_Window]] = _Window

    def _init_learned(self) -> None:
        super()._init_learned()
        self.baseline_ = Baseline(self.config.baseline_windows)
        self.storm_ = Episode()
        # Storms told as questions (`info`: clients' aborts on engines whose release no input
        # told yet), asked again at the end of the input: (window start, window, baseline,
        # baseline without its prior).
        self.questions_: list[tuple[float, _Window, float, float]] = []

    def _learned_state(self) -> dict[str, Any]:
        return {
            **super()._learned_state(),
            "baseline": self.baseline_.to_list(),
            "storm": self.storm_.to_state(),
            "questions": [
                [start, window.to_state(), base, lower]
                for start, window, base, lower in self.questions_
            ],
        }

    def _load_learned(self, state: dict[str, Any]) -> None:
        super()._load_learned(state)
        self.baseline_ = Baseline(self.config.baseline_windows, state["baseline"])
        self.storm_ = Episode.from_state(state.get("storm"))
        self.questions_ = [
            (float(start), _Window.from_state(window), float(base), float(lower))
            for start, window, base, lower in state.get("questions") or []
        ]

    def _on_flush(self, ctx: DetectionContext, now: float) -> list[Finding]:
        findings = super()._on_flush(ctx, now)
        if math.isinf(now) and self.questions_:
            findings.extend(self._answered(ctx))
        return findings

    def _answered(self, ctx: DetectionContext) -> list[Finding]:
        """The storms told as questions, asked again once the whole input is read: a
        `/server_info` saved after the logs (dated by its file, so read last) tells the release
        the storm's engines ran, and where it leaves the aborts failures, the storm is a page.

        Why: blind review 5a, 0.5.19 decode with 28 aborts in 5 minutes against a baseline of
        2 and its `/server_info` saved after the logs: the storm was only `info`, "no input
        tells" their release, while the same run's timeline said 0.5.19 from the engine's start
        and raised the unsafe version as critical."""
        cfg = self.config
        out = []
        questions, self.questions_ = self.questions_, []
        for start, window, base, lower in questions:
            window.excuse(ctx)
            failures = _failures(window, start, ctx)
            told = _failures(window, start, ctx, unknown_holds=True)
            score = self._burst(told, cfg.min_failures, cfg.ratio, base, lower)
            if failures > told or score < cfg.threshold:
                continue  # still a question, or no storm once the releases are known
            nodes = sorted(window.nodes())
            worst = _worst_node(window, nodes, ctx)
            summary = (
                f"KV transfer failure storm: {told:.0f} failed requests in "
                f"{cfg.window_seconds:.0f}s against a {baseline_said(base, lower)} across "
                f"{len(nodes)} nodes (most on {worst}), told as possible until a snapshot read "
                "after them said the engines' release leaves aborted transfers' pages free: "
                "aborts mid-transfer widen the KV corruption window; check prefill health and "
                "load-balancer aborts"
            )
            out.append(
                self._storm_finding(
                    "warning",
                    start,
                    worst,
                    summary,
                    f"storm:{start}:told",
                    told,
                    base,
                    nodes,
                    score,
                    0.0,
                )  # fmt: skip
            )
        return out

    def _unlogged(self, window: _Window) -> frozenset[str]:
        """Nodes with counter samples in the window whose logs never showed a failed transfer:
        only their counters can tell a storm. Where the logs show them, the lines tell clients'
        aborts apart, and a counter's rise is the lines' again (a scrape on the window's edge
        counts the aborts of the window before it: audit H2)."""
        return frozenset(node for node in window.metric if not self.logged_.get(node))

    def _counted_alone(
        self,
        window: _Window,
        start: float,
        counted: float,
        base: float,
        nodes: list[str],
        score: float,
        ctx: DetectionContext,
    ) -> Finding | None:
        """A storm only the failure counters show, on engines that hold a failed transfer's
        pages until prefill drains it: told at `info`, once a storm. The counters count
        clients' aborts with transport failures and checksum mismatches, so they cannot page
        (audit H2: a cancelled load test on a healthy 0.5.23 fleet); said nothing, a storm
        seen in `.prom` snapshots alone went unreported (blind review 17)."""
        cfg = self.config
        new = self.storm_.fire(start, 0)
        if not new:
            return None
        self.storm_.severity = "info"
        holds = _holds(ctx)
        worst = max(
            nodes, key=lambda node: window.node_metric(node, holds, held_too=True), default=None
        )
        summary = (
            f"Possible KV transfer failure storm: {counted:.0f} failed transfers in "
            f"{cfg.window_seconds:.0f}s against a {baseline_said(base, self.baseline_.level(0.0))}"
            ", counted by the "
            f"engines' failure counters and shown by no log line (most on {worst}). These "
            "engines hold a failed transfer's pages until prefill drains it, and the counters "
            "count clients' aborts with transport failures and checksum mismatches: the decode "
            "logs tell the causes apart, and deferred-release timeouts tell whether the race "
            "opened"
        )
        return self._storm_finding(
            "info", start, worst, summary, f"storm:{start}", counted, base, nodes, score, 0.0
        )

    def _storm_finding(
        self,
        severity: Severity,
        start: float,
        worst: str | None,
        summary: str,
        subject: str,
        failures: float,
        base: float,
        nodes: list[str],
        score: float,
        unsure: float,
    ) -> Finding:
        cfg = self.config
        return self._finding(
            severity,
            time=start + cfg.window_seconds,
            node=worst,
            summary=summary,
            subject=subject,
            evidence={
                "window_start": iso_time(start),
                "window_seconds": cfg.window_seconds,
                "failures": failures,
                "baseline": base,
                "nodes": len(nodes),
                "score": round(score, 6),
                "threshold": cfg.threshold,
                "aborts_on_unknown_release": unsure,
            },
        )

    def _fold(self, event: Event, ctx: DetectionContext) -> None:
        if event.kind == "transfer_failed":
            room = str(event.get("bootstrap_room") or f"{event.get('rid')}")
            window = self.window_
            if event.get("reason") == "aborted":
                # A client's abort: no failure where its pages are held until drained, which
                # is asked when the window is judged (`_Window`).
                aborts = window.aborts.setdefault(event.node, {})
                if room not in aborts and room not in window.rooms.get(event.node, ()):
                    aborts[room] = event.time if event.time is not None else -math.inf
                    self._log_shows(event.node)
                return
            rooms = window.rooms.setdefault(event.node, set())
            if room not in rooms:
                rooms.add(room)
                if window.aborts.get(event.node, {}).pop(room, None) is None:
                    self._log_shows(event.node)
            return
        fields = event.fields
        signal = metric_signal(fields, _NAME_SIGNAL)
        if signal not in _FAILURE_SIGNALS:
            return
        value = sample_value(fields)
        if value is None:
            return
        delta = self._increase(event, value, ctx, scope=event.node)
        # Where every failed transfer's pages are held until drained, the counter (which counts
        # clients' aborts with the rest) says nothing of the race: the holds' outcomes do
        # (`deferred_release_timeouts`), and the lines tell aborts apart. Asked when judged.
        labels = event.get("labels") or {}
        key = (str(signal), str(labels.get("dp_rank", "")))
        per_node = self.window_.metric.setdefault(event.node, {})
        per_node[key] = max(per_node.get(key, 0.0), delta)
        when = event.time if event.time is not None else -math.inf
        self.window_.metric_at[event.node] = max(self.window_.metric_at.get(event.node, when), when)

    def _has_data(self) -> bool:
        return bool(self.window_.nodes())

    def _level(self, windows: list[tuple[float, _Window]], ctx: DetectionContext) -> float:
        return normal_level([_failures(window, start, ctx) for start, window in windows])

    def _seed(self, held: list[tuple[float, _Window]], ctx: DetectionContext) -> None:
        cfg = self.config
        values = [_failures(window, start, ctx) for start, window in held]
        bar = cfg.ratio * max(normal_level(values), cfg.prior_failures)
        self.baseline_ = Baseline(cfg.baseline_windows, [settled_level(values, bar)])

    def _baselines(self) -> list[Learned]:
        return [self.baseline_]

    def _absorb(self, other: TransferFailureStorm) -> None:
        level = other.baseline_.level(0.0)
        self.baseline_ = shifted(self.baseline_, self.config.baseline_windows, level)

    def _unobserved(self) -> None:
        super()._unobserved()
        self.storm_.quiet_window(self.config.episode_gap_windows)

    def _close(self, window: _Window, start: float, ctx: DetectionContext) -> Finding | None:
        cfg = self.config
        window.excuse(ctx)
        nodes = sorted(window.nodes())
        failures = _failures(window, start, ctx)
        base = self.baseline_.level(cfg.prior_failures)
        score = self._burst(failures, cfg.min_failures, cfg.ratio, base, self.baseline_.level(0.0))
        if score < cfg.threshold:
            counted = _failures(window, start, ctx, held_too=self._unlogged(window))
            if counted > failures:
                lower = self.baseline_.level(0.0)
                counted_score = self._burst(counted, cfg.min_failures, cfg.ratio, base, lower)
                if counted_score >= cfg.threshold:
                    return self._counted_alone(
                        window, start, counted, base, nodes, counted_score, ctx
                    )
            self._quiet(failures, base, self.baseline_)
            self.baseline_.add(failures)
            self.storm_.quiet_window(cfg.episode_gap_windows)
            return None
        new = self.storm_.fire(start, 0)
        worst = _worst_node(window, nodes, ctx)
        summary = (
            f"KV transfer failure storm: {failures:.0f} failed requests in "
            f"{cfg.window_seconds:.0f}s against a {baseline_said(base, self.baseline_.level(0.0))}"
            f" across {len(nodes)} nodes (most on {worst}): aborts mid-transfer widen the KV "
            "corruption window; check prefill health and load-balancer aborts"
        )
        # Clients' aborts on engines whose release no input tells (SGLang logs none; only
        # `/server_info` does) may be held until drained (0.5.21 on): a storm only with them is
        # a question, not a page (a cancelled load test on a healthy 0.5.23 fleet, logs only,
        # warned).
        told = _failures(window, start, ctx, unknown_holds=True)
        unsure = failures - told
        severity: Severity = "warning"
        lower = self.baseline_.level(0.0)
        if (
            unsure > 0
            and self._burst(told, cfg.min_failures, cfg.ratio, base, lower) < cfg.threshold
        ):
            severity = "info"
            # What the unsure part is: clients' aborts the lines show, or increases of counters
            # that count clients' aborts with every other failure (review 17: a storm seen only
            # in `.prom` snapshots was called "clients' aborts").
            counted_alone = (
                _failures(window, start, ctx, unknown_holds=True, held_too=frozenset(window.metric))
                - told
            )
            summary = (
                f"Possible KV transfer failure storm: {failures:.0f} failed requests in "
                f"{cfg.window_seconds:.0f}s against a {baseline_said(base, lower)}, "
                f"{unsure:.0f} of them {_unsure_part(unsure, counted_alone)} on engines whose "
                f"release no input tells (most on {worst}): from 0.5.22 (NIXL and MORI 0.5.23) "
                "their pages are held until drained and open no race; before, they are the "
                "abort race's condition. A /server_info snapshot of the nodes tells which"
            )
        # One finding a storm, and one more when it turns from a question into a page (a storm
        # saved before severities were kept fired as a warning).
        fired = self.storm_.severity or "warning"
        if not new and (fired == "warning" or severity == fired):
            return None
        self.storm_.severity = severity
        if severity == "info" and len(self.questions_) < _QUESTIONS:
            self.questions_.append((start, window, base, lower))
        elif severity == "warning" and self.storm_.start is not None:
            # The storm is paged now: its question is answered.
            begun = self.storm_.start
            self.questions_ = [q for q in self.questions_ if q[0] < begun]
        return self._storm_finding(
            severity, start, worst, summary, f"storm:{start}", failures, base, nodes, score, unsure
        )


def _unsure_part(unsure: float, counted_alone: float) -> str:
    """What failures on engines of unknown release were: clients' aborts (their lines say so),
    or counted by the engines' counters alone (whose causes no line tells)."""
    if counted_alone <= 0:
        return "clients' aborts"
    if counted_alone >= unsure:
        return "failures only the engines' counters show (they count clients' aborts too)"
    return "clients' aborts or failures only the engines' counters show"


def _worst_node(window: _Window, nodes: list[str], ctx: DetectionContext) -> str | None:
    """The node with the most failed requests in the window, as the timeline knows it now."""
    holds = _holds(ctx)
    return max(nodes, key=lambda node: window.node_failures(node, holds), default=None)


# Storms told as questions kept for the end of the input (`_answered`).
_QUESTIONS: Final = 64


def _holds(ctx: DetectionContext, unknown: bool = False) -> Holds:
    """`_holds_aborted_pages` as the timeline knows it now, asked once per node and time; an
    engine whose release is unknown holds them when `unknown`."""
    asked: dict[tuple[str, float], bool] = {}

    def holds(node: str, time: float) -> bool:
        key = (node, time)
        if key not in asked:
            held = _holds_aborted_pages(node, None if math.isinf(time) else time, ctx)
            asked[key] = unknown if held is None else held
        return asked[key]

    return holds


def _holds_aborted_pages(node: str, time: float | None, ctx: DetectionContext) -> bool | None:
    """Whether the node's engine holds an aborted transfer's pages until it has drained:
    deferred release stated on, on a release with the backend's failed-send fix, or both by
    default (`holds_aborted_pages`); None when neither its release nor an earlier one of the
    node is known. Stated on, a release known to confirm failed sends as drained still lets
    their pages go early (blind review 34 D5)."""
    config = ctx.config_at(node, time)
    if config is None:
        return None
    stated = config.deferred_release
    held = holds_aborted_pages(
        config.version, backend=config.transfer_backend, deferred_release=stated
    )
    if stated is not None:
        return stated if held is None else held
    if held is None:
        # A restarted engine's release is not known until a snapshot of it says so (the next
        # may be an hour off), and an upgrade keeps deferred release: the release it ran
        # before answers. Not asked, a restart's clients' aborts were all failures, against a
        # baseline without them, and a rolling restart of a healthy 0.5.22 fleet was a storm
        # (blind review).
        for earlier in reversed(ctx.timeline.history(node)):
            if earlier.generation < config.generation:
                held = holds_aborted_pages(earlier.version, backend=config.transfer_backend)
                if held is not None:
                    break
    return held


def _failures(
    window: _Window,
    start: float,
    ctx: DetectionContext,
    unknown_holds: bool = False,
    held_too: frozenset[str] = frozenset(),
) -> float:
    """The window's failed requests, each node's side as its role was at the window's start
    (engines of unknown release taken to hold aborted pages when `unknown_holds`; the counters
    of the nodes `held_too` counted wherever they hold). Transfers lost to a prefill restart
    are none of them (`_Window.excuse`)."""
    window.excuse(ctx)
    return window.failures(
        lambda node: ctx.timeline.role_at(node, start), _holds(ctx, unknown_holds), held_too
    )
