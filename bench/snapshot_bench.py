"""Saved `/metrics` snapshots at the document cap: `kvwatch forensics` against `grep -c ''`.

A node's exporter can expose far more than SGLang's families (an application's per-path HTTP
counters, say), and a saved `.prom` may be as large as the 64 MB document cap. Forensics reads
a handful of SGLang signals from it; this bench writes one snapshot of `--series` series nobody
reads around the few that are read, and prints the time, the ratio to `grep -c ''` on the same
file and the peak memory of the forensics run (which must stay a small multiple of the file,
not grow with the series as events). Last, the cost of one engine scrape of 5,000 series
parsed in this process (what the live sidecar pays per scrape), against counting its lines.

    python bench/snapshot_bench.py [--series 880000] [--runs 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from timing import Column, interleaved, kvwatch_command, print_table, work_folder

COLUMNS: list[Column] = [
    ("series", "series", 8, 0),
    ("file MB", "mb", 8, 1),
    ("grep s", "grep_s", 7, 3),
    ("forensics s", "kv_s", 12, 2),
    ("ratio", "ratio", 7, 4),
    ("peak MiB", "peak_mib", 9, 0),
]


def write_snapshot(folder: Path, series: int) -> Path:
    path = folder / "decode-0@20260906T010000Z.prom"
    with path.open("w") as out:
        out.write("# TYPE sglang:max_total_num_tokens gauge\n")
        out.write('sglang:max_total_num_tokens{engine_type="decode",model_name="m"} 2040000\n')
        out.write("# TYPE sglang:context_len gauge\n")
        out.write('sglang:context_len{engine_type="decode",model_name="m"} 1048576\n')
        out.write("# TYPE http_requests_total counter\n")
        for i in range(series):
            out.write(f'http_requests_total{{path="/v1/x{i}",method="POST",code="200"}} {i}\n')
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=int, default=880_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args()
    kvwatch = kvwatch_command()
    with work_folder(args.keep, "kvwatch-snapbench-") as base:
        snapshots = base / "snapshots"
        snapshots.mkdir(exist_ok=True)
        path = write_snapshot(snapshots, args.series)
        forensics = [kvwatch, "forensics", str(snapshots), "--out", str(base / "out"), "--quiet"]
        grep_s, kv_s, peak_kib, _ = interleaved(["grep", "-c", "", str(path)], forensics, args.runs)
        row = {
            "series": args.series,
            "mb": path.stat().st_size / 1e6,
            "grep_s": grep_s,
            "kv_s": kv_s,
            "ratio": grep_s / kv_s,
            "peak_mib": peak_kib / 1024,
        }
        print_table(COLUMNS, [row])
        print(f"median of {args.runs} interleaved runs, page cache warm")
    print(scrape_figures())
    return 0


def engine_scrape(series: int = 5000) -> str:
    """An engine's /metrics: histogram families whose few label blocks repeat."""
    lines: list[str] = []
    for family in range(series // 50):
        lines.append(f"# TYPE sglang:family_{family} histogram")
        for i in range(45):
            lines.append(
                f'sglang:family_{family}_bucket{{dp_rank="{i % 8}",engine_type="decode",'
                f'le="{i}.0",model_name="glm-5.3",tp_rank="{i % 8}"}} {i}.0'
            )
        for i in range(5):
            lines.append(
                f'sglang:family_{family}_sum{{dp_rank="{i}",engine_type="decode",'
                f'model_name="glm-5.3",tp_rank="{i}"}} 1.5e3'
            )
    return "\n".join(lines) + "\n"


def scrape_figures(repeats: int = 20) -> str:
    """One engine scrape parsed in this process, against counting its lines (`str.count`, the
    in-process `grep -c ''`), best of `repeats`: what the live sidecar pays per scrape."""
    from collector.sglang.prometheus import parse_exposition

    text = engine_scrape()
    parse_s = count_s = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        parse_exposition(text, node="n", source="s", time=0.0)
        parse_s = min(parse_s, time.perf_counter() - start)
        start = time.perf_counter()
        text.count("\n")
        count_s = min(count_s, time.perf_counter() - start)
    return (
        f"engine scrape of 5,000 series ({len(text) / 1e6:.2f} MB): {parse_s * 1e3:.1f} ms to "
        f"parse, {count_s * 1e3:.3f} ms to count its lines (ratio {count_s / parse_s:.4f})"
    )


if __name__ == "__main__":
    sys.exit(main())
