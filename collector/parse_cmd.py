"""`kvwatch parse`: events as JSON lines, and an account of what was read."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from collector.batch_gc import batch_gc_schedule
from collector.parallel import count_events
from collector.parse import ParseStats, events_by_node, events_in_time_order


@batch_gc_schedule()
def run_parse(
    paths: list[str],
    *,
    fmt: str | None,
    show_stats: bool,
    by_time: bool = False,
    stats_json: bool = False,
    workers: int | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    missing = [str(p) for p in paths if not Path(p).exists() and not Path(p).is_symlink()]
    if missing:  # as forensics and audit answer it: a usage error, not a read error to count
        err.write(f"kvwatch parse: no such file or folder: {', '.join(missing)}\n")
        return 2
    show_stats = show_stats or stats_json
    if fmt is None:
        fmt = "none" if show_stats else "jsonl"
    stats = ParseStats()
    source = events_in_time_order if by_time else events_by_node
    if fmt == "none" and workers != 1:
        started = stats.started
        stats = count_events(paths, workers)
        stats.started = started
    elif fmt == "jsonl":
        dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
        write = out.write
        for event in source(paths, stats):
            record = event.to_json_dict()
            value = record.get("value")
            if isinstance(value, float) and not math.isfinite(value):
                # Valid Prometheus samples, but bare NaN/Infinity is not JSON: use the
                # exposition's own spelling as a string.
                record["value"] = "NaN" if value != value else ("+Inf" if value > 0 else "-Inf")
            try:
                line = dumps(record)
            except ValueError:  # `#token: nan` in a batch line: no number, so unknown
                line = dumps(_finite(record))
            write(line)
            write("\n")
    else:
        for _ in source(paths, stats):
            pass
    stats.finished = time.perf_counter()
    if show_stats:
        target = err if fmt == "jsonl" else out
        if stats_json:
            target.write(json.dumps(stats.to_json_dict(), indent=2) + "\n")
        else:
            target.write(format_stats(stats))
    if stats.files == 0:
        err.write("kvwatch parse: no telemetry files found in the given paths\n")
        return 2
    return 0


def format_stats(stats: ParseStats) -> str:
    data = stats.to_json_dict()
    lines = [
        f"files {data['files']}  bytes {data['bytes']:,}  lines {data['lines']:,}",
        f"{data['seconds']:.2f} s  {data['mb_per_second']} MB/s  "
        f"{data['lines_per_second']:,} lines/s",
        f"events {data['events']:,}",
    ]
    for kind, count in data["events_by_kind"].items():
        lines.append(f"  {kind:<28} {count:>12,}")
    lines.append(f"known noise {sum(data['noise_by_category'].values()):,}")
    for category, count in data["noise_by_category"].items():
        lines.append(f"  {category:<28} {count:>12,}")
    lines.append(f"unclassified engine lines {data['unclassified_engine_lines']:,}")
    for head, count in data["unclassified_heads"].items():
        lines.append(f"  {head!r:<28} {count:>12,}")
    lines.append(f"unclassified other lines {data['unclassified_other_lines']:,}")
    if data["dropped_by_reason"]:
        lines.append("dropped")
        for reason, count in data["dropped_by_reason"].items():
            lines.append(f"  {reason:<28} {count:>12,}")
    return "\n".join(lines) + "\n"


def _finite(value: Any) -> Any:
    """`value` with every NaN or infinity in it as None: JSON has no spelling for them (blind
    review 19: `"token":NaN` in `parse --format jsonl`, which strict readers refuse)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
