"""Parsing many nodes' files on every core while one process judges the merged timeline.

Forensics has two halves: parsing (independent per node) and judging (one timeline). The
streams (per node: its logs; per node and kind: its snapshots) are shared out among worker
processes; each worker merges its own streams by time, keeps only the events the judge wants,
materialises their fields and sends them down a pipe in pickled batches. The judging process
merges the workers' already-ordered outputs by time as they arrive, so parsing and judging run
at the same time. Pipes block when full: memory stays bounded whatever the input size.

A per-stream stage (`StageFactory`) may turn a node's raw events into other events inside the
worker (forensics uses it to pre-aggregate dense batch lines into per-window partials).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from collector.events import Event
from collector.files import TelemetryFile
from collector.parse import ParseStats, file_events, merge_by_time, streams_of

BATCH = 2048
# Below this much input the worker processes cost more than they save.
PARALLEL_MIN_BYTES = 48 << 20

Wanted = Callable[[Event], bool]
Row = tuple[str, str, float | None, str, dict[str, Any], dict[str, int]]
StreamKey = tuple[str, str]  # (node, file kind)


class Stage(Protocol):
    """Sees one stream's events in order; returns events to emit before each one (usually
    none: an empty sequence, which callers test before iterating)."""

    def observe(self, event: Event) -> Sequence[Event]: ...

    def flush(self) -> Sequence[Event]: ...


StageFactory = Callable[[StreamKey], Stage | None]


class ChainedStages:
    """Several stages over one stream: each sees every event, and what they ship before it is
    shipped in the order of the stages."""

    def __init__(self, stages: Iterable[Stage]) -> None:
        self.stages = tuple(stages)

    def observe(self, event: Event) -> Sequence[Event]:
        out: Sequence[Event] = ()
        for stage in self.stages:
            shipped = stage.observe(event)
            if shipped:
                out = shipped if not out else [*out, *shipped]
        return out

    def flush(self) -> list[Event]:
        out: list[Event] = []
        for stage in self.stages:
            out += stage.flush()
        return out


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
            signal = event.fields.get("signal")
            if self.metric_signals is None:
                return signal is not None
            return signal in self.metric_signals
        return True


def _stream(
    key: StreamKey,
    files: list[TelemetryFile],
    stats: ParseStats,
    wanted: Wanted,
    stage_factory: StageFactory | None,
) -> Iterator[Event]:
    stage = stage_factory(key) if stage_factory is not None else None
    observe = stage.observe if stage is not None else None
    for tf in files:
        for event in file_events(tf, stats):
            if observe is not None:
                shipped = observe(event)
                if shipped:
                    yield from shipped
            if wanted(event):
                yield event
    if stage is not None:
        yield from stage.flush()


def _merged(
    streams: dict[StreamKey, list[TelemetryFile]],
    stats: ParseStats,
    wanted: Wanted,
    stage_factory: StageFactory | None,
) -> Iterator[Event]:
    return merge_by_time(
        _stream(key, files, stats, wanted, stage_factory) for key, files in streams.items()
    )


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
    """Streams shared out by size, largest first to the least loaded worker."""
    shares: list[dict[StreamKey, list[TelemetryFile]]] = [{} for _ in range(workers)]
    load = [0] * workers
    for key, files in sorted(streams.items(), key=lambda kv: -_size(kv[1])):
        target = load.index(min(load))
        shares[target][key] = files
        load[target] += _size(files)
    return [share for share in shares if share]


def _worker(
    conn: Connection,
    share: dict[StreamKey, list[TelemetryFile]],
    wanted: Wanted,
    stage_factory: StageFactory | None,
) -> None:
    """Runs in a forked process: stream the share's wanted events down the pipe, then stats."""
    stats = ParseStats()
    sent = [0]

    def progressed(n: int) -> None:
        sent[0] += n

    stats.progress = progressed
    batch: list[Row] = []
    try:
        for event in _merged(share, stats, wanted, stage_factory):
            batch.append(
                (event.kind, event.node, event.time, event.source, event.fields, event.ranks)
            )
            if len(batch) >= BATCH:
                conn.send_bytes(pickle.dumps(("events", batch, sent[0]), pickle.HIGHEST_PROTOCOL))
                sent[0] = 0
                batch = []
        stats.progress = None
        conn.send_bytes(pickle.dumps(("events", batch, sent[0]), pickle.HIGHEST_PROTOCOL))
        conn.send_bytes(pickle.dumps(("done", stats, 0), pickle.HIGHEST_PROTOCOL))
    except BaseException as exc:  # report, never hang the judge
        conn.send_bytes(pickle.dumps(("error", repr(exc), 0), pickle.HIGHEST_PROTOCOL))
        raise
    finally:
        conn.close()


class WorkerFailed(RuntimeError):
    pass


def _receive(
    conn: Connection, stats: ParseStats, progress: Callable[[int], None] | None
) -> Iterator[Event]:
    while True:
        try:
            kind, payload, read = pickle.loads(conn.recv_bytes())
        except EOFError:
            raise WorkerFailed("a parsing worker ended without finishing") from None
        if progress is not None and read:
            progress(read)
        if kind == "events":
            for k, node, when, source, fields, ranks in payload:
                yield Event(k, node, when, source, fields, ranks)
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
) -> Iterator[Event]:
    """Like `parse.events_in_time_order`, restricted to `wanted` events (plus what the stages
    emit), parsed on every core. Unwanted events are still read and counted in `stats`."""
    streams = streams_of(paths)
    workers = workers or os.cpu_count() or 1
    total = sum(_size(files) for files in streams.values())
    if workers <= 1 or len(streams) <= 1 or total < PARALLEL_MIN_BYTES:
        if progress is not None:
            stats.progress = progress
        yield from _merged(streams, stats, wanted, stage_factory)
        return
    context = get_context("fork")
    readers: list[Iterator[Event]] = []
    processes = []
    try:
        for share in _share(streams, workers):
            receive, send = context.Pipe(duplex=False)
            process = context.Process(
                target=_worker, args=(send, share, wanted, stage_factory), daemon=True
            )
            process.start()
            send.close()
            processes.append(process)
            readers.append(_receive(receive, stats, progress))
        yield from merge_by_time(readers)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join()
