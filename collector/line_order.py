"""Log files written newest line first, read oldest line first.

Loki's `logcli query` prints newest first unless told `--forward`, and Grafana's "Download logs"
saves lines as the panel shows them, newest on top. Read as they lie, such a file runs backwards
in time: every request ends before it begins, the stream's clock stands at the last line's time
from the first line on, and the run reported "no exposed responses" over two seconds of logs.

So a log file whose first timed lines run back in time is read from its end: its lines, checked
and decoded as any file's are (`files.read_line_blocks`), go block by block to a temporary file
with each block's lines reversed, and the blocks are read back last first. Memory holds one
block; the disk, the file once more. Each line keeps its number in the file.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collector.files import ReadStats

# Timed lines looked at, in at most this much of the file's start.
_SNIFF_BYTES: Final = 256 << 10
_MIN_TIMED: Final = 10
# Newest first: the first timed line is later than the last by this much, and at most this
# share of consecutive timed lines go forward (ranks and clocks print a little out of order).
_MIN_SPAN_SECONDS: Final = 2.0
_MAX_FORWARD_SHARE: Final = 0.1


def runs_backwards(lines: list[str]) -> bool:
    """Whether these first lines of a file (whole lines, names of a merged file taken off) run
    back in time: newest first."""
    from collector.sglang.envelope import peel
    from collector.sglang.runtime_wrappers import RuntimeLines

    times: list[float] = []
    for line in lines:
        inner = RuntimeLines().unwrap(line, None)
        when = peel(inner if isinstance(inner, str) else line).time
        if when is not None:
            times.append(when)
    if len(times) < _MIN_TIMED or times[0] - times[-1] < _MIN_SPAN_SECONDS:
        return False
    forward = sum(later > earlier for earlier, later in zip(times, times[1:], strict=False))
    return forward <= _MAX_FORWARD_SHARE * (len(times) - 1)


def head_lines(path: Path, size: int = _SNIFF_BYTES) -> list[str]:
    """The whole lines in the first `size` bytes of a file (gzip read through)."""
    import zlib

    try:
        with open(path, "rb") as raw:
            head = raw.read(size)
            if head[:2] == b"\x1f\x8b":
                head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, size)
    except (OSError, zlib.error):
        return []
    lines = head.decode("utf-8", "replace").split("\n")
    return lines[:-1] if len(lines) > 1 else lines


def oldest_first(
    blocks: Iterator[tuple[int, list[str]]], stats: ReadStats
) -> Iterator[tuple[int, list[str]]]:
    """The lines of `blocks` (a newest-first file read as it lies) last first, each with its
    own number (one line per block: numbers run down)."""
    del stats  # the reading that made `blocks` counted what it read
    spans: list[tuple[int, int, int, int]] = []  # (first line, lines, offset, bytes)
    with tempfile.TemporaryFile(prefix="kvwatch-newest-first-") as spill:
        for first, lines in blocks:
            data = "\n".join(reversed(lines)).encode("utf-8", "surrogatepass")
            spans.append((first, len(lines), spill.tell(), len(data)))
            spill.write(data)
        for first, count, offset, length in reversed(spans):
            spill.seek(offset)
            lines = spill.read(length).decode("utf-8", "surrogatepass").split("\n")
            if len(lines) != count:  # cannot happen: lines hold no newline
                lines = (lines + [""] * count)[:count]
            last = first + count - 1
            for index, line in enumerate(lines):
                yield last - index, [line]
