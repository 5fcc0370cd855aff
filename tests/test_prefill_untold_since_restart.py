"""A prefill pool read before its deployment restarted is not taken as still in force after it.

Blind review 30a (b17): decode logs and prefill snapshots taken 3.3 hours before the deployment
restarted with a bigger pool. The 33 honest long answers after the restart were called exposed
against the old pool (precision 0.69), and the verdict said the prefill "still ran a pool below
the context". A restart is when a deployment's configuration changes: with nothing read of the
prefill since, those answers are possible exposures (warnings), and whether the gap is still open
is not known.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from collector.forensics.driver import print_outcome, run_forensics
from detectors.over_length_answered import PREFILL_UNTOLD_SINCE_RESTART
from simulator.offline import run_offline
from simulator.scenario import load_scenario

RESTART_AT = "2026-09-08T13:20:00"  # incident-replay-small's restart (back at 13:35)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sim")
    run_offline(load_scenario("incident-replay-small"), folder)
    return folder


def _case(sim: Path, folder: Path, *, snapshot_after_restart: bool) -> Path:
    """decode-0's log and prefill-0's snapshots from before the restart, and with
    `snapshot_after_restart` those saved at 14:00, after it."""
    folder.mkdir()
    shutil.copy(sim / "logs" / "decode-0.log", folder)
    for path in (sim / "snapshots").glob("prefill-0@*"):
        saved = path.name.split("@")[1][:15]
        if saved < "20260908T132000" or (snapshot_after_restart and saved == "20260908T140000"):
            shutil.copy(path, folder)
    return folder


def _exposed_truth(sim: Path) -> set[str]:
    truth = json.loads((sim / "ground_truth.json").read_text())
    return {entry["rid"] for entry in truth["exposed"]}


def _untold(summary: dict) -> list[dict]:
    return [
        f
        for f in summary["findings"]
        if f["detector"] == "over_length_answered"
        and f["evidence"].get("pool_basis") == PREFILL_UNTOLD_SINCE_RESTART
    ]


def test_answers_after_a_restart_nothing_read_of_the_prefill_follows_are_possible_only(
    sim: Path, tmp_path: Path
) -> None:
    case = _case(sim, tmp_path / "case", snapshot_after_restart=False)
    result = run_forensics([str(case)], tmp_path / "out", write_parquet=False)
    summary = result.summary
    named = {entry["rid"] for entry in summary["exposure"]["requests"]}
    assert named == _exposed_truth(sim)
    untold = _untold(summary)
    assert untold, "the honest long answers after the restart are said as possible"
    assert all(f["severity"] == "warning" and not f.get("exposure") for f in untold)
    assert all(f["time"] > "2026-09-08T13:35" for f in untold)
    assert {f["rid"] for f in untold}.isdisjoint(named)
    assert "nothing read tells of prefill-0 since" in untold[0]["summary"]
    unread = summary["nodes"]["prefill-0"]["unread_since"]
    assert unread["node"] == "decode-0" and unread["restart"] is True
    assert summary["nodes"]["prefill-0"]["last_read"] < RESTART_AT
    assert summary["verdict"]["status"] == "possibly_not_over"
    terminal = io.StringIO()
    print_outcome(result, terminal)
    assert "PREFILL UNTOLD: " in terminal.getvalue()
    report = (tmp_path / "out" / "report.md").read_text()
    assert ", still in force when the logs end" not in report
    assert "nothing read tells of prefill-0 since" in report


def test_a_snapshot_after_the_restart_tells_the_pool_again(sim: Path, tmp_path: Path) -> None:
    case = _case(sim, tmp_path / "case", snapshot_after_restart=True)
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert {entry["rid"] for entry in summary["exposure"]["requests"]} == _exposed_truth(sim)
    assert not _untold(summary)
    assert "unread_since" not in summary["nodes"]["prefill-0"]
    assert summary["verdict"]["status"] != "possibly_not_over"


def test_possible_exposures_alone_are_no_all_clear(sim: Path, tmp_path: Path) -> None:
    """The decode's log from its restart on, and prefill snapshots from before it: the long
    answers are warnings only, and the run is NOT JUDGED (exit 2), never "no exposed
    responses found"."""
    case = _case(sim, tmp_path / "case", snapshot_after_restart=False)
    log = case / "decode-0.log"
    lines = log.read_text().splitlines(keepends=True)
    back = next(n for n, line in enumerate(lines) if "server_args" in line and n > 0)
    log.write_text("".join(lines[back:]))
    # The timing detector judges apart from pools (its floors have their own tests).
    config = tmp_path / "kvwatch.yaml"
    config.write_text("detection:\n  disabled: [impossibly_fast_prefill]\n")
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", "--quiet", "--no-parquet"]
        + [str(case), "--out", str(tmp_path / "cli"), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "NOT JUDGED" in done.stderr and "nothing read tells that pool since" in done.stderr
