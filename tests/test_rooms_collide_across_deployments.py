"""Two PD deployments whose routers number bootstrap rooms themselves use the same numbers at
once: a room's sides are then two requests, one per rid, each with its own prefill and decode.

Why: blind review 20 (D4). With request time stats alone (request logging off), room 106 of a
leaking deployment served a 6,000-token prompt while room 106 of a healthy one served a
900,000-token prompt honestly; the four sides were judged as one request, and the leaking
deployment's decode was accused of answering 900,000 tokens from a 681,280-token pool.
"""

from __future__ import annotations

from pathlib import Path

from collector.forensics.driver import run_forensics
from tests.engine_lines import refusal_line
from tests.engine_lines import stats_start as _start
from tests.engine_lines import time_stats_line as _stats

DAY = "2026-09-01"


def _fleet(logs: Path) -> str:
    """Deployments `a` (prefill pool 681,280) and `b` (2,040,000) using rooms 101..106 each;
    returns the rid of the one exposed response: room 103 of `a`, refused and answered."""
    exposed = "a" * 24 + "00000103"
    a_prefill, a_decode = [_start("prefill", 681_280)], [_start("decode", 1_200_000)]
    b_prefill, b_decode = [_start("prefill", 2_040_000)], [_start("decode", 2_500_000)]
    for i, room in enumerate(range(101, 107)):
        at = f"08:{5 + 10 * i:02d}:00"
        done = f"08:{5 + 10 * i:02d}:05"
        a_rid, b_rid = f"{'a' * 24}{room:08d}", f"{'b' * 24}{room:08d}"
        if a_rid == exposed:
            a_prefill += [refusal_line(f"{DAY} {at}", a_rid, 900_000, 681_280)]
            a_prefill += [_stats(at, a_rid, room, 1, "prefill", 30.0)]
            a_decode += [_stats(done, a_rid, room, 900_000, "decode", 2500.0)]
        else:
            a_prefill += [_stats(at, a_rid, room, 6_000, "prefill", 2200.0)]
            a_decode += [_stats(done, a_rid, room, 6_000, "decode", 2500.0)]
        # `b` serves long prompts honestly, each within its pool, in the same room numbers.
        b_prefill += [_stats(done, b_rid, room, 900_000, "prefill", 312_000.0)]
        b_decode += [_stats(done, b_rid, room, 900_000, "decode", 2500.0)]
    for name, lines in (
        ("a-prefill-0", a_prefill),
        ("a-decode-0", a_decode),
        ("b-prefill-0", b_prefill),
        ("b-decode-0", b_decode),
    ):
        (logs / f"{name}.log").write_text("".join(lines))
    return exposed


def test_each_rid_of_a_shared_room_is_judged_with_its_own_prefill(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    exposed = _fleet(logs)
    summary = run_forensics([str(logs)], tmp_path / "out", write_parquet=False, workers=1).summary
    named = {(r["node"], r["rid"]) for r in summary["exposure"]["requests"]}
    assert named == {("a-decode-0", exposed)}
    accused = {
        (f["node"], f["rid"])
        for f in summary["findings"]
        if f["severity"] == "critical" and f["detector"] == "over_length_answered"
    }
    assert accused == {("a-decode-0", exposed)}
