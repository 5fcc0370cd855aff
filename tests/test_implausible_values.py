"""Counts and latencies no engine states: a garbled or forged finish line's values are unknown.

Blind review 7: a `Finish:` with `prompt_tokens` 1e32, `cached_tokens` -7 and `e2e_latency`
-1.0 was named an exposure "after -1.000s".
"""

from __future__ import annotations

import pytest

from collector.events import Event
from collector.sglang.time_stats import parse_time_stats
from collector.state.ledger import apply_event
from collector.state.request_record import SideRecord


@pytest.mark.parametrize(
    ("prompt", "cached", "e2e", "ttft"),
    [
        (10**32, -7, -1.0, 1e308),
        ("1e32", "-7", "-1", "inf"),
        (float("nan"), float("inf"), float("nan"), -0.5),
    ],
)
def test_values_out_of_every_engine_s_range_are_unknown(
    prompt: object, cached: object, e2e: object, ttft: object
) -> None:
    fields = {
        "rid": "r1",
        "finish_type": "stop",
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "completion_tokens": -3,
        "e2e_latency": e2e,
        "first_token_latency": ttft,
    }
    side = SideRecord(node="decode-0", rid="r1")
    apply_event(
        side, Event("request_finished", "decode-0", 100.0, "d.log:1", fields), fields, 100.0
    )
    assert side.prompt_tokens is None and side.cached_tokens is None
    assert side.completion_tokens is None
    assert side.e2e_latency is None and side.first_token_latency is None


def test_values_an_engine_states_are_kept() -> None:
    fields = {"rid": "r1", "prompt_tokens": 812_345, "cached_tokens": 0, "e2e_latency": 0.35}
    side = SideRecord(node="decode-0", rid="r1")
    apply_event(
        side, Event("request_finished", "decode-0", 100.0, "d.log:1", fields), fields, 100.0
    )
    assert (side.prompt_tokens, side.cached_tokens, side.e2e_latency) == (812_345, 0, 0.35)


@pytest.mark.parametrize("room", ["abc", "-5", "12a", "0x1f", "１２", "9" * 21])
def test_a_room_that_is_no_uint64_is_unknown(room: str) -> None:
    """Blind review 7: `bootstrap_room=abc` joined sides on "abc"."""
    line = (
        f"ReqTimeStats(rid=r1, bootstrap_room={room}, input_len=9, cached_input_len=0, "
        "output_len=1, attempts=0, type=prefill): queue_duration=1.00ms, entry_time=1.000"
    )
    fields = parse_time_stats(line)
    assert fields["bootstrap_room"] is None
    assert (fields["rid"], fields["input_len"]) == ("r1", 9)


def test_a_uint64_room_is_kept() -> None:
    line = (
        "ReqTimeStats(rid=r1, bootstrap_room=18446744073709551615, input_len=9, "
        "cached_input_len=0, output_len=1, attempts=0, type=prefill): queue_duration=1.00ms"
    )
    assert parse_time_stats(line)["bootstrap_room"] == "18446744073709551615"
