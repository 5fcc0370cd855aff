"""What discovery passed over that may have held logs, said the same way by every command.

A log in a folder that could not be listed, a file that could not be opened, or one rotated away
during the run is in no verdict: forensics says so beside its answer, and the rollout gate
(`kvwatch audit`) fails closed on it, since the node it leaves out is one no check ran on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from collector.files import FILE_REPLACED, UNDECODABLE, UNRECOGNISED
from collector.sglang.outcome import UNREAD_DOCUMENT
from collector.shown_text import printable

# Files named in a line, the rest counted.
_NAMED_IN_A_LINE: Final = 3

# (reason counted by discovery or reading, one, several)
_SAID: Final = (
    ("unreadable_folder", "folder could not be listed", "folders could not be listed"),
    ("unreadable_file", "file could not be opened", "files could not be opened"),
    (
        FILE_REPLACED,
        "file was rotated away during the run and could not be found again",
        "files were rotated away during the run and could not be found again",
    ),
    (
        "broken_or_looping_link",
        "link leads nowhere or in a loop",
        "links lead nowhere or in a loop",
    ),
    (
        "not_a_regular_file",
        "entry is not a file (a FIFO, socket, device or /proc file)",
        "entries are not files (FIFOs, sockets, devices or /proc files)",
    ),
)
# Input that was there to read and could not be: no verdict may pass for one over it. A link to
# nowhere or a FIFO is said, but holds no file that could have been read.
UNREAD_INPUT: Final = frozenset({"unreadable_folder", "unreadable_file", FILE_REPLACED})
# Archives read only up to damage (cut, corrupt), in a compression kvwatch does not read, a file
# a read error stopped, one whose lines were mostly not text, or one of which no line was
# recognised: what they held past it is in no verdict. Forensics says these among the files not
# read whole.
_CODECS: Final = ("gzip", "bz2", "xz")
NOT_READ_WHOLE: Final = frozenset(
    {f"{damage}_{codec}" for damage in ("corrupt", "truncated") for codec in _CODECS}
    | {"compressed_not_read", "read_error", UNDECODABLE, UNRECOGNISED}
)
# Files discovery does not open: a bundle (tar, zip) and a log search's CSV export. Forensics
# says them on lines of their own (ARCHIVES, CSV FILES).
_NOT_OPENED: Final = (
    ("archive_not_read", "archive was not opened", "archives were not opened"),
    ("csv_not_read", "CSV export was not read", "CSV exports were not read"),
)
# The rollout gate fails closed on more: a link to nowhere (a log volume not mounted), an
# archive not read whole (review: beside either, a node vanished from "all 2 nodes passed"),
# and a bundle or export not opened (blind review 58 D1: a node's failing logs in a `.tar.gz`
# beside two passing nodes, "all 2 nodes passed", exit 0).
GATE_UNREAD: Final = (
    UNREAD_INPUT | NOT_READ_WHOLE | {"broken_or_looping_link"} | {why for why, *_ in _NOT_OPENED}
)


def passed_over(
    dropped: Mapping[str, int], named: Mapping[str, Sequence[str]] | None = None
) -> str:
    """`1 file could not be opened (logs/decode-1.log), …; what it holds is not in the
    verdicts.`, or "". `named`: the files by reason (`files.name_file`)."""
    said = _counted(dropped, named, _SAID)
    if not said:
        return ""
    passed = sum(dropped.get(why, 0) for why, *_ in _SAID)
    held = "what it holds is" if passed == 1 else "what they hold is"
    return f"{', '.join(said)}; {held} not in the verdicts."


def not_opened(dropped: Mapping[str, int], named: Mapping[str, Sequence[str]] | None = None) -> str:
    """`1 archive was not opened (logs.tar.gz); extract …`, or "": the gate's words for the
    bundles and exports forensics says on lines of their own."""
    said = _counted(dropped, named, _NOT_OPENED)
    if not said:
        return ""
    return (
        f"{', '.join(said)}: extract archives and pass the folders; what they hold is not in "
        "the verdicts."
    )


def _counted(
    dropped: Mapping[str, int],
    named: Mapping[str, Sequence[str]] | None,
    reasons: Sequence[tuple[str, str, str]],
) -> list[str]:
    """`1 file could not be opened (logs/decode-1.log)` for each of `reasons` (reason, the
    words for one, for several) that `dropped` counts, with the files it names."""
    return [
        f"{count:,} {one if count == 1 else several}"
        + (f" ({names})" if (names := files_named(named, [why], count)) else "")
        for why, one, several in reasons
        if (count := dropped.get(why, 0))
    ]


def not_read_whole(
    dropped: Mapping[str, int], named: Mapping[str, Sequence[str]] | None = None
) -> str:
    """`2 files were not read whole (corrupt_gzip 1, truncated_xz 1: a.gz, b.xz)`, or ""."""
    damaged = {why: count for why in sorted(NOT_READ_WHOLE) if (count := dropped.get(why, 0))}
    if not damaged:
        return ""
    total = sum(damaged.values())
    reasons = ", ".join(f"{why} {count:,}" for why, count in damaged.items())
    names = files_named(named, damaged, total)
    return (
        f"{total:,} {'file was' if total == 1 else 'files were'} not read whole "
        f"({reasons}{f': {names}' if names else ''})"
    )


def unread_documents(named: Mapping[str, Sequence[str]] | None) -> str:
    """`2 snapshots could not be read (not_json: a.json, b.json)`, or "": saved documents that
    gave nothing, by the reason their parser dropped them (`collector.sglang.outcome`)."""
    if not named:
        return ""
    by_reason = {why: paths for why in sorted(UNREAD_DOCUMENT) if (paths := named.get(why))}
    total = len({path for paths in by_reason.values() for path in paths})
    if not total:
        return ""
    reasons = "; ".join(
        f"{why}: {files_named(named, [why], len(paths))}" for why, paths in by_reason.items()
    )
    return f"{total:,} {'snapshot' if total == 1 else 'snapshots'} could not be read ({reasons})"


def documents_unread(named: Mapping[str, Sequence[str]] | None) -> bool:
    """Whether a saved document gave nothing (`unread_documents`): the gate fails closed on it,
    as on a log not read (the node it was of is checked by nothing it held)."""
    return named is not None and any(named.get(why) for why in UNREAD_DOCUMENT)


def files_named(
    named: Mapping[str, Sequence[str]] | None, reasons: Iterable[str], count: int
) -> str:
    """The first files dropped for `reasons`, the rest of `count` counted (`a.gz, b.gz and 3
    more`); "" when none is named. Why: a count alone left a responder hunting for the damaged
    archive among hundreds (blind review 11d)."""
    if not named:
        return ""
    paths = sorted({path for why in reasons for path in named.get(why, ())})
    if not paths:
        return ""
    shown = paths[:_NAMED_IN_A_LINE]
    more = max(count, len(paths)) - len(shown)
    listed = ", ".join(_short(printable(path)) for path in shown)
    return listed + (f" and {more:,} more" if more > 0 else "")


# A path longer than this is shown by its two ends: one nested past the system's limit is
# thousands of characters.
_LONGEST_SHOWN: Final = 160


def _short(path: str) -> str:
    if len(path) <= _LONGEST_SHOWN:
        return path
    return f"{path[: _LONGEST_SHOWN // 3]}…{path[-(2 * _LONGEST_SHOWN) // 3 :]}"


def input_unread(dropped: Mapping[str, int], kinds: frozenset[str] = UNREAD_INPUT) -> bool:
    """Whether input of one of `kinds` went unread (the gate asks of `GATE_UNREAD`)."""
    return any(dropped.get(why) for why in kinds)
