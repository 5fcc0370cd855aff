"""`kvwatch simulate ...`: run a scenario live over HTTP, or write its telemetry offline.

    live  --scenario S [--port-base P] [--speed X] [--otlp-endpoint URL] [--duration SECONDS]
          [--log-dir DIR] [--seed N] [--no-traffic]
    logs  --scenario S --out DIR [--seed N] [--scale X]
    scenarios            (list the bundled scenarios)

`--scenario` takes a bundled name (`incident-replay`) or a path to a YAML file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulator.scenario import ScenarioError, bundled_scenarios, load_scenario


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvwatch simulate",
        description="An SGLang PD deployment whose KV pool really leaks.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    live = sub.add_parser("live", help="serve the deployment over HTTP on 127.0.0.1")
    live.add_argument("--scenario", required=True, help="bundled name or YAML path")
    live.add_argument(
        "--port-base", type=int, default=0, help="router on P, nodes on P+1...; 0 picks free ports"
    )
    live.add_argument("--speed", type=float, default=1.0, help="simulated seconds per second")
    live.add_argument("--otlp-endpoint", default=None, help="OTLP/HTTP collector URL")
    live.add_argument("--duration", type=float, default=None, help="wall seconds to run")
    live.add_argument("--log-dir", type=Path, default=Path("sim-live-logs"))
    live.add_argument("--seed", type=int, default=None)
    live.add_argument(
        "--no-traffic",
        action="store_true",
        help="serve only; do not send the scenario's own traffic",
    )
    logs = sub.add_parser("logs", help="write the scenario's telemetry to files")
    logs.add_argument("--scenario", required=True, help="bundled name or YAML path")
    logs.add_argument("--out", type=Path, required=True)
    logs.add_argument("--seed", type=int, default=None)
    logs.add_argument("--scale", type=float, default=1.0, help="multiply background traffic")
    sub.add_parser("scenarios", help="list the bundled scenarios")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    out = sys.stdout
    if args.command == "scenarios":
        for name in bundled_scenarios():
            out.write(f"{name}\n")
        return 0
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    if args.command == "logs":
        from simulator.offline import run_offline

        if args.scale <= 0:
            sys.stderr.write("--scale must be positive\n")
            return 2
        result = run_offline(scenario, args.out, seed=args.seed, scale=args.scale)
        mb = result.log_bytes / 1e6
        out.write(
            f"scenario {scenario.name}: {result.requests} requests, "
            f"{result.exposed} exposed, {result.caught} corruptions caught by the engine\n"
            f"wrote {result.files} files, {result.bytes_on_disk / 1e6:.1f} MB on disk "
            f"({mb:.1f} MB of log text) to {args.out} in {result.seconds:.1f} s "
            f"({mb / max(result.seconds, 1e-9):.1f} MB/s)\n"
            f"ground truth: {args.out / 'ground_truth.json'}\n"
        )
        return 0
    from simulator.live import LiveDeployment

    if args.speed <= 0:
        sys.stderr.write("--speed must be positive\n")
        return 2
    live = LiveDeployment(
        scenario,
        log_dir=args.log_dir,
        speed=args.speed,
        port_base=args.port_base,
        otlp_endpoint=args.otlp_endpoint,
        seed=args.seed,
        apply_restarts=True,
    )
    out.write(f"scenario {scenario.name} live at {args.speed}x; logs in {args.log_dir}\n")
    out.flush()
    live.start(drive=not args.no_traffic)
    out.write(f"router  {live.router_url}/v1/chat/completions\n")
    for name, url in live.urls.items():
        out.write(f"{name:<10}{url}  (/metrics /server_info /v1/models /v1/loads /health)\n")
    out.flush()
    try:
        live.wait(args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        live.stop()
    truth = live.dep.truth
    out.write(
        f"served {truth.requests_total} requests, {len(truth.exposed)} exposed, "
        f"{len(truth.caught)} corruptions caught by the engine\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
