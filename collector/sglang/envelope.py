"""The envelope of a log line: timestamp, rank prefix and the message inside.

SGLang's own prefix is `[YYYY-MM-DD HH:MM:SS(.mmm)? <ranks>] `, but the same message reaches us
wrapped in other ways: time-only prefixes from 2024 builds, user dictConfig formats
(`[ts][file:line][LEVEL]: msg`), wrappers that re-render records (`<ISO>Z  INFO mod.func: msg`)
and log shippers that prepend `<epoch_ms>\\t<ISO>\\t`. Peeling the envelope here means the message
classifiers never care how the line was delivered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from collector.events import epoch_from_parts

# `[2026-04-05 20:02:51.123 DP0 TP0 EP0] ` — the SGLang prefix. Ranks are `NAME<int>` tokens.
# Only real dates and times: a garbled `[2026-13-08 …]` is not a prefix (month 13 has no epoch).
DATE_PATTERN: Final = r"([12]\d{3})-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
CLOCK_PATTERN: Final = r"([01]\d|2[0-3]):([0-5]\d):([0-5]\d|60)"
# Rank tokens (`DP0 TP0 EP0`): a name and at most six digits.
_RANKS = r"((?: [A-Z][A-Z_]{0,15}\d{1,6})*)"
_SGLANG = re.compile(
    r"\[" + DATE_PATTERN + r"[ T]" + CLOCK_PATTERN + r"(?:[.,](\d{1,6}))?" + _RANKS + r"\]"
)
# `[16:43:29 TP0] ` — Oct 2024 builds printed the time of day only.
_TIME_ONLY = re.compile(r"\[" + CLOCK_PATTERN + r"(?:[.,](\d{1,6}))?" + _RANKS + r"\] ?")
# `[ts][scheduler.py:123][INFO]: msg` or `[ts] [INFO] msg` — user dictConfig formats.
_BRACKETED_TAGS = re.compile(r"(?:\s*\[[^\[\]]{1,200}\])+:?\s?")
# `2026-11-02T10:15:07.123456Z  INFO sglang.srt.managers.scheduler.func: msg` — wrappers (Dynamo);
# and Python's logging formats a dictConfig sets (`SGLANG_LOGGING_CONFIG_PATH`), its asctime
# `2026-11-02 10:15:07,123` in local time: `%(asctime)s %(levelname)s %(name)s: %(message)s`
# and `%(asctime)s - %(name)s - %(levelname)s - %(message)s`.
_LEVEL = r"(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)"
_WRAPPER = re.compile(
    DATE_PATTERN + "[T ]" + CLOCK_PATTERN + r"(?:[.,](\d{1,9}))?(?P<zone>Z|[+-]\d\d:?\d\d)?\s+"
    r"(?:" + _LEVEL + r"\s+(?:(?P<logger>[\w.<>-]+):\s)?"
    r"|-\s(?P<dashed_logger>[\w.<>-]+)\s-\s" + _LEVEL + r"\s-\s)"
)
# The logger whose records uvicorn prints as `INFO:     <client> - "<request>" <status>`: a
# wrapper re-renders them without that head, which is given back so they read as access lines.
_ACCESS_LOGGER = "uvicorn.access"
# `1793614509118\t2026-11-02T10:15:09.118Z\t<line>` — log shipper prefix.
_SHIPPER = re.compile(r"(\d{10,13})\t([^\t]{0,40})\t")
# The UTC offset a shipper's ISO time ends with (`+02:00`, `-0530`).
_ISO_OFFSET = re.compile(r"([+-])(\d\d):?(\d\d)$")
# How far the engine's stamp may trail the shipper's and still be the same moment.
_SHIPPER_LAG = 600.0
_RANK = re.compile(r"([A-Z][A-Z_]*?)(\d+)")

_RANK_NAMES: Final[dict[str, str]] = {
    "DP": "dp",
    "TP": "tp",
    "PP": "pp",
    "EP": "ep",
    "ATTN_CP": "attn_cp",
    "MOE_DP": "moe_dp",
    "CP": "cp",
}


@dataclass(slots=True)
class Envelope:
    """What surrounds a message. `engine` is true when an engine-style prefix was recognised."""

    time: float | None
    time_of_day: float | None
    ranks: dict[str, int]
    message: str
    engine: bool


# Prefixes and rank runs longer than this are read each time, never kept: caches of 50,000 keys
# must not hold megabytes each.
MAX_CACHED_KEY: Final = 128
_rank_cache: dict[str, dict[str, int]] = {}
_date_cache: dict[tuple[str, str, str], float] = {}


def _ranks(text: str) -> dict[str, int]:
    cached = _rank_cache.get(text)
    if cached is None:
        cached = {}
        for name, value in _RANK.findall(text):
            cached[_RANK_NAMES.get(name, name.lower())] = int(value)
        if len(_rank_cache) < 4096 and len(text) <= MAX_CACHED_KEY:
            _rank_cache[text] = cached
    return cached


def _day_epoch(year: str, month: str, day: str) -> float:
    key = (year, month, day)
    cached = _date_cache.get(key)
    if cached is None:
        cached = epoch_from_parts(int(year), int(month), int(day), 0, 0, 0)
        if len(_date_cache) < 100_000:
            _date_cache[key] = cached
    return cached


def _fraction(digits: str | None) -> float:
    return int(digits) / 10 ** len(digits) if digits else 0.0


_head_cache: dict[str, tuple[float, dict[str, int]]] = {}
# The same prefix without its seconds (`[2026-09-06 00:00 TP0`) → (epoch of the minute, ranks).
_minute_cache: dict[str, tuple[float, dict[str, int]]] = {}


def cached_head(line: str) -> tuple[float, dict[str, int], int] | None:
    """(time, ranks, message offset) of a line that starts with SGLang's own prefix, else None.

    The hot path of forensics: no copy of the (often kilobytes long) message, and a regex only
    for the first line of each second and rank (sparse logs print few lines per second, so the
    cache alone would miss most of them).
    """
    if line[:1] == "[":
        close = line.find("] ", 20, 80)
        if close > 0:
            if line[17] == ":" and line[20] in " ]":
                # Whole seconds: by the minute, as most seconds print too few lines to repeat.
                second = _SECONDS.get(line[18:20])
                if second is not None:
                    minute = _minute_cache.get(line[:18] + line[20:close])
                    if minute is not None:
                        return minute[0] + second, minute[1], close + 2
            cached = _head_cache.get(line[:close])
            if cached is None:
                cached = _learn_head(line, close)
                if cached is None:
                    return None
            return cached[0], cached[1], close + 2
    return None


_SECONDS: Final = {f"{second:02d}": second for second in range(61)}  # 60: a leap second


def _learn_head(line: str, close: int) -> tuple[float, dict[str, int]] | None:
    """Read a prefix not in the cache: by its minute (same text but the seconds) when that was
    read before, else by the regex."""
    seconds = line[18:20]
    whole_second = line[17] == ":" and line[20] in " ]" and seconds.isascii() and seconds.isdigit()
    minute_key = line[:18] + line[20:close] if whole_second else None
    minute = _minute_cache.get(minute_key) if minute_key is not None else None
    if minute is not None:
        stamp = (minute[0] + int(seconds), minute[1])
    else:
        m = _SGLANG.match(line)
        if m is None or m.end() != close + 1:
            return None
        stamp = _sglang_stamp(m)
        if minute_key is not None:
            _remember(_minute_cache, minute_key, (stamp[0] - int(m.group(6)), stamp[1]))
    _remember(_head_cache, line[:close], stamp)
    return stamp


def _sglang_stamp(m: re.Match[str]) -> tuple[float, dict[str, int]]:
    """(epoch, ranks) of an `_SGLANG` match."""
    y, mo, d, hh, mm, ss, frac, ranks = m.groups()
    return _epoch(y, mo, d, hh, mm, ss, frac), _ranks(ranks) if ranks else {}


def _epoch(y: str, mo: str, d: str, hh: str, mm: str, ss: str, frac: str | None) -> float:
    """Epoch seconds of a date and time read as digit strings."""
    return _day_epoch(y, mo, d) + _time_of_day(hh, mm, ss, frac)


def _time_of_day(hh: str, mm: str, ss: str, frac: str | None) -> float:
    return int(hh) * 3600 + int(mm) * 60 + int(ss) + _fraction(frac)


def _in_utc(local: float, shipped_at: float | None, shipped_iso: str) -> float:
    """The engine's stamp in UTC when a shipper's line says the engine wrote local time.

    SGLang prints the host's local time with no zone. A shipper's ISO time may carry the zone
    (`2026-09-06T07:00:00.000+02:00`); it is applied only when the shipper's epoch stamp agrees
    that the engine's clock reads in it (the two within ten minutes once shifted, not before):
    an engine container on UTC beside a shipper on local time, or a shipper catching up on a
    backlog, keeps the engine's own stamp.
    """
    if shipped_at is None:
        return local
    zone = _offset_seconds(shipped_iso)
    if not zone or abs(local - shipped_at) < _SHIPPER_LAG:
        return local
    if abs(local - zone - shipped_at) < _SHIPPER_LAG:
        return local - zone
    return local


def _offset_seconds(iso: str) -> float:
    """How far ahead of UTC the offset an ISO time ends with (`+02:00`, `-0530`) is; 0 for `Z`
    or none."""
    m = _ISO_OFFSET.search(iso)
    if m is None:
        return 0.0
    return (int(m.group(2)) * 3600 + int(m.group(3)) * 60) * (1 if m.group(1) == "+" else -1)


def _remember(
    cache: dict[str, tuple[float, dict[str, int]]], key: str, stamp: tuple[float, dict[str, int]]
) -> None:
    if len(key) > MAX_CACHED_KEY:  # a prefix of a hundred ranks repeats too rarely to keep
        return
    if len(cache) > 50_000:
        cache.clear()
    cache[key] = stamp


def peel(line: str) -> Envelope:
    """Split a line into its envelope and message. Never raises.

    The common SGLang prefix repeats for every line logged within the same second by the same
    rank, so it is looked up in a small cache before any regex runs. `ranks` dicts are shared
    between envelopes: treat them as read-only.
    """
    hit = cached_head(line)
    if hit is not None:
        return Envelope(hit[0], None, hit[1], line[hit[2] :], True)
    shipper_time: float | None = None
    shipped = _SHIPPER.match(line)
    if shipped:
        stamp = int(shipped.group(1))
        shipper_time = stamp / 1000.0 if stamp > 10**11 else float(stamp)
        line = line[shipped.end() :]
    if line.startswith("["):
        m = _SGLANG.match(line)
        if m:
            when, rank_map = _sglang_stamp(m)
            if shipped:
                when = _in_utc(when, shipper_time, shipped.group(2))
            rest = line[m.end() :]
            if rest[:1] == " ":
                rest = rest[1:]
                if not shipped:
                    _remember(_head_cache, line[: m.end() - 1], (when, rank_map))
            elif rest[:1] == "[":  # dictConfig style: `[ts][file:line][LEVEL]: msg`
                tags = _BRACKETED_TAGS.match(rest)
                if tags:
                    rest = rest[tags.end() :]
            return Envelope(when, None, rank_map, rest, True)
        m = _TIME_ONLY.match(line)
        if m:
            hh, mm, ss, frac, ranks = m.groups()
            tod = _time_of_day(hh, mm, ss, frac)
            return Envelope(
                shipper_time, tod, _ranks(ranks) if ranks else {}, line[m.end() :], True
            )
    elif line[:1].isdigit():
        m = _WRAPPER.match(line)
        if m:
            # A stated zone makes the stamp UTC; without one it is the host's, as the engine's.
            when = _epoch(*m.groups()[:7]) - _offset_seconds(m.group("zone") or "")
            message = line[m.end() :]
            if (m.group("logger") or m.group("dashed_logger")) == _ACCESS_LOGGER:
                message = "INFO:     " + message
            return Envelope(when, None, {}, message, True)
    embedded = _embedded_prefix(line)
    if embedded is not None:
        inner = peel(line[embedded:])
        if inner.engine:
            return inner
    return Envelope(shipper_time, None, {}, line, False)


def sglang_prefix_at(line: str, at: int) -> bool:
    """Whether SGLang's own `[YYYY-MM-DD HH:MM:SS ...] ` prefix begins at `at`."""
    m = _SGLANG.match(line, at)
    return m is not None and line[m.end() : m.end() + 1] == " "


# What may stand before an SGLang prefix that a collector added: syslog (`Sep  1 10:00:00 host
# sglang[123]: `), containerd CRI (`2026-09-01T10:00:00.1Z stdout F `), `kubectl logs
# --timestamps`. Quotes, `=` and parentheses never do, so request-log text cannot fake one.
_HEADER_CHARS = re.compile(r"[\w:.+\-/ \[\]@]{1,160}")


def _embedded_prefix(line: str) -> int | None:
    """Offset of an SGLang `[YYYY-MM-DD ...]` prefix behind a collector's header, if any."""
    at = line.find("[", 1, 200)
    while at > 0:
        if line[at + 1 : at + 3] == "20" and _SGLANG.match(line, at):
            header = _HEADER_CHARS.fullmatch(line, 0, at)
            return at if header else None
        at = line.find("[", at + 1, 200)
    return None
