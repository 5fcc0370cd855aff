"""What decode's deferred-release counters counted, as forensics says it beside the logs."""

from __future__ import annotations

from collector.events import Event
from collector.forensics.driver import _Evidence

T = 1_793_600_000.0


def _sample(node: str, at: float, value: float, **labels: str) -> Event:
    fields = {
        "name": "sglang:decode_deferred_kv_release_total",
        "signal": "deferred_release_total",
        "labels": labels,
        "value": value,
    }
    return Event("metric", node, at, f"{node}.prom", fields, {})


def test_counted_once_per_dp_group_across_snapshots_and_restarts() -> None:
    evidence = _Evidence(None)
    for tp in ("0", "1"):  # two ranks of one DP group count the same releases
        evidence.release_counter(_sample("decode-0", T, 1.0, outcome="timeout", tp_rank=tp))
        evidence.release_counter(
            _sample("decode-0", T + 1800, 151.0, outcome="timeout", tp_rank=tp)
        )
    # A restart: the counter starts again from 0 and counts 4 more.
    evidence.release_counter(_sample("decode-0", T + 3600, 4.0, outcome="timeout", tp_rank="0"))
    # Another DP group, and another node, each their own releases.
    evidence.release_counter(_sample("decode-0", T, 0.0, outcome="timeout", dp_rank="1"))
    evidence.release_counter(_sample("decode-0", T + 1800, 10.0, outcome="timeout", dp_rank="1"))
    evidence.release_counter(_sample("decode-1", T, 5.0, outcome="error"))
    evidence.release_counter(_sample("decode-1", T + 1800, 7.0, outcome="error"))
    # A series the node's earlier scrape lacked appears at its first increment: from 0.
    evidence.release_counter(_sample("decode-1", T + 1800, 9.0, outcome="drained"), T)
    # A node's first scrape: what its series hold was counted before anyone looked.
    evidence.release_counter(_sample("decode-2", T + 1800, 6.0, outcome="drained"))
    assert evidence.release_counted() == {"drained": 9, "error": 2, "timeout": 150 + 4 + 10}
