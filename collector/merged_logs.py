"""Log files that hold several engines' lines, each line led by the name of where it came from.

A responder on a single-host PD deployment saves `docker compose logs > all.log`: every line is
`<container>  | <line>` (the names padded to one width, `--timestamps` puts an RFC 3339 stamp
after the bar). On Kubernetes, `kubectl logs -l app=sglang --prefix` writes
`[pod/<pod>/<container>] <line>`. Read as one node, such a file mixes prefill's pool with
decode's requests, and its lines start with no SGLang prefix at all: nothing was judged.

So a log file whose first lines are nearly all led by such names is read once per name, each
time as that name's own log (the name is the node; other names' lines are passed over),
numbered as the file is, and counted once. Separate streams, not one: `docker compose logs`
prints each container's history as it reads it, so the names' lines need not be in time order
with each other, only within each name.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collector.files import ReadStats, TelemetryFile

# An ANSI colour (compose colours names on a terminal; a file saved through `script` keeps it).
_COLOUR = r"(?:\x1b\[[0-9;]*m)*"
# `decode-1  | `, `pd_decode_1   | ` (compose v1), the bar alone on an empty line.
_COMPOSE: Final = re.compile(
    _COLOUR
    + r"([A-Za-z0-9][A-Za-z0-9_.-]{0,127})"
    + _COLOUR
    + r" *"
    + _COLOUR
    + r"\|"
    + _COLOUR
    + r"(?: |$)"
)
# `[pod/sglang-decode-0/engine] `
_KUBECTL: Final = re.compile(r"\[pod/([A-Za-z0-9][A-Za-z0-9_.-]{0,252})/[A-Za-z0-9_.-]{1,63}\] ?")
# A file is merged when this share of its first non-blank lines (at least `_MIN_LINES`) is led
# by a name; a real log's continuation lines and tracebacks never are.
_SNIFF_LINES: Final = 200
_HEAD_BYTES: Final = 64 << 10
_MIN_LINES: Final = 3
_MIN_SHARE: Final = 0.9
# Names followed in one file: more is not a deployment's containers but text that looks alike.
MAX_NAMES: Final = 64


def line_source(line: str) -> tuple[str, int] | None:
    """(name, where the engine's line starts) for a line led by a compose or kubectl name."""
    first = line[:1]
    if first == "[":
        m = _KUBECTL.match(line)
    elif first.isalnum() or first == "\x1b":
        m = _COMPOSE.match(line)
    else:
        return None
    return (m.group(1), m.end()) if m is not None else None


def merged_names(tf: TelemetryFile) -> list[str] | None:
    """The names leading the lines of a merged log file, in order of first appearance; None
    for a file that is not merged (the usual case: only its first kilobytes are read)."""
    from collector.files import ReadStats, read_line_blocks

    sniffed = [line for line in _head_lines(tf.path) if line.strip()][:_SNIFF_LINES]
    led = sum(line_source(line) is not None for line in sniffed)
    if len(sniffed) < _MIN_LINES or led < _MIN_SHARE * len(sniffed):
        return None
    names: dict[str, None] = {}
    for _, lines in read_line_blocks(tf.path, ReadStats()):
        for line in lines:
            source = line_source(line)
            if source is not None and source[0] not in names:
                if len(names) >= MAX_NAMES:
                    return list(names)
                names[source[0]] = None
    return list(names) or None


def _head_lines(path: Path) -> list[str]:
    """The whole lines in the first `_HEAD_BYTES` of a file (gzip read through); none when it
    cannot be read (its reading proper reports why)."""
    try:
        with open(path, "rb") as raw:
            head = raw.read(_HEAD_BYTES)
            if head[:2] == b"\x1f\x8b":
                head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, _HEAD_BYTES)
    except (OSError, zlib.error):
        return []
    lines = head.decode("utf-8", "replace").split("\n")
    return lines[:-1] if len(lines) > 1 else lines


def split_merged(files: list[TelemetryFile]) -> list[TelemetryFile]:
    """Each merged log file as one file per name leading its lines (see the module docstring);
    other files as they are. Only the first name's reading counts the file's bytes and lines."""
    out: list[TelemetryFile] = []
    for tf in files:
        names = merged_names(tf) if tf.kind == "log" else None
        if not names:
            out.append(tf)
            continue
        out.extend(
            replace(tf, node=name, merged_source=name, counted=index == 0)
            for index, name in enumerate(names)
        )
    return out


def own_lines(
    blocks: Iterator[tuple[int, list[str]]], name: str, stats: ReadStats
) -> Iterator[tuple[int, list[str]]]:
    """The blocks of a merged file with `name`'s lines as the engine wrote them and every other
    line passed over (the reader's mark for a dropped line, so numbering stays the file's).
    Lines led by no name are another name's continuation (a traceback's, a wrapped line's):
    passed over, and counted (`merged_line_without_name`) by the reading that counts."""
    from collector.files import DROPPED

    for first, lines in blocks:
        kept: list[str] = []
        for line in lines:
            source = line_source(line)
            if source is None:
                if line and line != DROPPED:
                    stats.drop("merged_line_without_name")
                kept.append(DROPPED)
            elif source[0] == name:
                kept.append(line[source[1] :])
            else:
                kept.append(DROPPED)
        yield first, kept
