"""A prefill restart onto a bigger pool that its logs lost is not a leak still going on.

Blind review 53 D1, as the incident's replay shows it: prefill-0's log lost 35 minutes, its
restart onto a 2.04M pool among them (a `.gz` cut short, a collector down). Read again, it first
prefills short prompts, which both pools take, then prompts beyond the old pool, whole. An
honest 1M-token answer from the lost span was named exposed against the old pool, and the
verdict said the leak was not over: "prefill-0 still ran a pool below the context".
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from collector.audit.run import audit
from collector.forensics.driver import run_forensics
from collector.forensics.report import config_gaps
from simulator.offline import run_offline
from simulator.scenario import load_scenario

LOST = ("13:15:00", "13:50:00")  # incident-replay-small's restart: down 13:20, back 13:35
LINE_TIME = re.compile(r"^\[2026-09-08 (\d\d:\d\d:\d\d)")
# ReqTimeStats of a prefill that prefilled the prompt whole (not a one-token stub).
PREFILLED = re.compile(r"input_len=(\d+), .*type=prefill\)")


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    sim = tmp_path_factory.mktemp("sim")
    run_offline(load_scenario("incident-replay-small"), sim)
    folder = tmp_path_factory.mktemp("case")
    shutil.copy(sim / "logs" / "decode-0.log", folder)
    lost = False
    with (
        open(sim / "logs" / "prefill-0.log", encoding="utf-8") as source,
        open(folder / "prefill-0.log", "w", encoding="utf-8") as kept,
    ):
        for line in source:
            if stamp := LINE_TIME.match(line):
                lost = LOST[0] <= stamp.group(1) < LOST[1]
            if not lost:
                kept.write(line)
    return sim, folder


def _first_prefilled_beyond(log: Path, pool_limit: int) -> str:
    """The first line time (HH:MM:SS) at which the log shows a prompt beyond `pool_limit`
    prefilled whole."""
    with open(log, encoding="utf-8") as lines:
        for line in lines:
            match = PREFILLED.search(line)
            if match and int(match.group(1)) > pool_limit and (stamp := LINE_TIME.match(line)):
                return stamp.group(1)
    raise AssertionError("no prompt beyond the pool prefilled")


def test_the_gap_ends_when_prefill_is_read_past_its_pool_and_the_honest_answers_stand(
    case: tuple[Path, Path], tmp_path: Path
) -> None:
    sim, folder = case
    summary = run_forensics([str(folder)], tmp_path / "out", write_parquet=False).summary
    truth = json.loads((sim / "ground_truth.json").read_text())
    named = {entry["rid"] for entry in summary["exposure"]["requests"]}
    assert named == {entry["rid"] for entry in truth["exposed"]}

    (gap,) = [gap for gap in config_gaps(summary) if gap.node == "prefill-0"]
    assert gap.pool == 681_280 and gap.outgrown
    # Closed by the first request prefilled beyond the old pool at the latest: it came in
    # before its time stats were logged, and after the lost span.
    stats_logged = _first_prefilled_beyond(folder / "prefill-0.log", 681_273)
    assert f"2026-09-08T{LOST[1]}" < gap.until <= f"2026-09-08T{stats_logged}"
    assert summary["nodes"]["prefill-0"]["outgrown"]["time"] == gap.until
    assert summary["verdict"]["status"] == "stopped"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "still in force when the logs end" not in report
    assert f"until {gap.until} at the latest" in report


def test_the_audit_does_not_pass_or_fail_a_pool_the_node_was_read_outgrowing(
    case: tuple[Path, Path],
) -> None:
    """The gate fails closed: UNKNOWN (what the node runs now is not what was last read, and
    not known), not a FAIL on a pool it no longer runs, nor a PASS on a guess."""
    _, folder = case
    report = audit([folder / "prefill-0.log"])
    (result,) = report.results
    (pool,) = [check for check in result.checks if check.check == "pool"]
    stats_logged = _first_prefilled_beyond(folder / "prefill-0.log", 681_273)
    assert pool.status == "UNKNOWN"
    assert pool.evidence["pool_tokens"] == 681_280
    assert pool.evidence["longest_prefilled"] > 681_280
    assert "it restarted with a bigger pool these logs do not show" in pool.reason
    # The log before the lost span alone: the pool as read fails.
    before = folder.parent / "before.log"
    with (
        open(folder / "prefill-0.log", encoding="utf-8") as source,
        open(before, "w", encoding="utf-8") as kept,
    ):
        for line in source:
            if (stamp := LINE_TIME.match(line)) and stamp.group(1) >= stats_logged:
                break
            kept.write(line)
    (result,) = audit([before]).results
    assert [c.status for c in result.checks if c.check == "pool"] == ["FAIL"]
