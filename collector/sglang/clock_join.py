"""Zoneless log clocks set against each other by the requests their nodes share.

A node's log zone is read off UTC stamps in its own lines (`log_clock`): time stats' epochs,
metrics stamps. Without them (`--enable-request-time-stats-logging` is optional) its stamps
are read as UTC, and a decode host set to UTC+2 beside prefill hosts on UTC puts every decode
line two hours after the prefill lines of the same request: nothing joins, and every refused
request looks as if decode never received it (blind review: 31 of 31 exposures missed).

The router hands a PD request to a prefill and a decode node at the same moment, and both log
its `Receive:` with its `bootstrap_room`. So a node whose zone no stamp tells is set against
nodes whose zone is known (else against the most nodes that agree with each other): its
`Receive:` stamps, less theirs, for the rooms both logged, give its offset when they agree on a
whole number of quarter hours (hosts' clocks may differ by seconds, zones do not). Nodes that
share no room, or disagree, keep their own reading.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Final, NamedTuple

from collector.files import TelemetryFile
from collector.sglang.log_clock import ZONE_RANGE, ZONE_STEP, ZoneReading, first_lines
from collector.sglang.logs import LineParser
from collector.state.ledger import FAKE_BOOTSTRAP_HOST, WARMUP_ROOMS

# Rooms whose `Receive:` stamps are collected from a node's first lines.
MAX_ROOMS: Final = 4096
# Rooms both nodes must share before one's clock is set by the other's.
MIN_SHARED: Final = 3
# How far two hosts' clocks may drift apart (and a request take between its two receipts).
MAX_SKEW: Final = 120.0
# The share of shared rooms that must agree on the offset.
MIN_AGREEING: Final = 0.8

_RECEIVE: Final = "Receive:"
_ROOM: Final = "bootstrap_room="


# A log stream: (node, file kind).
Stream = tuple[str, str]


class Alignment(NamedTuple):
    """A stream's zone as set against other streams' clocks: its offset, the streams it was set
    against, and whether their zone was told by their stamps (else it too is assumed UTC)."""

    zone: float
    against: tuple[Stream, ...]
    known: bool


class Sample(NamedTuple):
    """What a stream's first lines say of its clock: each room's first `Receive:` stamp, and
    its first start-up line's (`server_args`; None without one), both read as UTC."""

    rooms: dict[str, float]
    started: float | None


def sample(node: str, files: list[TelemetryFile]) -> Sample:
    """The `Sample` of a node's first lines (`log_clock.first_lines`)."""
    parser = LineParser(node)
    stamps: dict[str, float] = {}
    started: float | None = None
    for line in first_lines(files):
        head = line[:400]
        if started is None and "server_args" in head:
            _, event = parser.parse(line, "")
            if event is not None and event.kind == "server_args" and event.time is not None:
                started = event.time
            continue
        if _RECEIVE not in line or _ROOM not in line:
            continue
        _, event = parser.parse(line, "")
        if event is None or event.time is None or event.kind != "request_received":
            continue
        room = event.fields.get("bootstrap_room")
        if room is None or str(room) in WARMUP_ROOMS or str(room) in ("", "None"):
            continue  # every node's warmups (room = DP rank) and health checks (room 0)
        if event.fields.get("bootstrap_host") == FAKE_BOOTSTRAP_HOST:
            continue
        stamps.setdefault(str(room), event.time)
        if len(stamps) >= MAX_ROOMS:
            break
    return Sample(stamps, started)


def offset(mine: Mapping[str, float], theirs: Mapping[str, float]) -> float | None:
    """The whole quarter hours `mine` runs ahead of `theirs` for the rooms both hold, when
    enough of them agree; None when they share too few, or disagree.

    >>> theirs = {"1": 100.0, "2": 200.0, "3": 300.0}
    >>> offset({"1": 7301.0, "2": 7399.5, "3": 7500.2}, theirs)
    7200.0
    >>> offset({"1": 101.0, "2": 200.0, "3": 299.0}, theirs), offset({"1": 7300.0}, theirs)
    (0.0, None)
    """
    shared = [mine[room] - theirs[room] for room in mine.keys() & theirs.keys()]
    if len(shared) < MIN_SHARED:
        return None
    zone = round(statistics.median(shared) / ZONE_STEP) * ZONE_STEP
    agreeing = sum(1 for diff in shared if abs(diff - zone) <= MAX_SKEW)
    if agreeing < MIN_AGREEING * len(shared) or not ZONE_RANGE[0] <= zone <= ZONE_RANGE[1]:
        return None
    return zone


def align(
    readings: Mapping[Stream, ZoneReading],
    samples: Mapping[Stream, Sample],
    snapshots: Mapping[str, float] | None = None,
) -> dict[Stream, Alignment]:
    """The zones of the streams whose stamps tell none, set against the others.

    Streams whose zone was told are the reference, their stamps moved to UTC. Without any, the
    reference is a group of zoneless streams whose clocks agree, and UTC stays an assumption:
    the one whose clock contradicts the fewest saved snapshots (`snapshots`: each node's
    earliest, in UTC by its name, of a server running then, so not before the start-up its log
    begins with), then the largest, then the one of the stream named first. Only offsets other
    than zero are returned.
    """
    told = sorted(node for node, r in readings.items() if r.voted)
    zoneless = sorted(node for node, r in readings.items() if r.prefixed and not r.voted)
    if not zoneless:
        return {}
    if told:
        return _against(told, zoneless, readings, samples, known=True)
    best: dict[Stream, Alignment] = {}
    best_rank: tuple[int, int] | None = None
    for group in _agreeing_groups(zoneless, samples):
        aligned = _against(group, zoneless, readings, samples, known=False)
        rank = (_contradictions(zoneless, aligned, samples, snapshots or {}), -len(group))
        if best_rank is None or rank < best_rank:
            best, best_rank = aligned, rank
    return best


def _against(
    reference: list[Stream],
    zoneless: list[Stream],
    readings: Mapping[Stream, ZoneReading],
    samples: Mapping[Stream, Sample],
    *,
    known: bool,
) -> dict[Stream, Alignment]:
    utc: dict[str, float] = {}
    for stream in reference:
        zone = readings[stream].zone
        for room, stamp in samples[stream].rooms.items():
            utc.setdefault(room, stamp - zone)
    aligned: dict[Stream, Alignment] = {}
    for stream in zoneless:
        if stream in reference:
            continue
        shift = offset(samples[stream].rooms, utc)
        if shift:
            aligned[stream] = Alignment(shift, tuple(reference), known)
    return aligned


def _agreeing_groups(streams: list[Stream], samples: Mapping[Stream, Sample]) -> list[list[Stream]]:
    """For each stream in name order, it and the streams whose clocks agree with its own."""
    groups: list[list[Stream]] = []
    for first in streams:
        group = [first] + [
            other
            for other in streams
            if other != first and offset(samples[other].rooms, samples[first].rooms) == 0.0
        ]
        if sorted(group) not in groups:
            groups.append(sorted(group))
    return groups


def _contradictions(
    streams: list[Stream],
    aligned: Mapping[Stream, Alignment],
    samples: Mapping[Stream, Sample],
    snapshots: Mapping[str, float],
) -> int:
    """Streams whose start-up, on the clock `aligned` sets, comes after a snapshot of their
    node answered (a server running before it started)."""
    count = 0
    for stream in streams:
        started = samples[stream].started
        taken = snapshots.get(stream[0])
        if started is None or taken is None:
            continue
        shift = aligned[stream].zone if stream in aligned else 0.0
        if taken < started - shift - MAX_SKEW:
            count += 1
    return count
