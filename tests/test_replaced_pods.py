"""A prefill pod replaced under a new name is gone, not unread: its gap closed with it.

Blind review 33 (D1, D2): `kubectl logs` saved one file per pod, the prefill pod with the small
pool replaced at the fix by one with a big pool. The old pod's file ends where it went; read
alone, its pool was carried to the end of the logs: "Possibly not over" (or, with the new pods'
start-up lines rotated away, "Not over"), and the report asked for the logs of a pod that no
longer existed. Every request after it went to the new pod; one that still named the old pod
says its logs only stopped being kept.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics
from simulator.offline import run_offline
from simulator.scenario import load_scenario

OLD_PREFILL, NEW_PREFILL = "sglang-prefill-0-6f7c9d8b5-k2x7p", "sglang-prefill-0-5d4b8c7f9-r8m2q"
OLD_DECODE, NEW_DECODE = "sglang-decode-0-7b8c9d6f4-w9z3x", "sglang-decode-0-69f8d7c5b-t4n6v"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sim")
    run_offline(load_scenario("incident-replay-small"), folder)  # restarted onto a big pool
    return folder


def _generations(log: Path) -> tuple[list[str], list[str]]:
    """The log's lines before its restart (its second `server_args` line) and from it on."""
    lines = log.read_text().splitlines(keepends=True)
    restart = next(n for n, line in enumerate(lines) if "server_args=" in line and n > 0)
    return lines[:restart], lines[restart:]


def _pods(sim: Path, folder: Path, *, old_prefill_until: str | None = None) -> Path:
    """One file per pod, as `kubectl logs` saves them; the old prefill pod's cut at
    `old_prefill_until` (its logs no longer kept after that, the pod still running)."""
    folder.mkdir()
    for role, old, new in (
        ("prefill", OLD_PREFILL, NEW_PREFILL),
        ("decode", OLD_DECODE, NEW_DECODE),
    ):
        before, after = _generations(sim / "logs" / f"{role}-0.log")
        if role == "prefill" and old_prefill_until is not None:
            before = [line for line in before if line[1:20] < old_prefill_until]
        (folder / f"{old}.log").write_text("".join(before))
        (folder / f"{new}.log").write_text("".join(after))
    return folder


def _truth(sim: Path) -> set[str]:
    truth = json.loads((sim / "ground_truth.json").read_text())
    return {entry["rid"] for entry in truth["exposed"]}


def test_a_prefill_pod_replaced_at_the_fix_ends_its_gap(sim: Path, tmp_path: Path) -> None:
    case = _pods(sim, tmp_path / "case")
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert {e["rid"] for e in summary["exposure"]["requests"]} == _truth(sim)
    old = summary["nodes"][OLD_PREFILL]
    assert old["replaced"]["by"] == [NEW_PREFILL]
    assert old["last_read"] < old["replaced"]["time"]
    assert "unread_since" not in old
    assert summary["verdict"]["status"] == "stopped", summary["verdict"]["said"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"and from then on {NEW_PREFILL} took its deployment's requests" in report
    assert "Cap --context-length" not in report  # nothing left running a small pool
    assert "Upgrade SGLang" not in report  # the pods left run 0.5.22


def test_answers_still_naming_the_old_pod_keep_its_gap_unread(sim: Path, tmp_path: Path) -> None:
    """Its file ends 20 minutes before the fix while decode's answers still went to it: its
    logs stopped being kept, and nothing says it was gone."""
    case = _pods(sim, tmp_path / "case", old_prefill_until="2026-09-08 13:00:00")
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert "replaced" not in summary["nodes"][OLD_PREFILL]
    assert summary["verdict"]["status"] in ("possibly_not_over", "not_over")
