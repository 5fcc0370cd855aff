"""A prefill's pool gap said while its release was unknown is restated once the input names it.

Blind review 27: the responder's `/server_info` was saved after the incident, so the stream
reached it long after the gap was judged. The report then said "the engine version is unknown"
in the critical finding while its own node table gave the node's 0.5.19 for that generation.
The severity and time stay what was known when the finding was raised.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from collector.forensics.driver import run_forensics
from detectors.pipeline import DetectionPipeline
from detectors.pool_below_context import PoolBelowContext
from simulator.offline import run_offline
from simulator.scenario import load_scenario
from tests.test_detectors_config import T, args, capacity, ev, info, prefill_refusal

ANSWERED = ev(
    "request_finished",
    "decode-0",
    T + 100.2,
    rid="d1",
    bootstrap_room="1",
    prompt_tokens=700_000,
    completion_tokens=80,
    finish_type="stop",
)
FLEET = [
    args("prefill-0", T, "prefill"),
    capacity("prefill-0", T + 60, 681_280),
    args("decode-0", T, "decode"),
    capacity("decode-0", T + 60, 2_000_000),
    *prefill_refusal(),
    ev("request_received", "decode-0", T + 100, rid="d1", bootstrap_room="1"),
    ANSWERED,
    # An hour of the decode's traffic: the answer is judged long before any snapshot.
    ev("request_received", "decode-0", T + 3600, rid="d2", bootstrap_room="2"),
]


def _judged(late: list) -> tuple[DetectionPipeline, list]:
    pipeline = DetectionPipeline(detectors=[PoolBelowContext()], raise_errors=True)
    findings = list(pipeline.run(FLEET + late))
    prefill = [f for f in findings if f.node == "prefill-0"]
    return pipeline, prefill


def test_a_release_stated_later_restates_the_finding_not_its_severity() -> None:
    pipeline, findings = _judged([info("prefill-0", T + 86400, "0.5.19")])
    assert [f.severity for f in findings] == ["warning", "critical"]
    assert "the engine version is unknown" in findings[1].summary  # as it was raised
    warning, critical = pipeline.revised(findings)
    assert (warning.severity, critical.severity) == ("warning", "critical")
    assert (warning.time, critical.time) == (findings[0].time, findings[1].time)
    assert "version is unknown" not in critical.summary
    assert "not known yet" not in warning.summary
    assert "decode answered them, and SGLang 0.5.19 < 0.5.20 answers them" in critical.summary
    assert "SGLang 0.5.19 < 0.5.20 admits them" in warning.summary
    assert all("release stated later in the input" in f.summary for f in (warning, critical))
    assert critical.evidence["version"] == "0.5.19"
    assert critical.evidence["version_stated_later"] is True


def test_a_fixed_release_stated_later_says_it_should_not_have_answered() -> None:
    pipeline, findings = _judged([info("prefill-0", T + 86400, "0.5.22")])
    _, critical = pipeline.revised(findings)
    assert "though SGLang 0.5.22 (>= 0.5.20) should not" in critical.summary


def test_a_release_of_a_later_generation_restates_nothing() -> None:
    """The release a restart's engine states says nothing of the engine before it."""
    restart = [
        args("prefill-0", T + 3600, "prefill"),
        capacity("prefill-0", T + 3660, 2_040_000),
        info("prefill-0", T + 3700, "0.5.22"),
    ]
    pipeline, findings = _judged(restart)
    assert findings and pipeline.revised(findings) == findings


def test_forensics_reports_the_release_a_late_snapshot_states(tmp_path: Path) -> None:
    sim = tmp_path / "sim"
    run_offline(load_scenario("incident-replay-small"), sim)
    late = tmp_path / "late"
    late.mkdir()
    # Only the last snapshot of the incident's engine: saved hours into it.
    before_fix = sorted(
        p
        for p in (sim / "snapshots").glob("prefill-0@*.server_info.json")
        if json.loads(p.read_text())["version"] == "0.5.19"
    )
    shutil.copy(before_fix[-1], late)
    result = run_forensics([str(sim / "logs"), str(late)], tmp_path / "out", write_parquet=False)
    gaps = [
        f
        for f in result.summary["findings"]
        if f["detector"] == "pool_below_context" and f["node"] == "prefill-0"
    ]
    assert any(f["severity"] == "critical" for f in gaps)
    assert gaps and all("version is unknown" not in f["summary"] for f in gaps)
    assert all("not known yet" not in f["summary"] for f in gaps)
    assert any("SGLang 0.5.19" in f["summary"] for f in gaps)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "version is unknown" not in report and "not known yet" not in report
