"""The evaluation harness: `kvwatch eval --scenario S`.

Runs a simulator scenario offline, runs forensics over what it wrote, and scores the result
against the scenario's ground truth — the responses that really carried another request's data
(`exposed`) and the corruptions the KV checksum caught (`caught`). Scores are per detector and
overall: precision, recall, and the time from the first exposed response to the first critical
finding. That time is given twice, because the two answer different questions: to the first
critical finding of any kind (negative when a configuration check warned before anything leaked)
and to the first critical finding naming an exposed response (how long the leak ran before
kvwatch named it). A request is identified by its bootstrap room (the only id shared by prefill,
decode and the ground truth).
"""

from __future__ import annotations

import json
import sys
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
    "kv_canary_violation": "exposed",
}
# Which caught corruptions each catching detector is for, by the ground truth's `cause`: the
# metadata check sees metadata that belongs to another request, the KV checksum pages that
# were overwritten (every other cause). Scoring each against all caught rooms would put the
# other detector's catches in its recall.
CAUGHT_CAUSES: dict[str, tuple[bool, frozenset[str]]] = {
    "metadata_corruption": (True, frozenset({"metadata_corruption"})),
    "checksum_mismatch": (False, frozenset({"metadata_corruption"})),
}


def caught_by(detector: str, cause: str | None) -> bool:
    """Whether a corruption of `cause` is one `detector` is meant to catch."""
    listed, causes = CAUGHT_CAUSES.get(detector, (False, frozenset()))
    return (cause in causes) == listed


@dataclass
class Score:
    flagged: int
    true_positives: int
    truth: int
    covered: int
    # Seconds from the first target response to the detector's first finding naming a target.
    first_seconds: float | None = None

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
            "first_seconds": self.first_seconds,
        }


@dataclass
class Evaluation:
    scenario: str
    exposure: Score
    detectors: dict[str, Score]
    first_exposed: float | None
    first_critical: float | None
    # The first critical finding naming an exposed response, and what raised each kind.
    first_critical_on_exposed: float | None
    first_critical_detector: str | None
    first_critical_on_exposed_detector: str | None
    findings_above_info: int
    findings_above_info_before_faults: int
    # Which detectors raised the findings above info that came before the first fault.
    before_faults_by_detector: dict[str, int]
    # Exposed responses not named but listed among a finding's candidates (one of which was hit).
    exposure_listed: int
    fault_start: float | None
    window_truth: tuple[str | None, str | None]
    window_found: tuple[str | None, str | None]
    # Detectors that raised during the run (forensics' `detector_errors`): their scores are of
    # a run that skipped some input, so the evaluation fails whatever they are.
    detector_errors: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def time_to_detect(self) -> float | None:
        if self.first_exposed is None or self.first_critical is None:
            return None
        return self.first_critical - self.first_exposed

    @property
    def time_to_name_exposed(self) -> float | None:
        """Seconds from the first exposed response to the first critical finding naming one."""
        if self.first_exposed is None or self.first_critical_on_exposed is None:
            return None
        return self.first_critical_on_exposed - self.first_exposed

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "exposure": self.exposure.to_json_dict(),
            "detectors": {name: s.to_json_dict() for name, s in sorted(self.detectors.items())},
            "first_exposed": iso_time(self.first_exposed),
            "first_critical": iso_time(self.first_critical),
            "time_to_detect_seconds": self.time_to_detect,
            "first_critical_detector": self.first_critical_detector,
            "first_critical_on_exposed": iso_time(self.first_critical_on_exposed),
            "first_critical_on_exposed_detector": self.first_critical_on_exposed_detector,
            "time_to_name_exposed_seconds": self.time_to_name_exposed,
            "findings_above_info": self.findings_above_info,
            "findings_above_info_before_faults": self.findings_above_info_before_faults,
            "before_faults_by_detector": dict(sorted(self.before_faults_by_detector.items())),
            "exposure_listed": self.exposure_listed,
            "window_truth": list(self.window_truth),
            "window_found": list(self.window_found),
            "detector_errors": self.detector_errors,
            **self.extra,
        }


def _score(
    flagged: set[str],
    truth: set[str],
    target: set[str],
    first_seconds: float | None = None,
) -> Score:
    return Score(
        len(flagged), len(flagged & truth), len(target), len(flagged & target), first_seconds
    )


def _first(
    findings: list[dict[str, Any]], rooms: set[str] | None = None
) -> tuple[float | None, str | None]:
    """The earliest finding raised (naming one of `rooms`, when given): when, and its detector.

    When it was raised, not the time it is about: a canary's violation is named once the
    requests in flight have ended, a request once its lines have settled; by its own time
    every exposure-naming detector was +0.0 s, whatever it waited for (review)."""
    best: tuple[float, str] | None = None
    for finding in findings:
        room = finding.get("bootstrap_room")
        if rooms is not None and (room is None or str(room) not in rooms):
            continue
        when = parse_iso_time(finding.get("raised_at") or finding["time"])
        if when is not None and (best is None or when < best[0]):
            best = (when, str(finding["detector"]))
    return best if best is not None else (None, None)


def score(summary: dict[str, Any], truth: dict[str, Any]) -> Evaluation:
    """Compare a forensics summary with a simulator ground truth."""
    exposed = {str(e["bootstrap_room"]) for e in truth.get("exposed", [])}
    caught = {str(e["bootstrap_room"]) for e in truth.get("caught", [])}
    every = exposed | caught
    truth_time = {
        str(e["bootstrap_room"]): parse_iso_time(e.get("time"))
        for e in (*truth.get("exposed", []), *truth.get("caught", []))
    }
    found = {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]}
    serious = [f for f in summary["findings"] if f["severity"] != "info"]
    listed = {
        str(c.get("bootstrap_room"))
        for f in serious
        for c in (f.get("evidence") or {}).get("candidates") or ()
    }
    by_detector: dict[str, list[dict[str, Any]]] = {}
    for finding in serious:
        if finding.get("bootstrap_room") is not None:
            by_detector.setdefault(finding["detector"], []).append(finding)
    detectors = {}
    for name, flagged in by_detector.items():
        kind = TARGETS.get(name, "")
        target = {"exposed": exposed, "caught": caught}.get(kind, every)
        if kind == "caught":
            target = {
                str(e["bootstrap_room"])
                for e in truth.get("caught", [])
                if caught_by(name, e.get("cause"))
            }
        first_target = min(
            (t for r in target if (t := truth_time.get(r)) is not None), default=None
        )
        first_flag, _ = _first(flagged, target)
        latency = (
            first_flag - first_target
            if first_flag is not None and first_target is not None
            else None
        )
        rooms = {str(f["bootstrap_room"]) for f in flagged}
        detectors[name] = _score(rooms, every, target, latency)
    exposed_times = [parse_iso_time(e["time"]) for e in truth.get("exposed", [])]
    first_exposed = min((t for t in exposed_times if t is not None), default=None)
    critical = [f for f in serious if f["severity"] == "critical"]
    first_critical, first_critical_detector = _first(critical)
    on_exposed, on_exposed_detector = _first(critical, exposed)
    faults = [parse_iso_time(p.get("start")) for p in truth.get("phases", [])]
    fault_start = min((t for t in faults if t is not None), default=None)
    before: dict[str, int] = {}
    if fault_start is not None:
        for finding in serious:
            when = parse_iso_time(finding["time"])
            if when is not None and when < fault_start:
                before[finding["detector"]] = before.get(finding["detector"], 0) + 1
    truth_times = sorted(t for t in exposed_times if t is not None)
    return Evaluation(
        scenario=str(truth.get("scenario")),
        exposure=_score(found, exposed, exposed),
        detectors=detectors,
        first_exposed=first_exposed,
        first_critical=first_critical,
        first_critical_on_exposed=on_exposed,
        first_critical_detector=first_critical_detector,
        first_critical_on_exposed_detector=on_exposed_detector,
        findings_above_info=len(serious),
        findings_above_info_before_faults=sum(before.values()),
        before_faults_by_detector=before,
        exposure_listed=len((listed - found) & exposed),
        fault_start=fault_start,
        window_truth=(
            iso_time(truth_times[0]) if truth_times else None,
            iso_time(truth_times[-1]) if truth_times else None,
        ),
        window_found=(summary["exposure"]["first"], summary["exposure"]["last"]),
        detector_errors=dict(summary.get("detector_errors") or {}),
    )


def _fmt(value: float | None) -> str:
    return "  n/a" if value is None else f"{value:5.3f}"


def _in_words(seconds: float) -> str:
    """`, 6 h 59 min before` for a latency of hours: -25157.1 s is read faster so."""
    if abs(seconds) < 120:
        return ""
    minutes = round(abs(seconds) / 60)
    hours, minutes = divmod(minutes, 60)
    span = f"{hours} h {minutes} min" if hours else f"{minutes} min"
    return f", {span} {'before' if seconds < 0 else 'after'}"


def format_evaluation(ev: Evaluation) -> str:
    lines = [f"scenario {ev.scenario}"]
    for name, info in ev.detector_errors.items():
        lines.append(
            f"DETECTOR ERROR: {name} failed {info['count']:,} times (first: {info['first']}); "
            "the scores below are of a run that skipped input"
        )
    e = ev.exposure
    lines.append(
        f"exposure: precision {_fmt(e.precision)}  recall {_fmt(e.recall)}  "
        f"(found {e.flagged}, true {e.true_positives}, truth {e.truth})"
    )
    if ev.exposure_listed:
        lines.append(
            f"          and {ev.exposure_listed} more among the candidates of findings that "
            f"hit one of several ({e.true_positives + ev.exposure_listed} of {e.truth})"
        )

    def span(window: tuple[str | None, str | None]) -> str:
        return "none" if window[0] is None else f"{window[0]} .. {window[1]}"

    lines.append(f"window: truth {span(ev.window_truth)}")
    lines.append(f"        found {span(ev.window_found)}")
    ttd = ev.time_to_detect
    lines.append(
        "time from first exposed response to first critical finding: "
        + ("n/a" if ttd is None else f"{ttd:+.1f} s{_in_words(ttd)} ({ev.first_critical_detector})")
    )
    named = ev.time_to_name_exposed
    lines.append(
        "  to the first critical finding naming an exposed response: "
        + (
            "n/a"
            if named is None
            else f"{named:+.1f} s{_in_words(named)} ({ev.first_critical_on_exposed_detector})"
        )
    )
    before = ", ".join(f"{k} {v}" for k, v in sorted(ev.before_faults_by_detector.items()))
    lines.append(
        f"findings above info: {ev.findings_above_info} "
        f"({ev.findings_above_info_before_faults} before the first fault"
        + (f": {before})" if before else ")")
    )
    lines.append(
        f"{'detector':<28} {'flagged':>8} {'precision':>10} {'recall':>8} {'first (s)':>10}"
    )
    for name, s in sorted(ev.detectors.items()):
        first = "n/a" if s.first_seconds is None else f"{s.first_seconds:+.1f}"
        lines.append(
            f"{name:<28} {s.flagged:>8} {_fmt(s.precision):>10} {_fmt(s.recall):>8} {first:>10}"
        )
    latencies = [named, *(s.first_seconds for s in ev.detectors.values())]
    if any(v is not None and -1.0 < v < 0.0 for v in latencies):
        lines.append(
            "(a latency negative by under a second: SGLang's log times are whole seconds, "
            "the ground truth's are not)"
        )
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
    err: TextIO | None = None,
) -> int:
    """Exit status 1 when a detector raised or a score is below its bar, each said on `err`
    (a CI log showed exit 1 and a table of scores, not which bar failed: blind review 58)."""
    evaluation, _ = evaluate_scenario(scenario, seed=seed)
    out.write(format_evaluation(evaluation))
    if json_path is not None:
        json_path.write_text(json.dumps(evaluation.to_json_dict(), indent=2))
    failures = []
    if evaluation.detector_errors:
        failures.append("a detector raised (DETECTOR ERROR above)")
    e = evaluation.exposure
    if min_precision is not None and e.flagged and (e.precision or 0.0) < min_precision:
        failures.append(
            f"exposure precision {e.precision or 0.0:.3f} < --min-precision {min_precision}"
        )
    if min_recall is not None and e.truth and (e.recall or 0.0) < min_recall:
        failures.append(f"exposure recall {e.recall or 0.0:.3f} < --min-recall {min_recall}")
    for failure in failures:
        (err or sys.stderr).write(f"kvwatch eval: {failure}\n")
    return 1 if failures else 0
