"""`kvwatch forensics PATH... --out DIR --json FILE`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

import yaml
from pydantic import ValidationError


def add_forensics_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", help="log files/folders, .prom and server_info JSON")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("kvwatch-forensics"),
        help="folder for report.html, report.md, findings.csv, requests.parquet",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        dest="json_path",
        help="where to write the JSON summary (default: OUT/forensics.json)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML with a `detection:` block (detector parameters)",
    )
    parser.add_argument("--no-parquet", action="store_true", help="skip requests.parquet")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def load_detection_config(path: Path | None) -> object:
    from detectors.pipeline import PipelineConfig

    if path is None:
        return PipelineConfig()
    data = yaml.safe_load(path.read_text()) or {}
    block = data.get("detection", data) if isinstance(data, dict) else data
    return PipelineConfig.model_validate(block)


def run_forensics_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from collector.forensics.driver import print_outcome, run_forensics, stderr_is_terminal
    from detectors.pipeline import PipelineConfig

    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        err.write(f"kvwatch forensics: no such file or folder: {', '.join(missing)}\n")
        return 2
    try:
        config = load_detection_config(args.config)
    except (OSError, yaml.YAMLError) as exc:
        err.write(f"kvwatch forensics: cannot read --config: {exc}\n")
        return 2
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        err.write(f"kvwatch forensics: --config detection.{where}: {first['msg']}\n")
        return 2
    assert isinstance(config, PipelineConfig)
    progress = sys.stderr if (stderr_is_terminal() and not args.quiet) else None
    result = run_forensics(
        args.paths,
        args.out,
        json_path=args.json_path,
        config=config,
        progress_stream=progress,
        write_parquet=not args.no_parquet,
    )
    print_outcome(result, out)
    if result.summary["input"]["files"] == 0:
        err.write("kvwatch forensics: no telemetry files found in the given paths\n")
        return 2
    return 0
