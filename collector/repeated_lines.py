"""Lines a node's log repeats from an earlier file of the same node: read once.

Responders save what they can reach, and often more than once: `kubectl logs` at ten and again
at eleven (the second file holds the first), the same rotated file copied into two folders, a
`--since=2h` export beside the full one. Read twice, every repeated line counts twice: batch
windows add up double, each kv-canary violation is a second critical finding, a storm's
timeouts are counted again, and the repeats come after their requests were judged (late
lines, blamed on a clock).

Two things follow, both from the lines themselves, never from names or times alone:

* `one_log` (discovery): logs of one name in several folders are one node's when their
  starts are the same (copies, whole-history exports), or when one's first line stands in
  the other (a later export). Otherwise the folders are hosts (`prefill-0/sglang.log`).
* `RepeatedLines` (reading): while a node's file is read, it watches for where each of the
  next few files begins; from there on it compares the two line by line. Those of the later
  file's first lines that matched to the end of the earlier file (or all of them, when the
  later file lies inside the earlier one) are skipped when the later file is read, and said
  (`ParseStats.repeated_lines`), when they are at least `MIN_REPEATED_LINES`. A match of one
  line that the next line breaks costs one comparison; nothing of a file is held beyond a
  block of its lines.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from collector.line_order import head_lines, line_time

if TYPE_CHECKING:
    from collector.files import ReadStats, TelemetryFile

Blocks = Iterator[tuple[int, list[str]]]

# How many of the files after the one being read are watched for: enough for three copies of
# a rotated set side by side.
WATCHED_FILES: Final = 4
# Fewer lines than this agreeing at a file's end are no repeat: the same line can be logged
# twice in one second, on either side of a rotation.
MIN_REPEATED_LINES: Final = 16
# The start of a file compared to tell copies of one log (its first lines, gzip read through).
_HEAD_BYTES: Final = 64 << 10
# A later export's first line is looked for in an earlier plain file up to this size.
_MAX_SEARCHED_BYTES: Final = 4 << 30


def one_log(groups: list[list[Path]]) -> bool:
    """Whether the logs of one name found in several folders (`groups`, one list of files per
    folder, oldest first) are all one node's: linked, folder to folder, by starting alike or
    by one's first line standing in the other's plain files."""
    starts = [_start(files[0]) for files in groups]
    if any(not start for start in starts):
        return False
    joined = {0}
    while len(joined) < len(groups):
        linked = next(
            (
                other
                for other in range(len(groups))
                if other not in joined
                and any(_overlap(groups, starts, one, other) for one in joined)
            ),
            None,
        )
        if linked is None:
            return False
        joined.add(linked)
    return True


def _overlap(groups: list[list[Path]], starts: list[list[str]], one: int, other: int) -> bool:
    return (
        _same_start(starts[one], starts[other])
        or _holds_line(groups[other], starts[one][0])
        or _holds_line(groups[one], starts[other][0])
    )


def _start(path: Path) -> list[str]:
    """The first content lines of a file (blank ones and the last, possibly cut, left out)."""
    return [line.rstrip("\r") for line in head_lines(path, _HEAD_BYTES) if line.strip()]


def _same_start(a: list[str], b: list[str]) -> bool:
    """Whether two heads begin alike over as many lines as the shorter holds (at least two):
    two hosts started in the same second with the same arguments part by their next lines."""
    shared = min(len(a), len(b))
    return shared >= 2 and a[:shared] == b[:shared]


def _holds_line(files: list[Path], line: str) -> bool:
    """Whether any of the plain files holds `line` as a whole line (gzip files are not
    searched: only their start can be read without reading all of them)."""
    needle = b"\n" + line.encode("utf-8", "surrogateescape")
    for path in files:
        try:
            with open(path, "rb") as handle:
                if handle.read(2) == b"\x1f\x8b":
                    continue
                size = os.fstat(handle.fileno()).st_size
                if not 0 < size <= _MAX_SEARCHED_BYTES:
                    continue
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                    at = mapped.find(needle)
                    while at >= 0:
                        end = at + len(needle)
                        if end == size or mapped[end : end + 1] in (b"\n", b"\r"):
                            return True
                        at = mapped.find(needle, at + 1)
        except (OSError, ValueError):
            continue
    return False


def in_reading_order(files: list[TelemetryFile]) -> list[TelemetryFile]:
    """A node's logs with files of the same rotation place (copies, exports saved at different
    times) in the order of their first line's time, so an earlier export is read first."""

    def first_time(tf: TelemetryFile) -> float:
        for line in head_lines(tf.path, _HEAD_BYTES):
            when = line_time(line)
            if when is not None:
                return when
        return float("inf")

    ties: dict[tuple[int, str], int] = {}
    for tf in files:
        ties[tf.order] = ties.get(tf.order, 0) + 1
    if all(count == 1 for count in ties.values()):
        return files
    return sorted(files, key=lambda tf: (tf.order, first_time(tf) if ties[tf.order] > 1 else 0))


class RepeatedLines:
    """One node's log stream, read with what earlier files already held skipped."""

    def __init__(self, files: list[TelemetryFile]) -> None:
        self.files = files
        self._position = {id(tf): index for index, tf in enumerate(files)}
        self._skip: dict[int, tuple[int, Path]] = {}  # file index -> (lines, earlier file)
        self._anchors: dict[int, tuple[str, int] | None] = {}

    def blocks(self, tf: TelemetryFile, stats: ReadStats) -> Blocks:
        """`file_line_blocks` of `tf`, less the lines an earlier file of the stream held
        (counted in `stats` as read; `repeated` says how many were skipped)."""
        from collector.files import file_line_blocks

        index = self._position.get(id(tf))
        if index is None:
            yield from file_line_blocks(tf, stats)
            return
        skip, _ = self._skip.get(index, (0, tf.path))
        watches = [
            _Watch(later, self._anchor(later))
            for later in range(index + 1, min(index + 1 + WATCHED_FILES, len(self.files)))
            if self._anchor(later) is not None
        ]
        seen = 0  # lines read so far, in reading order (newest-first files number backwards)
        for first, lines in file_line_blocks(tf, stats):
            for watch in watches:
                watch.feed(lines, self.files[watch.later])
            if seen + len(lines) <= skip:
                seen += len(lines)
                continue
            if seen < skip:
                cut = skip - seen
                seen += len(lines)
                yield first + cut, lines[cut:]
                continue
            seen += len(lines)
            yield first, lines
        for watch in watches:
            matched = watch.finish()
            if matched < MIN_REPEATED_LINES:
                continue
            if matched > self._skip.get(watch.later, (0, tf.path))[0]:
                self._skip[watch.later] = (matched, tf.path)

    def repeated(self, tf: TelemetryFile) -> tuple[int, Path] | None:
        """(lines skipped, the earlier file that held them) for a file already read."""
        index = self._position.get(id(tf))
        return self._skip.get(index) if index is not None else None

    def _anchor(self, index: int) -> tuple[str, int] | None:
        """A file's first content line and its place among its lines, read once."""
        if index not in self._anchors:
            self._anchors[index] = _first_content_line(self.files[index])
        return self._anchors[index]


def _first_content_line(tf: TelemetryFile) -> tuple[str, int] | None:
    from collector.files import DROPPED, ReadStats, file_line_blocks

    seen = 0
    blocks = file_line_blocks(tf, ReadStats(), block_size=16 << 10)
    try:
        for _, lines in blocks:
            for line in lines:
                if line and line != DROPPED:
                    return line, seen
                seen += 1
            if seen > 1024:
                return None
    finally:
        _close(blocks)
    return None


def _close(blocks: Blocks) -> None:
    """Stop a reading begun and not finished (its file is closed at once, not when collected)."""
    close = getattr(blocks, "close", None)
    if close is not None:
        close()


class _Watch:
    """Where, in the file being read, a later file begins, and how far the two then agree."""

    __slots__ = ("later", "_anchor", "_lead", "_theirs", "_buffer", "_at", "_matched", "_done")

    def __init__(self, later: int, anchor: tuple[str, int] | None) -> None:
        assert anchor is not None
        self.later = later
        self._anchor, self._lead = anchor
        self._theirs: Blocks | None = None
        self._buffer: list[str] = []
        self._at = 0  # next line of the buffer to compare
        self._matched = 0  # the later file's lines that agreed so far (from its first)
        self._done = False  # the later file ended inside this one: all of it is repeated

    def feed(self, lines: list[str], later: TelemetryFile) -> None:
        index = 0
        while index < len(lines) and not self._done:
            if self._theirs is None:
                try:
                    index = lines.index(self._anchor, index)
                except ValueError:
                    return
                self._begin(later)
                if self._theirs is None:
                    return
            start = index
            index = self._compare(lines, index)
            if self._theirs is None:  # broken: look again just after where it began
                index = start + 1

    def finish(self) -> int:
        """The later file's first lines the file read held (0 when it does not begin there)."""
        matched = self._matched if self._theirs is not None or self._done else 0
        self._stop()
        return matched

    def _begin(self, later: TelemetryFile) -> None:
        from collector.files import ReadStats, file_line_blocks

        self._theirs = file_line_blocks(later, ReadStats())
        self._buffer, self._at = [], 0
        # Blank or dropped lines before its first content line are passed over, not compared.
        self._matched = 0
        while self._matched < self._lead:
            if self._at >= len(self._buffer) and not self._pull():
                self._stop()
                return
            step = min(self._lead - self._matched, len(self._buffer) - self._at)
            self._at += step
            self._matched += step

    def _compare(self, lines: list[str], index: int) -> int:
        """Compare from `index` on; the index reached (where they differ, or the end)."""
        while index < len(lines):
            if self._at >= len(self._buffer) and not self._pull():
                self._done = True  # the later file ended: it lies inside this one
                return len(lines)
            span = min(len(lines) - index, len(self._buffer) - self._at)
            if lines[index : index + span] != self._buffer[self._at : self._at + span]:
                self._stop()
                return index
            index += span
            self._at += span
            self._matched += span
        return index

    def _pull(self) -> bool:
        assert self._theirs is not None
        for _, lines in self._theirs:
            if lines:
                self._buffer = self._buffer[self._at :] + lines
                self._at = 0
                return True
        return False

    def _stop(self) -> None:
        if self._theirs is not None:
            _close(self._theirs)
        self._theirs = None
        self._buffer, self._at = [], 0
