"""The evaluation harness: scoring a forensics summary against a simulator ground truth."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from detectors.evaluation import format_evaluation, score


def _finding(
    detector: str, room: str | None, severity: str = "critical", t: str = "2026-09-08T12:50:00.000Z"
) -> dict:
    return {"detector": detector, "severity": severity, "time": t, "bootstrap_room": room}


def _summary(rooms: list[str], findings: list[dict]) -> dict:
    return {
        "exposure": {
            "requests": [{"bootstrap_room": r} for r in rooms],
            "first": None,
            "last": None,
            "count": len(rooms),
        },
        "findings": findings,
    }


TRUTH = {
    "scenario": "t",
    "exposed": [
        {"bootstrap_room": "1", "time": "2026-09-08T12:10:00.000Z"},
        {"bootstrap_room": "2", "time": "2026-09-08T12:20:00.000Z"},
        {"bootstrap_room": "3", "time": "2026-09-08T12:30:00.000Z"},
    ],
    "caught": [{"bootstrap_room": "9", "time": "2026-09-08T12:40:00.000Z"}],
    "phases": [{"start": "2026-09-08T12:05:00.000Z"}],
}


def test_precision_recall_and_time_to_detect() -> None:
    summary = _summary(
        ["1", "2", "7"],
        [
            _finding("over_length_answered", "1", t="2026-09-08T12:10:30.000Z"),
            _finding("over_length_answered", "2"),
            _finding("over_length_answered", "7"),
            _finding("checksum_mismatch", "9"),
            _finding("pool_below_context", None, "warning", "2026-09-08T11:00:00.000Z"),
            _finding("telemetry_anomaly", None, "info"),
        ],
    )
    ev = score(summary, TRUTH)
    assert (ev.exposure.precision, ev.exposure.recall) == (2 / 3, 2 / 3)
    over = ev.detectors["over_length_answered"]
    assert (over.flagged, over.true_positives, over.covered) == (3, 2, 2)
    assert ev.detectors["checksum_mismatch"].recall == 1.0
    assert ev.time_to_detect == 30.0  # first exposure 12:10:00, first critical 12:10:30
    assert ev.findings_above_info == 5
    assert ev.findings_above_info_before_faults == 1
    assert ev.before_faults_by_detector == {"pool_below_context": 1}
    # Each detector's latency: from the first response it targets to its first finding on one.
    assert over.first_seconds == 30.0  # exposed from 12:10:00, room 1 flagged at 12:10:30
    assert ev.detectors["checksum_mismatch"].first_seconds == 600.0  # caught 12:40, flagged 12:50


def test_each_catching_detector_is_scored_on_the_corruptions_it_is_for() -> None:
    def caught(room: str, minute: int, cause: str) -> dict:
        return {"bootstrap_room": room, "time": f"2026-09-08T12:{minute}:00.000Z", "cause": cause}

    truth = {
        "scenario": "abort-race",
        "exposed": [],
        "caught": [
            caught("1", 10, "late_write"),
            caught("2", 20, "late_write"),
            caught("3", 30, "metadata_corruption"),
        ],
    }
    summary = _summary(
        [],
        [
            _finding("checksum_mismatch", "1", t="2026-09-08T12:10:01.000Z"),
            _finding("checksum_mismatch", "2", t="2026-09-08T12:20:01.000Z"),
            _finding("metadata_corruption", "3", t="2026-09-08T12:30:02.000Z"),
        ],
    )
    detectors = score(summary, truth).detectors
    checksum, metadata = detectors["checksum_mismatch"], detectors["metadata_corruption"]
    # 2 of the 2 overwritten pages, 1 of the 1 swapped metadata: not 2 of 3 and 1 of 3.
    assert (checksum.covered, checksum.truth) == (2, 2)
    assert (metadata.covered, metadata.truth) == (1, 1)
    # Each detector's latency runs from the first corruption of its own kind, not from 12:10.
    assert (checksum.first_seconds, metadata.first_seconds) == (1.0, 2.0)


def test_a_configuration_alarm_before_the_leak_does_not_hide_how_long_the_leak_ran() -> None:
    summary = _summary(
        ["1"],
        [
            # At start-up, before any fault: a critical finding naming no request.
            _finding("unsafe_engine_version", None, t="2026-09-08T12:00:00.000Z"),
            # A critical naming a room that was not exposed comes first among the named ones.
            _finding("impossibly_fast_prefill", "7", t="2026-09-08T12:09:00.000Z"),
            _finding("rejected_then_served", "2", t="2026-09-08T12:25:00.000Z"),
            _finding("over_length_answered", "1", t="2026-09-08T12:40:00.000Z"),
        ],
    )
    ev = score(summary, TRUTH)
    assert ev.time_to_detect == -600.0  # 12:00 is ten minutes before the first exposure
    assert ev.first_critical_detector == "unsafe_engine_version"
    assert ev.time_to_name_exposed == 900.0  # room 2 at 12:25, fifteen minutes after 12:10
    assert ev.first_critical_on_exposed_detector == "rejected_then_served"
    assert ev.before_faults_by_detector == {"unsafe_engine_version": 1}
    printed = format_evaluation(ev)
    assert "first critical finding: -600.0 s, 10 min before (unsafe_engine_version)" in printed
    assert "naming an exposed response: +900.0 s, 15 min after (rejected_then_served)" in printed
    assert "(1 before the first fault: unsafe_engine_version 1)" in printed
    assert "whole seconds" not in printed  # no latency is negative by under a second
    data = ev.to_json_dict()
    assert data["time_to_name_exposed_seconds"] == 900.0
    assert data["detectors"]["over_length_answered"]["first_seconds"] == 1800.0


def test_exposed_responses_listed_among_candidates_are_counted_apart_from_those_named() -> None:
    listing = _finding("kv_canary_violation", None, "warning")
    # Room 1 is named elsewhere, room 2 was exposed but only listed, room 8 was never exposed.
    listing["evidence"] = {"candidates": [{"bootstrap_room": r} for r in ("1", "2", "8")]}
    ev = score(_summary(["1"], [listing]), TRUTH)
    assert ev.exposure.recall == 1 / 3 and ev.exposure_listed == 1
    assert "and 1 more among the candidates of findings that hit one of several (2 of 3)" in (
        format_evaluation(ev)
    )


def test_a_latency_just_below_zero_is_explained_by_whole_second_log_times() -> None:
    # The log says 12:09:59 for a response the ground truth times at 12:10:00.000.
    flagged = _finding("over_length_answered", "1", t="2026-09-08T12:09:59.000Z")
    ev = score(_summary(["1"], [flagged]), TRUTH)
    assert ev.detectors["over_length_answered"].first_seconds == -1.0
    assert "whole seconds" not in format_evaluation(ev)  # a whole second early is not rounding
    flagged["time"] = "2026-09-08T12:09:59.500Z"
    ev = score(_summary(["1"], [flagged]), TRUTH)
    assert ev.time_to_name_exposed == -0.5
    assert "whole seconds" in format_evaluation(ev)


def test_eval_command_on_the_small_incident_meets_its_bar() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "collector.cli",
            "eval",
            "--scenario",
            "incident-replay-small",
            "--min-precision",
            "1.0",
            "--min-recall",
            "1.0",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exposure: precision 1.000  recall 1.000" in done.stdout


def test_a_run_without_exposures_says_so_instead_of_printing_none() -> None:
    healthy = {"scenario": "healthy", "exposed": [], "caught": []}
    text = format_evaluation(score(_summary([], []), healthy))
    assert "window: truth none" in text and "found none" in text and "None" not in text


def test_a_latency_of_hours_is_also_said_in_hours() -> None:
    summary = _summary(
        ["1"],
        [
            _finding("pool_below_context", None, t="2026-09-08T05:10:00.000Z"),
            _finding("over_length_answered", "1", t="2026-09-08T12:10:00.000Z"),
        ],
    )
    printed = format_evaluation(score(summary, TRUTH))
    assert "-25200.0 s, 7 h 0 min before (pool_below_context)" in printed
    assert "+0.0 s (over_length_answered)" in printed  # under two minutes: seconds only


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: p.write_bytes(bytes(range(128, 256))), "is not text (UTF-8 YAML expected)"),
        (lambda p: p.mkdir(), "is a folder: give a scenario's YAML file or a bundled name"),
    ],
)
def test_a_scenario_that_is_no_yaml_file_is_a_usage_error(tmp_path: Path, make, said) -> None:
    """Review: a binary file gave a traceback and exit 1, which CI reads as a score below the
    bar; a folder was said not to exist."""
    target = tmp_path / "scenario.dat"
    make(target)
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "eval", "--scenario", str(target)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == f"kvwatch eval: scenario {target} {said}\n"


def test_time_to_name_an_exposure_counts_from_when_the_finding_was_raised() -> None:
    """Review: by the finding's own time (the answer's), every exposure-naming detector was
    +0.0 s whatever it waited for; the canary names its request only once the requests in
    flight have ended, a join once the lines have settled."""
    named = _finding("kv_canary_violation", "1", t="2026-09-08T12:10:00.000Z")
    named["raised_at"] = "2026-09-08T12:40:00.000Z"  # attributed half an hour later
    ev = score(_summary(["1"], [named]), TRUTH)
    assert ev.time_to_name_exposed == 1800.0
    assert ev.detectors["kv_canary_violation"].first_seconds == 1800.0
    del named["raised_at"]  # a summary from before `raised_at`: its time, as then
    assert score(_summary(["1"], [named]), TRUTH).time_to_name_exposed == 0.0


def test_a_run_whose_detectors_failed_fails_the_evaluation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Perfect scores over a run that skipped input are no pass: the errors are said and the
    command exits 1 whatever the bars."""
    from detectors import evaluation

    failed = {"pool_below_context": {"count": 2, "first": "TypeError at x/y.py:3"}}
    summary = {**_summary(["1", "2", "3"], []), "detector_errors": failed}
    ev = score(summary, TRUTH)
    assert (ev.exposure.precision, ev.exposure.recall) == (1.0, 1.0)
    assert ev.to_json_dict()["detector_errors"] == failed
    assert "DETECTOR ERROR: pool_below_context failed 2 times" in format_evaluation(ev)
    monkeypatch.setattr(evaluation, "evaluate_scenario", lambda *a, **k: (ev, summary))
    out, err = io.StringIO(), io.StringIO()
    said = evaluation.run_eval_command(
        "t", seed=None, json_path=None, min_precision=1.0, min_recall=1.0, out=out, err=err
    )
    assert said == 1
    assert err.getvalue() == "kvwatch eval: a detector raised (DETECTOR ERROR above)\n"
    clean = score(_summary(["1", "2", "3"], []), TRUTH)
    monkeypatch.setattr(evaluation, "evaluate_scenario", lambda *a, **k: (clean, summary))
    assert (
        evaluation.run_eval_command(
            "t", seed=None, json_path=None, min_precision=1.0, min_recall=1.0, out=out
        )
        == 0
    )


def test_a_score_below_its_bar_is_said_beside_the_exit_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Blind review 58 J4: `--min-recall 1.01` exited 1 with nothing saying which bar failed."""
    from detectors import evaluation

    summary = _summary(["1", "2"], [])
    ev = score(summary, TRUTH)
    assert (ev.exposure.precision, ev.exposure.recall) == (1.0, 2 / 3)
    monkeypatch.setattr(evaluation, "evaluate_scenario", lambda *a, **k: (ev, summary))
    out, err = io.StringIO(), io.StringIO()
    code = evaluation.run_eval_command(
        "t", seed=None, json_path=None, min_precision=1.0, min_recall=0.9, out=out, err=err
    )
    assert code == 1
    assert err.getvalue() == "kvwatch eval: exposure recall 0.667 < --min-recall 0.9\n"
    err = io.StringIO()
    code = evaluation.run_eval_command(
        "t", seed=None, json_path=None, min_precision=1.0, min_recall=0.6, out=out, err=err
    )
    assert (code, err.getvalue()) == (0, "")
