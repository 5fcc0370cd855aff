"""The evaluation harness: `kvwatch eval --scenario S`.

Runs a simulator scenario offline, runs forensics over what it wrote, and scores the result
against the scenario's ground truth — the responses that really carried another request's data
(`exposed`) and the corruptions the KV checksum caught (`caught`). Scores are per detector and
overall: precision, recall, and the time from the first exposed response to the first critical
finding. A request is identified by its bootstrap room (the only id shared by prefill, decode
and the ground truth).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from collector.events import iso_time, parse_iso_time

# What each request-level detector is designed to see, in ground-truth terms. Detectors not
# listed are scored against every truth room (exposed or caught).
TARGETS: dict[str, str] = {
    "over_length_answered": "exposed",
    "rejected_then_served": "exposed",
    "impossibly_fast_prefill": "exposed",
    "checksum_mismatch": "caught",
    "metadata_corruption": "caught",
}


@dataclass
class Score:
    flagged: int
    true_positives: int
    truth: int
    covered: int

    @property
    def precision(self) -> float | None:
        return self.true_positives / self.flagged if self.flagged else None

    @property
    def recall(self) -> float | None:
        return self.covered / self.truth if self.truth else None

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "flagged": self.flagged,
            "true_positives": self.true_positives,
            "truth": self.truth,
            "covered": self.covered,
            "precision": self.precision,
            "recall": self.recall,
        }


@dataclass
class Evaluation:
    scenario: str
    exposure: Score
    detectors: dict[str, Score]
    first_exposed: float | None
    first_critical: float | None
    findings_above_info: int
    findings_above_info_before_faults: int
    fault_start: float | None
    window_truth: tuple[str | None, str | None]
    window_found: tuple[str | None, str | None]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def time_to_detect(self) -> float | None:
        if self.first_exposed is None or self.first_critical is None:
            return None
        return self.first_critical - self.first_exposed

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "exposure": self.exposure.to_json_dict(),
            "detectors": {name: s.to_json_dict() for name, s in sorted(self.detectors.items())},
            "first_exposed": iso_time(self.first_exposed),
            "first_critical": iso_time(self.first_critical),
            "time_to_detect_seconds": self.time_to_detect,
            "findings_above_info": self.findings_above_info,
            "findings_above_info_before_faults": self.findings_above_info_before_faults,
            "window_truth": list(self.window_truth),
            "window_found": list(self.window_found),
            **self.extra,
        }


def _score(flagged: set[str], truth: set[str], target: set[str]) -> Score:
    return Score(len(flagged), len(flagged & truth), len(target), len(flagged & target))


def score(summary: dict[str, Any], truth: dict[str, Any]) -> Evaluation:
    """Compare a forensics summary with a simulator ground truth."""
    exposed = {str(e["bootstrap_room"]) for e in truth.get("exposed", [])}
    caught = {str(e["bootstrap_room"]) for e in truth.get("caught", [])}
    every = exposed | caught
    found = {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]}
    by_detector: dict[str, set[str]] = {}
    serious = [f for f in summary["findings"] if f["severity"] != "info"]
    for finding in serious:
        room = finding.get("bootstrap_room")
        if room is not None:
            by_detector.setdefault(finding["detector"], set()).add(str(room))
    detectors = {}
    for name, rooms in by_detector.items():
        target = {"exposed": exposed, "caught": caught}.get(TARGETS.get(name, ""), every)
        detectors[name] = _score(rooms, every, target)
    exposed_times = [parse_iso_time(e["time"]) for e in truth.get("exposed", [])]
    first_exposed = min((t for t in exposed_times if t is not None), default=None)
    critical_times = [
        parse_iso_time(f["time"]) for f in summary["findings"] if f["severity"] == "critical"
    ]
    first_critical = min((t for t in critical_times if t is not None), default=None)
    faults = [parse_iso_time(p.get("start")) for p in truth.get("phases", [])]
    fault_start = min((t for t in faults if t is not None), default=None)
    before = 0
    if fault_start is not None:
        for finding in serious:
            when = parse_iso_time(finding["time"])
            if when is not None and when < fault_start:
                before += 1
    truth_times = sorted(t for t in exposed_times if t is not None)
    return Evaluation(
        scenario=str(truth.get("scenario")),
        exposure=_score(found, exposed, exposed),
        detectors=detectors,
        first_exposed=first_exposed,
        first_critical=first_critical,
        findings_above_info=len(serious),
        findings_above_info_before_faults=before,
        fault_start=fault_start,
        window_truth=(
            iso_time(truth_times[0]) if truth_times else None,
            iso_time(truth_times[-1]) if truth_times else None,
        ),
        window_found=(summary["exposure"]["first"], summary["exposure"]["last"]),
    )


def _fmt(value: float | None) -> str:
    return "  n/a" if value is None else f"{value:5.3f}"


def format_evaluation(ev: Evaluation) -> str:
    lines = [f"scenario {ev.scenario}"]
    e = ev.exposure
    lines.append(
        f"exposure: precision {_fmt(e.precision)}  recall {_fmt(e.recall)}  "
        f"(found {e.flagged}, true {e.true_positives}, truth {e.truth})"
    )
    lines.append(f"window: truth {ev.window_truth[0]} .. {ev.window_truth[1]}")
    lines.append(f"        found {ev.window_found[0]} .. {ev.window_found[1]}")
    ttd = ev.time_to_detect
    lines.append(
        "time from first exposed response to first critical finding: "
        + ("n/a" if ttd is None else f"{ttd:+.1f} s")
    )
    lines.append(
        f"findings above info: {ev.findings_above_info} "
        f"({ev.findings_above_info_before_faults} before the first fault)"
    )
    lines.append(f"{'detector':<28} {'flagged':>8} {'precision':>10} {'recall':>8}")
    for name, s in sorted(ev.detectors.items()):
        lines.append(f"{name:<28} {s.flagged:>8} {_fmt(s.precision):>10} {_fmt(s.recall):>8}")
    return "\n".join(lines) + "\n"


def evaluate_scenario(
    scenario: str, *, seed: int | None = None, workdir: Path | None = None
) -> tuple[Evaluation, dict[str, Any]]:
    """Simulate offline, run forensics, score. Returns the evaluation and the forensics summary."""
    from collector.forensics.driver import run_forensics
    from simulator.offline import run_offline
    from simulator.scenario import load_scenario

    loaded = load_scenario(scenario)
    with tempfile.TemporaryDirectory(prefix="kvwatch-eval-") as tmp:
        base = workdir or Path(tmp)
        sim_out = base / "sim"
        run_offline(loaded, sim_out, seed=seed)
        truth = json.loads((sim_out / "ground_truth.json").read_text())
        telemetry = [str(p) for p in (sim_out / "logs", sim_out / "snapshots") if p.exists()]
        result = run_forensics(telemetry, base / "forensics", write_parquet=False)
        return score(result.summary, truth), result.summary


def run_eval_command(
    scenario: str,
    *,
    seed: int | None,
    json_path: Path | None,
    min_precision: float | None,
    min_recall: float | None,
    out: TextIO,
) -> int:
    evaluation, _ = evaluate_scenario(scenario, seed=seed)
    out.write(format_evaluation(evaluation))
    if json_path is not None:
        json_path.write_text(json.dumps(evaluation.to_json_dict(), indent=2))
    failed = False
    e = evaluation.exposure
    if min_precision is not None and e.flagged and (e.precision or 0.0) < min_precision:
        failed = True
    if min_recall is not None and e.truth and (e.recall or 0.0) < min_recall:
        failed = True
    return 1 if failed else 0
