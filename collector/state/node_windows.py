"""Per-node window sums of the telemetry-anomaly inputs, folded where the logs are parsed.

Batch lines are over half of all events, yet their only readers want little of them: the
telemetry anomaly detector wants per node and window a few counts, sums and a peak, and the
configuration timeline wants the role their keys imply. A forensics worker parsing one node's
stream can fold them (and the few other kinds the detector counts) into one small `node_window`
event per window, so the lines never travel to the judging process.

Both sides must put every event in the same window. Windows are tumbling and aligned to the
epoch (`start = floor(t / W) * W`, as `detectors.windows.WindowClock`), so every process that
sees a node agrees on them. An event belongs to the window holding the *watermark* when it is
read (the latest time seen so far; an event without a time, or behind, joins the open window):
the detector places a raw event in the window holding the pipeline's watermark, and
`collector.parse.merge_by_time` hands the pipeline each event when the pipeline's watermark is
that of the event's own stream, which is what the aggregator tracks. Hence the detector fed the
partials (see `TelemetryAnomalyConfig.input`) scores the same windows as when fed the events.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any, Final

from collector.events import BATCH_KINDS, PREFILL_BATCH, Event
from collector.files import WINDOW_SOURCE
from collector.sglang.batch import BatchSample
from collector.state.config_timeline import (
    NODE_WINDOW,
    Role,
    batch_hint_strength,
    batch_role_hint,
)
from collector.state.prefill_hits import ChunkRuns, batch_hit

__all__ = [
    "BATCH_KINDS",
    "BATCH_PICKS",
    "PREFILL_BATCH_PICKS",
    "NODE_WINDOW",
    "SOURCE_KINDS",
    "NodeWindow",
    "NodeWindowAggregator",
    "with_node_windows",
]

_FINISHED: Final = "request_finished"
_REJECTED: Final = "request_rejected"
_TRANSFER_FAILED: Final = "transfer_failed"
_DEFERRED_RELEASE: Final = "deferred_release"
# What a window reads of a batch line (`BATCH_KINDS`), in `NodeWindow.add_batch`'s order. Batch
# lines are read only for these sums and the role hint, so a worker that ships partial windows
# (to a detector reading them and a timeline that accepts their hint) can drop them.
BATCH_PICKS: Final = ("token_usage", "queue_req", "gen_throughput")
# A prefill batch line's picks: the windows' and what ties a single-sequence line to its
# request's prefix-cache hits (`collector.state.prefill_hits`), shipped as a `prefill_hit`.
PREFILL_BATCH_PICKS: Final = (*BATCH_PICKS, "new_seq", "new_token", "cached_token")
# The raw kinds a `NodeWindow` folds: exactly what the telemetry anomaly detector reads.
SOURCE_KINDS: Final = frozenset(
    {_FINISHED, _REJECTED, _TRANSFER_FAILED, _DEFERRED_RELEASE} | BATCH_KINDS
)

# The count beside each summed sample (`add`): spelt out, as formatting them costs per line.
_COUNT_KEYS: Final = {
    "ttft": "n_ttft",
    "token_usage": "n_token_usage",
    "gen_throughput": "n_gen_throughput",
}


class NodeWindow:
    """Running sums for one node and window; the telemetry-anomaly features are computed from
    them. Bounded and JSON-able (`to_state`), so a worker can ship one and the detector `merge`
    it as if it had read the events itself."""

    __slots__ = ("counts", "sums", "queue_max", "timed_out_rooms")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.sums: dict[str, float] = {}
        self.queue_max = 0.0
        # Rooms whose deferred release timed out: every TP rank logs the same timeout, and a
        # window's count is of rooms, as the timeouts detector counts them.
        self.timed_out_rooms: set[str] = set()

    def add(self, key: str, value: float) -> None:
        """Add one sample of a mean: its sum under `key`, its count under `n_<key>`."""
        self.sums[key] = self.sums.get(key, 0.0) + value
        count = _COUNT_KEYS.get(key) or f"n_{key}"
        self.counts[count] = self.counts.get(count, 0) + 1

    def mean(self, key: str) -> float:
        n = self.counts.get(_COUNT_KEYS.get(key) or f"n_{key}", 0)
        return self.sums.get(key, 0.0) / n if n else 0.0

    def add_event(self, event: Event) -> None:
        """Fold one event of a `SOURCE_KINDS` kind (any other kind counts as a batch line)."""
        kind = event.kind
        fields = event.fields
        counts = self.counts
        if kind == _FINISHED:
            counts["finished"] = counts.get("finished", 0) + 1
            if fields.get("finish_type") == "abort":
                counts["aborted"] = counts.get("aborted", 0) + 1
            ttft = fields.get("first_token_latency")
            if type(ttft) is float or type(ttft) is int:
                self.add("ttft", float(ttft))
        elif kind == _REJECTED:
            counts["rejected"] = counts.get("rejected", 0) + 1
        elif kind == _TRANSFER_FAILED:
            counts["transfer_failed"] = counts.get("transfer_failed", 0) + 1
        elif kind == _DEFERRED_RELEASE:
            if fields.get("outcome") == "timeout":
                room = fields.get("bootstrap_room")
                if room is not None:
                    room = str(room)
                    if room in self.timed_out_rooms:
                        return
                    self.timed_out_rooms.add(room)
                counts["deferred_timeouts"] = counts.get("deferred_timeouts", 0) + 1
        else:
            self.add_batch(
                fields.get("token_usage"), fields.get("queue_req"), fields.get("gen_throughput")
            )

    def add_batch(self, usage: Any, queue: Any, throughput: Any) -> None:
        """Fold one batch line by the values of its `BATCH_PICKS` keys (None when absent)."""
        counts, sums = self.counts, self.sums
        counts["batches"] = counts.get("batches", 0) + 1
        # `add`, spelt out: this runs for over half of all lines.
        if type(usage) is float or type(usage) is int:
            sums["token_usage"] = sums.get("token_usage", 0.0) + float(usage)
            counts["n_token_usage"] = counts.get("n_token_usage", 0) + 1
        if (type(queue) is float or type(queue) is int) and queue > self.queue_max:
            self.queue_max = float(queue)
        if type(throughput) is float or type(throughput) is int:
            sums["gen_throughput"] = sums.get("gen_throughput", 0.0) + float(throughput)
            counts["n_gen_throughput"] = counts.get("n_gen_throughput", 0) + 1

    def merge(self, other: NodeWindow) -> None:
        """Add another part of the same window (into an empty window: an exact copy)."""
        counts, sums = self.counts, self.sums
        for key, n in other.counts.items():
            counts[key] = counts.get(key, 0) + n
        for key, total in other.sums.items():
            sums[key] = sums.get(key, 0.0) + total
        if other.queue_max > self.queue_max:
            self.queue_max = other.queue_max
        seen_twice = self.timed_out_rooms & other.timed_out_rooms
        if seen_twice:
            counts["deferred_timeouts"] -= len(seen_twice)
        self.timed_out_rooms |= other.timed_out_rooms

    def to_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "counts": dict(self.counts),
            "sums": dict(self.sums),
            "queue_max": self.queue_max,
        }
        if self.timed_out_rooms:
            state["timed_out_rooms"] = sorted(self.timed_out_rooms)
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> NodeWindow:
        window = cls()
        window.counts = {str(k): int(v) for k, v in state["counts"].items()}
        window.sums = {str(k): float(v) for k, v in state["sums"].items()}
        window.queue_max = float(state["queue_max"])
        window.timed_out_rooms = {str(room) for room in state.get("timed_out_rooms") or ()}
        return window


# The strongest hint a batch line can give: once a window has it, its lines need not be read.
_SURE: Final = batch_hint_strength("prefill")


class NodeWindowAggregator:
    """Folds one stream of one node (every event, in the stream's order) into `node_window`
    events: per window, the `NodeWindow` of its `SOURCE_KINDS` events and the role hint of its
    batch lines.

    `observe(event)` returns what to ship *before* `event`: the window the event's time closes
    (time: the latest time seen in it, so it sorts before anything at or after the window's end),
    and, the first time the stream's batch lines hint at a role this strongly, a hint-only
    partial (`events` 0, the line's own time, or the stream's latest when the line is behind it)
    so the timeline learns the role when it would have from the line. Source events seen before
    any time form a partial without time or window (shipped before the first timed event), as
    the detector holds such events for its first window. `flush()` returns the open window at
    the end of the stream. Windows without source events are not shipped: the detector has no
    row for a node that said nothing.

    Examples
    --------
    >>> agg = NodeWindowAggregator(window_seconds=60.0)
    >>> agg.observe(Event("decode_batch", "d0", 125.0, "d0.log:1",
    ...                   {"token_usage": 0.5, "queue_req": 3, "transfer_req": 1}))[0].fields
    {'window_start': 120.0, 'window_seconds': 60.0, 'events': 0, 'counts': {}, 'sums': {}, \
'queue_max': 0.0, 'role_hint': 'decode'}
    >>> agg.observe(Event("request_finished", "d0", 170.0, "d0.log:2", {"finish_type": "stop"}))
    []
    >>> (closed,) = agg.observe(Event("http_access", "d0", 181.0, "d0.log:3", {}))
    >>> closed.kind, closed.time, closed.fields["window_start"], closed.fields["counts"]
    ('node_window', 170.0, 120.0, {'batches': 1, 'n_token_usage': 1, 'finished': 1})
    >>> agg.flush()
    []
    """

    __slots__ = (
        "window_seconds",
        "_node",
        "_start",
        "_end",
        "_latest",
        "_window",
        "_events",
        "_hint",
        "_hint_strength",
        "_shipped_strength",
        "_chunks",
    )

    def __init__(self, window_seconds: float = 300.0) -> None:
        if not window_seconds > 0 or math.isinf(window_seconds):
            raise ValueError(f"window_seconds must be positive and finite, not {window_seconds}")
        self.window_seconds = float(window_seconds)
        self._node: str | None = None
        # The open window [start, end); None until the stream's first timed event.
        self._start: float | None = None
        self._end = math.inf
        self._latest: float | None = None  # the watermark
        self._window = NodeWindow()
        self._events = 0
        self._hint: Role | None = None
        self._hint_strength = 0
        self._shipped_strength = 0
        self._chunks = ChunkRuns()

    def observe(self, event: Event) -> list[Event]:
        """Take the stream's next event; return the partials to ship before it."""
        out: list[Event] = []
        time = event.time
        latest = self._latest
        if time is not None and (latest is None or time > latest):
            # Within the open window (most events): only the watermark moves.
            if time < self._end and self._start is not None:
                self._latest = time
            else:
                self._advance(time, out)
        if event.kind in SOURCE_KINDS:
            self._fold(event, out)
        return out

    def observe_batch(
        self,
        kind: str,
        node: str,
        time: float,
        source: str,
        sample: BatchSample,
        rank: int | None = None,
    ) -> list[Event]:
        """`observe` for a batch line read as a sample (a `BatchSampler` of `BATCH_PICKS`)
        instead of an event: the same windows, sums and hints, without the event's cost.
        `rank`: the line's DP rank (a chunked prefill runs on one)."""
        out: list[Event] = []
        latest = self._latest
        if latest is None or time > latest:
            # Within the open window (most lines): only the watermark moves.
            if time < self._end and self._start is not None:
                self._latest = time
            else:
                self._advance(time, out)
        if node != self._node:
            self._own(node)
        keys, values = sample
        self._window.add_batch(values[0], values[1], values[2])
        self._events += 1
        if len(values) > 3:  # a prefill line (`PREFILL_BATCH_PICKS`)
            hit = self._chunks.step(node, time, source, rank, values[3], values[4], values[5])
            if hit is not None:
                out.append(hit)
        if self._hint_strength < _SURE:
            role = batch_role_hint(kind, keys)
            self._hint_role(role, time, source, out)
        return out

    def _advance(self, time: float, out: list[Event]) -> None:
        if self._start is None or time >= self._end:
            if self._events:
                out.append(self._close())
            width = self.window_seconds
            self._start = math.floor(time / width) * width
            self._end = self._start + width
        self._latest = time

    def flush(self) -> list[Event]:
        """End of the stream: the open window, if it holds anything."""
        return [self._close()] if self._events else []

    def _own(self, node: str) -> None:
        if self._node is None:
            self._node = node
        elif node != self._node:
            raise ValueError(f"one aggregator per node: got {node!r} after {self._node!r}")

    def _fold(self, event: Event, out: list[Event]) -> None:
        self._own(event.node)
        self._window.add_event(event)
        self._events += 1
        if event.kind in BATCH_KINDS and self._hint_strength < _SURE:
            role = batch_role_hint(event.kind, event.fields.keys())
            self._hint_role(role, event.time, event.source, out)
        if event.kind == PREFILL_BATCH:
            hit = batch_hit(self._chunks, event)
            if hit is not None:
                out.append(hit)

    def _hint_role(
        self, role: Role | None, time: float | None, source: str, out: list[Event]
    ) -> None:
        strength = batch_hint_strength(role)
        if strength > self._hint_strength:
            self._hint, self._hint_strength = role, strength
        if strength > self._shipped_strength:
            self._shipped_strength = strength
            # Never behind the stream's watermark: the raw line would have reached the judge
            # after the later lines that set it, which the partial stands in for (a hint at the
            # line's own time once placed a judge's first window before them).
            if time is None or (self._latest is not None and time < self._latest):
                time = self._latest
            out.append(self._partial(NodeWindow(), 0, role, time, source))

    def _close(self) -> Event:
        node = self._node or ""
        partial = self._partial(
            self._window, self._events, self._hint, self._latest, f"{WINDOW_SOURCE}{node}"
        )
        self._window = NodeWindow()
        self._events = 0
        self._hint, self._hint_strength = None, 0
        return partial

    def _partial(
        self,
        window: NodeWindow,
        events: int,
        role_hint: Role | None,
        time: float | None,
        source: str,
    ) -> Event:
        fields: dict[str, Any] = {
            "window_start": self._start,
            "window_seconds": self.window_seconds,
            "events": events,
            **window.to_state(),
            "role_hint": role_hint,
        }
        return Event(NODE_WINDOW, self._node or "", time, source, fields)


def with_node_windows(events: Iterable[Event], window_seconds: float = 300.0) -> Iterator[Event]:
    """One node's stream with its partials inserted before the events that close them (the
    caller then drops what it does not ship, e.g. `BATCH_KINDS`)."""
    aggregator = NodeWindowAggregator(window_seconds)
    for event in events:
        yield from aggregator.observe(event)
        yield event
    yield from aggregator.flush()
