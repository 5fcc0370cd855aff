"""Log files written newest line first, read oldest line first.

Loki's `logcli query` prints newest first unless told `--forward`, and Grafana's "Download logs"
saves lines as the panel shows them, newest on top. Read as they lie, such a file runs backwards
in time: every request ends before it begins, the stream's clock stands at the last line's time
from the first line on, and the run reported "no exposed responses" over two seconds of logs.

A file is newest first when its first timed lines run back in time over at least two seconds
(read on past a busy engine's second, up to 16 MiB) and, when its end can be read directly (not
gzip), its end agrees: its last timed lines run back in time too, or (one busy second) are older
than its first. A block of older lines at the start of a file that otherwise runs forward does
not turn it round.

It is then read from its end: its lines, checked and decoded as any file's are
(`files.read_line_blocks`), go block by block to a temporary file with each block's lines
reversed, and are read back last first. Two exports appended to one another are two newest-first
runs: the file is cut where its time jumps forward, and the runs are read oldest first. Memory
holds one block; the disk, the file once more. Each line keeps its number in the file.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    pass

# The start of a file is read in growing pieces until its timed lines span this much.
_SNIFF_BYTES: Final = (256 << 10, 1 << 20, 4 << 20, 16 << 20)
_TAIL_BYTES: Final = 256 << 10
_MIN_TIMED: Final = 10
# Newest first: the first timed line is later than the last by this much, and at most this
# share of consecutive timed lines go forward (ranks and clocks print a little out of order).
_MIN_SPAN_SECONDS: Final = 2.0
_MAX_FORWARD_SHARE: Final = 0.1
# In a newest-first file, a step forward in time this long starts another run (an export
# appended to another).
_RUN_GAP_SECONDS: Final = 60.0

LineTime = Callable[[str], float | None]


def line_time(line: str) -> float | None:
    """The time a log line carries (SGLang's prefix, behind a runtime's or a shipper's)."""
    from collector.sglang.envelope import cached_head, peel
    from collector.sglang.runtime_wrappers import RuntimeLines

    hit = cached_head(line)
    if hit is not None:
        return hit[0]
    inner = RuntimeLines().unwrap(line, None)
    return peel(inner if isinstance(inner, str) else line).time


def runs_backwards(lines: list[str], time_of: LineTime = line_time) -> bool:
    """Whether these lines of a file (whole lines) run back in time: newest first. Steps longer
    than a run's gap (where one export was appended to another) are not counted."""
    times = [when for line in lines if (when := time_of(line)) is not None]
    steps = _steps(times)
    back = -sum(step for step in steps if step < 0)
    forward = sum(step > 0 for step in steps)
    return (
        len(times) >= _MIN_TIMED
        and back >= _MIN_SPAN_SECONDS
        and forward <= _MAX_FORWARD_SHARE * len(steps)
    )


def _steps(times: list[float]) -> list[float]:
    return [
        later - earlier
        for earlier, later in zip(times, times[1:], strict=False)
        if abs(later - earlier) <= _RUN_GAP_SECONDS
    ]


def _moves(times: list[float]) -> bool:
    """Whether these times say which way the file runs: enough of them, moving long enough."""
    return len(times) >= _MIN_TIMED and sum(map(abs, _steps(times))) >= _MIN_SPAN_SECONDS


def newest_first(path: Path, time_of: LineTime = line_time) -> bool:
    """Whether a log file was written newest line first (see the module docstring)."""
    lines: list[str] = []
    for size in _SNIFF_BYTES:
        lines = head_lines(path, size)
        if _moves([when for line in lines if (when := time_of(line)) is not None]):
            break
        if len(lines) < size // 4096 and size > _SNIFF_BYTES[0]:
            break  # the whole file was read
    if not runs_backwards(lines, time_of):
        return False
    # The end must agree: running back in time itself (newest-first exports appended to one
    # another), or, when it is one busy second, older than the start.
    tail_lines = _tail_lines(path)
    tail = [when for line in tail_lines if (when := time_of(line)) is not None]
    if _moves(tail):
        return runs_backwards(tail_lines, time_of)
    first = next(when for line in lines if (when := time_of(line)) is not None)
    return not tail or tail[-1] < first


def head_lines(path: Path, size: int = _SNIFF_BYTES[0]) -> list[str]:
    """The whole lines in the first `size` bytes of a file (gzip read through)."""
    try:
        with open(path, "rb") as raw:
            head = raw.read(size)
            if head[:2] == b"\x1f\x8b":
                head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, size)
    except (OSError, zlib.error):
        return []
    lines = head.decode("utf-8", "replace").split("\n")
    return lines[:-1] if len(lines) > 1 else lines


def _tail_lines(path: Path) -> list[str]:
    """The whole lines in the last `_TAIL_BYTES` of a plain file; none of a gzip file (its end
    is only reached through all of it)."""
    try:
        with open(path, "rb") as raw:
            if raw.read(2) == b"\x1f\x8b":
                return []
            size = os.fstat(raw.fileno()).st_size
            raw.seek(max(size - _TAIL_BYTES, 0))
            tail = raw.read(_TAIL_BYTES)
    except OSError:
        return []
    lines = tail.decode("utf-8", "replace").split("\n")
    return lines[1:] if size > _TAIL_BYTES else lines


def oldest_first(
    blocks: Iterator[tuple[int, list[str]]], time_of: LineTime = line_time
) -> Iterator[tuple[int, list[str]]]:
    """The lines of `blocks` (a newest-first file read as it lies) oldest first, each with its
    own number (one line per block: numbers run down within a run)."""
    # (first line, lines, offset, bytes, run) per piece of a block within one run.
    spans: list[tuple[int, int, int, int, int]] = []
    oldest: list[float] = [float("inf")]  # per run
    last: float | None = None
    with tempfile.TemporaryFile(prefix="kvwatch-newest-first-") as spill:

        def keep(first: int, lines: list[str]) -> None:
            data = "\n".join(reversed(lines)).encode("utf-8", "surrogatepass")
            spans.append((first, len(lines), spill.tell(), len(data), len(oldest) - 1))
            spill.write(data)

        for first, lines in blocks:
            start = 0
            for index, line in enumerate(lines):
                when = time_of(line)
                if when is None:
                    continue
                if last is not None and when - last > _RUN_GAP_SECONDS:
                    if index > start:
                        keep(first + start, lines[start:index])
                    start = index
                    oldest.append(float("inf"))
                last = when
                oldest[-1] = min(oldest[-1], when)
            if start < len(lines):
                keep(first + start, lines[start:])
        order = sorted(range(len(oldest)), key=lambda run: (oldest[run], run))
        by_run: dict[int, list[tuple[int, int, int, int, int]]] = {}
        for span in spans:
            by_run.setdefault(span[4], []).append(span)
        for run in order:
            for first, count, offset, length, _ in reversed(by_run.get(run, [])):
                spill.seek(offset)
                lines = spill.read(length).decode("utf-8", "surrogatepass").split("\n")
                if len(lines) != count:  # cannot happen: lines hold no newline
                    lines = (lines + [""] * count)[:count]
                top = first + count - 1
                for index, line in enumerate(lines):
                    yield top - index, [line]
