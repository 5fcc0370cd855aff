"""What the benchmarks share: timing a command (wall time, peak memory, CPU) and printing the table.

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
from typing import NamedTuple


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


class Run(NamedTuple):
    """One timed run of a command."""

    wall: float  # seconds
    peak_kib: int  # peak RSS of the command's largest process, workers included
    cpu: float  # user + system seconds of the command and every process it waited for


def timed(cmd: list[str]) -> Run:
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
    return Run(wall, usage.ru_maxrss, usage.ru_utime + usage.ru_stime)


class Comparison(NamedTuple):
    """Medians of interleaved runs of a baseline and a command."""

    baseline_wall: float
    wall: float
    peak_kib: int  # the largest of the command's runs
    cpu: float  # the command's CPU seconds (median)


def interleaved(baseline: list[str], command: list[str], runs: int) -> Comparison:
    """Median seconds of `baseline` and of `command`, the command's peak RSS and CPU seconds.

    The two run alternately, so that machine drift hits both alike. The baseline runs once
    untimed first: it then reads the files from the page cache like every later run (a cold
    first read would flatter the ratio several times over).
    """
    timed(baseline)
    baseline_times: list[float] = []
    measured: list[Run] = []
    for _ in range(runs):
        baseline_times.append(timed(baseline).wall)
        measured.append(timed(command))
    return Comparison(
        statistics.median(baseline_times),
        statistics.median(run.wall for run in measured),
        max(run.peak_kib for run in measured),
        statistics.median(run.cpu for run in measured),
    )


# (header, row key, width, decimals): the header is right-aligned over its column.
Column = tuple[str, str, int, int]


def print_table(columns: Sequence[Column], rows: Sequence[Mapping[str, float | str]]) -> None:
    print(" ".join(f"{header:>{width}}" for header, _, width, _ in columns))
    for row in rows:
        print(" ".join(_cell(row[key], width, decimals) for _, key, width, decimals in columns))


def _cell(value: float | str, width: int, decimals: int) -> str:
    return f"{value:>{width}}" if isinstance(value, str) else f"{value:{width}.{decimals}f}"
