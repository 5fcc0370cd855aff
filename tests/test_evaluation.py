"""The evaluation harness: scoring a forensics summary against a simulator ground truth."""

from __future__ import annotations

import subprocess
import sys

from detectors.evaluation import score


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
