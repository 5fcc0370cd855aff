"""Counting events over many large files with every core.

Classification is independent line by line, so the work splits into line-aligned byte ranges of
plain files (and whole gzip files, which cannot be entered mid-stream) handed to worker
processes; each returns its counts and the counts are summed.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from collector.files import TelemetryFile, is_compressed, line_aligned_ranges
from collector.line_order import is_plain_utf8
from collector.parse import ParseStats, file_events, is_log_stream, streams_of
from collector.repeated_lines import RepeatedLines

CHUNK_BYTES = 16 << 20

# One file, or a line-aligned range of it; or a node's whole log stream, read in order so that
# what its files repeat of each other is counted once (`collector.repeated_lines`).
Task = tuple[list[TelemetryFile], tuple[int, int] | None]


def plan(
    paths: Iterable[str | Path],
    chunk_bytes: int = CHUNK_BYTES,
    skipped: Counter[str] | None = None,
) -> list[Task]:
    tasks: list[Task] = []
    for key, files in streams_of(paths, skipped).items():
        if is_log_stream(key[1]) and len(files) > 1:
            tasks.append((files, None))
            continue
        for tf in files:
            if tf.kind != "log" or not is_plain_utf8(tf.path) or tf.pieces or tf.cloud_export:
                tasks.append(([tf], None))
                continue
            for byte_range in line_aligned_ranges(tf.path, chunk_bytes):
                tasks.append(([tf], byte_range))
    # Largest first, so a big gzip file does not start last and leave a core idle.
    tasks.sort(key=lambda t: -_task_size(t))
    return tasks


def _task_size(task: Task) -> int:
    files, byte_range = task
    if byte_range is not None:
        return byte_range[1] - byte_range[0]
    total = 0
    for tf in files:
        try:
            total += os.stat(tf.path).st_size * (8 if is_compressed(tf.path) else 1)
        except OSError:
            continue
    return total


def _count(task: Task) -> ParseStats:
    files, byte_range = task
    stats = ParseStats()
    repeats = RepeatedLines(files) if len(files) > 1 else None
    for tf in files:
        for _ in file_events(tf, stats, byte_range, repeats=repeats):
            pass
    return stats


def count_events(
    paths: Iterable[str | Path], workers: int | None = None, chunk_bytes: int = CHUNK_BYTES
) -> ParseStats:
    """ParseStats over all files, computed by `workers` processes (default: all cores)."""
    total = ParseStats()
    tasks = plan(paths, chunk_bytes, total.dropped)
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            total.merge(_count(task))
        return total
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
        for part in pool.map(_count, tasks):
            total.merge(part)
    return total
