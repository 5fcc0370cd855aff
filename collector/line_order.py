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

It is then read from its end, and nothing of it is written anywhere (its lines hold prompts):
a plain file by line-aligned pieces, last piece first, each read and checked as any file is
(`files.read_line_blocks`); a gzip file, readable only from its start, turned round in memory
up to `MAX_GZIP_TEXT`, past which it is a counted drop (decompress it to read it). Two exports
appended to one another are two newest-first runs: the file is cut where its time jumps
forward, and the runs are read oldest first. Each line keeps its number in the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from collector.compression import (
    MAGIC_BYTES,
    compression_of,
    decompressed_head,
    stream_blocks,
    unreadable_compression,
)
from collector.text_encoding import head_as_utf8, wide_encoding

if TYPE_CHECKING:
    from collector.files import ReadStats

# The start of a file is read in growing pieces until its timed lines span this much.
_SNIFF_BYTES: Final = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)
# Timed lines enough to tell the order, once they move.
_ENOUGH_TIMED: Final = 64
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
    if not line or line.isspace():  # a file of blank lines costs no more than its reading
        return None
    from collector.sglang.envelope import cached_head, peel
    from collector.sglang.runtime_wrappers import RuntimeLines

    hit = cached_head(line)
    if hit is not None:
        return hit[0]
    inner = RuntimeLines().unwrap(line, None)
    return peel(inner if isinstance(inner, str) else line).time


def first_line_time(lines: Iterable[str]) -> float | None:
    """The time of the first of `lines` that carries one."""
    for line in lines:
        when = line_time(line)
        if when is not None:
            return when
    return None


def runs_backwards(lines: list[str], time_of: LineTime = line_time) -> bool:
    """Whether these lines of a file (whole lines) run back in time: newest first. Steps longer
    than a run's gap (where one export was appended to another) are not counted."""
    return _backwards([when for line in lines if (when := time_of(line)) is not None])


def _backwards(times: list[float]) -> bool:
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


def _leading_times(lines: Iterable[str], time_of: LineTime) -> list[float]:
    """The times of these lines, in order, up to the first `_ENOUGH_TIMED` once they move: what
    the order is judged on (a file of thousands of lines is not read whole to tell it)."""
    times: list[float] = []
    moved = 0.0
    for line in filter(None, lines):
        when = time_of(line)
        if when is None:
            continue
        if times and abs(when - times[-1]) <= _RUN_GAP_SECONDS:
            moved += abs(when - times[-1])
        times.append(when)
        if len(times) >= _ENOUGH_TIMED and moved >= _MIN_SPAN_SECONDS:
            break
    return times


def newest_first(path: Path, time_of: LineTime = line_time) -> bool:
    """Whether a log file was written newest line first (see the module docstring)."""
    times: list[float] = []
    for size in _SNIFF_BYTES:
        lines, whole = _head(path, size)
        times = _leading_times(lines, time_of)
        if _moves(times) or whole:
            break
    if not _backwards(times):
        return False
    # The end must agree: running back in time itself (newest-first exports appended to one
    # another), or, when it is one busy second, older than the start.
    tail = _leading_times(reversed(tail_lines(path)), time_of)[::-1]
    if _moves(tail):
        return _backwards(tail)
    return not tail or tail[-1] < times[0]


def head_lines(path: Path, size: int = _SNIFF_BYTES[0]) -> list[str]:
    """The whole lines in the first `size` bytes of a file (gzip read through)."""
    return _head(path, size)[0]


def head_bytes(path: Path, size: int) -> tuple[bytes, bool] | None:
    """The first `size` bytes of a file (of its text, when gzipped; as UTF-8, when UTF-16), and
    whether they are all of it; None when it cannot be read."""
    try:
        with open(path, "rb") as raw:
            head = raw.read(size)
            whole = len(head) < size
            text = decompressed_head(head, size)
            if text is not None:
                head, whole = text, whole and len(text) < size
    except OSError:
        return None
    return head_as_utf8(head), whole


def _head(path: Path, size: int) -> tuple[list[str], bool]:
    """`head_lines`, and whether they are the whole file."""
    read = head_bytes(path, size)
    if read is None:
        return [], True
    lines = read[0].decode("utf-8", "replace").split("\n")
    return (lines[:-1] if len(lines) > 1 else lines), read[1]


def tail_bytes(path: Path, size: int) -> tuple[bytes, bool] | None:
    """The last `size` bytes of a plain file, and whether they are cut (the file is longer);
    None for a compressed file (its end is only reached through all of it), a UTF-16/32 one
    (its end read alone is no whole characters), or one that cannot be read."""
    try:
        with open(path, "rb") as raw:
            start = raw.read(4096)
            if (
                compression_of(start) is not None
                or unreadable_compression(start)
                or wide_encoding(start) is not None
            ):
                return None
            length = os.fstat(raw.fileno()).st_size
            raw.seek(max(length - size, 0))
            return raw.read(size), length > size
    except OSError:
        return None


def tail_lines(path: Path) -> list[str]:
    """The whole lines in the last `_TAIL_BYTES` of a plain file (`tail_bytes`)."""
    read = tail_bytes(path, _TAIL_BYTES)
    if read is None:
        return []
    tail, cut = read
    lines = tail.decode("utf-8", "replace").split("\n")
    return lines[1:] if cut else lines


# A gzip file's end is reached by reading through it: done for files up to this size only.
MAX_GZIP_THROUGH: Final = 64 << 20


def end_lines(path: Path) -> list[str]:
    """`tail_lines`, and of a compressed file up to `MAX_GZIP_THROUGH` the whole lines in the
    last `_TAIL_BYTES` of its readable text, read through at the decompressor's speed (none of
    a larger one)."""
    try:
        with open(path, "rb") as raw:
            compression = compression_of(raw.read(MAGIC_BYTES))
            if compression is None:
                return tail_lines(path)
            if os.fstat(raw.fileno()).st_size > MAX_GZIP_THROUGH:
                return []
            raw.seek(0)
            tail = b""
            for block in stream_blocks(raw, compression, 1 << 20):
                if isinstance(block, str):  # cut or damaged: its last readable lines
                    break
                tail = (tail + block)[-_TAIL_BYTES:]
    except OSError:
        return []
    if wide_encoding(tail[:4096]) is not None:
        return []
    lines = tail.decode("utf-8", "replace").split("\n")
    return lines[1:]


class _Runs:
    """Where a newest-first file's runs begin (line numbers) and each run's oldest time: a step
    forward in time longer than `_RUN_GAP_SECONDS` starts a run."""

    def __init__(self) -> None:
        self.starts: list[int] = [1]
        self.oldest: list[float] = [float("inf")]
        self._last: float | None = None

    def see(self, number: int, when: float | None) -> None:
        if when is None:
            return
        if self._last is not None and when - self._last > _RUN_GAP_SECONDS:
            self.starts.append(number)
            self.oldest.append(float("inf"))
        self._last = when
        self.oldest[-1] = min(self.oldest[-1], when)

    def spans(self, end: int) -> list[tuple[int, int]]:
        """[first, last] line numbers of each run, the run holding the oldest lines first."""
        bounds = [*self.starts, end + 1]
        order = sorted(range(len(self.starts)), key=lambda run: (self.oldest[run], run))
        return [(bounds[run], bounds[run + 1] - 1) for run in order]


def oldest_first(
    path: Path, stats: ReadStats, time_of: LineTime = line_time
) -> Iterator[tuple[int, list[str]]]:
    """The lines of a newest-first file oldest first, each with its own number (one line per
    block: numbers run down within a run). Never written anywhere: a plain file is read again
    by line-aligned pieces, last piece first; a gzip file, which can only be read from its
    start, is turned round in memory up to `MAX_GZIP_TEXT` of text, and past that is not read
    (counted, `newest_first_gzip_too_large`: decompress it to read it); so is a UTF-16 file."""
    if not is_plain_utf8(path):  # gzip, or UTF-16 (its pieces would split characters)
        return _gzip_oldest_first(path, stats, time_of)
    return _plain_oldest_first(path, stats, time_of)


def is_plain_utf8(path: Path) -> bool:
    """Whether a file can be read from any line's start: not gzip, not UTF-16."""
    try:
        with open(path, "rb") as raw:
            start = raw.read(4096)
    except OSError:
        return True
    return compression_of(start) is None and wide_encoding(start) is None


# A newest-first gzip file is turned round in memory up to this much text.
MAX_GZIP_TEXT: Final = 64 << 20
# Pieces a plain newest-first file is read back by.
_PIECE_BYTES: Final = 8 << 20


def _plain_oldest_first(
    path: Path, stats: ReadStats, time_of: LineTime
) -> Iterator[tuple[int, list[str]]]:
    from collector.files import ReadStats as Uncounted
    from collector.files import line_aligned_ranges, read_line_blocks

    pieces = line_aligned_ranges(path, _PIECE_BYTES)
    runs = _Runs()
    firsts: list[int] = []  # each piece's first line number
    number = 0
    for piece in pieces:  # the reading that counts: bytes, lines, drops
        firsts.append(number + 1)
        seen = 0
        for first, lines in read_line_blocks(path, stats, piece):
            for index, line in enumerate(lines):
                runs.see(number + first + index, time_of(line))
            seen = first + len(lines) - 1
        number += seen
    for low, high in runs.spans(number):
        for index in reversed(range(len(pieces))):
            begin = firsts[index]
            end = firsts[index + 1] - 1 if index + 1 < len(firsts) else number
            if end < low or begin > high:
                continue
            kept: list[tuple[int, str]] = []
            for first, lines in read_line_blocks(path, Uncounted(), pieces[index]):
                offset = begin - 1 + first
                kept.extend(
                    (offset + i, line) for i, line in enumerate(lines) if low <= offset + i <= high
                )
            for line_number, line in reversed(kept):
                yield line_number, [line]


def _gzip_oldest_first(
    path: Path, stats: ReadStats, time_of: LineTime
) -> Iterator[tuple[int, list[str]]]:
    from collector.files import read_line_blocks

    held: list[str] = []
    size = 0
    runs = _Runs()
    for first, lines in read_line_blocks(path, stats):
        for index, line in enumerate(lines):
            runs.see(first + index, time_of(line))
        held.extend(lines)
        size += sum(map(len, lines))
        if size > MAX_GZIP_TEXT:
            stats.drop("newest_first_gzip_too_large")
            return
    for low, high in runs.spans(len(held)):
        for number in range(high, low - 1, -1):
            yield number, [held[number - 1]]
