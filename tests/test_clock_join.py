"""Nodes whose stamps tell no zone are set against each other by the requests both logged.

Blind review D4: decode hosts at UTC+2, prefill on UTC, no time stats and no metrics stamps.
Every decode line came two hours after the prefill lines of its request, nothing joined, and
all 31 over-length answers were missed ("decode's logs left out").
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from collector.audit import add_audit_arguments, run_audit
from collector.events import parse_iso_time
from collector.files import TelemetryFile
from collector.forensics.driver import SCHEMA_PATH, run_forensics
from collector.sglang.clock_join import Sample, align, offset, sample
from collector.sglang.log_clock import ZoneReading
from collector.state.ledger import FAKE_BOOTSTRAP_HOST
from simulator.offline import run_offline
from simulator.scenario import scenario_from_dict

SCENARIOS = Path(__file__).parents[1] / "simulator" / "scenarios"
HOUR = 3600.0


def _rooms(start: float, count: int = 10, *, drift: float = 0.0) -> dict[str, float]:
    """`count` rooms received a minute apart from `start`, each `drift` seconds later."""
    return {str(1000 + i): start + 60.0 * i + drift for i in range(count)}


@pytest.mark.parametrize(
    ("shift", "expected"),
    [
        (2 * HOUR + 3.0, 2 * HOUR),  # clocks seconds apart: the zone is whole quarter hours
        (5.5 * HOUR - 40.0, 5.5 * HOUR),  # India
        (5.75 * HOUR, 5.75 * HOUR),  # Nepal
        (-5 * HOUR + 90.0, -5 * HOUR),
        (0.5, 0.0),
        (HOUR / 8, None),  # half way between two zones: no zone says so
        (20 * HOUR, None),  # no zone is that far ahead
    ],
)
def test_the_offset_is_the_zone_the_shared_rooms_agree_on(
    shift: float, expected: float | None
) -> None:
    theirs = _rooms(1_790_000_000.0)
    assert offset(_rooms(1_790_000_000.0, drift=shift), theirs) == expected


def test_rooms_that_disagree_or_are_too_few_set_no_clock() -> None:
    theirs = _rooms(1_790_000_000.0)
    mine = _rooms(1_790_000_000.0, drift=2 * HOUR)
    for room in list(mine)[:3]:  # three of ten received an hour apart: 70% agree
        mine[room] += HOUR
    assert offset(mine, theirs) is None
    assert offset(dict(list(mine.items())[5:7]), theirs) is None  # two shared rooms
    assert offset(_rooms(0.0, 10), {"9": 1.0}) is None  # none shared


def _reading(voted: bool, zone: float = 0.0) -> ZoneReading:
    return ZoneReading(zone, voted, True)


def test_zoneless_streams_are_set_against_streams_whose_zone_is_told() -> None:
    prefill, decode, lone = ("prefill-0", "log"), ("decode-0", "log"), ("decode-1", "log")
    start = 1_790_000_000.0
    readings = {prefill: _reading(True, HOUR), decode: _reading(False), lone: _reading(False)}
    samples = {
        prefill: Sample(_rooms(start + HOUR), None),  # UTC+01:00, told by its stamps
        decode: Sample(_rooms(start + 3 * HOUR + 2.0), None),  # UTC+03:00, told by nothing
        lone: Sample({"77": start}, None),
    }
    aligned = align(readings, samples)
    assert set(aligned) == {decode}  # decode-1 shares no room: it keeps its UTC reading
    assert aligned[decode].zone == 3 * HOUR
    assert aligned[decode].against == (prefill,) and aligned[decode].known


def test_without_a_told_zone_the_clock_no_snapshot_contradicts_is_the_reference() -> None:
    """Decode's stamps two hours ahead of prefill's, neither zone told: which one is UTC? The
    `/server_info` snapshots (UTC) of servers running before decode's log says it started,
    read as UTC, settle it; without them the first stream by name is the reference, and UTC
    stays an assumption either way."""
    prefill, decode = ("prefill-0", "log"), ("decode-0", "log")
    start = 1_790_000_000.0
    readings = {prefill: _reading(False), decode: _reading(False)}
    samples = {
        prefill: Sample(_rooms(start), start - 600.0),
        decode: Sample(_rooms(start + 2 * HOUR), start + 2 * HOUR - 600.0),
    }
    by_name = align(readings, samples)
    assert set(by_name) == {prefill} and by_name[prefill].zone == -2 * HOUR
    assert not by_name[prefill].known
    snapshots = {"decode-0": (start - 300.0, start), "prefill-0": (start - 300.0, start)}
    settled = align(readings, samples, snapshots)
    assert set(settled) == {decode} and settled[decode].zone == 2 * HOUR
    assert settled[decode].against == (prefill,) and not settled[decode].known


# (prefill's zone, decode's, nodes of each role, whether prefill's stamps tell its zone): the
# zones `input.log_zone_aligned` must say, and whether they were set against a told zone.
SPLIT_ZONES = {
    "prefill-told": ((60, 180, 1, True), {"decode-0": "+03:00"}, True),
    # Neither told: the snapshots say decode's clock is not UTC (its server answered them
    # before its log says it started).
    "none-told": ((0, 120, 1, False), {"decode-0": "+02:00"}, False),
    # Decode behind, two of each: each decode node shares rooms with one prefill node only,
    # and decode's clocks, read as UTC, end hours before the last snapshots were saved.
    "two-each-behind": ((0, -300, 2, False), {"decode-0": "-05:00", "decode-1": "-05:00"}, False),
}


def _split_zones(prefill: int, decode: int, count: int, prefill_tells: bool) -> Any:
    """The small incident replay with prefill's and decode's hosts at the given zones
    (minutes), `count` nodes each; decode's stamps tell no zone, prefill's when told to."""
    data = yaml.safe_load((SCENARIOS / "incident-replay-small.yaml").read_text())
    for role, minutes, tells in (("prefill", prefill, prefill_tells), ("decode", decode, False)):
        data["deployment"][role].update(
            log_utc_offset_minutes=minutes,
            request_time_stats=tells,
            enable_metrics=tells,
            count=count,
        )
    return scenario_from_dict(data, "split-zones")


def _without_startup_times(snapshots: Path) -> None:
    """The saved `/server_info` documents without the `startup_time` that tells a zoneless
    log's zone by itself (`log_clock.startup_zone`): the rooms alone set the clocks."""
    for saved in snapshots.glob("*.server_info.json"):
        document = json.loads(saved.read_text())
        document.pop("startup_time", None)
        saved.write_text(json.dumps(document))


@pytest.mark.parametrize("startup_times", [False, True], ids=["rooms", "startup-times"])
@pytest.mark.parametrize("case", list(SPLIT_ZONES))
def test_an_incident_on_hosts_in_different_zones_is_joined_request_by_request(
    tmp_path: Path, case: str, startup_times: bool
) -> None:
    deployment, zones, known = SPLIT_ZONES[case]
    folder = tmp_path / "sim"
    run_offline(_split_zones(*deployment), folder)
    if not startup_times:
        _without_startup_times(folder / "snapshots")
    truth = json.loads((folder / "ground_truth.json").read_text())["exposed"]
    rooms = {str(r["bootstrap_room"]) for r in truth}
    assert len(rooms) >= 10
    inputs = [str(folder / "logs"), str(folder / "snapshots")]
    summary = run_forensics(inputs, tmp_path / "out", write_parquet=False, workers=2).summary
    jsonschema.validate(summary, json.loads(SCHEMA_PATH.read_text()))
    assert {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]} == rooms
    # Stamped to the second (no time stats, no metrics stamps): right to the second.
    for end, pick in (("first", min), ("last", max)):
        said = parse_iso_time(summary["exposure"][end]) or 0.0
        assert 0.0 <= pick(parse_iso_time(r["time"]) or 0.0 for r in truth) - said < 1.0
    if startup_times:
        # Each zoneless log's zone told by its node's saved startup_time, none by the rooms.
        told = summary["input"]["log_zone_by_startup"]
        assert {node: told[node] for node in zones} == zones
        assert summary["input"]["log_zone_aligned"] == {}
        return
    aligned = summary["input"]["log_zone_aligned"]
    assert {node: how["offset"] for node, how in aligned.items()} == zones
    assert {how["against_known"] for how in aligned.values()} == {known}
    assert {node: how["against"] for node, how in aligned.items()} == {
        f"decode-{i}": [f"prefill-{i}"] for i in range(len(zones))
    }
    said = (tmp_path / "out" / "report.md").read_text()
    assert "The log stamps of decode-0" in said and "carry no zone; for the same requests" in said


def _receive(stamp: str, room: int, host: str = "10.0.1.10") -> str:
    return (
        f"[{stamp}] Receive: obj=GenerateReqInput(rid='r{room}', stream=False, "
        f"bootstrap_host='{host}', bootstrap_port=8998, bootstrap_room={room})\n"
    )


def test_warmups_and_health_checks_are_no_shared_request(tmp_path: Path) -> None:
    """Every node's warmups take its DP ranks as rooms and its health checks room 0, at its
    own start-up: logs two hours apart that share only those must not set one clock by the
    other (the real rooms, four a node here, are not shared)."""
    files = {}
    for node, hour in (("prefill-0", 10), ("decode-0", 12)):
        lines = [_receive(f"2026-11-02 {hour}:00:0{rank}", rank) for rank in range(8)]
        lines += [_receive(f"2026-11-02 {hour}:01:00", 0, FAKE_BOOTSTRAP_HOST)]
        lines += [
            _receive(f"2026-11-02 {hour}:05:0{i}", 7_000_000_000_000 + hour * 100 + i)
            for i in range(4)
        ]
        path = tmp_path / f"{node}.log"
        path.write_text("".join(lines))
        files[(node, "log")] = Sample(
            sample(node, [TelemetryFile(path, node, "log", (0, ""))]).rooms, None
        )
    # The four real rooms, and their rids: no warmup's or health check's.
    assert all(len(s.rooms) == 8 for s in files.values())
    assert align({key: _reading(False) for key in files}, files) == {}


def test_clocks_are_set_in_turn_through_the_nodes_each_shares_rooms_with() -> None:
    """Each request goes to one prefill and one decode node: decode-1 shares no room with the
    prefill node whose zone is told, only with prefill-1, which shares rooms with decode-0."""
    p0, p1, d0, d1 = (("prefill-0", "log"), ("prefill-1", "log"), ("decode-0", "log"),
                      ("decode-1", "log"))  # fmt: skip
    t = 1_790_000_000.0

    def rooms(first: int, start: float) -> dict[str, float]:
        return {str(first + i): start + 60.0 * i for i in range(5)}

    samples = {  # p0 UTC, told; d0 +05:30; p1 -03:00; d1 +00:00
        p0: Sample(rooms(100, t), None),
        d0: Sample({**rooms(100, t + 5.5 * HOUR), **rooms(200, t + 600 + 5.5 * HOUR)}, None),
        p1: Sample({**rooms(200, t + 600 - 3 * HOUR), **rooms(300, t + 900 - 3 * HOUR)}, None),
        d1: Sample(rooms(300, t + 900), None),
    }
    readings = {p0: _reading(True), d0: _reading(False), p1: _reading(False), d1: _reading(False)}
    aligned = align(readings, samples)
    assert {stream: a.zone for stream, a in aligned.items()} == {
        d0: 5.5 * HOUR,
        p1: -3 * HOUR,
        d1: 0.0,  # UTC, and now known to be
    }
    assert aligned[d1].against == (p1,) and aligned[p1].against == (d0, d1)
    assert all(a.known for a in aligned.values())
    # None told: the same clocks set against each other, UTC the zone most of them share, and
    # an assumption; a stream that shares nothing keeps its reading.
    lone = ("decode-9", "log")
    samples[lone] = Sample(rooms(900, t), None)
    readings = {stream: _reading(False) for stream in samples}
    assumed = align(readings, samples)
    assert {stream: a.zone for stream, a in assumed.items()} == {d0: 5.5 * HOUR, p1: -3 * HOUR}
    assert not any(a.known for a in assumed.values())


def _refusal(at: str, rid: str) -> str:
    """A 0.5.19 prefill's refusal of a 900,000-token prompt, naming its request by rid alone."""
    return (
        f"[{at} TP0] Input length (900000 tokens) exceeds the maximum allowed length "
        f"(681274 tokens). Use a shorter input or enable --allow-auto-truncate., "
        f"self.rid='{rid}'\n"
    )


def test_refusals_and_finishes_naming_one_rid_set_a_clock(tmp_path: Path) -> None:
    """A prefill logging no request lines names its refusals by rid alone; decode logs the same
    rids' finishes (the router passes the client's rid to both halves). Decode five hours
    behind, with no room shared, its refusals were "joined to no decode answer" (blind review
    6b). A finish counts at its receipt: its stamp less its end-to-end latency."""
    refusals, finishes = [], []
    for i in range(5):
        rid = f"{i:032x}"
        refusals.append(_refusal(f"2026-11-02 09:0{i}:45", rid))
        finishes.append(
            f"[2026-11-02 04:0{i}:47] Finish: obj=GenerateReqInput(rid='{rid}', "
            f"bootstrap_host='10.0.1.10', bootstrap_port=8998, bootstrap_room={7000 + i}), "
            f"out={{'meta_info': {{'id': '{rid}', 'finish_reason': {{'type': 'abort', "
            f"'status_code': 400}}, 'prompt_tokens': 1, 'e2e_latency': 2.0}}}}\n"
        )
    samples = {}
    for node, lines in (("prefill-0", refusals), ("decode-0", finishes)):
        path = tmp_path / f"{node}.log"
        path.write_text("".join(lines))
        samples[node] = sample(node, [TelemetryFile(path, node, "log", (0, ""))]).rooms
    assert offset(samples["decode-0"], samples["prefill-0"]) == -5 * 3600.0


def test_time_stats_and_long_finishes_sharing_rooms_set_a_clock(tmp_path: Path) -> None:
    """A prefill logging time stats alone (no request line) and a decode logging its finishes
    alone, an hour behind: they share rooms only through the time stats' `entry_time` and the
    finishes less their end-to-end latency, here over 100 s (blind review 10b: the decode's
    answers met the prefill's generation an hour earlier, its smaller pool)."""
    stats, finishes = [], []
    for i in range(5):
        room, rid = 9000 + i, f"{i:032x}"
        entry = 1_788_253_200.0 + 600 * i  # 2026-09-01 09:00 UTC, every 10 minutes
        stats.append(
            f"[2026-09-01 09:{i}1:40 TP0] ReqTimeStats(rid={rid}, bootstrap_room={room}, "
            f"input_len=900000, cached_input_len=0, output_len=1, attempts=0, type=prefill): "
            f"bootstrap_duration=1.00ms, queue_duration=50.00ms, forward_duration=99949.00ms, "
            f"entry_time={entry:.3f}\n"
        )
        finishes.append(
            f"[2026-09-01 08:{i}2:10] Finish: obj=GenerateReqInput(rid='{rid}', "
            f"bootstrap_host='10.0.1.10', bootstrap_port=8998, bootstrap_room={room}), "
            f"out={{'meta_info': {{'id': '{rid}', 'finish_reason': {{'type': 'stop'}}, "
            f"'prompt_tokens': 900000, 'completion_tokens': 300, 'e2e_latency': 130.0}}}}\n"
        )
    samples = {}
    for node, lines in (("prefill-0", stats), ("decode-0", finishes)):
        path = tmp_path / f"{node}.log"
        path.write_text("".join(lines))
        samples[node] = sample(node, [TelemetryFile(path, node, "log", (0, ""))]).rooms
    assert offset(samples["decode-0"], samples["prefill-0"]) == -3600.0


def test_time_stats_without_an_epoch_set_a_clock_by_their_durations(tmp_path: Path) -> None:
    """Blind review 18: a prefill on UTC+8 logging time stats without `entry_time`, and a
    decode logging its receipts. The stats carry no UTC stamp, so only their stamps less their
    durations share the rooms' moments; unread, the prefill clock stayed 8 h ahead and its
    refusals were said to have "never reached decode" beside decode's answers to them."""
    stats, receipts = [], []
    for i in range(5):
        room = 9100 + i
        stats.append(
            f"[2026-09-03 17:{i}0:45 TP0] ReqTimeStats(rid={i:032x}, bootstrap_room={room}, "
            f"input_len=400000, cached_input_len=0, output_len=1, type=prefill): "
            f"bootstrap_duration=1.20ms, queue_duration=0.50ms, forward_duration=44000.00ms\n"
        )
        receipts.append(_receive(f"2026-09-03 09:{i}0:01", room))
    samples = {}
    for node, lines in (("prefill-0", stats), ("decode-0", receipts)):
        path = tmp_path / f"{node}.log"
        path.write_text("".join(lines))
        samples[node] = sample(node, [TelemetryFile(path, node, "log", (0, ""))]).rooms
    assert offset(samples["prefill-0"], samples["decode-0"]) == 8 * HOUR


def test_json_records_dated_in_utc_set_a_zoneless_prefill_against_utc(tmp_path: Path) -> None:
    """Blind review 26: a UTC+2 prefill logging only its refusals (by rid), beside a decode
    whose request records are `--log-requests-format json` (each dated in UTC by its own
    `timestamp`), kept its clock; 10 honest answers were then judged by the pool in force two
    hours earlier. A record standing alone is a moment in UTC, on no node's clock; one behind
    the node's prefix is on that node's clock, as a text line is."""
    refusals, records, prefixed = [], [], []
    for i in range(5):
        rid = f"{i:032x}"
        refusals.append(_refusal(f"2026-11-02 11:0{i}:45", rid))
        record = json.dumps(
            {
                "timestamp": f"2026-11-02T09:0{i}:47.000000+00:00",
                "event": "request.finished",
                "rid": rid,
                "obj": {"rid": rid, "bootstrap_room": 7000 + i},
                "out": {"meta_info": {"id": rid, "prompt_tokens": 1, "e2e_latency": 2.0}},
            }
        )
        records.append(record + "\n")
        prefixed.append(f"[2026-11-02 11:0{i}:47] {record}\n")
    files = {}
    for node, lines in (("prefill-0", refusals), ("decode-0", records), ("decode-1", prefixed)):
        path = tmp_path / f"{node}.log"
        path.write_text("".join(lines))
        files[node] = [TelemetryFile(path, node, "log", (0, ""))]
    prefill, decode = sample("prefill-0", files["prefill-0"]), sample("decode-0", files["decode-0"])
    assert decode.rooms == {} and decode.utc is not None
    assert offset(prefill.rooms, decode.utc) == 2 * 3600.0
    # Behind the prefix, the same records are on decode-1's own clock, as its text lines are.
    assert offset(prefill.rooms, sample("decode-1", files["decode-1"]).rooms) == 0.0
    # Set against decode-0, whose zone its records told: the prefill is two hours east.
    readings = {
        ("prefill-0", "log"): ZoneReading(0.0, False, True),
        ("decode-0", "log"): ZoneReading(7200.0, True, True),
    }
    samples = {("prefill-0", "log"): prefill, ("decode-0", "log"): decode}
    aligned = align(readings, samples)
    assert aligned[("prefill-0", "log")].zone == 2 * 3600.0


def test_request_metrics_exports_set_a_zoneless_prefill_against_utc(tmp_path: Path) -> None:
    """Blind review 26: beside `--export-metrics-to-file` records (dated in UTC by their
    `request_finished_ts`), a UTC+2 prefill logging only its refusals kept its clock; 10
    honest answers were judged by the pool in force two hours earlier."""
    refusals, exported = [], []
    for i in range(5):
        rid = f"{i:032x}"
        refusals.append(_refusal(f"2026-11-02 11:0{i}:45", rid))
        finished = parse_iso_time(f"2026-11-02T09:0{i}:47.000Z")
        record = {
            "request_parameters": json.dumps({"rid": rid, "bootstrap_room": 7000 + i}),
            "meta_info": {"id": rid, "prompt_tokens": 1, "e2e_latency": 2.0},
        }
        record["meta_info"]["request_finished_ts"] = finished  # type: ignore[index]
        exported.append(json.dumps(record) + "\n")
    prefill_log = tmp_path / "prefill-0.log"
    prefill_log.write_text("".join(refusals))
    export = tmp_path / "sglang-request-metrics-20261102_09.log"
    export.write_text("".join(exported))
    prefill = sample("prefill-0", [TelemetryFile(prefill_log, "prefill-0", "log", (0, ""))])
    records = sample("decode-0", [TelemetryFile(export, "decode-0", "log", (0, ""))], exports=True)
    assert records.utc is not None and offset(prefill.rooms, records.utc) == 2 * 3600.0
    readings = {("prefill-0", "log"): ZoneReading(0.0, False, True)}
    samples = {("prefill-0", "log"): prefill, ("decode-0", "log:export"): records}
    assert align(readings, samples)[("prefill-0", "log")].zone == 2 * 3600.0


def test_audit_reads_a_zoneless_node_s_restarts_in_the_zone_forensics_reads_them(
    tmp_path: Path,
) -> None:
    """Blind review 28a: a prefill at UTC-4 whose lines tell no zone (no time stats, no
    metrics) was read by the audit as UTC, its restarts four hours early against snapshots
    named in UTC; a roll-back to the small pool then came before a snapshot of the good one,
    and the gate passed. Set against decode's rooms, as forensics sets it, the restart back
    on the large pool is at 13:35 UTC."""
    data = yaml.safe_load((SCENARIOS / "incident-replay-small.yaml").read_text())
    data["deployment"]["prefill"].update(
        log_utc_offset_minutes=-240, request_time_stats=False, enable_metrics=False
    )
    folder = tmp_path / "sim"
    run_offline(scenario_from_dict(data, "zoneless-prefill"), folder)
    out, err = io.StringIO(), io.StringIO()
    parser = argparse.ArgumentParser(prog="kvwatch audit")
    add_audit_arguments(parser)
    run_audit(parser.parse_args([str(folder / "logs"), str(folder / "snapshots")]), out, err)
    (prefill,) = [line for line in out.getvalue().splitlines() if line.startswith("prefill-0")]
    assert "an earlier configuration failed until 2026-09-08 13:35:00 UTC" in prefill


def test_a_router_s_log_beside_the_engines_is_said_of_no_zone(tmp_path: Path) -> None:
    """Blind review 29a: every line of the router's log had a UTC stamp of its own and of
    kubectl's, and the report said "the log stamps of smg-router carry no zone": its lines are
    noise, none of them read for a time."""
    data = yaml.safe_load((SCENARIOS / "incident-replay-small.yaml").read_text())
    data["deployment"]["prefill"].update(request_time_stats=False, enable_metrics=False)
    folder = tmp_path / "sim"
    run_offline(scenario_from_dict(data, "with-router"), folder)
    (folder / "logs" / "smg-router.log").write_text(
        "".join(
            f"2026-09-08T12:0{i}:00.000000102Z 2026-09-08T12:0{i}:00.000000Z  INFO "
            f"smg::routers::http::pd_router: PD routing bootstrap_room={1000 + i}\n"
            for i in range(10)
        )
    )
    summary = run_forensics([str(folder / "logs")], tmp_path / "out", write_parquet=False).summary
    assert "smg-router" not in summary["input"]["log_zone_unknown"]
    assert "smg-router" not in (tmp_path / "out" / "report.md").read_text()
