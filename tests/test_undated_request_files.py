"""Request logs with no time at all, in files of their own, beside the engines' dated logs.

SGLang's request logger writes to `--log-requests-target DIR` as `{hostname}_{rank}.log`, hourly
rotated, and its lines may carry no prefix (reference §2.5, §8); without `--enable-metrics` the
finish holds no wall-clock stamp either. A stream with no time sorts first, so those sides
reached the ledger before any dated line and were judged at once, each a request alone; the
engine's dated time stats of the same requests then came late. Blind review 4a: 10 of 10
exposures missed, "LATE LINES: 520 ... (a clock that disagrees with the others)". Undated sides
now wait for a dated line of their request.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from collector.forensics.driver import run_forensics
from tests.engine_lines import prefill_start, server_args

DAY = "2026-09-04"
EXPOSED_ROOM, HONEST_ROOM = "6200000000000000001", "6200000000000000002"


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


def _time_stats(stamp: str, role: str, room: str, prompt: int, forward_ms: float) -> str:
    entry = _epoch(stamp) - forward_ms / 1000 - 0.01
    extra = "transfer_duration=30.00ms, " if role == "decode" else ""
    return (
        f"[{stamp} TP0] ReqTimeStats(rid={role[0]}{room[-6:]}, bootstrap_room={room}, "
        f"input_len={prompt}, cached_input_len=0, output_len=200, attempts=0, type={role}): "
        f"bootstrap_duration=1.00ms, {extra}queue_duration=1.00ms, "
        f"forward_duration={forward_ms:.2f}ms, entry_time={entry:.3f}\n"
    )


def _finish(role: str, room: str, prompt: int, seconds: float) -> str:
    """A request logger's line, with no prefix and no wall-clock stamp."""
    rid = f"{role[0]}{room[-6:]}"
    ids = f"rid='{rid}', bootstrap_host='10.0.0.5', bootstrap_port=8998, bootstrap_room={room}"
    return (
        f"Receive: obj=GenerateReqInput({ids})\n"
        f"Finish: obj=GenerateReqInput({ids}), out={{'text': '', 'meta_info': {{'id': '{rid}', "
        f"'finish_reason': {{'type': 'stop', 'matched': 151336}}, 'prompt_tokens': {prompt}, "
        f"'completion_tokens': 200, 'cached_tokens': 0, 'e2e_latency': {seconds}}}}}\n"
    )


def test_undated_request_files_join_the_engines_dated_lines(tmp_path: Path) -> None:
    case = tmp_path / "case"
    (case / "reqlogs").mkdir(parents=True)
    (case / "prefill-0.log").write_text(
        server_args(DAY, "prefill", time_stats=True)
        + prefill_start(DAY, "10.0.0.5", 681_280)
        + _time_stats("2026-09-04 00:20:30", "prefill", HONEST_ROOM, 400_000, 20_000.0)
    )
    (case / "decode-0.log").write_text(
        server_args(DAY, "decode", time_stats=True)
        + _time_stats("2026-09-04 00:10:09", "decode", EXPOSED_ROOM, 900_000, 8_000.0)
        + _time_stats("2026-09-04 00:20:40", "decode", HONEST_ROOM, 400_000, 9_000.0)
    )
    (case / "reqlogs" / "glm53-prefill-0-7d9f4_0.log").write_text(
        _finish("prefill", HONEST_ROOM, 400_000, 20.1)
    )
    (case / "reqlogs" / "glm53-decode-0-7d9f4_0.log").write_text(
        _finish("decode", EXPOSED_ROOM, 900_000, 8.2)
        + _finish("decode", HONEST_ROOM, 400_000, 29.5)
    )
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert [r["bootstrap_room"] for r in summary["exposure"]["requests"]] == [EXPOSED_ROOM]
    assert summary["requests"].get("late_lines", 0) == 0
    assert summary["requests"]["total"] == 2
