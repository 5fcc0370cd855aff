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

A second table takes the whole worker: what a forensics worker makes of the log (a record per
request and node, `request_side`, and the per-window sums of batch lines) against the same made
in columns: lines read into polars, times and the stream's watermark, batch lines summed per
window by `group_by`, request lines' fields extracted and grouped per request id, and the rows
turned into `SideRecord`s for the judging process. Again a lower bound (no settle logic, no
literal-aware checks, one pattern per field).
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

WINDOW_SECONDS = 300.0
_LINE = "line"
# Per request line: the fields a side is made of, each by the first match of its pattern.
SIDE_FIELDS: dict[str, tuple[str, type[float] | type[int] | None]] = {
    "room": (r"bootstrap_room=([0-9]+)", None),
    "prompt": (r"'prompt_tokens': ([0-9]+)", int),
    "cached": (r"'cached_tokens': ([0-9]+)", int),
    "completion": (r"'completion_tokens': ([0-9]+)", int),
    "e2e": (r"'e2e_latency': ([0-9.]+)", float),
    "ttft": (r"'first_token_latency': ([0-9.]+)", float),
    "input_len": (r"input_len=([0-9]+)", int),
    "cached_input_len": (r"cached_input_len=([0-9]+)", int),
    "forward": (r"forward_duration=([0-9.]+)ms", float),
    "role": (r"type=(\w+)\)", None),
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


WORKER_COLUMNS: list[Column] = [
    ("step", "step", 30, 0),
    ("kvwatch s", "kv_s", 10, 3),
    ("polars s", "pl_s", 9, 3),
]


def kvwatch_worker_seconds(log: Path) -> tuple[float, int]:
    """CPU seconds of a forensics worker's stream over `log` (its stages included), and the
    events it ships."""
    from collector.forensics.driver import WorkerStages, _anomaly_window, _for_workers, consumed
    from collector.parse import ParseStats, streams_of
    from collector.spill import _stream
    from detectors.pipeline import DetectionPipeline, PipelineConfig

    config = _for_workers(PipelineConfig())
    window = _anomaly_window(config)
    wanted = consumed(DetectionPipeline(config), node_windows=window is not None)
    stages = WorkerStages(config.ledger, window)
    shipped = 0
    started = time.process_time()
    for key, files in streams_of([log]).items():
        for _ in _stream(key, files, ParseStats(), wanted, stages):
            shipped += 1
    return time.process_time() - started, shipped


def polars_worker_seconds(log: Path) -> tuple[dict[str, float], int, int]:
    """CPU seconds per step of the same made in columns, the windows and the sides made."""
    import polars as pl

    from collector.state.request_record import SideRecord

    steps: dict[str, float] = {}
    clock = time.process_time()

    def step(name: str) -> None:
        nonlocal clock
        now = time.process_time()
        steps[name] = now - clock
        clock = now

    frame = pl.read_csv(
        log,
        separator="\x1f",
        quote_char=None,
        has_header=False,
        new_columns=[_LINE],
        schema={_LINE: pl.String},
        encoding="utf8-lossy",
    )
    step("read")
    head = pl.col(_LINE).str.slice(0, 64)
    stamp = head.str.extract(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", 1)
    millis = stamp.str.strptime(pl.Datetime("ms"), "%Y-%m-%d %H:%M:%S", strict=False).dt.epoch("ms")
    frame = frame.with_columns(head.str.extract(HEAD, 1).alias("head"), millis.alias("ms"))
    # The stream's watermark at each line: what the stages date a line's effects by.
    frame = frame.with_columns((pl.col("ms").forward_fill().cum_max() / 1000).alias("mark"))
    step("times, heads, watermark")
    line = pl.col(_LINE)
    windows = (
        frame.filter(pl.col("head") == "Decode batch")
        .select(
            (pl.col("mark") // WINDOW_SECONDS).alias("window"),
            line.str.extract(r"token usage: ([0-9.]+)", 1).cast(pl.Float64).alias("usage"),
            line.str.extract(r"#queue-req: ([0-9]+)", 1).cast(pl.Int64).alias("queue"),
            line.str.extract(r"gen throughput \(token/s\): ([0-9.]+)", 1)
            .cast(pl.Float64)
            .alias("throughput"),
        )
        .group_by("window", maintain_order=True)
        .agg(
            pl.col("usage").sum(),
            pl.col("queue").max(),
            pl.col("throughput").sum(),
            pl.len().alias("batches"),
        )
    )
    step("batch lines to windows")
    requests = frame.filter(pl.col("head").is_in(["Receive", "Finish", "ReqTimeStats"]))
    rid = (
        pl.when(pl.col("head") == "ReqTimeStats")
        .then(line.str.extract(r"rid=([0-9a-f]+)", 1))
        .otherwise(line.str.extract(r"rid='([0-9a-f]+)'", 1))
    )
    fields = []
    for name, (pattern, kind) in SIDE_FIELDS.items():
        value = line.str.extract(pattern, 1)
        if kind is not None:
            value = value.cast(pl.Int64 if kind is int else pl.Float64)
        fields.append(value.alias(name))
    mark = pl.col("mark")
    sides = (
        requests.select("head", "mark", rid.alias("rid"), *fields)
        .group_by("rid", maintain_order=True)
        .agg(
            mark.min().alias("first"),
            mark.max().alias("last"),
            mark.filter(pl.col("head") == "Receive").min().alias("received"),
            mark.filter(pl.col("head") == "Finish").max().alias("finished"),
            *(pl.col(name).drop_nulls().last() for name in SIDE_FIELDS),
        )
    )
    step("request lines to a side table")
    made = [
        SideRecord(
            node=log.stem,
            rid=row["rid"],
            role_hint=row["role"],
            first_time=row["first"],
            last_time=row["last"],
            received_time=row["received"],
            finished_time=row["finished"],
            prompt_tokens=row["prompt"],
            cached_tokens=row["cached"],
            completion_tokens=row["completion"],
            e2e_latency=row["e2e"],
            first_token_latency=row["ttft"],
            has_stats=row["input_len"] is not None,
            input_len=row["input_len"],
            cached_input_len=row["cached_input_len"],
            durations={"forward_duration": row["forward"]} if row["forward"] is not None else {},
        )
        for row in sides.iter_rows(named=True)
    ]
    step("side records")
    return steps, windows.height, len(made)


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
        print()
        kv_seconds, shipped = kvwatch_worker_seconds(log)
        steps, windows, sides = polars_worker_seconds(log)
        worker_rows: list[dict[str, float | str]] = [
            {"step": name, "kv_s": "", "pl_s": seconds} for name, seconds in steps.items()
        ]
        polars_total = sum(steps.values())
        worker_rows.append({"step": "whole worker", "kv_s": kv_seconds, "pl_s": polars_total})
        print_table(WORKER_COLUMNS, worker_rows)
        print(
            f"whole worker, CPU seconds: kvwatch ships {shipped:,} events (sides, windows and "
            f"the rest); polars makes {sides:,} sides and {windows:,} windows; "
            f"ratio {kv_seconds / polars_total:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
