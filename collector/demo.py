"""`kvwatch demo`: the incident, replayed and found, with nothing external needed.

The simulator writes the incident scenario's telemetry (an SGLang 0.5.19 PD deployment whose
prefill pool is smaller than the advertised context, then a restart on a fixed engine with a
bigger pool); forensics reads it as it would read a fleet's logs; the terminal shows what was
found and where the report is. The ground truth the simulator kept is used only at the end, to
show that the answer is right.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

DEFAULT_SCENARIO = "incident-replay"
DEFAULT_SCALE = 0.02


def run_demo(
    out: TextIO | None = None,
    *,
    workdir: Path = Path("demo-out"),
    scenario: str = DEFAULT_SCENARIO,
    scale: float = DEFAULT_SCALE,
) -> int:
    from collector.forensics.driver import print_outcome, run_forensics, stderr_is_terminal
    from detectors.evaluation import format_evaluation, score
    from simulator.offline import run_offline
    from simulator.scenario import load_scenario

    out = out or sys.stdout
    loaded = load_scenario(scenario)
    sim_dir = workdir / "telemetry"
    report_dir = workdir / "report"
    out.write(
        "kvwatch demo: the 2026 SGLang KV-cache exposure, replayed in a simulator and found\n"
        "in its logs.\n\n"
        f"1. Simulating `{loaded.name}` ({loaded.description.strip().splitlines()[0]})\n"
    )
    result = run_offline(loaded, sim_dir, scale=scale)
    out.write(
        f"   {result.requests:,} requests, {result.log_bytes / 1e6:,.0f} MB of SGLang logs, "
        f"snapshots of /metrics and /server_info -> {sim_dir}\n\n"
        "2. Forensics over those files, exactly as over a fleet's logs:\n\n"
    )
    progress = sys.stderr if stderr_is_terminal() else None
    found = run_forensics(
        [str(sim_dir / "logs"), str(sim_dir / "snapshots")],
        report_dir,
        progress_stream=progress,
    )
    print_outcome(found, out)
    truth = json.loads((sim_dir / "ground_truth.json").read_text())
    evaluation = score(found.summary, truth)
    out.write("\n3. Checked against the simulator's ground truth (never read by forensics):\n\n")
    out.write("".join(f"   {line}\n" for line in format_evaluation(evaluation).splitlines()))
    out.write(
        f"\nOpen {report_dir / 'report.html'} for the plots: prefill speed against the physical\n"
        "floor, the findings timeline, deferred releases, and each node's pool against context.\n"
    )
    return 0
