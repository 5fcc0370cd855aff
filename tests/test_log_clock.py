"""Logs written in the host's local time are read as UTC, told by their own UTC stamps.

SGLang prints its prefix in local time with no zone; `ReqTimeStats`'s `entry_time` and the
meta_info stamps of `--enable-metrics` are Unix epochs. Snapshots and spans are UTC. A host east
of UTC put its log lines hours after the `/server_info` restart that fixed the pool, and the
over-length answers served before it were cleared by the bigger pool.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector.audit.run import audit
from collector.events import Event, parse_iso_time
from collector.files import TelemetryFile
from collector.forensics.driver import run_forensics
from collector.forensics.report import log_zones_line
from collector.parse import ParseStats, events_by_node
from collector.sglang.log_clock import LogClock, agreed_zone, log_zone, vote, zone_name
from collector.sglang.logs import LineParser
from simulator.offline import run_offline
from simulator.scenario import scenario_from_dict

SCENARIOS = Path(__file__).parents[1] / "simulator" / "scenarios"

# Reference §2.6's decode sample: printed at 10:15:09 UTC, entered 10:15:09.118 UTC less the
# 9.2 s its durations add up to (the sample is constructed; only the sum matters here).
TIME_STATS = (
    "[{prefix} DP2 TP2 EP2] ReqTimeStats(rid=4f1c, bootstrap_room=8360203925601259718, "
    "input_len=4096, cached_input_len=0, output_len=512, attempts=0, type=decode): "
    "bootstrap_duration=1.20ms, alloc_wait_duration=0.35ms, transfer_duration=88.41ms, "
    "queue_duration=0.52ms, forward_duration=9123.77ms, entry_time=1793614500.000"
)
FINISH = (
    "[{prefix}] Finish: obj=GenerateReqInput(rid='4f1c'), out={{'meta_info': {{'id': '4f1c', "
    "'finish_reason': {{'type': 'stop', 'matched': 2}}, 'prompt_tokens': 4096, "
    "'completion_tokens': 512, 'cached_tokens': 0, 'e2e_latency': 9.3, "
    "'request_finished_ts': 1793614509.3}}}}"
)


def _event(line: str) -> Event:
    _, event = LineParser("decode-0").parse(line, "t:1")
    assert event is not None
    return event


@pytest.mark.parametrize(
    ("prefix", "zone"),
    [
        ("2026-11-02 10:15:09", 0.0),
        ("2026-11-02 12:15:09", 7200.0),
        ("2026-11-02 05:15:09", -18000.0),
        ("2026-11-02 15:45:09", 19800.0),  # India, UTC+05:30
    ],
)
def test_a_stamped_line_votes_for_the_zone_its_prefix_was_printed_in(
    prefix: str, zone: float
) -> None:
    assert vote(_event(TIME_STATS.format(prefix=prefix))) == zone
    assert vote(_event(FINISH.format(prefix=prefix))) == zone


def test_a_line_whose_stamps_are_minutes_off_a_quarter_hour_has_no_say() -> None:
    # 10:23:09 against 10:15:09: eight minutes is no zone, and no request's durations say it.
    assert vote(_event(FINISH.format(prefix="2026-11-02 10:23:09"))) is None
    assert vote(_event("[2026-11-02 10:15:09 TP0] Decode batch, #running-req: 1")) is None


# A prefill's time stats (reference §2.6): printed once the KV is sent, 70 GB at 0.1 GB/s here,
# 700 s after the request entered at 10:15:09 UTC; no duration says the transfer's time.
PREFILL_STATS = (
    "[{prefix} TP0] ReqTimeStats(rid=w0, bootstrap_room=100, input_len=1000000, "
    "cached_input_len=0, output_len=1, attempts=0, type=prefill): bootstrap_duration=100.00ms, "
    "queue_duration=100.00ms, forward_duration=300.00ms, entry_time=1793614509.000, "
    "transfer_speed={speed:.2f} GB/s, transfer_total={size:.2f} MB"
)


@pytest.mark.parametrize(("speed", "size"), [(0.1, 70_000.0), (1.0, 1.0)])
@pytest.mark.parametrize("late", [600, 700, 780])
def test_a_prefill_line_printed_minutes_after_its_request_votes_for_no_false_zone(
    speed: float, size: float, late: int
) -> None:
    """Blind review 21 (D7): a UTC prefill whose lines came 700 s after their requests' entry
    (a slow KV transfer) voted UTC-00:15, and its log was read 15 minutes early. The transfer's
    time is its size over its speed; and no clock keeps a zone a quarter hour off UTC."""
    printed = datetime.fromtimestamp(1793614509 + late, UTC).strftime("%Y-%m-%d %H:%M:%S")
    line = PREFILL_STATS.format(prefix=printed, speed=speed, size=size)
    assert vote(_event(line)) in (0.0, None)
    # The same line printed on a clock two hours east still says so, when its stats tell the
    # transfer's time.
    east = datetime.fromtimestamp(1793614509 + late + 7200, UTC).strftime("%Y-%m-%d %H:%M:%S")
    told = vote(_event(PREFILL_STATS.format(prefix=east, speed=speed, size=size)))
    assert told == (7200.0 if size / 1000 / speed == 700 else None) or late == 700 == told


def test_the_zone_needs_two_thirds_of_the_votes() -> None:
    assert agreed_zone([]) == 0.0
    assert agreed_zone([7200.0]) == 7200.0
    assert agreed_zone([7200.0, 7200.0]) == 7200.0
    assert agreed_zone([7200.0, 7200.0, 0.0]) == 7200.0
    assert agreed_zone([7200.0, 0.0, 3600.0]) == 0.0
    assert zone_name(-18000.0) == "-05:00" and zone_name(19800.0) == "+05:30"


def test_the_shift_moves_prefix_times_and_never_a_utc_stamp_a_line_stands_on() -> None:
    parser = LineParser("decode-0", clock=LogClock(7200.0))
    _, stamped = parser.parse(TIME_STATS.format(prefix="2026-11-02 12:15:09"), "t:1")
    assert stamped is not None and stamped.time == pytest.approx(1793614509.0)
    # A finish record without a prefix takes its time from `request_finished_ts`: UTC already.
    bare = FINISH.format(prefix="x").removeprefix("[x] ")
    _, unstamped = parser.parse(bare, "t:2")
    assert unstamped is not None and unstamped.time == pytest.approx(1793614509.3)


@pytest.mark.parametrize(
    "wrapped",
    [
        '2026-11-02T10:15:09.5Z INFO:     10.0.0.1:4 - "POST /generate HTTP/1.1" 200 OK',
        '2026-11-02T10:15:09.5Z stdout F INFO:     10.0.0.1:4 - "POST /generate HTTP/1.1" 200 OK',
        '{"log":"INFO:     10.0.0.1:4 - \\"POST /generate HTTP/1.1\\" 200 OK\\n",'
        '"stream":"stdout","time":"2026-11-02T10:15:09.5Z"}',
    ],
    ids=["kubectl", "cri", "docker"],
)
def test_a_runtime_stamp_on_a_line_without_a_prefix_is_utc_whatever_the_engine_zone(
    wrapped: str,
) -> None:
    """Audit Y's +08:00 kubectl capture: the access lines took the runtime's UTC stamp and then
    lost the engine's zone too, 8 h early (what the logs cover began 8 h before the first line)."""
    parser = LineParser("decode-0", clock=LogClock(28800.0))
    kind, event = parser.parse(wrapped, "t:1")
    assert kind == "http_access" and event is not None
    assert event.time == pytest.approx(1793614509.5)
    # The engine's own prefix inside the same wrapping is still local time.
    _, stamped = parser.parse(
        "2026-11-02T10:15:09.5Z " + TIME_STATS.format(prefix="2026-11-02 18:15:09"), "t:2"
    )
    assert stamped is not None and stamped.time == pytest.approx(1793614509.0)


def test_only_a_line_whose_time_is_its_prefix_votes(tmp_path: Path) -> None:
    """A request record in JSON or without a prefix takes its time from a UTC stamp: half the
    votes said UTC whatever the zone, and no zone had two thirds."""
    log = tmp_path / "decode-0.log"
    unprefixed = FINISH.format(prefix="x").removeprefix("[x] ")
    as_json = json.dumps(
        {"timestamp": "2026-11-02T10:15:09.3Z", "request_finished_ts": 1793614509.3, "rid": "4f1c"}
    )
    stamped = TIME_STATS.format(prefix="2026-11-02 13:15:09")
    log.write_text("\n".join([unprefixed, as_json, stamped] * 3) + "\n")
    assert log_zone("decode-0", [TelemetryFile(log, "decode-0", "log", (0, ""))]) == 10800.0


def test_the_older_prealloc_breakdown_is_not_counted_twice() -> None:
    """`prealloc_queue_duration(X) = alloc_wait(A) + bootstrap(B) + other(C)` is X once: a
    14-minute wait counted twice put a +05:30 host at +05:15."""
    line = (
        "[2026-11-02 15:59:09 TP0] ReqTimeStats(rid=4f1c, bootstrap_room=1, input_len=4096, "
        "cached_input_len=0, output_len=1, type=decode): prealloc_queue_duration(840000.00ms) "
        "= alloc_wait(839000.00ms) + bootstrap(1000.00ms) + other(0.00ms); "
        "transfer_duration=0.00ms, queue_duration=0.00ms, forward_duration=0.00ms, "
        "entry_time=1793614500.000"
    )
    # Entered 10:15:00 UTC, printed 14 minutes later at 15:59:09 in UTC+05:30.
    assert vote(_event(line)) == 19800.0


def _stamped(prefix: str) -> Event:
    return _event(FINISH.format(prefix=prefix))


def test_the_clock_follows_a_zone_change_once_stamped_lines_confirm_it() -> None:
    clock = LogClock(7200.0, sample_every=2, confirm=3)
    parser = LineParser("decode-0", clock=clock)
    # Berlin's clocks go back at 01:00 UTC: the prefix now reads UTC+01:00.
    line = FINISH.format(prefix="2026-11-02 11:15:09")
    times = [event.time for _, event in (parser.parse(line, "t") for _ in range(8)) if event]
    assert clock.zones == [7200.0, 3600.0]
    # Six lines (three sampled votes) at the old zone, then the new one.
    assert times == [1793614509.0 - 3600.0] * 6 + [1793614509.0] * 2
    # Lines in the zone in force, or with no say, move nothing.
    steady = LogClock(7200.0, sample_every=1, confirm=1)
    steady.observe(_stamped("2026-11-02 10:15:09"))  # read with the shift: UTC already
    steady.observe(_event("[2026-11-02 12:15:09 TP0] Decode batch, #running-req: 1"))
    assert steady.zones == [7200.0]


def test_a_node_of_unreadable_or_unstamped_lines_is_read_as_utc(tmp_path: Path) -> None:
    junk = tmp_path / "decode-0.log"
    junk.write_bytes(
        b"\x00\xff" * 5000 + b"\nentry_time=1793614500.0\n" + b"[2026-11-02 12:15:09]\n"
    )
    assert log_zone("decode-0", [TelemetryFile(junk, "decode-0", "log", (0, ""))]) == 0.0
    missing = TelemetryFile(tmp_path / "gone.log", "decode-0", "log", (0, ""))
    assert log_zone("decode-0", [missing]) == 0.0


def test_kvwatch_parse_gives_the_events_of_a_local_time_log_in_utc(tmp_path: Path) -> None:
    log = tmp_path / "decode-0.log"
    lines = [
        TIME_STATS.format(prefix="2026-11-02 12:15:09"),
        FINISH.format(prefix="2026-11-02 12:15:09"),
    ]
    log.write_text("\n".join(lines * 2) + "\n")
    stats = ParseStats()
    times = [event.time for event in events_by_node([log], stats)]
    assert times == [1793614509.0] * 4
    assert stats.log_zones == {"decode-0": [7200.0]}


def test_a_log_whose_stamps_tell_no_zone_is_said_to_be_read_as_utc_by_assumption(
    tmp_path: Path,
) -> None:
    """SGLang's prefix has no zone: without time stats or metrics stamps, UTC is assumed, and
    the report said nothing of it while every time from a host on local time was off by its
    offset (blind review)."""
    unstamped = tmp_path / "decode-0.log"
    unstamped.write_text("[2026-11-02 12:15:09 TP0] Decode batch, #running-req: 1, #token: 9\n")
    stamped = tmp_path / "decode-1.log"
    lines = [
        TIME_STATS.format(prefix="2026-11-02 10:15:09"),
        FINISH.format(prefix="2026-11-02 10:15:09"),
    ]
    stamped.write_text("\n".join(lines * 4) + "\n")  # in UTC, as its stamps say
    stats = ParseStats()
    assert len(list(events_by_node([unstamped, stamped], stats))) == 9
    assert stats.zone_unknown == {"decode-0"} and stats.log_zones == {}


def _zoned(minutes: int) -> Any:
    data = yaml.safe_load((SCENARIOS / "incident-replay-small.yaml").read_text())
    for role in ("prefill", "decode"):
        data["deployment"][role]["log_utc_offset_minutes"] = minutes
    return scenario_from_dict(data, "zoned")


@pytest.fixture(scope="module", params=[120, -300], ids=["utc+2", "utc-5"])
def zoned(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(the zone's offset in minutes, the incident replay logged in it)."""
    folder = tmp_path_factory.mktemp("zoned")
    run_offline(_zoned(request.param), folder)
    return request.param, folder


def _inputs(folder: Path) -> list[str]:
    return [str(folder / "logs"), str(folder / "snapshots")]


def test_the_incident_logged_in_local_time_is_judged_by_the_config_in_force_then(
    tmp_path: Path, zoned: tuple[int, Path]
) -> None:
    """East of UTC, the restart snapshot (UTC) came before the exposed answers' log lines."""
    minutes, folder = zoned
    # Two workers: each finds its own nodes' zones, and the judge hears of them.
    result = run_forensics(_inputs(folder), tmp_path / "out", write_parquet=False, workers=2)
    truth = json.loads((folder / "ground_truth.json").read_text())["exposed"]
    rooms = {str(r["bootstrap_room"]) for r in truth}
    assert len(rooms) >= 10
    summary = result.summary
    assert {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]} == rooms
    over_length = {
        f["bootstrap_room"] for f in summary["findings"] if f["detector"] == "over_length_answered"
    }
    assert over_length == rooms
    offsets = summary["input"]["log_utc_offsets"]
    assert offsets and list(offsets.values()) == [[zone_name(minutes * 60.0)]] * len(offsets)
    assert summary["exposure"]["first"] == min(r["time"] for r in truth)


def test_the_audit_of_a_local_time_deployment_reads_as_the_same_deployment_in_utc(
    tmp_path_factory: pytest.TempPathFactory, zoned: tuple[int, Path]
) -> None:
    """Read as UTC, the logs of a host east of UTC restarted hours after the UTC-named
    snapshots: phantom generations with no engine version. The verdict must not depend on the
    zone the hosts were set to."""
    _, folder = zoned
    in_utc = tmp_path_factory.mktemp("utc")
    run_offline(_zoned(0), in_utc)
    assert audit(_inputs(folder)).lines() == audit(_inputs(in_utc)).lines()


_PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def _clocks_change(folder: Path, at: float, zone: int, step: int) -> None:
    """Logs written at UTC`zone` (hours) read UTC`zone + step` from `at` on."""
    for log in (folder / "logs").iterdir():
        lines = []
        for line in log.read_text().splitlines(keepends=True):
            m = _PREFIX.match(line)
            if m:
                local = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
                utc = local.replace(tzinfo=UTC).timestamp() - zone * 3600
                if utc >= at:
                    local += timedelta(hours=step)
                    line = f"[{local:%Y-%m-%d %H:%M:%S}" + line[m.end() :]
            lines.append(line)
        log.write_text("".join(lines))


def _clocks_go_back(folder: Path, at: float) -> None:
    """Logs written at UTC+02:00 read UTC+01:00 from `at` on (Europe's autumn change)."""
    _clocks_change(folder, at, zone=2, step=-1)


def test_a_daylight_saving_change_between_the_exposures_and_the_restart(
    tmp_path: Path,
) -> None:
    """Read an hour early after the change, the honest long prompts served after the restart
    were judged by the prefill pool before it, which only the UTC-named snapshots tell here (the
    prefill node's log is missing)."""
    folder = tmp_path / "sim"
    run_offline(_zoned(120), folder)
    for log in (folder / "logs").glob("prefill-*"):
        log.unlink()
    truth = json.loads((folder / "ground_truth.json").read_text())["exposed"]
    last = max(parse_iso_time(r["time"]) or 0.0 for r in truth)
    _clocks_go_back(folder, last + 300)
    summary = run_forensics(_inputs(folder), tmp_path / "out", write_parquet=False).summary
    rooms = {str(r["bootstrap_room"]) for r in truth}
    assert {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]} == rooms
    critical = {f["bootstrap_room"] for f in summary["findings"] if f["severity"] == "critical"}
    assert critical - {None} == rooms
    assert set(map(tuple, summary["input"]["log_utc_offsets"].values())) == {("+02:00", "+01:00")}


def test_lines_printing_the_time_of_day_alone_are_dated_by_the_stamps_among_them(
    tmp_path: Path,
) -> None:
    # Late-2024 builds print `[16:43:29 TP0]`. With `--enable-metrics`, a `Finish` line says
    # when it was printed (`request_finished_ts`): that dates the whole stream, from its first
    # line (before the stamp), over midnight and into the next rotated file. Undated, every
    # request line was out of time and no request judged ("no exposed responses found").
    stamp = parse_iso_time("2026-08-28T00:20:05Z")
    assert stamp is not None
    finish = (
        "[00:20:05] Finish: obj=GenerateReqInput(rid='d1', bootstrap_room=7), out={'meta_info': "
        "{'id': 'd1', 'finish_reason': {'type': 'stop', 'matched': 1}, 'prompt_tokens': 9, "
        f"'completion_tokens': 3, 'cached_tokens': 0, 'e2e_latency': 0.5, "
        f"'request_finished_ts': {stamp + 0.4}}}}}"
    )
    older = tmp_path / "decode-0.log.1"
    older.write_text(
        "[23:59:50 TP0] max_total_num_tokens=681280, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=128, context_len=1048576, "
        "available_gpu_mem=9.80 GB\n"
        "[00:10:00] Receive: obj=GenerateReqInput(rid='d0', bootstrap_room=6)\n"
    )
    (tmp_path / "decode-0.log").write_text(
        "[00:20:00] Receive: obj=GenerateReqInput(rid='d1', bootstrap_room=7)\n" + finish + "\n"
    )
    events = list(events_by_node([str(tmp_path)], ParseStats()))
    times = {e.kind: e.time for e in events}
    assert times["capacity"] == parse_iso_time("2026-08-27T23:59:50Z")
    assert [e.time for e in events if e.kind == "request_received"] == [
        parse_iso_time("2026-08-28T00:10:00Z"),
        parse_iso_time("2026-08-28T00:20:00Z"),
    ]


REFERENCE = Path(__file__).parent / "testdata" / "reference_incident"
_DATE_IN_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d ", re.MULTILINE)


def _time_only(case: Path, *, stamps: bool) -> None:
    """The reference incident as a late-2024 build prints it: the time of day alone; without
    `stamps`, no `entry_time` either (no line says when it was printed)."""
    case.mkdir()
    for log in REFERENCE.glob("*.log"):
        text = _DATE_IN_PREFIX.sub("[", log.read_text())
        if not stamps:
            text = re.sub(r", entry_time=[0-9.]+", "", text)
        (case / log.name).write_text(text)


def _forensics_cli(*args: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", "--quiet", "--no-parquet", *args],
        capture_output=True,
        text=True,
    )
    return done.returncode, done.stdout, done.stderr


def test_a_deployment_printing_the_time_of_day_alone_is_judged_as_its_dated_logs(
    tmp_path: Path,
) -> None:
    # One node's stamps date every node's lines (a deployment keeps one clock); without any,
    # the run is NOT JUDGED (it said "no exposed responses found" and exited 0), and
    # --log-date dates them.
    def exposed(stdout: str) -> list[str]:
        return sorted(line.split()[2] for line in stdout.splitlines() if "rid=" in line)

    code, dated, _ = _forensics_cli(str(REFERENCE), "--out", str(tmp_path / "dated"))
    assert exposed(dated)
    _time_only(tmp_path / "stamped", stamps=True)
    code, out, _ = _forensics_cli(str(tmp_path / "stamped"), "--out", str(tmp_path / "o1"))
    assert exposed(out) == exposed(dated)
    _time_only(tmp_path / "unstamped", stamps=False)
    code, out, err = _forensics_cli(str(tmp_path / "unstamped"), "--out", str(tmp_path / "o2"))
    assert "UNDATED: " in out and "--log-date YYYY-MM-DD" in out  # named, but out of time
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    for log in (tmp_path / "unstamped").glob("*.log"):
        kept = [line for line in log.read_text().splitlines(keepends=True) if "912384" not in line]
        (healthy / log.name).write_text("".join(kept))
    code, out, err = _forensics_cli(str(healthy), "--out", str(tmp_path / "o4"))
    assert code == 2 and "NOT JUDGED" in err and "--log-date" in err
    assert "no exposed responses found" not in out
    code, out, _ = _forensics_cli(
        str(tmp_path / "unstamped"), "--out", str(tmp_path / "o3"), "--log-date", "2026-08-27"
    )
    assert exposed(out) == exposed(dated)
    # Dated by --log-date, their times of day are read as UTC, and that is said (blind review
    # 48 D6: on hosts five hours west, the window was five hours early, unsaid); dated by their
    # own stamps, they are not.
    assumed = "carry no zone, and no UTC stamp in their lines (time stats, metrics stamps) tells"
    assert assumed in out
    assert assumed in (tmp_path / "o3" / "report.md").read_text()
    _, stamped_out, _ = _forensics_cli(
        str(tmp_path / "stamped"), "--out", str(tmp_path / "o5"), "--log-date", "2026-08-27"
    )
    assert assumed not in stamped_out


def test_json_request_records_between_prefixed_lines_tell_the_zone(tmp_path: Path) -> None:
    """A decode an hour east of UTC logging requests as JSON without time stats: its records
    (UTC `timestamp`) are its only request lines, and its prefixed lines (local) are the rest.
    Read in two clocks, its records came an hour before its stream did, were dropped as late,
    and none of the incident's exposures was named."""
    data = yaml.safe_load((SCENARIOS / "incident-replay-small.yaml").read_text())
    data["deployment"]["decode"].update(
        log_utc_offset_minutes=60, log_requests_format="json", request_time_stats=False
    )
    folder = tmp_path / "sim"
    run_offline(scenario_from_dict(data, "json-east"), folder, seed=2)
    summary = run_forensics(_inputs(folder), tmp_path / "out", write_parquet=False).summary
    truth = json.loads((folder / "ground_truth.json").read_text())["exposed"]
    rooms = {str(r["bootstrap_room"]) for r in truth}
    assert len(rooms) >= 10
    assert {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]} == rooms
    decodes = {n: z for n, z in summary["input"]["log_utc_offsets"].items() if "decode" in n}
    assert decodes and set(map(tuple, decodes.values())) == {("+01:00",)}
    assert summary["exposure"]["first"] == min(r["time"] for r in truth)
    assert summary["exposure"]["last"] == max(r["time"] for r in truth)


@pytest.mark.parametrize("stamp_zone", ["+00:00", "Z"])
def test_json_request_records_behind_the_prefix_tell_the_zone_by_their_own_timestamp(
    tmp_path: Path, stamp_zone: str
) -> None:
    """Blind review 54 D2: a deployment at UTC+8 logging requests as JSON behind the request
    logger's `[%(asctime)s] ` prefix, without time stats, metrics stamps or snapshots. Each
    record states its UTC time, yet every exposure was dated 8 hours late."""
    data = yaml.safe_load((SCENARIOS / "incident-replay-small.yaml").read_text())
    for role in ("prefill", "decode"):
        data["deployment"][role].update(
            log_utc_offset_minutes=480,
            log_requests_format="json",
            request_time_stats=False,
            enable_metrics=False,
        )
    folder = tmp_path / "sim"
    run_offline(scenario_from_dict(data, "json-east-prefixed"), folder, seed=2)
    prefixed = 0
    for log in (folder / "logs").glob("*.log"):
        lines = log.read_text().splitlines(keepends=True)
        for at, line in enumerate(lines):
            if line.startswith('{"timestamp": "'):
                utc = datetime.fromisoformat(json.loads(line)["timestamp"].replace("Z", "+00:00"))
                local = (utc + timedelta(hours=8)).strftime("%Y-%m-%d %H:%M:%S")
                stamp = utc.isoformat(timespec="milliseconds").replace("+00:00", stamp_zone)
                record = line.replace(json.loads(line)["timestamp"], stamp, 1)
                lines[at] = f"[{local}] {record}"
                prefixed += 1
        log.write_text("".join(lines))
    assert prefixed > 100
    summary = run_forensics([str(folder / "logs")], tmp_path / "out", write_parquet=False).summary
    truth = json.loads((folder / "ground_truth.json").read_text())["exposed"]
    assert len(truth) >= 10
    assert {r["rid"] for r in summary["exposure"]["requests"]} == {r["rid"] for r in truth}
    assert set(map(tuple, summary["input"]["log_utc_offsets"].values())) == {("+08:00",)}
    first, last = (parse_iso_time(summary["exposure"][k]) for k in ("first", "last"))
    assert first is not None and last is not None
    # To the second: the prefix is.
    assert abs(first - min(parse_iso_time(r["time"]) or 0 for r in truth)) < 1.5
    assert abs(last - max(parse_iso_time(r["time"]) or 0 for r in truth)) < 1.5


def test_request_lines_printed_without_any_prefix_are_not_taken_for_undated(
    tmp_path: Path,
) -> None:
    # 0.5.10 printed request lines without a prefix: they take the time of the line before
    # (or their own stamps), and are no lines printing the time of day alone.
    case = tmp_path / "case"
    case.mkdir()
    for log in REFERENCE.glob("*.log"):
        lines = log.read_text().splitlines(keepends=True)
        bare = [
            line[line.index("] ") + 2 :] if ("Receive:" in line or "Finish:" in line) else line
            for line in lines
        ]
        (case / log.name).write_text("".join(bare))
    code, out, _ = _forensics_cli(str(case), "--out", str(tmp_path / "out"))
    assert "UNDATED" not in out and "NOT JUDGED" not in out
    assert "rid=" in out and code == 0


def _cri(written: datetime, line: str) -> str:
    return f"{written.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z stdout F {line}"


def _kubectl(written: datetime, line: str) -> str:
    return f"{written.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z {line}"


def _rsyslog(written: datetime, line: str) -> str:
    # rsyslog's RFC 3339 template in the host's zone (+02:00 here, as the engine's).
    local = (written + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return f"{local}+02:00 gpu-7 python3[123]: {line}"


def _journald(written: datetime, line: str) -> str:
    micros = str(int(written.timestamp() * 1e6))
    return json.dumps({"__REALTIME_TIMESTAMP": micros, "MESSAGE": line, "_PID": "123"})


def _vector(written: datetime, line: str) -> str:
    stamp = written.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return json.dumps({"message": line, "timestamp": stamp, "source_type": "kubernetes_logs"})


@pytest.mark.parametrize("wrap", [_cri, _kubectl, _rsyslog, _journald, _vector])
def test_every_runtime_s_utc_stamp_tells_the_engine_s_zone(tmp_path: Path, wrap: Any) -> None:
    """Whatever wrote the engine's local-time line down stamps it in UTC (or with its zone):
    each wrapped line votes, as a Docker record does. Blind review 21: a +02:00 engine kept by
    containerd, `kubectl --timestamps`, rsyslog, journald or Vector was read 2 h late."""
    log = tmp_path / "decode-0.log"
    utc = datetime(2026, 11, 2, 10, 16, 48, tzinfo=UTC)
    lines = []
    for second in range(0, 60, 10):
        written = utc + timedelta(seconds=second, microseconds=300_000)
        local = (written + timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S")
        room = 18 + second
        line = f"[{local} TP0] Deferred KV release for room {room} ended by timeout after 30s"
        lines.append(wrap(written, line))
    log.write_text("\n".join(lines) + "\n")
    tf = TelemetryFile(log, "decode-0", "log", (0, "~"))
    assert log_zone("decode-0", [tf]) == 2 * 3600.0
    events = list(events_by_node([tmp_path], ParseStats()))
    assert [e.time for e in events] == [utc.timestamp() + s for s in range(0, 60, 10)]


@pytest.mark.parametrize(
    ("stamp", "utc_hour"),
    [
        ("2026-11-02T12:15:07.500+02:00  INFO sglang.srt.managers.scheduler.log:", 10),
        ("2026-11-02 12:15:07,500-0530 INFO sglang.srt.managers.scheduler:", 17),
        ("2026-11-02T12:15:07.500Z  INFO sglang.srt.managers.scheduler.log:", 12),
    ],
)
def test_a_re_rendered_record_s_stated_zone_is_taken_off(stamp: str, utc_hour: int) -> None:
    """A wrapper that re-renders records with a zoned time (Dynamo, a dictConfig `%z`) says
    its line's UTC moment. Blind review 21: `12:15:07+02:00` was read as 12:15:07 UTC."""
    line = f"{stamp} Decode batch, #running-req: 4, #token: 100, token usage: 0.01"
    _, event = LineParser("decode-0").parse(line, "x.log:1")
    assert event is not None
    minutes = 45 if utc_hour == 17 else 15
    expected = datetime(2026, 11, 2, utc_hour, minutes, 7, 500_000, tzinfo=UTC).timestamp()
    assert event.time == expected


@pytest.mark.parametrize("hours", [8, -5])
def test_a_docker_log_s_records_tell_the_engine_s_zone(tmp_path: Path, hours: int) -> None:
    """Docker writes each line's UTC time beside the engine's local prefix: every line votes.
    Blind review 8b: a +08:00 engine's Docker log was read as UTC (NOT JUDGED), a -05:00 one's
    first exposures dated 5 h early."""
    log = tmp_path / "decode-0.log"
    utc = datetime(2026, 9, 6, 6, 50, tzinfo=UTC)
    records = []
    for second in range(0, 600, 30):
        written = utc + timedelta(seconds=second, microseconds=400_000)
        local = (written + timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S")
        line = f"[{local} TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.01\n"
        records.append(
            json.dumps(
                {
                    "log": line,
                    "stream": "stderr",
                    "time": written.isoformat().replace("+00:00", "Z"),
                }
            )
        )
    log.write_text("\n".join(records) + "\n")
    tf = TelemetryFile(log, "decode-0", "log", (0, "~"))
    assert log_zone("decode-0", [tf]) == hours * 3600.0
    events = list(events_by_node([tmp_path], ParseStats()))
    assert events and events[0].time == utc.timestamp()


def _clocks_go_forward(folder: Path, at: float) -> None:
    """Logs written at UTC-04:00 read UTC-03:00 from `at` on (Chile's spring change)."""
    _clocks_change(folder, at, zone=-4, step=1)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_daylight_saving_change_forward_amid_the_exposures(tmp_path: Path, workers: int) -> None:
    """Blind review 30b: the lines between the change and the votes that moved the zone were
    read an hour ahead; their stream waited an hour in the merge, and the hour of request lines
    after came late: 13 of 20 exposures named, and a healthy fleet's run NOT JUDGED. Held
    until the zone moves, they are read in the zone they were printed in."""
    folder = tmp_path / "sim"
    run_offline(_zoned(-240), folder)
    truth = json.loads((folder / "ground_truth.json").read_text())["exposed"]
    times = sorted(parse_iso_time(r["time"]) or 0.0 for r in truth)
    change = times[len(times) // 2] - 30  # half of the exposures after it
    _clocks_go_forward(folder, change)
    summary = run_forensics(
        _inputs(folder), tmp_path / "out", write_parquet=False, workers=workers
    ).summary
    rooms = {str(r["bootstrap_room"]) for r in truth}
    assert {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]} == rooms
    assert summary["requests"]["late_lines"] == 0
    assert summary["exposure"]["last"] == max(r["time"] for r in truth)
    assert set(map(tuple, summary["input"]["log_utc_offsets"].values())) == {("-04:00", "-03:00")}


def _unstamped_at_night(minutes: int) -> Any:
    """The CI incident replay on the night Europe's clocks go back (2026-10-25, 00:00 to 02:30
    UTC), in a zone `minutes` east of UTC, with no UTC stamp in any line: no time stats, no
    metrics stamps, so nothing tells the zone or its change."""
    text = (SCENARIOS / "incident-replay-small.yaml").read_text()
    for hour, night in (("12", "00"), ("13", "01"), ("14", "02")):
        text = text.replace(f"2026-09-08T{hour}:", f"2026-10-25T{night}:")
    data = yaml.safe_load(text)
    for role in ("prefill", "decode"):
        spec = data["deployment"][role]
        spec |= {"log_utc_offset_minutes": minutes}
        spec |= {"enable_metrics": False, "request_time_stats": False}
    return scenario_from_dict(data, "unstamped-at-night")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_daylight_saving_change_back_in_logs_whose_stamps_tell_no_zone(
    tmp_path: Path, workers: int
) -> None:
    """Blind review 48 D2/D3: zoneless logs of hosts whose clocks went back an hour at 03:00.
    Read as printed, the repeated hour lay over the first: 710 of prefill-0's request lines came
    late, and the exposure window began 15 minutes early. Read an hour on from the change, the
    repeated hour follows the first, and every time is the summer zone's, as before it."""
    folder = tmp_path / "sim"
    run_offline(_unstamped_at_night(120), folder)
    change = datetime(2026, 10, 25, 1, tzinfo=UTC).timestamp()  # 03:00 CEST, 02:00 CET
    _clocks_go_back(folder, change)
    truth = json.loads((folder / "ground_truth.json").read_text())["exposed"]
    times = sorted(parse_iso_time(r["time"]) or 0.0 for r in truth)
    assert times[0] < change < times[-1]
    summary = run_forensics(
        [str(folder / "logs")], tmp_path / "out", write_parquet=False, workers=workers
    ).summary
    rooms = {str(r["bootstrap_room"]) for r in truth}
    assert {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]} == rooms
    assert summary["requests"]["late_lines"] == 0
    # Read as UTC, the summer zone's two hours on, before the change and after it.
    read = [parse_iso_time(summary["exposure"][end]) for end in ("first", "last")]
    assert read == [int(times[0]) + 7200, int(times[-1]) + 7200]  # printed to the second
    fell_back = summary["input"]["log_clock_fell_back"]
    assert set(fell_back) == {"decode-0", "prefill-0"}
    for node, (at,) in fell_back.items():
        assert 0 <= (parse_iso_time(at) or 0.0) - (change + 7200) < 60, node
    assert "decode-0 and prefill-0 went back an hour at 2026-10-25T03:00:" in log_zones_line(
        summary
    )


def test_only_a_zoneless_stream_going_back_an_hour_at_night_falls_back() -> None:
    """A stream the stamps give a zone moves by their votes; going back an hour by day, or
    twenty minutes at night, is no daylight-saving change."""
    night = datetime(2026, 10, 25, 3, tzinfo=UTC).timestamp()
    clock = LogClock(prefixed=True)
    assert clock.falls_back(night - 3600 + 5, night - 2)
    assert clock.falls_back(night - 3600 + 600, night - 2)  # ten quiet minutes before it
    assert not clock.falls_back(night - 1200, night - 2)
    assert not clock.falls_back(night - 3600 + 5 + 12 * 3600, night - 2 + 12 * 3600)
    assert not LogClock(prefixed=True, voted=True).falls_back(night - 3600 + 5, night - 2)
    assert clock.fall_back(night - 3600 + 5) == night + 5
    # Later lines are read an hour on too.
    assert clock.shift == -3600.0 and clock.fell_back == [night + 5]


@pytest.mark.parametrize("goes_back", [False, True], ids=["summer", "change-back"])
def test_a_saved_server_info_s_startup_time_tells_a_zoneless_log_s_zone(
    tmp_path: Path, goes_back: bool
) -> None:
    """Blind review 48 D4: zoneless, unstamped logs of a UTC+02:00 host beside their UTC
    snapshots were read as UTC, the exposure window two hours late. The `startup_time` a saved
    `/server_info` states falls between the start-up's arguments and ready lines at one offset
    alone: the logs' zone, and every time is UTC, across a change back too."""
    folder = tmp_path / "sim"
    run_offline(_unstamped_at_night(120), folder)
    if goes_back:
        _clocks_go_back(folder, datetime(2026, 10, 25, 1, tzinfo=UTC).timestamp())
    truth = json.loads((folder / "ground_truth.json").read_text())["exposed"]
    times = sorted(parse_iso_time(r["time"]) or 0.0 for r in truth)
    summary = run_forensics(_inputs(folder), tmp_path / "out", write_parquet=False).summary
    rooms = {str(r["bootstrap_room"]) for r in truth}
    assert {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]} == rooms
    read = [parse_iso_time(summary["exposure"][end]) for end in ("first", "last")]
    assert read == [int(times[0]), int(times[-1])]  # printed to the second
    assert summary["input"]["log_zone_by_startup"] == {"decode-0": "+02:00", "prefill-0": "+02:00"}
    assert summary["input"]["log_zone_unknown"] == []
    assert "startup_time their saved /server_info states" in log_zones_line(summary)
