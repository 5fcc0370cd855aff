"""Parse throughput: `kvwatch parse --stats` against `grep -c ''` on the same file, same run.

Builds a realistic mixed SGLang PD log (prefill and decode lines interleaved as a log shipper
would collect them, `--log-requests` at its default level 2 with prompt and reply text truncated
to 2048 characters, batch lines, ReqTimeStats, access lines and a sprinkling of PD events), then
times both commands over the same page-cached file and prints MB/s, lines/s, the ratio and the
peak memory of each run. Two file sizes are measured so that memory growth (streaming vs
slurping) is visible.

    python bench/parse_bench.py [--size-mb 600] [--small-mb 120] [--runs 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from timing import Column, interleaved, kvwatch_command, print_table, work_folder

WORDS = (
    "the of and to in is that for it as with was on be by this are from at or an have not "
    "kv cache page prefill decode token request model attention layer pool context window"
).split()


def _text(rng: random.Random, limit: int) -> str:
    n = rng.randint(20, limit // 6)
    return " ".join(rng.choice(WORDS) for _ in range(n))[:limit]


def build_log(path: Path, target_bytes: int, seed: int = 7) -> tuple[int, int]:
    """Write the mixed log; returns (bytes, lines)."""
    rng = random.Random(seed)
    t0 = 1_787_824_800  # 2026-08-27 00:00:00 UTC
    lines = 0
    written = 0
    batch: list[str] = []
    second = 0
    with open(path, "w", buffering=8 << 20) as out:
        while written < target_bytes:
            second += rng.randint(0, 2)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t0 + second))
            rid_p = f"{rng.getrandbits(128):032x}"
            rid_d = f"{rng.getrandbits(128):032x}"
            room = rng.getrandbits(63)
            prompt = rng.choice((512, 2048, 8192, 32768, 131072))
            cached = rng.choice((0, 0, prompt // 2, prompt - 64))
            completion = rng.randint(16, 1024)
            text = _text(rng, 2048)
            reply = _text(rng, 2048)
            dp = rng.randint(0, 7)
            batch.append(
                f"[{stamp}] Receive: obj=GenerateReqInput(text='{text}', sampling_params="
                f"{{'max_new_tokens': {completion}, 'temperature': 0.7}}, rid='{rid_d}', "
                f"bootstrap_host='10.0.0.5', bootstrap_port=8998, bootstrap_room={room})"
            )
            batch.append(
                f"[{stamp} TP0] Prefill batch, #new-seq: 1, #new-token: {prompt - cached}, "
                f"#cached-token: {cached}, token usage: {rng.random():.2f}, #running-req: 0, "
                f"#queue-req: {rng.randint(0, 9)}, #pending-token: 0, #bootstrap-req: 0, "
                f"#inflight-req: {rng.randint(0, 4)}, #optimistic-req: 0, cuda graph: False, "
                f"input throughput (token/s): {rng.uniform(1e3, 5e4):.2f}"
            )
            batch.append(
                f"[{stamp} TP0] ReqTimeStats(rid={rid_p}, bootstrap_room={room}, "
                f"input_len={prompt}, cached_input_len={cached}, output_len=1, attempts=0, "
                f"type=prefill): bootstrap_duration={rng.uniform(1, 5):.2f}ms, "
                f"queue_duration={rng.uniform(0, 50):.2f}ms, forward_duration="
                f"{(prompt - cached) * 0.02 + 5:.2f}ms, entry_time={t0 + second:.3f}, "
                f"transfer_speed={rng.uniform(5, 40):.2f} GB/s, transfer_total="
                f"{prompt * 0.07:.2f} MB"
            )
            for _ in range(rng.randint(0, 2)):
                batch.append(
                    f"[{stamp} DP{dp} TP{dp} EP{dp}] Decode batch, #running-req: "
                    f"{rng.randint(1, 64)}, #token: {rng.randint(1000, 300000)}, token usage: "
                    f"{rng.random():.2f}, pre-allocated usage: {rng.random() / 10:.2f}, "
                    f"#prealloc-req: {rng.randint(0, 5)}, #transfer-req: {rng.randint(0, 5)}, "
                    f"#retracted-req: 0, cuda graph: True, gen throughput (token/s): "
                    f"{rng.uniform(100, 3000):.2f}, #queue-req: 0"
                )
            batch.append(
                f"[{stamp} DP{dp} TP{dp} EP{dp}] ReqTimeStats(rid={rid_d}, bootstrap_room="
                f"{room}, input_len={prompt}, cached_input_len=0, output_len={completion}, "
                f"attempts=0, type=decode): bootstrap_duration=1.20ms, alloc_wait_duration="
                f"0.35ms, transfer_duration={rng.uniform(5, 400):.2f}ms, queue_duration=0.52ms, "
                f"forward_duration={completion * 18.5:.2f}ms, entry_time={t0 + second:.3f}"
            )
            batch.append(
                f"[{stamp}] Finish: obj=GenerateReqInput(text='{text}', sampling_params="
                f"{{'max_new_tokens': {completion}, 'temperature': 0.7}}, rid='{rid_d}', "
                f"bootstrap_host='10.0.0.5', bootstrap_port=8998, bootstrap_room={room}), "
                f"out={{'text': '{reply}', 'meta_info': {{'id': '{rid_d}', 'finish_reason': "
                f"{{'type': 'stop', 'matched': 151336}}, 'prompt_tokens': {prompt}, "
                f"'weight_version': 'default', 'num_retractions': 0, 'reasoning_tokens': 0, "
                f"'completion_tokens': {completion}, 'cached_tokens': {cached}, "
                f"'cached_tokens_details': {{'device': {cached}, 'host': 0}}, "
                f"'e2e_latency': {completion * 0.0185 + 0.3:.4f}, 'queue_time': 0.0012, "
                f"'first_token_latency': {rng.uniform(0.05, 3):.4f}}}}}"
            )
            batch.append(
                f"[{stamp}] INFO:     10.0.{dp}.{rng.randint(1, 250)}:{rng.randint(1024, 65535)} "
                f'- "POST /v1/chat/completions HTTP/1.1" 200 OK'
            )
            if rng.random() < 0.01:
                batch.append(
                    f"[{stamp} DP{dp} TP{dp} EP{dp}] Deferred KV release for room {room} timed out "
                    "after 30.0s without a full drain ack from prefill; releasing anyway."
                )
            if rng.random() < 0.005:
                batch.append(
                    f"[{stamp} TP0] Decode transfer failed for request rank=0 decode_req.req.rid="
                    f"'{rid_d}' decode_req.req.bootstrap_room={room} with exception "
                    f"KVTransferError(bootstrap_room={room}): Aborted by AbortReq."
                )
            if len(batch) > 2000:
                chunk = "\n".join(batch) + "\n"
                out.write(chunk)
                written += len(chunk.encode())
                lines += len(batch)
                batch.clear()
        if batch:
            chunk = "\n".join(batch) + "\n"
            out.write(chunk)
            written += len(chunk.encode())
            lines += len(batch)
    return written, lines


COLUMNS: list[Column] = [
    ("file MB", "mb", 8, 0),
    ("lines", "lines", 10, 0),
    ("grep MB/s", "grep_mb_s", 10, 0),
    ("kvwatch MB/s", "kv_mb_s", 13, 1),
    ("lines/s", "kv_lines_s", 10, 0),
    ("ratio", "ratio", 7, 3),
    ("peak MiB", "kv_peak_mib", 9, 0),
]


def _measure(path: Path, runs: int, kvwatch: str) -> dict[str, float]:
    size = path.stat().st_size
    grep = ["grep", "-c", "", str(path)]
    lines = int(subprocess.run(grep, capture_output=True, text=True, check=True).stdout)
    grep_s, kv_s, peak_kib, _ = interleaved(grep, [kvwatch, "parse", "--stats", str(path)], runs)
    return {
        "mb": size / 1e6,
        "lines": lines,
        "grep_mb_s": size / grep_s / 1e6,
        "kv_mb_s": size / kv_s / 1e6,
        "kv_lines_s": lines / kv_s,
        "ratio": grep_s / kv_s,
        "kv_peak_mib": peak_kib / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=600)
    parser.add_argument("--small-mb", type=int, default=120)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="write the logs here and keep them")
    args = parser.parse_args()
    kvwatch = kvwatch_command()
    with work_folder(args.keep, "kvwatch-bench-") as workdir:
        results = []
        for mb in (args.small_mb, args.size_mb):
            path = workdir / f"mixed-{mb}mb.log"
            if not path.exists():
                built, _ = build_log(path, mb * 1_000_000)
                print(f"built {path} ({built / 1e6:.0f} MB)")
            results.append(_measure(path, args.runs, kvwatch))
        print_table(COLUMNS, results)
        print(
            f"cores: {os.cpu_count()}; ratio = kvwatch speed / grep -c '' speed (median of "
            f"{args.runs} interleaved runs, page cache warm)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
