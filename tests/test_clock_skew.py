"""Host clocks set wrong: every stamp a host writes is off by the same seconds, UTC ones too.

Blind review 38: a decode host's clock 40 to 45 minutes fast (its prefix, its `entry_time` and
meta_info stamps with it, so its zone read right) hid every exposure: decode's answers came
after their requests had been judged, 0 of 23 named, NOT JUDGED over "LATE LINES". Healthy
deployments with clocks 6 to 7.5 minutes apart exited 2 the same way. The requests both nodes
logged (the same rooms) tell how far apart the clocks ran; the one more nodes keep is taken as
right, on a tie the prefill's.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from collector.files import TelemetryFile
from collector.forensics.driver import SCHEMA_PATH, run_forensics
from collector.parse import ParseStats, stream_zones, streams_of
from collector.sglang.clock_join import SKEW_TOLERANCE, Sample, Stream, skews
from collector.sglang.log_clock import LogClock, read_zone
from collector.sglang.logs import LineParser
from simulator.offline import run_offline
from simulator.scenario import scenario_from_dict
from tests.host_clock import as_s6_folder, set_clock_off, step_clock
from tests.test_forensics_traces import CollectorFileExporterStandIn

SCENARIOS = Path(__file__).parents[1] / "simulator" / "scenarios"
START = 1_790_000_000.0
PREFILL: Stream = ("prefill-0", "log")
DECODE: Stream = ("decode-0", "log")


def _rooms(first: int, *, late: float = 0.0, count: int = 20) -> dict[str, float]:
    """`count` rooms from `first`, received 30 s apart from START, each `late` seconds later."""
    return {str(first + i): START + 30.0 * i + late for i in range(count)}


def _sample(rooms: dict[str, float], role: str | None = None) -> Sample:
    return Sample(rooms, None, role=role)


def test_a_decode_clock_forty_minutes_fast_is_moved_onto_the_prefill_s() -> None:
    samples = {
        PREFILL: _sample(_rooms(100), "prefill"),
        DECODE: _sample(_rooms(100, late=2460.0 + 0.4), "decode"),
    }
    moved = skews({PREFILL: 0.0, DECODE: 0.0}, samples)
    assert set(moved) == {DECODE}
    assert moved[DECODE].seconds == pytest.approx(2460.4)
    # One node against one: which clock was right is not known, and is said so.
    assert moved[DECODE].against == (PREFILL,) and moved[DECODE].tied


def test_the_clock_more_nodes_keep_is_right_though_they_share_no_room() -> None:
    """A prefill 7 minutes slow between two decodes: each decode shares rooms with the prefill
    alone, yet both lead it by the same, so theirs is one clock, kept by two nodes."""
    decode_1: Stream = ("decode-1", "log")
    samples = {
        PREFILL: _sample({**_rooms(100, late=-420.0), **_rooms(500, late=-420.0)}, "prefill"),
        DECODE: _sample(_rooms(100, late=1.0), "decode"),
        decode_1: _sample(_rooms(500), "decode"),
    }
    moved = skews({stream: 0.0 for stream in samples}, samples)
    assert set(moved) == {PREFILL}
    assert moved[PREFILL].seconds == pytest.approx(-420.5)
    assert moved[PREFILL].against == (DECODE, decode_1) and not moved[PREFILL].tied


def test_the_zones_told_are_taken_off_before_the_clocks_are_compared() -> None:
    samples = {
        PREFILL: _sample(_rooms(100, late=3600.0), "prefill"),  # UTC+1, right
        DECODE: _sample(_rooms(100, late=-5 * 3600.0 + 600.0)),  # UTC-5, ten minutes fast
    }
    moved = skews({PREFILL: 3600.0, DECODE: -5 * 3600.0}, samples)
    assert set(moved) == {DECODE} and moved[DECODE].seconds == pytest.approx(600.0)


@pytest.mark.parametrize("late", [0.0, 20.0, -SKEW_TOLERANCE])
def test_clocks_within_a_minute_are_left_as_they_are(late: float) -> None:
    samples = {PREFILL: _sample(_rooms(100)), DECODE: _sample(_rooms(100, late=late))}
    assert skews({PREFILL: 0.0, DECODE: 0.0}, samples) == {}


def test_rooms_that_disagree_or_are_too_few_move_no_clock() -> None:
    scattered = _rooms(100, late=900.0)
    for at, room in enumerate(scattered):
        scattered[room] += 97.0 * (at % 5)  # no fifth of them within seconds of another
    few = dict(list(_rooms(100, late=900.0).items())[:2])
    for decode in (scattered, few):
        samples = {PREFILL: _sample(_rooms(100)), DECODE: _sample(decode)}
        assert skews({PREFILL: 0.0, DECODE: 0.0}, samples) == {}


def test_a_skewed_clock_reads_its_stamps_back_and_its_zone_stays_told() -> None:
    """A UTC+2 host ten minutes fast: its prefix and its UTC stamps are moved back by the skew,
    and its stamps, which share it, still vote for +02:00 and nothing else."""
    clock = LogClock(7200.0, sample_every=1, confirm=1, skew=600.0)
    parser = LineParser("decode-0", clock=clock)
    entry = START + 600.0  # the host's UTC stamp, ten minutes fast
    printed = START + 7200.0 + 600.0 + 2.0
    stamp = _local(printed)
    for _ in range(3):
        _, event = parser.parse(
            f"[{stamp} TP0] ReqTimeStats(rid=ab, bootstrap_room=7, input_len=10, "
            "cached_input_len=0, output_len=5, type=decode): bootstrap_duration=1.00ms, "
            "alloc_wait_duration=0.00ms, transfer_duration=1.00ms, queue_duration=0.00ms, "
            f"forward_duration=2000.00ms, entry_time={entry:.3f}\n",
            "decode-0.log",
        )
        assert event is not None
        assert event.time == pytest.approx(START + 2.0)
        assert event.fields["entry_time"] == pytest.approx(START)
    assert clock.zones == [7200.0]


def _local(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("incident")
    data = yaml.safe_load((SCENARIOS / "incident-replay-small.yaml").read_text())
    run_offline(scenario_from_dict(data, "incident"), folder)
    return folder


def _forensics(folder: Path, out: Path) -> dict[str, Any]:
    summary = run_forensics(
        [str(folder / "logs"), str(folder / "snapshots")], out, write_parquet=False
    ).summary
    jsonschema.validate(summary, json.loads(SCHEMA_PATH.read_text()))
    return summary


def _skewed(source: Path, tmp_path: Path, node: str, seconds: int) -> Path:
    folder = tmp_path / "skewed"
    shutil.copytree(source, folder)
    set_clock_off(folder / "logs" / f"{node}.log", seconds)
    return folder


def test_a_fast_decode_clock_hides_no_exposure(incident: Path, tmp_path: Path) -> None:
    """Every exposure named, at the moment the clock taken as right gives it, as the same
    deployment with both clocks right names them."""
    right = _forensics(incident, tmp_path / "right")
    skewed = _forensics(_skewed(incident, tmp_path, "decode-0", 2460), tmp_path / "out")
    assert right["exposure"]["requests"], "the incident's exposures"
    named = [(r["rid"], r["time"]) for r in skewed["exposure"]["requests"]]
    assert named == [(r["rid"], r["time"]) for r in right["exposure"]["requests"]]
    assert skewed["verdict"]["outcome"] == "exposed"
    assert skewed["input"]["log_clock_skews"] == {
        "decode-0": {"seconds": 2460.0, "against": ["prefill-0"], "tied": True}
    }
    said = (tmp_path / "out" / "report.md").read_text()
    assert "decode-0's host clock ran 41 min 0 s ahead of that of prefill-0" in said
    assert "which was right, the logs cannot tell" in said


def test_clocks_under_a_minute_apart_are_left_as_they_are_and_said(
    incident: Path, tmp_path: Path
) -> None:
    """Blind review 48 D5: a decode 45 s fast gave its exposures' times to the millisecond,
    45 s late, and nothing said the clocks disagreed. Every join tolerates that much, so
    nothing is moved; the offset is said, and the same deployment with one clock says none."""
    right = _forensics(incident, tmp_path / "right")
    assert right["input"]["log_clock_offsets"] == []
    skewed = _forensics(_skewed(incident, tmp_path, "decode-0", 45), tmp_path / "out")
    assert skewed["input"]["log_clock_skews"] == {}
    assert skewed["input"]["log_clock_offsets"] == [
        {"node": "decode-0", "ahead_of": "prefill-0", "seconds": 45.0}
    ]
    said = (tmp_path / "out" / "report.md").read_text()
    assert "decode-0's clock ran 45 s ahead of prefill-0's: under a minute, not moved" in said
    assert [r["rid"] for r in skewed["exposure"]["requests"]] == [
        r["rid"] for r in right["exposure"]["requests"]
    ]


@pytest.mark.parametrize(
    ("stepped", "node"), [(False, "decode-0"), (True, "decode-0"), (True, "prefill-0")]
)
def test_a_healthy_deployment_with_clocks_minutes_apart_is_judged_clean(
    tmp_path: Path, stepped: bool, node: str
) -> None:
    """Set back 7 min 10 s, throughout or halfway (NTP). Of a prefill set back halfway, the
    ends of a pair tell only that one of the two clocks moved: its own jump back tells which
    (before, decode was taken as stepped, no jump was found there, and 197 late lines made the
    run NOT JUDGED)."""
    data = yaml.safe_load((SCENARIOS / "healthy-long-context-small.yaml").read_text())
    data["end"] = "2026-10-12T12:30:00Z"
    healthy = tmp_path / "healthy"
    run_offline(scenario_from_dict(data, "healthy"), healthy)
    if stepped:
        folder = tmp_path / "stepped"
        shutil.copytree(healthy, folder)
        step_clock(folder / "logs" / f"{node}.log", -430, after=0.5)
    else:
        folder = _skewed(healthy, tmp_path, node, -430)
    summary = _forensics(folder, tmp_path / "out")
    assert summary["verdict"]["outcome"] == "none_found"
    assert summary["requests"].get("late_lines_by_node", {}) == {}
    assert [f for f in summary["findings"] if f["severity"] != "info"] == []
    moved = summary["input"]["log_clock_steps" if stepped else "log_clock_skews"]
    assert list(moved) == [node]
    assert moved[node]["seconds"] == pytest.approx(-430, abs=1)


def test_zoneless_logs_are_set_against_the_spans_of_the_same_requests(tmp_path: Path) -> None:
    """Blind review 38 D3: logs of a UTC-5 host whose lines tell no zone (no time stats, no
    metrics stamps), beside the spans the same servers exported (dated in UTC): read as UTC,
    every exposure was dated 5 h early. The spans' rooms set the logs' clock."""
    (tmp_path / "otel").mkdir()
    provider = TracerProvider(resource=Resource({"service.name": "sglang"}))
    provider.add_span_processor(
        SimpleSpanProcessor(CollectorFileExporterStandIn(tmp_path / "otel" / "otel_trace.json"))
    )
    tracer = provider.get_tracer("sglang server")
    logs: dict[str, list[str]] = {"prefill-0": [], "decode-0": []}
    for i in range(6):
        room, at = 880_000 + i, START + 60.0 * i  # received at `at`, UTC
        for node, role in (("prefill-0", "prefill"), ("decode-0", "decode")):
            span = tracer.start_span(
                f"{role} Req r{room}",
                start_time=int(at * 1e9),
                attributes={
                    "rid": f"r{room}",
                    "module": "sglang::request",
                    "bootstrap_room": hex(room),
                },
            )
            span.end(end_time=int((at + 2.0) * 1e9))
            stamp = _local(at - 5 * 3600.0)  # the host's prefix: local time, UTC-5
            logs[node].append(
                f"[{stamp}] Receive: obj=GenerateReqInput(rid='r{room}', stream=False, "
                f"bootstrap_host='10.0.1.10', bootstrap_port=8998, bootstrap_room={room})\n"
            )
    provider.shutdown()
    (tmp_path / "logs").mkdir()
    for node, lines in logs.items():
        (tmp_path / "logs" / f"{node}.log").write_text("".join(lines))
    stats = ParseStats()
    zones = stream_zones(streams_of([tmp_path / "logs", tmp_path / "otel"]), stats)
    for node in logs:
        assert zones[(node, "log")].zone == -5 * 3600.0
        zone, against, known = stats.zone_aligned[node]
        assert (zone, known) == (-5 * 3600.0, True) and "otel_trace" in against


@pytest.mark.parametrize("tai_offset", [10, 37])
def test_lines_behind_s6_labels_are_read_as_their_host_clock_wrote_them(
    incident: Path, tmp_path: Path, tai_offset: int
) -> None:
    """Blind review 39 (1, 3): lines behind s6-log's TAI64N labels were read as no engine
    line's, so neither a clock 40 minutes fast (0 of 17 named, NOT JUDGED) nor a zone (every
    time 2 h late, said of no node) was read off them. The label is the logger's UTC moment:
    the zone is read against it, and the clocks by the rooms, as in plain files."""
    right = _forensics(incident, tmp_path / "right")
    skewed = _skewed(incident, tmp_path, "decode-0", 2460)
    labelled = tmp_path / "labelled"
    shutil.copytree(skewed / "snapshots", labelled / "snapshots")
    for log in (skewed / "logs").glob("*.log"):
        as_s6_folder(log, labelled / "logs" / log.stem, tai_offset=tai_offset)
    summary = _forensics(labelled, tmp_path / "out")
    named = [(r["rid"], r["time"]) for r in summary["exposure"]["requests"]]
    assert named == [(r["rid"], r["time"]) for r in right["exposure"]["requests"]]
    assert summary["input"]["log_clock_skews"]["decode-0"]["seconds"] == 2460.0


@pytest.mark.parametrize("tai_offset", [10, 37])
def test_an_s6_label_tells_the_zone_of_lines_that_carry_no_stamp(
    tmp_path: Path, tai_offset: int
) -> None:
    """Blind review 39 (3): a UTC+2 host's lines behind s6 labels, no stamp of their own to
    tell their zone, were read as UTC and said of no node: every exposure 2 h late."""
    current = tmp_path / "current"
    lines = []
    for i in range(10):
        at = START + 30.0 * i  # UTC, as the logger labels it; the prefix is two hours on
        label = f"@{(1 << 62) + int(at) + tai_offset:016x}{0:08x}"
        lines.append(
            f"{label} [{_local(at + 7200.0)}] Receive: obj=GenerateReqInput(rid='r{i}', "
            f"bootstrap_room={900 + i})\n"
        )
    current.write_text("".join(lines))
    reading = read_zone("decode-0", [TelemetryFile(current, "decode-0", "log", (0, "~"))])
    assert (reading.zone, reading.voted, reading.prefixed) == (7200.0, True, True)


@pytest.mark.parametrize("seconds", [300, -300, 2460])
def test_a_decode_clock_stepped_mid_run_is_followed_from_the_step_on(
    incident: Path, tmp_path: Path, seconds: int
) -> None:
    """Blind review 39 D2/D4: a host clock stepped by NTP halfway through the logs. The skew of
    the first lines covers only the time before; the lines after it were 5 to 41 min off their
    prefill's (2,195 late lines, 3 of 16 exposures unnamed at +41 min, the others at the
    wrong time). The ends of the logs, set against each other, tell the step; the first jump of
    about as much in the node's own times tells where."""
    right = _forensics(incident, tmp_path / "right")
    folder = tmp_path / "stepped"
    shutil.copytree(incident, folder)
    step_clock(folder / "logs" / "decode-0.log", seconds, after=0.5)
    stepped = _forensics(folder, tmp_path / "out")
    named = [(r["rid"], r["time"]) for r in stepped["exposure"]["requests"]]
    assert named == [(r["rid"], r["time"]) for r in right["exposure"]["requests"]]
    assert stepped["requests"].get("late_lines_by_node", {}) == {}
    assert stepped["input"]["log_clock_skews"] == {}
    (step,) = stepped["input"]["log_clock_steps"].items()
    assert step[0] == "decode-0" and step[1]["seconds"] == pytest.approx(seconds, abs=2)
    said = (tmp_path / "out" / "report.md").read_text()
    way = "forward" if seconds > 0 else "back"
    assert f"decode-0's host clock was set {way} by" in said


def _read(clock: LogClock, stamps: list[float]) -> list[float]:
    """The times a stream's parser gives lines of these stamps (`LineParser.parse`)."""
    times = []
    for stamp in stamps:
        when = stamp - clock.shift
        times.append(clock.follow(when) if clock.step else when)
    return times


def test_a_clock_follows_its_step_at_the_first_jump_of_about_as_much() -> None:
    ahead = LogClock(step=300.0)
    # A minute's gap is no step of five minutes; the jump of five is, and what follows it.
    assert _read(ahead, [100.0, 101.0, 160.0, 461.0, 462.0]) == [100.0, 101.0, 160.0, 161.0, 162.0]
    assert ahead.stepped == (300.0, 161.0) and ahead.skew == 300.0 and ahead.step == 0.0
    back = LogClock(step=-300.0)
    # A line a few seconds behind the latest is no step back.
    assert _read(back, [1000.0, 1010.0, 1005.0, 711.0, 712.0]) == [
        1000.0,
        1010.0,
        1005.0,
        1011.0,
        1012.0,
    ]
    assert back.stepped == (-300.0, 1011.0)
