"""The verdict a responder reads first: never a green all-clear beside critical findings.

From audit R (the 0.5.23 abort race): the HTML box was green and said "No client response was
found to carry another request's data" next to seven critical findings; nothing said that the
engine had caught those transfers, nor when the releases timed out, nor that a write landing
after a timeout leaves no mismatch behind.
"""

from __future__ import annotations

from typing import Any

from collector.forensics.report import _headline, _verdict_shade, abort_signals_line, caught_line


def _summary(*findings: tuple[str, str], exposed: int = 0, canary: str | None = None) -> dict:
    config = {"time": "2026-11-02T05:58:00.000Z", "max_total_num_tokens": 900_000}
    summary: dict[str, Any] = {
        "exposure": {"count": exposed, "requests": [], "first": None, "last": None},
        "findings": [
            {"detector": detector, "severity": severity, "evidence": {}}
            for detector, severity in findings
        ],
        "nodes": {"decode-0": {"role": "decode", "config": [dict(config, kv_canary=canary)]}},
        "requests": {"total": 40, "nodes_not_judged": [], "pd_role_missing": None},
        "input": {"first_time": None, "dropped_by_reason": {}},
        "abort_signals": {
            "deferred_release_outcomes": {"timeout": 59, "completed": 3},
            "transfer_failure_lines": 198,
            "timeouts_between": ["2026-11-02T09:30:00.000Z", "2026-11-02T09:55:00.000Z"],
        },
    }
    return summary


RACE = (
    ("checksum_mismatch", "critical"),
    ("checksum_mismatch", "critical"),
    ("metadata_corruption", "critical"),
    ("deferred_release_timeouts", "critical"),
)


def test_corrupt_transfers_the_engine_caught_are_said_beside_no_exposure() -> None:
    summary = _summary(*RACE)
    said = caught_line(summary)
    assert said.startswith(
        "The engine caught 2 KV checksum mismatches and 1 metadata corruption (critical, below) "
        "and aborted those requests"
    )
    assert said in _headline(summary)
    # Exposed responses are the verdict then; nothing caught, nothing said.
    assert caught_line(_summary(*RACE, exposed=3)) == ""
    assert caught_line(_summary(("deferred_release_timeouts", "critical"))) == ""


def test_the_verdict_box_is_green_only_with_nothing_above_info() -> None:
    assert _verdict_shade(_summary(*RACE)) == "warn"
    assert _verdict_shade(_summary(("pool_below_context", "warning"))) == "warn"
    assert _verdict_shade(_summary(*RACE, exposed=1)) == "exposed"
    assert _verdict_shade(_summary(("telemetry_anomaly", "info"))) == "ok"


def test_timeouts_are_placed_in_time_and_what_only_the_canary_shows_is_said() -> None:
    said = abort_signals_line(_summary(*RACE))
    assert said.startswith(
        "Abort-race signals: 59 deferred KV releases timed out between 2026-11-02T09:30:00.000Z "
        "and 2026-11-02T09:55:00.000Z and 198 transfer-failure lines were logged (1 storm "
        "finding raised)."
    )
    assert "only the KV canary (--kv-canary log) names those responses" in said
    # With the canary on, its violations (or their absence) are in the verdicts already.
    assert "KV canary" not in abort_signals_line(_summary(*RACE, canary="log"))
    assert "KV canary" in abort_signals_line(_summary(*RACE, canary="off"))
