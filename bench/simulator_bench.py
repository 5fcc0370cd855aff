"""Offline throughput benchmark: how fast the simulator writes a deployment's telemetry.

    python bench/simulator_bench.py [--scenario incident-replay] [--scale 0.25] [--out DIR] [--keep]

Prints log text written, bytes on disk, wall time, MB/s and GB per minute, and as a baseline the
speed of `dd` writing the same number of bytes to the same folder in the same run (the disk's
own pace), with the ratio. Not part of any test run's pass/fail; the target is >= 1 GB of logs in
under 2 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simulator.offline import run_offline
from simulator.scenario import load_scenario


def _dd_seconds(folder: Path, nbytes: int) -> float:
    """Seconds `dd` takes to write `nbytes` into `folder`: the disk's own pace."""
    target = folder / "dd-baseline.bin"
    blocks = max(nbytes // (1 << 20), 1)
    start = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={blocks}"],
        check=True,
        capture_output=True,
    )
    seconds = time.perf_counter() - start
    target.unlink()
    return seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python bench/simulator_bench.py")
    parser.add_argument("--scenario", default="incident-replay")
    parser.add_argument("--scale", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the output folder")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="kvsim-bench-"))
    try:
        result = run_offline(load_scenario(args.scenario), out, seed=args.seed, scale=args.scale)
        baseline = _dd_seconds(out, result.bytes_on_disk)
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    mb = result.log_bytes / 1e6
    rate = mb / result.seconds
    dd_rate = result.bytes_on_disk / 1e6 / baseline
    sys.stdout.write(
        f"scenario={args.scenario} scale={args.scale} requests={result.requests} "
        f"exposed={result.exposed}\n"
        f"log_text_mb={mb:.1f} on_disk_mb={result.bytes_on_disk / 1e6:.1f} "
        f"files={result.files} seconds={result.seconds:.1f}\n"
        f"throughput_mb_s={rate:.1f} gb_per_min={rate * 60 / 1000:.2f} "
        f"seconds_per_gb={1000 / rate:.1f}\n"
        f"baseline dd to the same folder: {dd_rate:.0f} MB/s; "
        f"ratio simulator/dd = {result.bytes_on_disk / 1e6 / result.seconds / dd_rate:.3f}\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
