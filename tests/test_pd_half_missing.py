"""One half of a PD deployment in the input: never an all-clear, never the other half's answer.

From a responder's audit (R): the reference incident with decode's log alone said "no exposed
responses found" over a 912,384-token answer; with prefill's alone it said the same over the
refusal; and prefill's request lines written apart from its stdout (`--log-requests-target
DIR`), without any decode log, made seven of prefill's own stubs "decode answers". Warmups,
which every node sends itself through a fake transfer in rooms 0 to DP-1, joined across nodes
into one request and counted as late lines at each restart.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from collector.events import Event
from collector.forensics.driver import SCHEMA_PATH, run_forensics
from collector.forensics.report import pd_role_missing_line
from collector.state.ledger import FAKE_BOOTSTRAP_HOST, LedgerConfig, RequestLedger
from collector.state.request_record import RequestRecord
from simulator.offline import run_offline
from simulator.scenario import load_scenario

REFERENCE = Path(__file__).parent / "testdata" / "reference_incident"
EXPOSED_ROOM = "5523401987766512300"
PREFILL_STUB_RID = "b2e1d4f3c5a6b7988877665544332222"


def _half(tmp_path: Path, keep: str) -> Path:
    case = tmp_path / keep
    case.mkdir()
    shutil.copy(REFERENCE / f"{keep}-0.log", case / f"{keep}-0.log")
    return case


def _valid(summary: dict[str, object]) -> None:
    jsonschema.validate(json.loads(json.dumps(summary)), json.loads(SCHEMA_PATH.read_text()))


def _forensics(case: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", str(case), "--out", str(out)]
        + ["--quiet", "--no-parquet"],
        capture_output=True,
        text=True,
    )


def test_decode_logs_alone_are_not_an_all_clear(tmp_path: Path) -> None:
    case = _half(tmp_path, "decode")
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    # Decode's time stats tell the leak: 912,384 tokens of KV "transferred" in 0.88 ms.
    assert [r["bootstrap_room"] for r in summary["exposure"]["requests"]] == [EXPOSED_ROOM]
    assert summary["exposure"]["requests"][0]["evidence"] == ["impossibly_fast_prefill"]
    _valid(summary)
    # The status speaks of the leak, whose mending no pool read can tell, not of the abort
    # race, which nothing in these logs shows (blind review 37 D6).
    assert summary["verdict"]["status"] == "possibly_not_over"
    assert "no prefill pool was read" in summary["verdict"]["said"]
    assert "aborted transfers" not in summary["verdict"]["said"]
    # Timing names a leak only while its answer beats every honest prefill: the list is a
    # floor, and says so where a machine reads it (blind review 61 D5).
    assert "the over-length leak is judged by timing alone" in summary["verdict"]["unnamed"]
    assert summary["requests"]["pd_role_missing"] == {
        "role": "prefill",
        "present": ["decode-0"],
        "requests": 2,
        "refused": 0,
        "refused_rooms": [],
        "refused_rids": [],
        "untimed_long": 0,
        "untimed_long_rids": [],
    }
    done = _forensics(case, tmp_path / "cli")
    assert done.returncode == 0 and "EXPOSED: 1 response" in done.stdout
    said = "HALF MISSING: no prefill node's logs were found in the input, only decode's (decode-0)"
    assert said in done.stdout
    assert "judged by their timing alone." in done.stdout
    assert "NOT ALL NAMED: no prefill node was read, so the over-length leak" in done.stdout
    # Without decode's time stats, nothing in its log shows the leak: not judged.
    untimed = tmp_path / "untimed"
    untimed.mkdir()
    lines = (case / "decode-0.log").read_text().splitlines(keepends=True)
    (untimed / "decode-0.log").write_text("".join(li for li in lines if "ReqTimeStats" not in li))
    done = _forensics(untimed, tmp_path / "cli-untimed")
    assert done.returncode == 2
    assert "no exposed responses found" not in done.stdout
    said = "NOT JUDGED: no prefill node's logs were found in the input, only decode's (decode-0)"
    assert said in done.stdout and said in done.stderr


def test_decode_answers_with_no_timing_are_said_not_judged_at_all(tmp_path: Path) -> None:
    """Blind review 12f: decode's time stats alone (finish lines not logged) state a prompt's
    length but no time to its first token: with prefill's logs missing nothing judges such an
    answer, and the run said every answer was "judged by their timing alone"."""
    case = tmp_path / "decode"
    case.mkdir()
    lines = (REFERENCE / "decode-0.log").read_text().splitlines(keepends=True)
    stats_alone = [line for line in lines if "Finish:" not in line]
    (case / "decode-0.log").write_text("".join(stats_alone))
    # Decode's wait for the KV, in its time stats, times the answer as a first token would.
    summary = run_forensics([str(case)], tmp_path / "timed", write_parquet=False).summary
    assert [r["bootstrap_room"] for r in summary["exposure"]["requests"]] == [EXPOSED_ROOM]
    assert summary["requests"]["pd_role_missing"]["untimed_long"] == 0
    # Time stats that state no stage before the forward pass time nothing.
    (case / "decode-0.log").write_text(
        "".join(re.sub(r"bootstrap_duration=.*?(?=forward_duration)", "", li) for li in stats_alone)
    )
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    _valid(summary)
    assert summary["exposure"]["count"] == 0
    missing = summary["requests"]["pd_role_missing"]
    # The 912,384-token answer; the 4,096-token one is no long prompt.
    assert (missing["untimed_long"], missing["untimed_long_rids"]) == (
        1,
        ["e5f4a3b2c1d0e9f8a7b6554433221100"],
    )
    done = _forensics(case, tmp_path / "cli")
    assert done.returncode == 2
    assert (
        "and 1 of them, an answer to a prompt of 32,768 tokens or more (rid "
        "e5f4a3b2c1d0e9f8a7b6554433221100), stated no timing" in done.stdout
    )


def test_prefill_logs_alone_name_the_refusals_whose_answer_is_not_in_the_input(
    tmp_path: Path,
) -> None:
    case = _half(tmp_path, "prefill")
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    _valid(summary)
    missing = summary["requests"]["pd_role_missing"]
    assert (missing["role"], missing["refused"], missing["refused_rooms"]) == (
        "decode",
        1,
        [EXPOSED_ROOM],
    )
    done = _forensics(case, tmp_path / "cli")
    assert done.returncode == 2
    assert "NOT JUDGED: no decode node's logs were found in the input" in done.stdout
    assert f"prefill refused 1 request or ran it as one-token stubs (room {EXPOSED_ROOM})" in (
        done.stdout
    )
    assert "Not judged: no decode node's logs" in (tmp_path / "cli" / "report.md").read_text()


def test_both_halves_say_nothing_of_a_missing_half(tmp_path: Path) -> None:
    summary = run_forensics([str(REFERENCE)], tmp_path / "out", write_parquet=False).summary
    assert summary["exposure"]["count"] == 1
    assert summary["requests"]["pd_role_missing"] is None


def test_prefill_request_lines_apart_from_its_stdout_are_never_a_decode_answer(
    tmp_path: Path,
) -> None:
    """Prefill's Receive and Finish lines in `<host>_<rank>.log`, its refusal and time stats
    in its stdout: the two files are two node names for one engine, and with no decode log
    the refused request was answered by nobody in the input."""
    case = tmp_path / "case"
    (case / "prefill-0-requests").mkdir(parents=True)
    prefill = (REFERENCE / "prefill-0.log").read_text().splitlines(keepends=True)
    request_lines = [line for line in prefill if re.search(r"\] (Receive|Finish): ", line)]
    (case / "prefill-0.log").write_text(
        "".join(line for line in prefill if line not in request_lines)
    )
    (case / "prefill-0-requests" / "sglang-prefill-0-6f7d9_0.log").write_text(
        "".join(request_lines)
    )
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert summary["exposure"]["count"] == 0
    assert not [f for f in summary["findings"] if f["severity"] == "critical" and f["rid"]]
    missing = summary["requests"]["pd_role_missing"]
    assert missing is not None and missing["role"] == "decode"
    assert missing["refused_rooms"] == [EXPOSED_ROOM]


def test_request_logs_in_each_node_s_folder_join_its_engine(tmp_path: Path) -> None:
    """`--log-requests-target /var/log/sglang` on every node, each node's folder holding its
    stdout and the request-log directory's `<host>_<rank>.log` (hourly rotated, the live file
    last): the host names are no node's, and the refused request must still be found answered
    by decode."""
    case = tmp_path / "case"
    for node, host in (("prefill-0", "gpu-host-3"), ("decode-0", "gpu-host-7")):
        (case / node).mkdir(parents=True)
        lines = (REFERENCE / f"{node}.log").read_text().splitlines(keepends=True)
        request_lines = [line for line in lines if re.search(r"\] (Receive|Finish): ", line)]
        assert request_lines
        (case / node / f"{node}.log").write_text(
            "".join(line for line in lines if line not in request_lines)
        )
        half = len(request_lines) // 2
        (case / node / f"{host}_0.log.2026-08-27_09").write_text("".join(request_lines[:half]))
        (case / node / f"{host}_0.log").write_text("".join(request_lines[half:]))
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert [str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]] == [EXPOSED_ROOM]
    assert summary["requests"]["pd_role_missing"] is None


def _line(kind: str, node: str, time: float, **fields: object) -> Event:
    return Event(kind, node, time, f"{node}.log:1", dict(fields))


def test_warmups_through_a_fake_transfer_join_no_other_node() -> None:
    """Each node's warmup (room = DP rank) and health check (room 0) name SGLang's fake
    bootstrap host; the same rooms come back on every node at every restart."""
    ledger = RequestLedger(LedgerConfig(settle_seconds=1.0))
    records = []
    for restart, t in enumerate((100.0, 5_000.0)):
        for node in ("prefill-0", "prefill-1", "decode-0"):
            for rank in range(2):
                rid = f"w{restart}{node}{rank}"
                fake = {"bootstrap_host": FAKE_BOOTSTRAP_HOST, "bootstrap_room": rank}
                ledger.add(_line("request_received", node, t, rid=rid, **fake))
                ledger.add(
                    _line(
                        "request_time_stats", node, t + 0.1, rid=rid, bootstrap_room=rank,
                        input_len=4, output_len=1,
                    )
                )  # fmt: skip
                ledger.add(
                    _line(
                        "request_finished", node, t + 0.2, rid=rid, prompt_tokens=4,
                        completion_tokens=1, finish_type="length", **fake,
                    )
                )  # fmt: skip
        records += ledger.advance(t + 1_000)
    records += ledger.drain()
    assert len(records) == 12  # one per node, rank and restart
    assert all(r.bootstrap_room is None and len(r.sides) == 1 for r in records)
    assert ledger.stats.late_events == 0


def test_warmups_that_never_name_the_fake_host_join_no_other_node_live() -> None:
    """Request logging off: a warmup's time stats alone, no host named. Read line by line (the
    live sidecar), the rooms 0 to DP-1 of every node joined across nodes and came back late at
    each restart; told by when they run (start-up to "fired up"), they join nothing. A client's
    request in the same rooms' range after "fired up" still joins."""
    ledger = RequestLedger(LedgerConfig(settle_seconds=1.0))
    records = []
    nodes = ("prefill-0", "prefill-1", "decode-0")
    for restart, t in enumerate((100.0, 5_000.0)):
        for node in nodes:
            assert not ledger.add(_line("server_args", node, t - 30, disaggregation_mode="x"))
            for rank in range(2):
                ledger.add(
                    _line(
                        "request_time_stats", node, t + 0.1, rid=f"w{restart}{node}{rank}",
                        bootstrap_room=rank, input_len=4, output_len=1,
                    )
                )  # fmt: skip
            ledger.add(_line("server_ready", node, t + 1))
        records += ledger.advance(t + 1_000)
    for node in ("prefill-0", "decode-0"):  # the same small room, after start-up: one request
        ledger.add(
            _line(
                "request_time_stats", node, 9_000.0, rid=f"c-{node}", bootstrap_room=1,
                input_len=4, output_len=1,
            )
        )  # fmt: skip
    records += ledger.drain()
    warmups = [r for r in records if r.sides[0].rid.startswith("w")]
    assert len(warmups) == 12 and all(len(r.sides) == 1 for r in warmups)
    assert all(r.bootstrap_room is None for r in warmups)
    (client,) = [r for r in records if r.bootstrap_room == "1"]
    assert {s.node for s in client.sides} == {"prefill-0", "decode-0"}
    assert ledger.stats.late_events == 0


def test_a_refusal_no_decode_node_logged_is_no_all_clear(tmp_path: Path) -> None:
    """Both halves in the input, but the decode node that got the refused request is not (one
    of four decode logs left out: 12 of 77 exposures gone without a word, audit R's A3)."""
    case = tmp_path / "case"
    shutil.copytree(REFERENCE, case)
    decode = case / "decode-0.log"
    kept = [
        line for line in decode.read_text().splitlines(keepends=True) if EXPOSED_ROOM not in line
    ]
    decode.write_text("".join(line for line in kept if "e5f4a3b2c1d0e9f8" not in line))
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    _valid(summary)
    assert summary["exposure"]["count"] == 0
    assert summary["requests"]["pd_role_missing"] is None
    missing = summary["requests"]["refused_without_decode"]
    assert (missing["count"], missing["rooms"], missing["rids"]) == (1, [EXPOSED_ROOM], [])
    assert missing["without_room"] == 0 and missing["first"] == missing["last"] is not None
    done = _forensics(case, tmp_path / "cli")
    assert done.returncode == 2
    assert (
        f"NOT JUDGED: 1 request prefill refused or ran as one-token stubs reached no decode node "
        f"in the input (room {EXPOSED_ROOM}, {missing['first']}): decode receives every PD "
        "request" in done.stdout
    )
    # The whole reference: its decode half is there.
    whole = run_forensics([str(REFERENCE)], tmp_path / "whole", write_parquet=False).summary
    assert whole["requests"]["refused_without_decode"]["count"] == 0


def _default_logging(line: str) -> bool:
    """What SGLang logs without `--log-requests` or time stats: no request line, but the
    scheduler's refusal (an error, logged whatever the flags)."""
    return "Receive:" not in line and "Finish:" not in line and "ReqTimeStats(" not in line


@pytest.mark.parametrize("named", [True, False])
def test_refusals_of_default_logging_are_said_with_their_rids_and_times(
    tmp_path: Path, named: bool
) -> None:
    """Blind review F1: neither node logs its requests, and prefill's refusal names the rid
    alone (2025 builds not even that). The refusal was read and then dropped, and the run said
    "no SGLang request line recognised": the one over-length prompt, on a release that hands
    it to decode, said nowhere. It is a request of its own now, said with its time."""
    case = tmp_path / "case"
    case.mkdir()
    for node in ("prefill-0", "decode-0"):
        lines = (REFERENCE / f"{node}.log").read_text().splitlines(keepends=True)
        kept = "".join(line for line in lines if _default_logging(line))
        if not named:
            kept = re.sub(r", self\.rid='[0-9a-f]+'", "", kept)
        (case / f"{node}.log").write_text(kept)
    assert ("self.rid=" in (case / "prefill-0.log").read_text()) is named
    done = _forensics(case, tmp_path / "cli")
    summary = json.loads((tmp_path / "cli" / "forensics.json").read_text())
    _valid(summary)
    assert done.returncode == 2
    missing = summary["requests"]["refused_without_decode"]
    assert missing == {
        "count": 1,
        "rooms": [],
        "rids": [PREFILL_STUB_RID] if named else [],
        "without_room": 1,
        "first": "2026-08-27T10:14:40.000Z",
        "last": "2026-08-27T10:14:40.000Z",
        "csv": str(tmp_path / "cli" / "refused_without_decode.csv"),
    }
    with open(missing["csv"], newline="") as listed:
        (row,) = csv.DictReader(listed)
    assert (row["prefill_node"], row["bootstrap_room"], row["time"]) == (
        "prefill-0",
        "",
        "2026-08-27T10:14:40.000Z",
    )
    assert row["rid"] == (PREFILL_STUB_RID if named else "")
    assert summary["requests"]["total"] == 1
    said = done.stderr.replace("\n", " ")
    assert "NOT JUDGED: 1 request prefill refused" in said
    assert (f"rid {PREFILL_STUB_RID}" in said) is named
    assert "only a refusal line names it" in said and "decode-0 logs no requests" in said
    assert "prefill-0 (prefill) ran requests" in done.stdout
    assert "logged only its 1 refusal" in done.stdout


def test_a_refusal_alone_on_a_release_that_refuses_for_good_reaches_no_decode():
    """From 0.5.20 a refused prompt never reaches decode: its refusal alone is no sign of a
    missing answer (a healthy fleet's refusals, with default logging, are not NOT JUDGED
    for them)."""
    from collector.forensics.driver import _Evidence
    from collector.state.request_record import SideRecord

    def refusal_alone(node: str) -> RequestRecord:
        ledger = RequestLedger(role_of=lambda n, t: n.split("-")[0])
        ledger.add(
            Event(
                "request_rejected",
                node,
                100.0,
                f"{node}.log:9",
                {"rid": "p1", "input_tokens": 900_000, "limit_tokens": 681_274},
            )
        )
        (record,) = ledger.drain()
        assert isinstance(record.sides[0], SideRecord) and record.bootstrap_room is None
        return record

    for final, counted in ((lambda node, t: True, 0), (lambda node, t: False, 1), (None, 1)):
        evidence = _Evidence(None)
        evidence.refusal_final = final
        evidence.record(refusal_alone("prefill-0"), [])
        evidence.record(refusal_alone("router-0"), [])  # a role no PD prefill has
        # Asked at the end of the input: a release read late may refuse for good (review 9a).
        evidence.settle_refusals()
        assert evidence.refused_without_decode == counted
        assert evidence.refused_without_decode_rids == ["p1"] * counted


def test_every_refusal_no_decode_log_shows_is_listed_for_the_responder(tmp_path: Path) -> None:
    """Blind review 56: with decode's logs missing, the verdict named three refused rooms "and
    23 more", and the 23 were in no output. Each is a response decode may have built from other
    requests' KV, to be looked up elsewhere: refused_without_decode.csv lists every one."""
    sim = tmp_path / "sim"
    run_offline(load_scenario("incident-replay-small"), sim)
    for log in (sim / "logs").glob("decode-*"):
        log.unlink()
    truth = json.loads((sim / "ground_truth.json").read_text())
    leaked = {str(r["bootstrap_room"]) for r in truth["exposed"]}
    assert len(leaked) > 3
    result = run_forensics([str(sim / "logs")], tmp_path / "out", write_parquet=False)
    summary = result.summary
    _valid(summary)
    missing = summary["requests"]["refused_without_decode"]
    assert len(missing["rooms"]) == 3 < missing["count"]
    with open(missing["csv"], newline="") as listed:
        rows = list(csv.DictReader(listed))
    assert len(rows) == missing["count"]
    assert {row["bootstrap_room"] for row in rows} == leaked
    assert all(row["prefill_node"].startswith("prefill-") for row in rows)
    assert all(int(row["prompt_tokens"]) > 681_280 for row in rows)
    assert result.outputs["refusals"] == Path(missing["csv"])
    said = pd_role_missing_line(summary)
    assert f"and {missing['count'] - 3} more, all {missing['count']} listed in " in said
    assert "refused_without_decode.csv" in said


def test_no_refusal_without_a_decode_side_writes_no_list(tmp_path: Path) -> None:
    summary = run_forensics([str(REFERENCE)], tmp_path / "out", write_parquet=False).summary
    assert summary["requests"]["refused_without_decode"]["csv"] is None
    assert not (tmp_path / "out" / "refused_without_decode.csv").exists()


def test_an_earlier_run_s_list_is_not_left_beside_a_run_that_has_none(tmp_path: Path) -> None:
    # Left in the folder, an earlier run's list reads as this run's refusals.
    out = tmp_path / "out"
    out.mkdir()
    (out / "refused_without_decode.csv").write_text("time,prefill_node\n2026-09-06,prefill-0\n")
    summary = run_forensics([str(REFERENCE)], out, write_parquet=False).summary
    assert summary["requests"]["refused_without_decode"]["csv"] is None
    assert not (out / "refused_without_decode.csv").exists()


def test_both_halves_name_exposures_by_the_refusal_not_timing_alone(tmp_path: Path) -> None:
    """With prefill's log read, the refusal names the leak whatever its timing: the list is not
    said to be a floor (blind review 61 D5's caveat is for one half alone)."""
    summary = run_forensics([str(REFERENCE)], tmp_path / "out", write_parquet=False).summary
    assert [r["bootstrap_room"] for r in summary["exposure"]["requests"]] == [EXPOSED_ROOM]
    assert summary["requests"]["pd_role_missing"] is None
    assert "timing alone" not in summary["verdict"].get("unnamed", "")
