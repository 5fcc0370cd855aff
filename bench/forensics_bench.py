"""Forensics throughput end to end: `kvwatch forensics` against `grep -c ''` on the same files.

Writes a simulator scenario offline (default: the full incident replay at a traffic scale that
gives at least 1 GB of logs, rotated and gzipped as a shipper leaves them), then times
`grep -c ''` over the uncompressed bytes (`zcat -f` for the gzipped siblings, counted the same
way) and `kvwatch forensics` over the folder, interleaved, and prints MB/s of log text, the
ratio, the CPU seconds of all its processes (and the cores they kept busy), and the peak memory
of each forensics run. Two more runs show how cost and memory grow: the same days at a fifth of
the traffic (from the two, the fixed seconds a run costs whatever its size and the speed beyond
them), and that lighter traffic over `--stretch` times as many days (memory must stay flat as
the logs get longer: what grows with traffic is the requests in flight, never the history).

    python bench/forensics_bench.py [--scenario incident-replay] [--scale 0.25]
        [--small-scale 0.05] [--stretch 4] [--runs 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import yaml
from timing import Column, interleaved, kvwatch_command, print_table, work_folder


def _log_text_bytes(folder: Path) -> int:
    total = 0
    for path in sorted((folder / "logs").iterdir()):
        if path.suffix == ".gz":
            done = subprocess.run(
                f"zcat '{path}' | wc -c", shell=True, capture_output=True, text=True, check=True
            )
            total += int(done.stdout)
        else:
            total += path.stat().st_size
    return total


COLUMNS: list[Column] = [
    ("scale", "scale", 6, 2),
    ("days", "days", 5, 1),
    ("log MB", "mb", 8, 0),
    ("grep MB/s", "grep_mb_s", 10, 0),
    ("forensics MB/s", "kv_mb_s", 15, 1),
    ("seconds", "kv_seconds", 8, 1),
    ("ratio", "ratio", 7, 3),
    ("CPU s", "cpu_seconds", 7, 1),
    ("cores", "cores", 6, 2),
    ("peak MiB", "peak_mib", 9, 0),
]


def measure(folder: Path, runs: int, kvwatch: str) -> dict[str, float]:
    text_bytes = _log_text_bytes(folder)
    logs = folder / "logs"
    plain = [str(p) for p in sorted(logs.iterdir()) if p.suffix != ".gz"]
    gz = [str(p) for p in sorted(logs.iterdir()) if p.suffix == ".gz"]
    grep_cmd = "grep -c '' " + " ".join(f"'{p}'" for p in plain)
    if gz:
        grep_cmd = f"{grep_cmd}; zcat {' '.join(repr(p) for p in gz)} | grep -c ''"
    forensics = [
        kvwatch,
        "forensics",
        str(logs),
        str(folder / "snapshots"),
        "--out",
        str(folder / "forensics-out"),
        "--quiet",
    ]
    grep_s, kv_s, peak_kib, cpu_s = interleaved(["sh", "-c", grep_cmd], forensics, runs)
    return {
        "mb": text_bytes / 1e6,
        "grep_mb_s": text_bytes / grep_s / 1e6,
        "kv_mb_s": text_bytes / kv_s / 1e6,
        "kv_seconds": kv_s,
        "ratio": grep_s / kv_s,
        # All processes' CPU, and how many cores that kept busy on average: the ratio can only
        # grow by less CPU once this is near the core count.
        "cpu_seconds": cpu_s,
        "cores": cpu_s / kv_s,
        "peak_mib": peak_kib / 1024,
    }


def stretched(scenario: str, factor: float, out: Path) -> Path:
    """The bundled scenario lasting `factor` times as long: the same traffic and incident, then
    more ordinary days after it (its end moved)."""
    data = yaml.safe_load(
        (resources.files("simulator") / "scenarios" / f"{scenario}.yaml").read_text()
    )
    data["end"] = data["start"] + (data["end"] - data["start"]) * factor
    data["name"] = f"{data['name']}-stretched"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _days(scenario: str | Path) -> float:
    from simulator.scenario import load_scenario

    loaded = load_scenario(scenario)
    return (loaded.end - loaded.start).total_seconds() / 86400


def _simulate(kvwatch: str, scenario: str | Path, scale: float, folder: Path) -> None:
    if (folder / "ground_truth.json").exists():
        return
    cmd = [kvwatch, "simulate", "logs", "--scenario", str(scenario), "--out", str(folder)]
    subprocess.run([*cmd, "--scale", str(scale)], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", default="incident-replay")
    parser.add_argument("--scale", type=float, default=0.25)
    parser.add_argument("--small-scale", type=float, default=0.05)
    parser.add_argument("--stretch", type=float, default=4.0, help="days x this, small scale")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args()
    kvwatch = kvwatch_command()
    with work_folder(args.keep, "kvwatch-fbench-") as base:
        long = stretched(args.scenario, args.stretch, base / f"{args.scenario}-stretched.yaml")
        runs: list[tuple[str | Path, float, Path]] = [
            (args.scenario, args.small_scale, base / f"{args.scenario}-x{args.small_scale}"),
            (args.scenario, args.scale, base / f"{args.scenario}-x{args.scale}"),
            (long, args.small_scale, base / f"{args.scenario}-x{args.small_scale}-long"),
        ]
        rows = []
        for scenario, scale, folder in runs:
            _simulate(kvwatch, scenario, scale, folder)
            row = measure(folder, args.runs, kvwatch)
            row["scale"] = scale
            row["days"] = _days(scenario)
            rows.append(row)
        print_table(COLUMNS, rows)
        print(
            f"cores: {os.cpu_count()}; ratio = forensics speed / grep -c '' speed over the same "
            f"log text (median of {args.runs} interleaved runs, page cache warm)"
        )
        small, large = rows[0], rows[1]
        marginal = (large["mb"] - small["mb"]) / (large["kv_seconds"] - small["kv_seconds"])
        fixed = small["kv_seconds"] - small["mb"] / marginal
        print(
            f"same days, {large['scale'] / small['scale']:.0f}x the traffic: {fixed:.1f} s of "
            f"every run whatever its size (start-up, model fits, report), then {marginal:.0f} "
            f"MB/s (ratio {marginal / large['grep_mb_s']:.3f} to grep at "
            f"{large['grep_mb_s']:.0f} MB/s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
