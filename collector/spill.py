"""Parsing many nodes' files on every core while one process judges the merged timeline.

Forensics has two halves: parsing (independent per node) and judging (one timeline). The
streams (per node: its logs; per node and kind: its snapshots) are shared out among worker
processes; each worker merges its own streams by time, keeps only the events the judge wants,
materialises their fields and sends them down a pipe in pickled batches. The judging process
merges the workers' already-ordered outputs by time as they arrive, so parsing and judging run
at the same time. Pipes block when full: memory stays bounded whatever the input size.

A per-stream stage (`StageFactory`) may turn a node's raw events into other events inside the
worker (forensics uses it to pre-aggregate dense batch lines into per-window partials). A stage
that can fold batch lines from samples (`BatchStage`) gets them through a `BatchLane` when nobody
wants the batch events themselves: over half of all lines then never become events.
"""

from __future__ import annotations

import heapq
import math
import os
import pickle
import signal
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from multiprocessing import get_context
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from collector.events import BATCH_KINDS, PREFILL_BATCH, Event
from collector.files import TelemetryFile, settled
from collector.parse import (
    OUT_OF_LINE_SECONDS,
    ParseStats,
    StampsInLine,
    file_events,
    is_log_stream,
    merge_placed,
    note_clock,
    placed,
    stream_clock,
    stream_repeats,
    stream_zones,
    streams_of,
)
from collector.sglang.batch import BatchSample, BatchSampler
from collector.sglang.log_clock import ZoneReading
from collector.state.node_windows import BATCH_PICKS, PREFILL_BATCH_PICKS

BATCH = 2048
# Events pulled from a stream at a time (`_in_chunks`).
STREAM_CHUNK = 512
_T = TypeVar("_T")
# Below this much input the worker processes cost more than they save.
PARALLEL_MIN_BYTES = 48 << 20

Wanted = Callable[[Event], bool]
# An event as a worker ships it, with its stream's place (`merge_placed`) last.
Row = tuple[str, str, float | None, str, dict[str, Any], dict[str, int], int]
StreamKey = tuple[str, str]  # (node, file kind)
# Each log stream's zone (`parse.stream_zones`).
Zones = Mapping[StreamKey, ZoneReading]


class Stage(Protocol):
    """Sees one stream's events in order; returns events to emit before each one (usually
    none: an empty sequence, which callers test before iterating)."""

    def observe(self, event: Event) -> Sequence[Event]: ...

    def flush(self) -> Sequence[Event]: ...


StageFactory = Callable[[StreamKey], Stage | None]
ObserveBatch = Callable[[str, str, float, str, BatchSample, int | None], Sequence[Event]]


@runtime_checkable
class BatchStage(Stage, Protocol):
    """A stage that takes a batch line as (kind, node, time, source, sample of `BATCH_PICKS`,
    of `PREFILL_BATCH_PICKS` for a prefill line, DP rank) in place of its event, with the same
    effect."""

    def observe_batch(
        self,
        kind: str,
        node: str,
        time: float,
        source: str,
        sample: BatchSample,
        rank: int | None = None,
    ) -> Sequence[Event]: ...


class ChainedStages:
    """Several stages over one stream: each sees every event, and what they ship before it is
    shipped in the order of the stages."""

    def __init__(self, stages: Iterable[Stage]) -> None:
        self.stages = tuple(stages)
        self._observers = tuple(stage.observe for stage in self.stages)
        # Each stage's `observe_batch` when every stage has one (`BatchStage`), else empty.
        observers = [s.observe_batch for s in self.stages if isinstance(s, BatchStage)]
        self.batch_observers = tuple(observers) if len(observers) == len(self.stages) else ()

    def observe(self, event: Event) -> Sequence[Event]:
        out: Sequence[Event] = ()
        for observe in self._observers:
            shipped = observe(event)
            if shipped:
                out = shipped if not out else [*out, *shipped]
        return out

    def flush(self) -> list[Event]:
        out: list[Event] = []
        for stage in self.stages:
            out += stage.flush()
        return out

    def observe_batch(
        self,
        kind: str,
        node: str,
        time: float,
        source: str,
        sample: BatchSample,
        rank: int | None = None,
    ) -> Sequence[Event]:
        """For chains of `BatchStage`s only (`batch_observers` not empty)."""
        out: Sequence[Event] = ()
        for observe_batch in self.batch_observers:
            shipped = observe_batch(kind, node, time, source, sample, rank)
            if shipped:
                out = shipped if not out else [*out, *shipped]
        return out


def batch_observer(stage: Stage | None, wanted: Wanted) -> ObserveBatch | None:
    """The stage's `observe_batch`, when batch lines may skip being events: every stage takes
    samples, and the consumer does not want the batch events themselves."""
    if not isinstance(wanted, KindFilter) or wanted.kinds & BATCH_KINDS:
        return None
    if isinstance(stage, ChainedStages):
        return stage.observe_batch if stage.batch_observers else None
    return stage.observe_batch if isinstance(stage, BatchStage) else None


class BatchLane:
    """Batch lines read straight into a stage's fold (`LineParser` hands them over): a learnt
    shape's match and three conversions in place of an event, its fields and the stage's generic
    path. What the stage ships goes to `outbox`, which the stream empties before its next event.
    A line no learnt shape fits is declined and becomes an event as usual. `last_time`: the
    latest batch line's time, part of the stream's clock (`StampsInLine`)."""

    __slots__ = ("node", "observe", "outbox", "_sample", "_sample_prefill", "last_time", "order")

    def __init__(
        self,
        node: str,
        observe: ObserveBatch,
        outbox: list[Event],
        order: StampsInLine | None = None,
    ) -> None:
        self.node = node
        self.observe = observe
        self.outbox = outbox
        self._sample = BatchSampler(BATCH_PICKS)
        self._sample_prefill = BatchSampler(PREFILL_BATCH_PICKS)
        self.last_time = -math.inf
        # The stream's order: a line it holds on a zone's change comes as an event instead.
        self.order = order

    def __call__(
        self, kind: str, time: float, source: str, line: str, offset: int, ranks: dict[str, int]
    ) -> bool:
        order = self.order
        if (
            order is not None
            and (
                order.zone_held is not None
                or time > self.last_time + OUT_OF_LINE_SECONDS
                or time < self.last_time - OUT_OF_LINE_SECONDS
            )
            and order.holds(time, self.last_time)
        ):
            return False
        sample = (self._sample_prefill if kind == PREFILL_BATCH else self._sample)(line, offset)
        if sample is None:
            return False
        if time > self.last_time:
            self.last_time = time
        shipped = self.observe(kind, self.node, time, source, sample, ranks.get("dp"))
        if shipped:
            self.outbox.extend(shipped)
        return True


@dataclass(frozen=True)
class KindFilter:
    """The events a consumer wants: by kind, and for metrics by canonical signal."""

    kinds: frozenset[str]
    # Metric samples kept: those with one of these canonical signals; None keeps every sample
    # that has a canonical signal (samples no signal names are read by no detector).
    metric_signals: frozenset[str] | None = None

    def __call__(self, event: Event) -> bool:
        if event.kind not in self.kinds:
            return False
        if event.kind == "metric":
            return self.keeps_metric(event.fields.get("signal"))
        return True

    def keeps_metric(self, signal: str | None) -> bool:
        """Whether a metric sample with this signal is wanted (asked before it is built)."""
        if "metric" not in self.kinds or signal is None:
            return False
        return self.metric_signals is None or signal in self.metric_signals


def _stream(
    key: StreamKey,
    files: list[TelemetryFile],
    stats: ParseStats,
    wanted: Wanted,
    stage_factory: StageFactory | None,
    reading: ZoneReading | None = None,
) -> Iterator[Event]:
    stage = stage_factory(key) if stage_factory is not None else None
    observe = stage.observe if stage is not None else None
    observe_batch = batch_observer(stage, wanted)
    outbox: list[Event] = []
    files = settled(files)
    clock = stream_clock(key, files, reading)
    order = StampsInLine(stats, note_span=is_log_stream(key[1]), zone_clock=clock)
    lane = BatchLane(key[0], observe_batch, outbox, order) if observe_batch is not None else None
    # Unwanted samples of a `.prom` file are never built, unless a stage reads every event.
    keep_metric = (
        wanted.keeps_metric if isinstance(wanted, KindFilter) and observe is None else None
    )
    repeats = stream_repeats(key, files)

    def lane_clock() -> float:
        return lane.last_time if lane is not None else -math.inf

    def hand_on(events: list[Event]) -> Iterator[Event]:
        for event in events:
            if observe is not None:
                shipped = observe(event)
                if shipped:
                    yield from shipped
            if wanted(event):
                yield event

    def released_with_outbox() -> Iterator[Event]:
        """What the lane's lines shipped and the events their clock released from a hold, in
        time order (ties: as shipped). The lane may have moved the stages past a held line,
        and what they shipped then (a side whose wait ended before that line) must not follow
        the line into the merge, which takes each stream as ordered. Blind review 31c: a quiet
        prefill's side reached the ledger after its request was judged, "LATE LINES"."""
        released = list(hand_on(order.tick(lane_clock())))
        # Stamped by each stage its own way: a window's role hint at the line that gave it, a
        # side at the end of its wait, which may come earlier.
        shipped = sorted(outbox, key=_time_or_first)
        outbox.clear()
        if released:
            yield from heapq.merge(shipped, released, key=_time_or_first)
        else:
            yield from shipped

    for tf in files:
        for event in file_events(
            tf, stats, batch_lane=lane, keep_metric=keep_metric, clock=clock, repeats=repeats
        ):
            if outbox:  # what the lane's lines shipped comes before this event
                yield from released_with_outbox()
            # `hand_on`, spelt out: this runs for every event.
            for taken in order.take(event, lane.last_time if lane is not None else -math.inf):
                if observe is not None:
                    shipped = observe(taken)
                    if shipped:
                        yield from shipped
                if wanted(taken):
                    yield taken
        if outbox:
            yield from released_with_outbox()
    yield from hand_on(order.close())
    note_clock(key, clock, stats)
    if stage is not None:
        yield from stage.flush()


def _time_or_first(event: Event) -> float:
    return event.time if event.time is not None else -math.inf


def _merged(
    streams: dict[StreamKey, list[TelemetryFile]],
    stats: ParseStats,
    wanted: Wanted,
    stage_factory: StageFactory | None,
    zones: Zones,
) -> Iterator[Event]:
    places = range(len(streams))
    for _, event in _merged_placed(streams, places, stats, wanted, stage_factory, zones):
        yield event


def _merged_placed(
    streams: dict[StreamKey, list[TelemetryFile]],
    places: Iterable[int],
    stats: ParseStats,
    wanted: Wanted,
    stage_factory: StageFactory | None,
    zones: Zones,
) -> Iterator[tuple[int, Event]]:
    """(place, event) of `streams`, each at its place among the run's streams (increasing)."""
    return merge_placed(
        placed(
            place,
            _in_chunks(
                _stream(key, files, stats, wanted, stage_factory, zones.get(key)), STREAM_CHUNK
            ),
        )
        for place, (key, files) in zip(places, streams.items(), strict=True)
    )


def _in_chunks(events: Iterable[_T], size: int) -> Iterator[_T]:
    """`events` in their order, pulled from the stream `size` at a time.

    Why: the merge takes one event at a time from whichever stream is earliest, so without this
    a worker switches between its streams' parsers every few events; parsing a few hundred
    events' worth of lines in one go before switching costs 4 to 7% less CPU (a worker's share
    of 1.37 GB: 7.2 to 6.85 s; forensics end to end 3.8% less CPU, 2.4% less time). Memory
    stays bounded: `size` events per stream.
    """
    iterator = iter(events)
    while chunk := list(islice(iterator, size)):
        yield from chunk


def _size(files: list[TelemetryFile]) -> int:
    total = 0
    for tf in files:
        try:
            total += tf.path.stat().st_size
        except OSError:
            continue
    return total


def _share(
    streams: dict[StreamKey, list[TelemetryFile]], workers: int
) -> list[dict[StreamKey, list[TelemetryFile]]]:
    """Streams shared out by size, largest first to the least loaded worker; each share in the
    streams' own order (their places, `merge_placed`)."""
    target_of: dict[StreamKey, int] = {}
    load = [0] * workers
    for key, files in sorted(streams.items(), key=lambda kv: -_size(kv[1])):
        target = target_of[key] = load.index(min(load))
        load[target] += _size(files)
    shares: list[dict[StreamKey, list[TelemetryFile]]] = [{} for _ in range(workers)]
    for key, files in streams.items():
        shares[target_of[key]][key] = files
    return [share for share in shares if share]


def _worker_process(
    conn: Connection,
    share: dict[StreamKey, list[TelemetryFile]],
    places: list[int],
    wanted: Wanted,
    stage_factory: StageFactory | None,
    zones: Zones,
    inherited: tuple[Connection, ...],
) -> None:
    """A parsing worker's process: it closes the pipes' read ends it inherited (holding one,
    it would never learn that the judge is gone: its writes would block for ever), leaves
    Ctrl-C to the judge, and dies at SIGTERM (the judge's `terminate`)."""
    for end in inherited:
        end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _worker(conn, share, places, wanted, stage_factory, zones)


def _worker(
    conn: Connection,
    share: dict[StreamKey, list[TelemetryFile]],
    places: list[int],
    wanted: Wanted,
    stage_factory: StageFactory | None,
    zones: Zones,
) -> None:
    """Runs in a forked process: stream the share's wanted events down the pipe, then stats."""
    stats = ParseStats()
    sent = [0]

    def progressed(n: int) -> None:
        sent[0] += n

    stats.progress = progressed
    batch: list[Row] = []
    try:
        for place, event in _merged_placed(share, places, stats, wanted, stage_factory, zones):
            batch.append(
                (event.kind, event.node, event.time, event.source, event.fields, event.ranks, place)
            )
            if len(batch) >= BATCH:
                conn.send_bytes(pickle.dumps(("events", batch, sent[0]), pickle.HIGHEST_PROTOCOL))
                sent[0] = 0
                batch = []
        stats.progress = None
        conn.send_bytes(pickle.dumps(("events", batch, sent[0]), pickle.HIGHEST_PROTOCOL))
        conn.send_bytes(pickle.dumps(("done", stats, 0), pickle.HIGHEST_PROTOCOL))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the judge says it
        return
    except BaseException as exc:  # report, never hang the judge
        conn.send_bytes(pickle.dumps(("error", repr(exc), 0), pickle.HIGHEST_PROTOCOL))
        raise
    finally:
        conn.close()


class WorkerFailed(RuntimeError):
    pass


def _receive(
    conn: Connection, stats: ParseStats, progress: Callable[[int], None] | None
) -> Iterator[tuple[int, Event]]:
    while True:
        try:
            kind, payload, read = pickle.loads(conn.recv_bytes())
        except EOFError:
            raise WorkerFailed("a parsing worker ended without finishing") from None
        if progress is not None and read:
            progress(read)
        if kind == "events":
            for k, node, when, source, fields, ranks, place in payload:
                yield place, Event(k, node, when, source, fields, ranks)
        elif kind == "done":
            stats.merge(payload)
            return
        else:
            raise WorkerFailed(f"a parsing worker failed: {payload}")


def parallel_events_in_time_order(
    paths: Iterable[str | Path],
    stats: ParseStats,
    wanted: Wanted,
    *,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    stage_factory: StageFactory | None = None,
    log_date: float | None = None,
) -> Iterator[Event]:
    """Like `parse.events_in_time_order`, restricted to `wanted` events (plus what the stages
    emit), parsed on every core. Unwanted events are still read and counted in `stats`.
    `log_date`: see `parse.streams_of`."""
    streams = streams_of(paths, stats.dropped, log_date, stats.dropped_files)
    # Every stream's zone before any is read: a node's may be set by the others' (forked
    # workers inherit them).
    zones = stream_zones(streams, stats)
    workers = workers or os.cpu_count() or 1
    total = sum(_size(files) for files in streams.values())
    if workers <= 1 or len(streams) <= 1 or total < PARALLEL_MIN_BYTES:
        if progress is not None:
            stats.progress = progress
        yield from _merged(streams, stats, wanted, stage_factory, zones)
        return
    context = get_context("fork")
    readers: list[Iterator[tuple[int, Event]]] = []
    inherited: list[Connection] = []  # every read end made so far: a worker closes its copies
    processes = []
    place_of = {key: place for place, key in enumerate(streams)}
    try:
        for share in _share(streams, workers):
            receive, send = context.Pipe(duplex=False)
            inherited.append(receive)
            places = [place_of[key] for key in share]
            process = context.Process(
                target=_worker_process,
                args=(send, share, places, wanted, stage_factory, zones, tuple(inherited)),
                daemon=True,
            )
            process.start()
            send.close()
            processes.append(process)
            readers.append(_receive(receive, stats, progress))
        for _, event in merge_placed(readers):
            yield event
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join()
