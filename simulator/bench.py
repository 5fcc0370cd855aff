"""Offline throughput benchmark: how fast the simulator writes a deployment's telemetry.

    python -m simulator.bench [--scenario incident-replay] [--scale 0.25] [--out DIR] [--keep]

Prints log text written, bytes on disk, wall time, MB/s and GB per minute. Not part of any test
run's pass/fail; the target is >= 1 GB of logs in under 2 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from simulator.offline import run_offline
from simulator.scenario import load_scenario


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.bench")
    parser.add_argument("--scenario", default="incident-replay")
    parser.add_argument("--scale", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the output folder")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="kvsim-bench-"))
    try:
        result = run_offline(load_scenario(args.scenario), out, seed=args.seed, scale=args.scale)
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    mb = result.log_bytes / 1e6
    rate = mb / result.seconds
    sys.stdout.write(
        f"scenario={args.scenario} scale={args.scale} requests={result.requests} "
        f"exposed={result.exposed}\n"
        f"log_text_mb={mb:.1f} on_disk_mb={result.bytes_on_disk / 1e6:.1f} "
        f"files={result.files} seconds={result.seconds:.1f}\n"
        f"throughput_mb_s={rate:.1f} gb_per_min={rate * 60 / 1000:.2f} "
        f"seconds_per_gb={1000 / rate:.1f}\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
