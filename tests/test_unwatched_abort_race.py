"""An abort-race storm with the KV canary off, end to end: no all-clear, and the gate fails.

Blind review 34 D8: with the canary off, timeout storms over 4 to 54 truly exposed responses
gave `verdict.outcome` none_found, and `kvwatch forensics --fail-on exposure` exited 0. A late
write onto re-let pages leaves no mismatch: only the canary names its victims, so without it
the run can be neither an exposure list nor an all-clear.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from simulator.offline import run_offline
from simulator.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "simulator" / "scenarios"


def _simulate(tmp_path: Path, canary: str) -> Path:
    spec = yaml.safe_load((SCENARIOS / "abort-race-storm-small.yaml").read_text())
    spec["name"] = f"abort-race-canary-{canary}"
    for role in ("prefill", "decode"):
        spec["deployment"][role]["kv_canary"] = canary
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    sim = tmp_path / canary
    run_offline(load_scenario(path), sim, seed=None)
    return sim


def _forensics(
    sim: Path, out: Path, fail_on: str = "exposure"
) -> tuple[subprocess.CompletedProcess[str], dict]:
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", "--quiet", "--no-parquet"]
        + ["--fail-on", fail_on, str(sim / "logs"), str(sim / "snapshots")]
        + ["--out", str(out), "--json", str(out / "summary.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done, json.loads((out / "summary.json").read_text())


def test_a_storm_with_the_canary_off_fails_the_exposure_gate(tmp_path: Path) -> None:
    sim = _simulate(tmp_path, "none")
    truth = json.loads((sim / "ground_truth.json").read_text())
    late = [e for e in truth["exposed"] if e["cause"] == "late_write"]
    assert late, "the storm must have exposed someone through late writes"
    done, summary = _forensics(sim, tmp_path / "out")
    # Nothing names them (no canary), and nothing may call that an all-clear.
    assert summary["exposure"]["count"] == 0
    assert summary["verdict"]["outcome"] == "not_judged"
    assert done.returncode == 2, done.stderr
    # The storm's critical findings fail `--fail-on critical` too, said as such, but the run
    # is still NOT JUDGED: exit 2, as its verdict (blind review 41: it exited 1).
    paged, _ = _forensics(sim, tmp_path / "paged", "critical")
    assert "--fail-on critical:" in paged.stderr and "NOT JUDGED" in paged.stderr
    assert paged.returncode == 2, paged.stderr
    # Off through the restart at 07:00 (the checksum went off, not the canary): one stretch,
    # on decode, whose pages the late writes land in.
    said = (
        "NOT JUDGED: a deferred-release timeout storm and a transfer-failure storm came with "
        "the KV canary off on decode-0: "
    )
    assert said in done.stderr and said in done.stdout
