"""A room used again minutes after a request that had both halves starts a new request.

Why: blind review 63 (D1). A router numbering rooms itself reused room 7 two minutes after an
honest 5,000-token request, on the same nodes, for a 900,000-token prompt the prefill refused
and the decode answered; in another dataset a second deployment's router reused it 20 minutes
on. The leak's lines were counted late ("a clock that disagrees") and never judged: an
all-clear, exit 0 with `--fail-on exposure`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics
from tests.engine_lines import refusal_line, stats_start, time_stats_line

DAY = "2026-09-01"
LEAK_RID = "c" * 32


@pytest.mark.parametrize("other_deployment", [False, True])
def test_a_leak_in_a_room_reused_minutes_later_is_named(
    tmp_path: Path, other_deployment: bool
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    honest = {
        "prefill": [stats_start("prefill", 2_040_000)],
        "decode": [stats_start("decode", 2_500_000)],
    }
    leaking = {
        "prefill": [stats_start("prefill", 681_280)],
        "decode": [stats_start("decode", 1_200_000)],
    }
    first = honest if other_deployment else leaking
    first["prefill"].append(time_stats_line("08:20:00", "a" * 32, 7, 5_000, "prefill", 1800.0))
    first["decode"].append(time_stats_line("08:20:09", "a" * 32, 7, 5_000, "decode", 2500.0))
    # Two minutes on (twenty, by the other deployment's router), room 7 again: refused, answered.
    at, answered = ("08:40:00", "08:40:07") if other_deployment else ("08:22:00", "08:22:07")
    leaking["prefill"].append(refusal_line(f"{DAY} {at}", LEAK_RID, 900_000, 681_280))
    leaking["prefill"].append(time_stats_line(at, LEAK_RID, 7, 1, "prefill", 12.0))
    leaking["decode"].append(time_stats_line(answered, LEAK_RID, 7, 900_000, "decode", 2500.0))
    deployments = {"b": leaking, "a": honest} if other_deployment else {"b": leaking}
    for name, halves in deployments.items():
        for role, lines in halves.items():
            (logs / f"{name}-{role}-0.log").write_text("".join(lines))
    summary = run_forensics([str(logs)], tmp_path / "out", write_parquet=False).summary
    assert [(r["rid"], r["bootstrap_room"]) for r in summary["exposure"]["requests"]] == [
        (LEAK_RID, "7")
    ]
    assert summary["verdict"]["outcome"] == "exposed"
    assert summary["requests"]["late_lines"] == 0
