"""The `kvwatch` command line. Each subcommand lives in its own module; this file only routes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from collector import __version__


def _parse_command(args: argparse.Namespace) -> int:
    from collector.parse_cmd import run_parse

    return run_parse(
        args.paths,
        fmt=args.format,
        show_stats=args.stats,
        by_time=args.by_time,
        stats_json=args.stats_json,
        workers=args.workers,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvwatch",
        description="Find KV-cache exposure in SGLang deployments: live, and in historical logs.",
    )
    parser.add_argument("--version", action="version", version=f"kvwatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    parse = sub.add_parser("parse", help="parse SGLang telemetry files into events")
    parse.add_argument("paths", nargs="+", help="files or folders (logs, .prom, server_info JSON)")
    parse.add_argument(
        "--format",
        choices=("jsonl", "none"),
        default=None,
        help="event output on stdout (default: jsonl, or none with --stats)",
    )
    parse.add_argument(
        "--stats",
        action="store_true",
        help="print counts by kind, unclassified lines, bytes and speed",
    )
    parse.add_argument("--stats-json", action="store_true", help="print --stats as JSON")
    parse.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes for --stats without event output (default: all cores)",
    )
    parse.add_argument(
        "--by-time",
        action="store_true",
        help="merge nodes into one timeline instead of node after node",
    )
    parse.set_defaults(func=_parse_command)

    demo = sub.add_parser("demo", help="run the main job on the bundled default and explain it")
    demo.set_defaults(func=lambda a: _demo())

    simulate = sub.add_parser(
        "simulate", help="run the SGLang PD simulator (live or offline)", add_help=False
    )
    simulate.add_argument("rest", nargs=argparse.REMAINDER)
    simulate.set_defaults(func=lambda a: _simulate(a.rest))
    return parser


def _demo() -> int:
    from collector.demo import run_demo

    return run_demo()


def _simulate(rest: list[str]) -> int:
    from simulator.cli import main as simulator_main

    return int(simulator_main(rest))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
