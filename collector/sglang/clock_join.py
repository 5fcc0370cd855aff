"""Zoneless log clocks set against each other by the requests their nodes share.

A node's log zone is read off UTC stamps in its own lines (`log_clock`): time stats' epochs,
metrics stamps. Without them (`--enable-request-time-stats-logging` is optional) its stamps
are read as UTC, and a decode host set to UTC+2 beside prefill hosts on UTC puts every decode
line two hours after the prefill lines of the same request: nothing joins, and every refused
request looks as if decode never received it (blind review: 31 of 31 exposures missed).

The router hands a PD request to a prefill and a decode node at the same moment, and both log
its `Receive:` with its `bootstrap_room`. So a node whose zone no stamp tells is set against
the nodes it shares rooms with: its `Receive:` stamps, less theirs, for the rooms both logged,
give its offset when they agree on a whole number of quarter hours (hosts' clocks may differ by
seconds, zones do not). Clocks are set from the nodes whose zone is known, in turn through the
nodes each reaches; where no known zone reaches, which clock is UTC stays an assumption
(`align`). Nodes that share no room, or disagree, keep their own reading.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, NamedTuple

from collector.compression import MAGIC_BYTES, compression_of
from collector.events import Event
from collector.files import TelemetryFile
from collector.line_order import end_lines, first_line_time, tail_lines
from collector.sglang.log_clock import (
    ZONE_RANGE,
    ZONE_STEP,
    ZoneReading,
    elapsed_since_entry,
    first_lines,
)
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

# A measured end-to-end latency longer than this is a garbled one (a request may run an hour).
MAX_LATENCY: Final = 86_400.0

_RECEIVE: Final = "Receive:"
_TIME_STATS: Final = "ReqTimeStats("
_ROOM: Final = "bootstrap_room="
_REFUSAL_RID: Final = "self.rid="
_FINISH: Final = "Finish:"
_JSON_REQUEST: Final = '"event": "request.'
# Rids are kept beside rooms in a sample, told apart by this prefix.
_RID: Final = "rid:"


# A log stream: (node, file kind).
Stream = tuple[str, str]


class Alignment(NamedTuple):
    """A stream's zone as set against other streams' clocks: its offset, the streams it was set
    against, and whether their zone was told by their stamps (else it too is assumed UTC)."""

    zone: float
    against: tuple[Stream, ...]
    known: bool


class Sample(NamedTuple):
    """What a stream's lines say of its clock, read as UTC: each room's first `Receive:` stamp
    and the first start-up line's (`server_args`) in its first lines, and its last line's
    (None for either when there is none)."""

    rooms: dict[str, float]
    started: float | None
    ended: float | None = None
    # Rooms and rids whose moment a JSON request record states in UTC itself (its own
    # `timestamp`, no prefix): on no node's clock, they join any clock to UTC.
    utc: Mapping[str, float] | None = None
    # The role its start-up line states (`disaggregation_mode`), when one does.
    role: str | None = None
    # The rooms whose moment was estimated from a time-stats line's durations.
    estimated: frozenset[str] = frozenset()


def sample(
    node: str,
    files: list[TelemetryFile],
    *,
    exports: bool = False,
    limit: int = MAX_ROOMS,
    ends: bool = True,
) -> Sample:
    """The `Sample` of a node's first lines (`log_clock.first_lines`, up to `limit` rooms) and,
    with `ends`, its last file's end (a gzipped one is read through: `skews` needs no end); of
    its `--export-metrics-to-file` records with `exports` (each dated in UTC by its
    `request_finished_ts`: blind review 26, a node beside them kept its clock)."""
    read = _sample_lines(node, first_lines(files), exports=exports, limit=limit)
    ended = first_line_time(reversed(end_lines(files[-1].path))) if files and ends else None
    return read._replace(ended=ended)


def end_sample(node: str, files: list[TelemetryFile], *, limit: int = MAX_ROOMS) -> Sample | None:
    """The `Sample` of the lines at the end of a node's last file, when that is a plain file
    read in its order (a compressed one would be read through): set against the other nodes'
    ends, a clock that stepped during the run (NTP) is told from one set wrong throughout."""
    if not files:
        return None
    last = files[-1]
    if last.newest_first or last.pieces or last.merged_source or last.cloud_export:
        return None
    try:
        with open(last.path, "rb") as raw:
            if compression_of(raw.read(MAGIC_BYTES)) is not None:
                return None
    except OSError:
        return None
    return _sample_lines(node, iter(tail_lines(last.path)), exports=False, limit=limit)


def _sample_lines(node: str, lines: Iterator[str], *, exports: bool, limit: int) -> Sample:
    parser = LineParser(node)
    stamps: dict[str, float] = {}
    utc: dict[str, float] = {}
    started: float | None = None
    role: str | None = None
    # Rooms whose moment is a time-stats line's less its durations: an estimate, which holds
    # when the durations cover the wait (`skews` reads none of them).
    estimated: set[str] = set()
    for line in lines:
        head = line[:400]
        if _JSON_REQUEST in head or (exports and head.startswith("{")):
            # `--log-requests-format json`: as its text lines would, when behind the node's
            # prefix; in UTC when it stands alone, dated by its own `timestamp` (blind review
            # 26: a UTC+2 prefill logging only its refusals kept its clock beside such a
            # decode, and 10 honest answers were judged by the pool before its restart).
            _, event = parser.parse(line, "")
            if event is None or not event.time or not _shared_request(event):
                continue
            if event.kind not in ("request_finished", "request_received"):
                continue
            if line.lstrip().startswith("{"):
                _note_receipt(utc, event, event.time)
            else:
                _note_receipt(stamps, event, event.time, estimated)
            continue
        if started is None and "server_args" in head:
            _, event = parser.parse(line, "")
            if event is not None and event.kind == "server_args" and event.time is not None:
                started = event.time
                mode = event.fields.get("disaggregation_mode")
                role = str(mode) if mode is not None else None
            continue
        if _REFUSAL_RID in line and _RECEIVE not in head:
            # A prefill's refusal names the request's rid alone; decode's `Receive:` of it,
            # when the router passes the client's rid to both halves, names the same rid. With
            # no request lines on prefill, these are the only moments both clocks share (blind
            # review 6b: a decode five hours behind, its refusals "joined to no decode answer").
            _, event = parser.parse(line, "")
            rid = event.fields.get("rid") if event is not None else None
            if event is not None and event.kind == "request_rejected" and event.time and rid:
                stamps.setdefault(_RID + str(rid), event.time)
            continue
        if _TIME_STATS in head:
            # When the request entered, on this clock: its line's stamp less the time since
            # entry, which its durations add up to (no `entry_time` epoch needed: blind review
            # 18, a prefill on UTC+8 whose time stats carry none kept its clock, and its
            # refusals "never reached decode"). A prefill logging time stats and no request
            # line shares its rooms' moments with decode's finishes.
            _, event = parser.parse(line, "")
            if event is None or event.kind != "request_time_stats" or not event.time:
                continue
            room = event.fields.get("bootstrap_room")
            if room is not None and _shared_request(event):
                if str(room) not in stamps:
                    stamps[str(room)] = event.time - elapsed_since_entry(event.fields)
                    estimated.add(str(room))
            continue
        if _FINISH in head and _RECEIVE not in head:
            # Its rid and room, at when it was received (its finish less its end-to-end
            # latency): a decode logging finishes alone still shares the moments of prefill's
            # refusals and time stats (blind review 10b: a decode an hour behind, its long
            # answers judged against the pool of the prefill's generation an hour earlier).
            _, event = parser.parse(line, "")
            if event is None or event.kind != "request_finished" or not event.time:
                continue
            if not _shared_request(event):
                continue
            _note_receipt(stamps, event, event.time, estimated)
            continue
        if _RECEIVE not in line or (_ROOM not in line and "rid=" not in line):
            continue
        _, event = parser.parse(line, "")
        if event is None or event.time is None or event.kind != "request_received":
            continue
        if not _shared_request(event):
            continue
        _note_receipt(stamps, event, event.time, estimated)
        if len(stamps) >= limit:
            break
    return Sample(stamps, started, None, utc or None, role, frozenset(estimated))


def span_sample(spans: Iterable[Event]) -> Sample:
    """When the first request spans' requests started, in UTC by their own clocks, under
    their rooms and rids: a reference on no log's clock, as exports' records are (blind review
    38 D3: logs of a UTC-5 host whose stamps told no zone were read as UTC beside the spans of
    the same requests, every exposure dated 5 h early)."""
    utc: dict[str, float] = {}
    for event in spans:
        start = event.fields.get("start")
        if event.kind != "request_trace" or type(start) is not float:
            continue
        if _shared_request(event):
            _note_receipt(utc, event, start)
        if len(utc) >= MAX_ROOMS:
            break
    return Sample({}, None, utc=utc or None)


def _note_receipt(
    stamps: dict[str, float], event: Event, at: float, estimated: set[str] | None = None
) -> None:
    """When a request line's request was received, under its rid and its room (the first
    kept, unless `estimated` holds it): a finish's stamp (`at`) less its end-to-end latency, a
    receipt's own stamp."""
    if event.kind == "request_finished":
        e2e = event.fields.get("e2e_latency")
        at -= e2e if isinstance(e2e, float) and 0 <= e2e < MAX_LATENCY else 0.0
    rid, room = event.fields.get("rid"), event.fields.get("bootstrap_room")
    for key in (_RID + str(rid) if rid else None, None if room is None else str(room)):
        if key is None:
            continue
        if estimated and key in estimated:
            estimated.discard(key)
            stamps[key] = at
        else:
            stamps.setdefault(key, at)


def _shared_request(event: Event) -> bool:
    """A request line of a request two nodes may share: not a node's own warmup (room = a DP
    rank, or the fake bootstrap host) nor a health check (room 0), which every node runs at its
    own start-up under the same rooms and rids."""
    room = event.fields.get("bootstrap_room")
    if room is not None and (str(room) in WARMUP_ROOMS or str(room) in ("", "None")):
        return False
    return event.fields.get("bootstrap_host") != FAKE_BOOTSTRAP_HOST


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
    snapshots: Mapping[str, tuple[float, float]] | None = None,
) -> dict[Stream, Alignment]:
    """The zones of the streams whose stamps tell none, set against the others'.

    Streams whose zone was told are the reference, their stamps moved to UTC, and a zoneless
    stream set against them is set against the streams it shared rooms with, in turn (decode-1
    by prefill-1, set by decode-0): every one reached is known, zero offsets included. The
    streams no told one reaches are set against each other, and which of their clocks is UTC
    stays an assumption: the one that puts the fewest saved snapshots (`snapshots`: each
    node's earliest and latest, in UTC by their names) before the start-up their node's log
    begins with (a server answered before it started), then the fewest after their node's
    log ends (weaker: snapshots may be saved later), then the one the most streams share, then
    the first stream's by name. Only their offsets other than zero are returned.
    """
    told = {stream: r.zone for stream, r in readings.items() if r.voted}
    # Streams of records dated in UTC alone (exports): a reference on no node's clock.
    told.update(
        (stream, 0.0) for stream, got in samples.items() if stream not in readings and got.utc
    )
    zoneless = sorted(stream for stream, r in readings.items() if r.prefixed and not r.voted)
    rank = {stream: at for at, stream in enumerate(zoneless)}
    holders: dict[str, list[Stream]] = {}  # each room's zoneless streams, in their order
    for stream in zoneless:
        for room in samples[stream].rooms:
            holders.setdefault(room, []).append(stream)
    aligned: dict[Stream, Alignment] = {}
    if told and zoneless:
        for stream, (zone, against) in _spread(told, rank, samples, holders).items():
            if stream not in told:
                aligned[stream] = Alignment(zone, against, True)
    rest = {stream: rank[stream] for stream in zoneless if stream not in aligned}
    while rest:
        component = _spread({next(iter(rest)): 0.0}, rest, samples, holders)
        utc = _utc_zone(component, samples, snapshots or {})
        for stream, (zone, against) in component.items():
            if zone != utc:
                aligned[stream] = Alignment(zone - utc, against, False)
            rest.pop(stream, None)
    return aligned


def _spread(
    reference: Mapping[Stream, float],
    candidates: Mapping[Stream, int],
    samples: Mapping[Stream, Sample],
    holders: Mapping[str, list[Stream]],
) -> dict[Stream, tuple[float, tuple[Stream, ...]]]:
    """Each stream `reference`'s clocks reach through shared rooms, with its zone on their
    clock and the streams it shared rooms with.

    The `candidates` (each with its place in the order they are tried) are tried in passes, in
    that order, until a pass places none. A stream is tried again only once a room of its came
    onto the reference clock since its last try: the rooms already there keep their times, so
    its offset could not have changed (`offset`). Thousands of streams that share no room (a
    folder of tiny logs) then cost one look each, not one per stream placed.
    """
    zones: dict[Stream, float] = {}
    times: dict[str, float] = {}  # each room's first Receive, on the reference clock
    this_pass: list[tuple[int, Stream]] = []  # a heap, by place in the order
    next_pass: list[tuple[int, Stream]] = []
    trying = -1  # the place of the stream being tried

    def place(stream: Stream, zone: float) -> None:
        zones[stream] = zone
        own = samples[stream]
        moments = [(room, stamp - zone) for room, stamp in own.rooms.items()]
        moments += (own.utc or {}).items()
        for room, stamp in moments:
            if room in times:
                continue
            times[room] = stamp
            for other in holders.get(room, ()):
                at = candidates.get(other)
                if at is not None and other not in zones:
                    if at > trying:
                        heapq.heappush(this_pass, (at, other))
                    else:
                        next_pass.append((at, other))

    for stream, zone in sorted(reference.items()):
        place(stream, zone)
    while this_pass:
        tried: set[Stream] = set()
        while this_pass:
            trying, stream = heapq.heappop(this_pass)
            if stream in zones or stream in tried:
                continue
            tried.add(stream)
            shift = offset(samples[stream].rooms, times)
            if shift is not None:
                place(stream, shift)
        this_pass, next_pass = next_pass, []
        heapq.heapify(this_pass)
        trying = -1
    shared_by: dict[str, list[Stream]] = {}
    for stream in zones:
        for room in (*samples[stream].rooms, *(samples[stream].utc or {})):
            shared_by.setdefault(room, []).append(stream)
    placed: dict[Stream, tuple[float, tuple[Stream, ...]]] = {}
    for stream, zone in zones.items():
        held = (*samples[stream].rooms, *(samples[stream].utc or {}))
        shared = {other for room in held for other in shared_by[room]}
        placed[stream] = (zone, tuple(sorted(shared - {stream})))
    return placed


def _utc_zone(
    component: Mapping[Stream, tuple[float, tuple[Stream, ...]]],
    samples: Mapping[Stream, Sample],
    snapshots: Mapping[str, tuple[float, float]],
) -> float:
    """Which of a component's zones (set against its first stream) to take as UTC."""
    zones = [zone for zone, _ in component.values()]  # the first stream's first
    return min(
        dict.fromkeys(zones),
        key=lambda utc: (*_contradictions(component, utc, samples, snapshots), -zones.count(utc)),
    )


def _contradictions(
    component: Mapping[Stream, tuple[float, tuple[Stream, ...]]],
    utc: float,
    samples: Mapping[Stream, Sample],
    snapshots: Mapping[str, tuple[float, float]],
) -> tuple[int, int]:
    """With `utc` taken as UTC: the streams whose start-up comes after a snapshot of their
    node answered, and those whose last line comes before one did."""
    before = after = 0
    for stream, (zone, _) in component.items():
        taken = snapshots.get(stream[0])
        if taken is None:
            continue
        shift = zone - utc
        started, ended = samples[stream].started, samples[stream].ended
        if started is not None and taken[0] < started - shift - MAX_SKEW:
            before += 1
        if ended is not None and taken[1] > ended - shift + MAX_SKEW:
            after += 1
    return before, after


# Two hosts' clocks further apart than this, beyond their zones, are set one by the other.
# Hosts without time sync drift seconds apart, which every join tolerates; minutes apart, a
# request's refusal and its answer fall outside the ledger's join window, and every exposure
# on the fast host is missed (blind review 38: a decode clock 40 minutes fast, 0 of 23 named).
SKEW_TOLERANCE: Final = 60.0
# How closely the shared rooms must agree on how far apart two clocks are: receipts are whole
# seconds, a finish less its latency a little less sure.
SKEW_SPREAD: Final = 10.0
# Rooms sampled from a stream whose zone its own stamps tell: enough for a median.
SKEW_ROOMS: Final = 256
# Streams of one room compared pairwise (a room is one request's: two or three nodes log it).
_MAX_HOLDERS: Final = 8


class Skew(NamedTuple):
    """How far a stream's clock ran ahead of the clock its times were moved onto, the streams
    that clock was read from, and whether as many nodes kept its own clock (then which of the
    two was right, the logs cannot tell)."""

    seconds: float
    against: tuple[Stream, ...]
    tied: bool


def skews(zones: Mapping[Stream, float], samples: Mapping[Stream, Sample]) -> dict[Stream, Skew]:
    """The streams whose clock ran more than `SKEW_TOLERANCE` off the others' for the requests
    both logged, once each stream's zone (`zones`) is taken off: a host clock set wrong, which
    its own UTC stamps share, so no zone reading sees it. Only the moments lines state are
    compared (receipts, refusals, finishes less their latency): a time-stats line less its
    durations is an estimate, off by any wait they leave out, and a move on an estimate
    accuses honest answers (a synthetic prefill of 312 s beside a decode that waited none).

    Streams whose clocks agree form one clock; of the clocks that shared rooms, the one the
    most nodes keep is taken as right, on a tie the prefill nodes' (their refusals and pools
    are what the answers are judged by), then the first by name. Every other clock is moved
    onto it by the median of its shared rooms' differences, in turn through the clocks each
    reaches. Streams that share no room with another keep their own clock."""
    return _skews_of(_ahead(zones, samples), samples)


def _skews_of(
    ahead: Mapping[tuple[Stream, Stream], float], samples: Mapping[Stream, Sample]
) -> dict[Stream, Skew]:
    if all(abs(seconds) <= SKEW_TOLERANCE for seconds in ahead.values()):
        return {}
    return _moved_clocks(ahead, samples)


# Two clocks this far apart or less are said to agree: receipts are whole seconds.
SAID_SKEW: Final = 5.0


class ClockErrors(NamedTuple):
    """What the shared rooms tell of the streams' host clocks (`skews_and_steps`)."""

    skews: dict[Stream, Skew]
    steps: dict[Stream, float]
    # Pairs more than `SAID_SKEW` but at most `SKEW_TOLERANCE` apart (the first's clock less
    # the second's), where no clock is moved: every join tolerates them, but every time read
    # from one is that far off the other's (blind review 48 D5: a decode 45 s fast, its
    # exposures' times given to the millisecond, nothing said).
    unmoved: dict[tuple[Stream, Stream], float]


def skews_and_steps(
    zones: Mapping[Stream, float],
    starts: Mapping[Stream, Sample],
    ends: Mapping[Stream, Sample],
) -> ClockErrors:
    """`skews` of the streams' first lines, the streams whose host clock moved during the run
    by more than `SKEW_TOLERANCE` (NTP stepping it): their skew among the other nodes' ends
    (`ends`) less that at the start, for streams both measured (a stream whose end shares no
    room is not judged), and the clocks apart by less than a minute, said, not moved."""
    before = _ahead(zones, starts)
    first = _skews_of(before, starts)
    unmoved = (
        {}
        if first
        else {pair: s for pair, s in before.items() if SAID_SKEW < abs(s) <= SKEW_TOLERANCE}
    )
    after = _ahead(zones, ends) if ends else {}
    measured = {stream for pair in before for stream in pair} & {
        stream for pair in after for stream in pair
    }
    if not measured:
        return ClockErrors(first, {}, unmoved)
    last = _skews_of(after, ends)
    moved: dict[Stream, float] = {}
    for stream in sorted(measured):
        step = (last[stream].seconds if stream in last else 0.0) - (
            first[stream].seconds if stream in first else 0.0
        )
        if abs(step) <= SKEW_TOLERANCE:
            continue
        moved.setdefault(stream, step)
        said = last.get(stream) or first.get(stream)
        if said is not None and said.tied and step > 0:
            # As many nodes kept the other clock: which one stepped, the ends cannot tell. The
            # other may have been set back by as much, a jump back its own times show beyond
            # doubt (a jump ahead may be an idle gap); whichever shows its jump is moved (a
            # 1P1D pair whose prefill was set back 5 min: 197 late lines, NOT JUDGED).
            for other in said.against:
                if other in measured:
                    moved.setdefault(other, -step)
    return ClockErrors(first, moved, unmoved)


def _ahead(
    zones: Mapping[Stream, float], samples: Mapping[Stream, Sample]
) -> dict[tuple[Stream, Stream], float]:
    """Each pair of streams sharing enough rooms, its first's clock less its second's."""
    moments: dict[Stream, dict[str, float]] = {}
    for stream, zone in zones.items():
        own = samples.get(stream)
        if own is None:
            continue
        # Its JSON records standing alone are dated in UTC, by the same host clock.
        stated = dict(own.utc or {})
        stated.update(
            (room, stamp - zone) for room, stamp in own.rooms.items() if room not in own.estimated
        )
        if stated:
            moments[stream] = stated
    holders: dict[str, list[Stream]] = {}
    for stream in sorted(moments):
        for room in moments[stream]:
            held = holders.setdefault(room, [])
            if len(held) < _MAX_HOLDERS:
                held.append(stream)
    apart: dict[tuple[Stream, Stream], list[float]] = {}
    for room, held in holders.items():
        for at, first in enumerate(held):
            for second in held[at + 1 :]:
                apart.setdefault((first, second), []).append(
                    moments[first][room] - moments[second][room]
                )
    ahead: dict[tuple[Stream, Stream], float] = {}  # first's clock less second's
    for pair, diffs in apart.items():
        if len(diffs) < MIN_SHARED:
            continue
        middle = statistics.median(diffs)
        if sum(abs(diff - middle) <= SKEW_SPREAD for diff in diffs) >= MIN_AGREEING * len(diffs):
            ahead[pair] = middle
    return ahead


def _moved_clocks(
    ahead: Mapping[tuple[Stream, Stream], float], samples: Mapping[Stream, Sample]
) -> dict[Stream, Skew]:
    """`skews` once pairs of streams are measured: each stream's lead on one of those it
    reaches, the clocks those leads form, the right one, the moves onto it."""
    links: dict[Stream, dict[Stream, float]] = {}  # stream -> other -> its lead on the other
    for (first, second), seconds in ahead.items():
        links.setdefault(first, {})[second] = seconds
        links.setdefault(second, {})[first] = -seconds

    def rank(clock: list[Stream]) -> tuple[int, bool, Stream]:
        """The clock taken as right sorts first: most nodes, a prefill's, first by name."""
        prefill = any(samples[stream].role == "prefill" for stream in clock)
        return -len({node for node, _ in clock}), not prefill, clock[0]

    moved: dict[Stream, Skew] = {}
    for root in sorted(links):
        if root in moved:
            continue
        lead, reached = {root: 0.0}, [root]
        while reached:
            placed = reached.pop(0)
            for other, seconds in sorted(links[placed].items()):
                if other not in lead:
                    lead[other] = lead[placed] - seconds
                    reached.append(other)
        clocks: list[list[Stream]] = []  # streams whose leads lie within the tolerance
        for stream in sorted(lead, key=lambda stream: (lead[stream], stream)):
            if clocks and lead[stream] - lead[clocks[-1][0]] <= SKEW_TOLERANCE:
                clocks[-1].append(stream)
            else:
                clocks.append([stream])
        for clock in clocks:
            clock.sort()
        right = min(clocks, key=rank)
        base = statistics.median(lead[stream] for stream in right)
        tied = sum(1 for clock in clocks if rank(clock)[0] == rank(right)[0]) > 1
        for clock in clocks:
            for stream in clock:
                moved[stream] = Skew(lead[stream] - base, tuple(right), tied)
    return {stream: skew for stream, skew in moved.items() if abs(skew.seconds) > SKEW_TOLERANCE}
