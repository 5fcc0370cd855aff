"""Parsing many nodes' files on every core, then merging them into one timeline.

Forensics has two halves: parsing (independent per node, so it can use every core) and judging
(one timeline, so one process). Workers parse a node's stream (its logs, or its snapshots), keep
only the events the judge wants, materialise their fields, and spill them to a temporary file
in pickled batches; the main process then merges the spilled streams by time. Memory stays
bounded: a worker holds one batch, the merge one batch per stream.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from collector.events import Event
from collector.files import TelemetryFile
from collector.parse import ParseStats, file_events, merge_by_time, stream_events, streams_of

BATCH = 4096
# Below this much input the process pool costs more than it saves.
PARALLEL_MIN_BYTES = 48 << 20

Wanted = Callable[[Event], bool]  # must pickle: it travels to the worker processes
Row = tuple[str, str, float | None, str, dict[str, Any], dict[str, int]]


@dataclass(frozen=True)
class KindFilter:
    """The events a consumer wants: by kind, and for metrics by canonical signal.

    A plain, picklable object (not a closure) because it travels to the worker processes.
    """

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


@dataclass(frozen=True)
class _Task:
    key: tuple[str, str]
    files: list[TelemetryFile]
    spill: Path


def _spill_stream(task: _Task, wanted: Wanted) -> tuple[ParseStats, int]:
    """Worker: parse one stream, write the wanted events as pickled batches. Returns stats."""
    stats = ParseStats()
    batch: list[Row] = []
    written = 0
    with open(task.spill, "wb") as out:
        for tf in task.files:
            for event in file_events(tf, stats):
                if not wanted(event):
                    continue
                batch.append(
                    (event.kind, event.node, event.time, event.source, event.fields, event.ranks)
                )
                if len(batch) >= BATCH:
                    pickle.dump(batch, out, protocol=pickle.HIGHEST_PROTOCOL)
                    written += len(batch)
                    batch = []
        if batch:
            pickle.dump(batch, out, protocol=pickle.HIGHEST_PROTOCOL)
            written += len(batch)
    stats.progress = None
    return stats, written


def _read_spill(path: Path) -> Iterator[Event]:
    with open(path, "rb") as handle:
        while True:
            try:
                batch: list[Row] = pickle.load(handle)
            except EOFError:
                return
            for kind, node, when, source, fields, ranks in batch:
                yield Event(kind, node, when, source, fields, ranks)


def _input_bytes(streams: dict[tuple[str, str], list[TelemetryFile]]) -> int:
    total = 0
    for files in streams.values():
        for tf in files:
            try:
                total += tf.path.stat().st_size
            except OSError:
                continue
    return total


def parallel_events_in_time_order(
    paths: Iterable[str | Path],
    stats: ParseStats,
    wanted: Wanted,
    *,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[Event]:
    """Like `parse.events_in_time_order`, restricted to `wanted` events, parsed on all cores.

    Unwanted events are still read and counted in `stats`; they just never leave the worker.
    """
    streams = streams_of(paths)
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or _input_bytes(streams) < PARALLEL_MIN_BYTES:
        yield from _serial(streams, stats, wanted)
        return
    with tempfile.TemporaryDirectory(prefix="kvwatch-spill-") as tmp:
        tasks = [
            _Task(key, files, Path(tmp) / f"{i}.pkl")
            for i, (key, files) in enumerate(streams.items())
        ]
        # Largest streams first so that one big node does not start last.
        order = sorted(tasks, key=lambda t: -sum(_size(f) for f in t.files))
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
            futures = [pool.submit(_spill_stream, task, wanted) for task in order]
            for task, future in zip(order, futures, strict=True):
                part, _ = future.result()
                stats.merge(part)
                if progress is not None:
                    progress(sum(_size(f) for f in task.files))
        yield from merge_by_time(_read_spill(task.spill) for task in tasks)


def _size(tf: TelemetryFile) -> int:
    try:
        return tf.path.stat().st_size
    except OSError:
        return 0


def _serial(
    streams: dict[tuple[str, str], list[TelemetryFile]], stats: ParseStats, wanted: Wanted
) -> Iterator[Event]:
    return merge_by_time(
        (e for e in stream_events(files, stats) if wanted(e)) for files in streams.values()
    )
