"""The zone a node's log stamps are written in, read off the UTC stamps its own lines carry.

SGLang prints its prefix in the host's local time with no zone (reference §2.1), while the same
log carries Unix epochs: `ReqTimeStats`'s `entry_time` (§2.6) and, with `--enable-metrics`,
`Finish`'s `request_finished_ts` and `response_sent_to_client_ts` (§2.5). Everything else
kvwatch reads is UTC: `.prom` scrapes and saved `/server_info` named by their UTC time, trace
spans. Read as UTC, a host two hours east of it puts every log line two hours late, and the
configuration in force at a request's time is the one two hours later: a restart with a bigger
pool then clears the over-length answers served before it.

Each stamped line votes for an offset (its prefix, less its UTC stamp, less the time the request
took when the stamp is its start), rounded to the quarter hour every zone in use is a multiple
of. A clear majority of the first stamped lines decides; without one, or without stamped lines,
the stamps are read as UTC, as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Final

from collector.events import REQUEST_FINISHED, REQUEST_TIME_STATS, Event
from collector.files import ReadStats, TelemetryFile, read_line_blocks
from collector.sglang.logs import LineParser

ZONE_STEP: Final = 900.0  # every UTC offset in use is a whole number of quarter hours
# A vote further than this from a quarter hour is noise (a stamp whose request's time is not
# in its durations), not a zone.
MAX_RESIDUAL: Final = 300.0
# UTC-12:00 to UTC+14:00.
ZONE_RANGE: Final = (-12 * 3600.0, 14 * 3600.0)
MIN_VOTES: Final = 2
MAX_VOTES: Final = 64
# The votes are taken from the start of a node's logs: at most this many lines are looked at,
# and only those that may carry a stamp are parsed.
MAX_SCAN_LINES: Final = 50_000
_STAMP_MARKS: Final = ("entry_time=", "_ts': ", '_ts": ')


def vote(event: Event) -> float | None:
    """The offset one event's line stamps votes for, or None when it has no say."""
    if event.time is None:
        return None
    if event.kind == REQUEST_TIME_STATS:
        start = event.fields.get("entry_time")
        if type(start) is not float or not 1e9 < start < 1e11:
            return None
        # The line is printed when the request ends: its durations are the time since entry.
        elapsed = sum(
            value
            for key, value in event.fields.items()
            if key.endswith("_duration") and type(value) is float and 0.0 <= value < 86400.0
        )
        offset = event.time - start - elapsed
    elif event.kind == REQUEST_FINISHED:
        fields = event.fields
        end = fields.get("response_sent_to_client_ts", fields.get("request_finished_ts"))
        if type(end) is not float or not 1e9 < end < 1e11:
            return None
        offset = event.time - end
    else:
        return None
    zone = round(offset / ZONE_STEP) * ZONE_STEP
    if abs(offset - zone) > MAX_RESIDUAL or not ZONE_RANGE[0] <= zone <= ZONE_RANGE[1]:
        return None
    return zone


def agreed_zone(votes: Iterable[float]) -> float:
    """The offset at least two thirds of at least `MIN_VOTES` votes name, else 0 (UTC)."""
    tally = Counter(votes)
    total = sum(tally.values())
    if total < MIN_VOTES:
        return 0.0
    zone, count = tally.most_common(1)[0]
    return zone if 3 * count >= 2 * total else 0.0


def log_zone(node: str, files: list[TelemetryFile]) -> float:
    """Seconds a node's log stamps run ahead of UTC (its zone's offset), from its first lines.

    Never raises: a file that cannot be read has no say, as its reading proper will report.
    """
    parser = LineParser(node)
    votes: list[float] = []
    looked = 0
    for tf in files:
        if tf.kind != "log":
            continue
        try:
            for _, lines in read_line_blocks(tf.path, ReadStats()):
                for line in lines:
                    looked += 1
                    if any(mark in line for mark in _STAMP_MARKS):
                        _, event = parser.parse(line, "")
                        if event is not None:
                            zone = vote(event)
                            if zone is not None:
                                votes.append(zone)
                    if len(votes) >= MAX_VOTES or looked >= MAX_SCAN_LINES:
                        return agreed_zone(votes)
        except (OSError, EOFError, ValueError):
            continue
    return agreed_zone(votes)


def zone_name(offset: float) -> str:
    """`+02:00`, `-05:30`: how the offset reads as a UTC offset."""
    sign = "-" if offset < 0 else "+"
    minutes = round(abs(offset) / 60)
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
