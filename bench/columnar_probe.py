"""Probe: how fast could a columnar reader read the lines forensics spends its time on?

Forensics costs about 12 µs of Python per line in its parsing workers. This probe reads one
node's log both ways, one core each, and prints per message family the cost per line:

* kvwatch: `read_line_blocks`, `LineParser.parse` and the fields of the line (`Event.fields`),
  as a forensics worker reads them;
* polars (Rust regexes, one thread): the file as a column of lines, the head of each line, and
  per family the few fields forensics uses, each found by a pattern that starts with its key.

The polars side is a lower bound, not an equivalent parser: it reads only SGLang's own prefix,
takes the first occurrence of each key without the literal-aware checks that keep prompt text
from faking a value, and builds no events. It says how much room a columnar reader would have.
polars is not a kvwatch dependency: `pip install polars` to run this.

    python bench/columnar_probe.py [--log FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from timing import Column, kvwatch_command, print_table, work_folder

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # one core, as one forensics worker

HEAD = (
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z_]+\d+)*\] "
    r"(Decode batch|Prefill batch|Receive|Finish|ReqTimeStats)"
)
# kvwatch's kind for each family, and the fields forensics reads from it.
FAMILIES: dict[str, tuple[str, dict[str, str]]] = {
    "Decode batch": (
        "decode_batch",
        {
            "token_usage": r"token usage: ([0-9.]+)",
            "gen_throughput": r"gen throughput \(token/s\): ([0-9.]+)",
            "queue_req": r"#queue-req: ([0-9]+)",
        },
    ),
    "Prefill batch": (
        "prefill_batch",
        {"token_usage": r"token usage: ([0-9.]+)", "queue_req": r"#queue-req: ([0-9]+)"},
    ),
    "Receive": ("request_received", {"rid": r"rid='([0-9a-f]+)'"}),
    "Finish": (
        "request_finished",
        {
            "rid": r"rid='([0-9a-f]+)'",
            "room": r"bootstrap_room=([0-9]+)",
            "prompt_tokens": r"'prompt_tokens': ([0-9]+)",
            "completion_tokens": r"'completion_tokens': ([0-9]+)",
            "cached_tokens": r"'cached_tokens': ([0-9]+)",
            "e2e_latency": r"'e2e_latency': ([0-9.]+)",
            "first_token_latency": r"'first_token_latency': ([0-9.]+)",
        },
    ),
    "ReqTimeStats": (
        "request_time_stats",
        {
            "rid": r"rid=([0-9a-f]+)",
            "input_len": r"input_len=([0-9]+)",
            "cached_input_len": r"cached_input_len=([0-9]+)",
            "forward_duration": r"forward_duration=([0-9.]+)ms",
        },
    ),
}

COLUMNS: list[Column] = [
    ("family", "family", 14, 0),
    ("lines", "lines", 9, 0),
    ("kvwatch µs/line", "kv_us", 16, 2),
    ("polars µs/line", "pl_us", 15, 2),
    ("ratio", "ratio", 7, 1),
]


def kvwatch_costs(log: Path) -> tuple[float, Counter[str], dict[str, float]]:
    """(seconds to read and classify every line, lines by kind, seconds of fields by kind)."""
    from collector.files import ReadStats, read_line_blocks
    from collector.sglang.logs import LineParser

    parser = LineParser(log.stem)
    wanted = {kind for kind, _ in FAMILIES.values()}
    lines: Counter[str] = Counter()
    field_seconds: dict[str, float] = defaultdict(float)
    events = []
    started = time.perf_counter()
    for first, block in read_line_blocks(log, ReadStats()):
        for number, line in enumerate(block, first):
            kind, event = parser.parse(line, f"{log}:{number}")
            if event is not None and kind in wanted:
                events.append(event)
    classify = time.perf_counter() - started
    for event in events:
        lines[event.kind] += 1
        started = time.perf_counter()
        event.fields  # noqa: B018 -- the read being timed
        field_seconds[event.kind] += time.perf_counter() - started
    return classify, lines, field_seconds


def polars_costs(log: Path) -> tuple[float, float, dict[str, float], int]:
    """(seconds to read the lines, to classify them, to read each family's fields, lines)."""
    import polars as pl

    started = time.perf_counter()
    frame = pl.read_csv(
        log,
        separator="\x1f",
        quote_char=None,
        has_header=False,
        new_columns=["line"],
        schema={"line": pl.String},
        encoding="utf8-lossy",
    )
    read = time.perf_counter() - started
    started = time.perf_counter()
    frame = frame.with_columns(pl.col("line").str.slice(0, 64).str.extract(HEAD, 1).alias("head"))
    classify = time.perf_counter() - started
    fields: dict[str, float] = {}
    for head, (kind, patterns) in FAMILIES.items():
        started = time.perf_counter()
        rows = frame.filter(pl.col("head") == head)
        rows.select(pl.col("line").str.extract(p, 1).alias(n) for n, p in patterns.items())
        fields[kind] = time.perf_counter() - started
    return read, classify, fields, frame.height


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log", type=Path, default=None, help="one node's log (default: made)")
    parser.add_argument("--keep", type=Path, default=None, help="write the scenario here")
    args = parser.parse_args()
    try:
        import polars  # noqa: F401
    except ImportError:
        print("polars is not installed: pip install polars", file=sys.stderr)
        return 2
    with work_folder(args.keep, "kvwatch-probe-") as base:
        log = args.log
        if log is None:
            folder = base / "incident-replay-small"
            if not (folder / "ground_truth.json").exists():
                cmd = [kvwatch_command(), "simulate", "logs", "--scenario", "incident-replay-small"]
                subprocess.run([*cmd, "--out", str(folder)], check=True, capture_output=True)
            log = max((folder / "logs").glob("decode-*.log"), key=lambda p: p.stat().st_size)
        classify, lines, field_seconds = kvwatch_costs(log)
        pl_read, pl_classify, pl_fields, total = polars_costs(log)
        rows: list[dict[str, float | str]] = [
            {
                "family": "all lines",
                "lines": total,
                "kv_us": classify / total * 1e6,
                "pl_us": (pl_read + pl_classify) / total * 1e6,
                "ratio": classify / (pl_read + pl_classify),
            }
        ]
        for head, (kind, _) in FAMILIES.items():
            if lines[kind]:
                rows.append(
                    {
                        "family": head,
                        "lines": lines[kind],
                        "kv_us": field_seconds[kind] / lines[kind] * 1e6,
                        "pl_us": pl_fields[kind] / lines[kind] * 1e6,
                        "ratio": field_seconds[kind] / max(pl_fields[kind], 1e-9),
                    }
                )
        print_table(COLUMNS, rows)
        print(
            f"{log} ({log.stat().st_size / 1e6:.0f} MB), one core each; 'all lines' is reading and "
            "classifying, the families are their fields; ratio = kvwatch time / polars time"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
