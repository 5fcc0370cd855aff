"""A host whose clock is set wrong, for tests: everything it writes is off by the same seconds.

Its log prefix (local time, no zone), the UTC epochs in its request lines (`entry_time`,
meta_info's `*_ts`), and the UTC `timestamp` of its JSON request records all come from the same
wrong clock; a zone is another matter (`log_utc_offset_minutes` in the simulator). The formats
are the reference's (§2.1, §2.5, §2.6).
"""

from __future__ import annotations

import calendar
import re
import time
from pathlib import Path

_PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_EPOCH = re.compile(r"((?:_ts|_time)(?:'|\")?(?::\s|=))(1\d{9}\.\d+)")
_ISO = re.compile(r'("timestamp": ")(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z"')


def set_clock_off(path: Path, seconds: int) -> None:
    """Rewrite the log at `path` as its host would have written it, its clock `seconds` fast
    (negative: slow)."""

    def moved(stamp: str, layout: str) -> str:
        at = calendar.timegm(time.strptime(stamp, layout)) + seconds
        return time.strftime(layout, time.gmtime(at))

    def prefix(m: re.Match[str]) -> str:
        return "[" + moved(m[1], "%Y-%m-%d %H:%M:%S")

    def epoch(m: re.Match[str]) -> str:
        digits = len(m[2].split(".")[1])
        return f"{m[1]}{float(m[2]) + seconds:.{digits}f}"

    def iso(m: re.Match[str]) -> str:
        return f'{m[1]}{moved(m[2], "%Y-%m-%dT%H:%M:%S")}{m[3] or ""}Z"'

    with path.open() as lines:
        written = [_ISO.sub(iso, _EPOCH.sub(epoch, _PREFIX.sub(prefix, line))) for line in lines]
    path.write_text("".join(written))


def step_clock(path: Path, seconds: int, after: float) -> None:
    """Rewrite the log at `path` as if its host clock was stepped `seconds` (NTP) once the
    first `after` (a fraction) of its lines were written: the lines from there on are off by
    that much, the earlier ones right."""
    lines = path.read_text().splitlines(keepends=True)
    cut = int(len(lines) * after)
    tail = path.with_name(path.name + ".stepped")
    tail.write_text("".join(lines[cut:]))
    set_clock_off(tail, seconds)
    path.write_text("".join(lines[:cut]) + tail.read_text())
    tail.unlink()


def as_s6_folder(log: Path, folder: Path, *, tai_offset: int = 10) -> None:
    """Keep `log` as s6-log keeps a service's log with its `t` directive: in `folder/current`,
    each line behind the TAI64N label of the moment it was written (its prefix, read as UTC, on
    the same host clock), with the logger's `lock` beside it. `tai_offset`: TAI less UTC as
    the logger counts it (multilog 10 s, s6-log 37 s with the leap seconds since 1972)."""
    folder.mkdir(parents=True)
    labelled = []
    with log.open() as lines:
        for line in lines:
            m = _PREFIX.match(line)
            if m is None:
                labelled.append(line)
                continue
            at = calendar.timegm(time.strptime(m[1], "%Y-%m-%d %H:%M:%S"))
            labelled.append(f"@{(1 << 62) + at + tai_offset:016x}{0:08x} {line}")
    (folder / "current").write_text("".join(labelled))
    (folder / "lock").write_text("")
