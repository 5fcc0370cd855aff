"""Counts and latencies no engine states: a garbled or forged finish line's values are unknown.

Blind review 7: a `Finish:` with `prompt_tokens` 1e32, `cached_tokens` -7 and `e2e_latency`
-1.0 was named an exposure "after -1.000s".
"""

from __future__ import annotations

import pytest

from collector.events import Event
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
