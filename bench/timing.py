"""What the benchmarks share: timing a command (wall time, peak memory) and printing the table.

Imported by the bench scripts as a sibling module (`python bench/<name>.py` puts this folder on
the path).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path


def kvwatch_command() -> str:
    """This environment's `kvwatch` (the virtualenv's when it is not on PATH)."""
    return shutil.which("kvwatch") or str(Path(sys.executable).parent / "kvwatch")


@contextmanager
def work_folder(keep: Path | None, prefix: str) -> Iterator[Path]:
    """`keep` when given (created if need be, left in place), else a temporary folder that is
    removed afterwards."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def timed(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS in KiB of the command's largest process, workers included)."""
    start = time.perf_counter()
    # Output goes to a pipe, not /dev/null: GNU grep stops at the first match when it sees that
    # its output is /dev/null, which would make the baseline meaningless.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed with {proc.returncode}")
    return wall, usage.ru_maxrss


def interleaved(baseline: list[str], command: list[str], runs: int) -> tuple[float, float, int]:
    """Median seconds of `baseline` and of `command`, and the command's peak RSS (KiB).

    The two run alternately, so that machine drift hits both alike. The baseline runs once
    untimed first: it then reads the files from the page cache like every later run (a cold
    first read would flatter the ratio several times over).
    """
    timed(baseline)
    baseline_times, times, peaks = [], [], []
    for _ in range(runs):
        baseline_times.append(timed(baseline)[0])
        wall, rss = timed(command)
        times.append(wall)
        peaks.append(rss)
    return statistics.median(baseline_times), statistics.median(times), max(peaks)


# (header, row key, width, decimals): the header is right-aligned over its column.
Column = tuple[str, str, int, int]


def print_table(columns: Sequence[Column], rows: Sequence[Mapping[str, float | str]]) -> None:
    print(" ".join(f"{header:>{width}}" for header, _, width, _ in columns))
    for row in rows:
        print(" ".join(_cell(row[key], width, decimals) for _, key, width, decimals in columns))


def _cell(value: float | str, width: int, decimals: int) -> str:
    return f"{value:>{width}}" if isinstance(value, str) else f"{value:{width}.{decimals}f}"
