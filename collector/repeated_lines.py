"""Lines a node's log repeats from an earlier file of the same node: read once.

Responders save what they can reach, and often more than once: `kubectl logs` at ten and again
at eleven (the second file holds the first), the same rotated file copied into two folders, a
`--since=2h` export beside the full one. Read twice, every repeated line counts twice: batch
windows add up double, each kv-canary violation is a second critical finding, a storm's
timeouts are counted again, and the repeats come after their requests were judged (late
lines, blamed on a clock).

Two things follow, both from the lines themselves, never from names or times alone, and both
only on evidence a chance likeness does not give: `EVIDENCE_LINES` distinct stamped lines, in
more than one second, alike in the same order. Start-up lines two hosts print alike, a
keep-alive line repeated, a traceback's body recurring are no evidence.

* `log_clusters` (discovery): logs of one name in several folders are one node's when their
  starts are alike (copies, whole-history exports) or one's start stands in the other (a
  later export); the others are hosts (`prefill-0/sglang.log`), a copy of one of them
  (`backup/sglang.log`) that host's.
* `RepeatedLines` (reading): while a node's file is read, it watches for where each of the
  next few files begins (its first stamped line); from there on it compares the two line by
  line. Those of the later file's first lines that matched to the end of the earlier file,
  and on into the files after it while they agree (a copy saved before two rotations), or all
  of them, when the later file lies inside (a copy cut mid-line included), are skipped when the
  later file is read, and said (`ParseStats.repeated_lines`).
  Nothing of a file is held beyond a block of its lines; a watch that keeps failing to match
  stops (`MAX_STARTS`).
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from collector.compression import MAGIC_BYTES, compression_of, stream_blocks
from collector.line_order import first_line_time, head_lines, line_time
from collector.merged_logs import line_source
from collector.sglang.runtime_wrappers import RFC3339, STAMPED

if TYPE_CHECKING:
    from collector.files import ReadStats, TelemetryFile

Blocks = Iterator[tuple[int, list[str]]]

# How many of the files after the one being read are watched for: enough for three copies of
# a rotated set side by side.
WATCHED_FILES: Final = 4
# What makes lines alike a copy, not a chance: this many distinct stamped lines, in more than
# one second.
EVIDENCE_LINES: Final = 32
# A watch whose anchor keeps recurring without a match gives up after this many tries.
MAX_STARTS: Final = 64
# The start of a file compared to tell copies of one log (gzip read through).
_HEAD_BYTES: Final = 256 << 10
# The start of a runtime's capture compared with a node's log (`capture_of`).
_CAPTURE_HEAD_BYTES: Final = 8 << 20
# A later export's start is looked for in an earlier file up to this size (of text).
_MAX_SEARCHED_BYTES: Final = 4 << 30
# Text read at a time from a compressed file searched.
_SEARCH_READ_BYTES: Final = 1 << 20


# A runtime's one-for-one wrapping of a line: containerd's (a whole line, `F`) and `kubectl
# logs --timestamps`'s; a piece of a split line (`P`) is none.
_CRI: Final = re.compile(RFC3339 + r" (?:stdout|stderr) (?P<flag>[PF]) ")
# What stands for a piece of a split line: equal to no line.
_PIECE: Final = "\x00piece of a split line"


def unwrapped(line: str) -> str:
    """The engine's line inside a runtime's one-for-one wrapping (a `kubectl logs --timestamps`
    capture, a containerd line not split), else the line itself; `_PIECE` for a piece, which
    is no one line of the engine's."""
    if line[:1].isdigit():
        m = _CRI.match(line)
        if m is not None and m["flag"] == "P":
            return _PIECE
        m = m or STAMPED.match(line)
        if m is not None:
            return line[m.end() :]
    return line


class _Evidence:
    """Distinct stamped lines seen, and their seconds, until there are enough."""

    __slots__ = ("_lines", "_times", "_time_of")

    def __init__(self, time_of: Callable[[str], float | None] = line_time) -> None:
        self._lines: set[str] = set()
        self._times: set[float] = set()
        self._time_of = time_of

    @property
    def enough(self) -> bool:
        return len(self._lines) >= EVIDENCE_LINES and len(self._times) > 1

    def see(self, lines: list[str]) -> None:
        for line in lines:
            if self.enough:
                return
            if line not in self._lines:
                when = self._time_of(line)
                if when is not None:
                    self._lines.add(line)
                    self._times.add(when)


def log_clusters(groups: list[list[Path]], *, read_compressed: bool = False) -> list[list[int]]:
    """The logs of one name found in several folders (`groups`, one list of files per folder,
    oldest first), in clusters of folders holding one node's log: linked, folder to folder,
    by starting alike or by one's start standing in the other's plain files; with
    `read_compressed`, in its compressed ones too, read through (for a name that says it is a
    copy: hosts of one name are told apart without inflating every rotation of each). A
    folder with no file of the name holding a byte (logrotate's `create` leaves the new log
    empty) holds nothing of any node: it joins the first cluster (blind review 19: a
    traceback)."""
    starts = [_start(files[0]) if files else [] for files in groups]
    clusters: list[list[int]] = []
    for index in (i for i, files in enumerate(groups) if files):
        linked = [
            cluster
            for cluster in clusters
            if any(_overlap(groups, starts, one, index, read_compressed) for one in cluster)
        ]
        joined = [index]
        for cluster in linked:
            clusters.remove(cluster)
            joined = sorted(joined + cluster)
        clusters.append(joined)
    clusters.sort()
    empty = [i for i, files in enumerate(groups) if not files]
    if empty:
        clusters = [sorted([*clusters[0], *empty]), *clusters[1:]] if clusters else [empty]
    return clusters


def _overlap(
    groups: list[list[Path]], starts: list[list[str]], one: int, other: int, read_compressed: bool
) -> bool:
    blocks = (_evidence_block(starts[one]), _evidence_block(starts[other]))
    return _same_start(starts[one], starts[other]) or any(
        # A newest-first export's start is the other's lines the other way round.
        _holds(groups[where], block, read_compressed)
        or _holds(groups[where], block[::-1], read_compressed)
        for where, block in ((other, blocks[0]), (one, blocks[1]))
    )


def capture_of(capture: list[Path], log: list[Path]) -> bool:
    """Whether a log saved through a container runtime (`kubectl logs --timestamps` under the
    pod's name; `capture`, oldest first) repeats a node's own log files (`log`): its first
    lines, unwrapped, stand in their plain files, on evidence (`EVIDENCE_LINES`)."""
    if not capture:
        return False
    # Request lines of kilobytes of prompt fill the usual start before it is evidence.
    block = _evidence_block([unwrapped(line) for line in _start(capture[0], _CAPTURE_HEAD_BYTES)])
    # Read through the node's compressed files too: a capture of an older stretch lies in its
    # rotations, and only a pod's log named after another node is looked at so.
    return _PIECE not in block and _holds(log, block, read_compressed=True)


def _start(path: Path, size: int = _HEAD_BYTES) -> list[str]:
    """The first lines of a file (its first `size` bytes) from its first stamped one (the
    last, possibly cut, left out; line ends as written)."""
    lines = [line.rstrip("\r") for line in head_lines(path, size)]
    first = next((i for i, line in enumerate(lines) if _stamped(line) is not None), None)
    return lines[first:] if first is not None else []


def _stamped(line: str) -> float | None:
    """A line's time, behind the name a merged file leads it with too (`decode-0  | [...]`)."""
    when = line_time(line)
    if when is None and (source := line_source(line)) is not None:
        when = line_time(line[source[1] :])
    return when


def _evidence_block(start: list[str]) -> list[str]:
    """The shortest beginning of `start` that is evidence (see the module docstring)."""
    evidence = _Evidence(_stamped)
    for end in range(len(start)):
        evidence.see(start[end : end + 1])
        if evidence.enough:
            return start[: end + 1]
    return []


def _same_start(a: list[str], b: list[str]) -> bool:
    """Whether two starts agree over an evidence block (two hosts started in the same second
    with the same arguments part within their first requests)."""
    block = _evidence_block(a)
    return bool(block) and b[: len(block)] == block


def _holds(files: list[Path], block: list[str], read_compressed: bool = False) -> bool:
    """Whether any of the files holds `block` as whole consecutive lines, LF or CRLF; with
    `read_compressed`, a compressed one read through, as far as `_MAX_SEARCHED_BYTES` of text
    (an earlier download of a log whose lines have since rotated into `decode-0.log.1.gz`:
    audit KS), else passed over (only its start can be read without reading it all)."""
    if not block:
        return False
    needles = [
        ("\n" + ending.join(block)).encode("utf-8", "surrogateescape") for ending in ("\n", "\r\n")
    ]
    for path in files:
        try:
            with open(path, "rb") as handle:
                name = compression_of(handle.read(MAGIC_BYTES))
                if name is not None:
                    if read_compressed:
                        handle.seek(0)
                        blocks = stream_blocks(handle, name, _SEARCH_READ_BYTES)
                        if _stream_holds(blocks, needles):
                            return True
                    continue
                size = os.fstat(handle.fileno()).st_size
                if not 0 < size <= _MAX_SEARCHED_BYTES:
                    continue
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                    for needle in needles:
                        at = mapped.find(needle)
                        while at >= 0:
                            end = at + len(needle)
                            if end == size or mapped[end : end + 1] in (b"\n", b"\r"):
                                return True
                            at = mapped.find(needle, at + 1)
        except (OSError, ValueError):
            continue
    return False


def _stream_holds(blocks: Iterator[bytes | str], needles: list[bytes]) -> bool:
    """`_holds` over a stream of text blocks (a `str` ends it: the damage `stream_blocks`
    reports): a needle's match must end at a line end or the stream's end, and a match or a
    line end cut by a block's edge is looked at again with the next block."""
    carry = b""
    read = 0
    longest = max(len(needle) for needle in needles)
    for block in blocks:
        if isinstance(block, str) or read > _MAX_SEARCHED_BYTES:
            return False  # cut or damaged: where it stops is no line end
        read += len(block)
        text = carry + block
        keep_from = max(len(text) - longest, 0)
        for needle in needles:
            at = text.find(needle)
            while at >= 0:
                end = at + len(needle)
                if end == len(text):
                    keep_from = min(keep_from, at)  # its line end is in the next block
                    break
                if text[end : end + 1] in (b"\n", b"\r"):
                    return True
                at = text.find(needle, at + 1)
        carry = text[keep_from:]
    return any(carry.endswith(needle) for needle in needles)


def in_reading_order(files: list[TelemetryFile]) -> list[TelemetryFile]:
    """A node's logs with files of the same rotation place (copies, exports saved at different
    times) in the order of their first line's time, so an earlier export is read first."""

    def first_time(tf: TelemetryFile) -> float:
        when = first_line_time(head_lines(tf.path, _HEAD_BYTES))
        return when if when is not None else float("inf")

    def size(tf: TelemetryFile) -> int:
        try:
            return os.stat(tf.path).st_size
        except OSError:
            return 0

    ties: dict[tuple[int, str], int] = {}
    for tf in files:
        ties[tf.order] = ties.get(tf.order, 0) + 1
    if all(count == 1 for count in ties.values()):
        return files
    # Of copies starting alike, the longest first: a copy cut short then lies inside it.
    return sorted(
        files,
        key=lambda tf: (tf.order, first_time(tf), -size(tf)) if ties[tf.order] > 1 else (tf.order,),
    )


class RepeatedLines:
    """One node's log stream, read with what earlier files already held skipped."""

    def __init__(self, files: list[TelemetryFile]) -> None:
        self.files = files
        self._position = {id(tf): index for index, tf in enumerate(files)}
        self._skip: dict[int, tuple[int, Path]] = {}  # file index -> (lines, earlier file)
        self._anchors: dict[int, tuple[str, int] | None] = {}
        # Files whose first line is the rest of the file before's last line (`_continuation`).
        self._joined: set[int] = set()
        # Watches that agreed to the end of the file read, going on into the next: a copy
        # saved before a rotation spans the rotated files (file index -> watch, where it began).
        self._carried: dict[int, tuple[_Watch, Path]] = {}

    def blocks(self, tf: TelemetryFile, stats: ReadStats) -> Blocks:
        """`file_line_blocks` of `tf`, less the lines an earlier file of the stream held
        (counted in `stats` as read; `repeated` says how many were skipped)."""
        from collector.files import DROPPED, file_line_blocks

        index = self._position.get(id(tf))
        if index is None:
            yield from file_line_blocks(tf, stats)
            return
        skip, _ = self._skip.get(index, (0, tf.path))
        joined = index in self._joined
        carried, self._carried = self._carried, {}
        began = {later: path for later, (_, path) in carried.items()}
        watches = [watch for watch, _ in carried.values()] + [
            _Watch(later, self.files[later], anchor)
            for later in range(index + 1, min(index + 1 + WATCHED_FILES, len(self.files)))
            if later not in carried and (anchor := self._anchor(later)) is not None
        ]
        # Read through a runtime's wrapping while a later file is the engine's lines as they
        # are (the node's own log after a `kubectl logs --timestamps` capture): those watches
        # see this file's lines unwrapped.
        anchor = self._anchor(index)
        wrapped = anchor is not None and unwrapped(anchor[0]) != anchor[0]
        bare_for = {id(w) for w in watches if wrapped and w.bare_anchor}
        seen = 0  # lines read so far, in reading order (newest-first files number backwards)
        for first, lines in file_line_blocks(tf, stats, continued=self._continuation(index)):
            if joined and lines:  # read already, as the end of the file before's last line
                lines[0], joined = DROPPED, False
            bare = [unwrapped(line) for line in lines] if bare_for else lines
            for watch in watches:
                watch.feed(bare if id(watch) in bare_for else lines)
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
            earlier = began.get(watch.later, tf.path)
            if watch.agreeing and watch.later > index + 1:
                self._carried[watch.later] = (watch, earlier)
                continue
            matched = watch.finish()
            if matched > self._skip.get(watch.later, (0, earlier))[0]:
                self._skip[watch.later] = (matched, earlier)

    def _continuation(self, index: int) -> Callable[[], str | None] | None:
        """For a file that may end mid-line: what reads the next file's first line when it is
        that line's rest, and marks it read.

        logrotate's `copytruncate` copies a log while its writer goes on: a line half written
        ends the rotated file without its newline, and its rest begins the live one. A file
        ends without a newline only when cut; a first line without a time of its own is no
        line's start. Both together join the halves; either alone leaves the files as they are.
        """
        if index + 1 >= len(self.files):
            return None
        mine, after = self.files[index], self.files[index + 1]
        if not (_plain_log(mine) and _plain_log(after)):
            return None

        def rest() -> str | None:
            line = _first_line(after)
            if not line or line_time(line) is not None:
                return None
            self._joined.add(index + 1)
            return line

        return rest

    def repeated(self, tf: TelemetryFile) -> tuple[int, Path] | None:
        """(lines skipped, the earlier file that held them) for a file already read."""
        index = self._position.get(id(tf))
        return self._skip.get(index) if index is not None else None

    def _anchor(self, index: int) -> tuple[str, int] | None:
        """A file's first stamped line and its place among its lines, read once."""
        if index not in self._anchors:
            self._anchors[index] = _first_stamped_line(self.files[index])
        return self._anchors[index]


def _first_stamped_line(tf: TelemetryFile) -> tuple[str, int] | None:
    """The first line with a time (a traceback's body recurs; a stamped line rarely does)."""
    from collector.files import ReadStats, file_line_blocks

    seen = 0
    blocks = file_line_blocks(tf, ReadStats(), block_size=16 << 10)
    try:
        for _, lines in blocks:
            for line in lines:
                if line_time(line) is not None:
                    return line, seen
                seen += 1
            if seen > 1024:
                return None
    finally:
        _close(blocks)
    return None


def _plain_log(tf: TelemetryFile) -> bool:
    """A log file read as written: not from its end, not an export, not a merged file's part."""
    return not (tf.newest_first or tf.cloud_export or tf.merged_source or tf.pieces[1:])


def _first_line(tf: TelemetryFile) -> str | None:
    """A file's first line, read alone; None when it is of no use (binary, too long)."""
    from collector.files import DROPPED, ReadStats, file_line_blocks

    blocks = file_line_blocks(tf, ReadStats(), block_size=64 << 10)
    try:
        for _, lines in blocks:
            return None if lines[0] == DROPPED else lines[0]
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

    __slots__ = (
        "later",
        "_file",
        "_anchor",
        "_lead",
        "_theirs",
        "_buffer",
        "_at",
        "_matched",
        "_evidence",
        "_inside",
        "_cut",
        "_starts",
        "_bare",
        "_unwrap",
    )

    def __init__(self, later: int, file: TelemetryFile, anchor: tuple[str, int]) -> None:
        self.later = later
        self._file = file
        self._anchor, self._lead = anchor
        # The anchor out of a runtime's wrapping (None when it has none), looked for too: a
        # `kubectl logs --timestamps` capture begins inside the node's own log, whose lines
        # are the engine's; found so, their lines are compared unwrapped (`_unwrap`).
        bare = unwrapped(self._anchor)
        self._bare = bare if bare != self._anchor and bare != _PIECE else None
        self._unwrap = False
        self._theirs: Blocks | None = None
        self._buffer: list[str] = []
        self._at = 0  # next line of the buffer to compare
        self._matched = 0  # the later file's lines that agreed so far (from its first)
        self._evidence = _Evidence()
        self._inside = False  # the later file ended inside this one: all of it is repeated
        self._cut = False  # our last line so far is the start of theirs (a copy cut there?)
        self._starts = 0

    def feed(self, lines: list[str]) -> None:
        index = 0
        if self._cut and lines:  # more lines after a cut one: it was no cut, a difference
            self._stop()
        while index < len(lines) and not self._inside:
            if self._theirs is None:
                if self._starts >= MAX_STARTS:
                    return
                found = _index(lines, self._anchor, index)
                bare = self._bare
                self._unwrap = found < 0 and bare is not None
                if found < 0 and bare is not None:
                    found = _index(lines, bare, index)
                if found < 0:
                    return
                index = found
                self._begin()
                if self._theirs is None:
                    return
            start = index
            index = self._compare(lines, index)
            if self._theirs is None:  # broken: look again just after where it began
                index = start + 1

    @property
    def bare_anchor(self) -> bool:
        """The later file begins with a line no runtime wrapped."""
        return self._bare is None and unwrapped(self._anchor) == self._anchor

    @property
    def agreeing(self) -> bool:
        """Still comparing, alike to the end of what was fed: the later file may go on in the
        file read next."""
        return self._theirs is not None and not self._inside and not self._cut

    def finish(self) -> int:
        """The later file's first lines the file read held (0 when it does not begin there,
        or when what agreed is no evidence of a copy)."""
        live = self._theirs is not None or self._inside
        matched = self._matched if live and self._evidence.enough else 0
        self._stop()
        return matched

    def _begin(self) -> None:
        from collector.files import ReadStats, file_line_blocks

        self._starts += 1
        self._theirs = file_line_blocks(self._file, ReadStats(), block_size=64 << 10)
        self._buffer, self._at, self._evidence = [], 0, _Evidence()
        # Lines before its first stamped one are passed over, not compared.
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
                self._inside = True  # the later file ended: it lies inside this one
                return len(lines)
            span = min(len(lines) - index, len(self._buffer) - self._at)
            ours = lines[index : index + span]
            theirs = self._buffer[self._at : self._at + span]
            if ours != theirs:
                agree = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b)
                self._agreed(ours[:agree])
                return self._differ(lines, index + agree, theirs[agree])
            self._agreed(ours)
            index += span
        return index

    def _agreed(self, lines: list[str]) -> None:
        self._at += len(lines)
        self._matched += len(lines)
        if not self._evidence.enough:
            self._evidence.see(lines)

    def _differ(self, lines: list[str], index: int, theirs: str) -> int:
        """Where the two differ: a copy cut mid-line (theirs the cut one, at its end; or ours,
        when nothing follows it), else the end of this match."""
        ours = lines[index]
        if ours.startswith(theirs) and self._at + 1 == len(self._buffer) and not self._pull():
            self._matched += 1  # their last line, cut: the whole later file is repeated
            self._inside = True
            return len(lines)
        if theirs.startswith(ours) and index + 1 == len(lines):
            self._cut = True  # ours may be the cut one, if this file ends here
            return len(lines)
        self._stop()
        return index

    def _pull(self) -> bool:
        assert self._theirs is not None
        for _, lines in self._theirs:
            if lines:
                if self._unwrap:
                    lines = [unwrapped(line) for line in lines]
                self._buffer = self._buffer[self._at :] + lines
                self._at = 0
                return True
        return False

    def _stop(self) -> None:
        if self._theirs is not None:
            _close(self._theirs)
        self._theirs = None
        self._buffer, self._at, self._cut = [], 0, False


def _index(lines: list[str], line: str, start: int) -> int:
    """Where `line` is in `lines` from `start` on; -1 when it is not."""
    try:
        return lines.index(line, start)
    except ValueError:
        return -1
