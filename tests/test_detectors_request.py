"""Request-level detectors: over-length answered, rejected then served, impossibly fast prefill.

Numbers follow incident.md: prefill pool 681,280 tokens, context 1,048,576, 0.5.19, then a
restart with a ~2.04M pool.
"""

from __future__ import annotations

import numpy as np
import pytest

from collector.events import BOOTSTRAP_SERVER, Event
from detectors.base import Detector
from detectors.finding import Finding
from detectors.impossibly_fast_prefill import (
    FloorModel,
    ImpossiblyFastPrefill,
    ImpossiblyFastPrefillConfig,
)
from detectors.over_length_answered import OverLengthAnswered
from detectors.pipeline import DetectionPipeline
from detectors.quantile_line import quantile_line
from detectors.rejected_then_served import RejectedThenServed

T = 1_788_500_000.0
POOL = 681_280
CONTEXT = 1_048_576


def ev(kind: str, node: str, t: float, **fields) -> Event:
    return Event(kind, node, t, f"{node}.log", dict(fields))


def boot(node: str, role: str, t: float, pool: int, version: str | None = None) -> list[Event]:
    out = [
        ev(
            "server_args",
            node,
            t,
            disaggregation_mode=role,
            transfer_backend="mooncake",
            kv_checksum=False,
            tp_size=8,
        )
    ]
    if version:
        out.append(
            ev(
                "server_info",
                node,
                t + 1,
                version=version,
                max_total_num_tokens=pool,
                context_len=CONTEXT,
                disaggregation_mode=role,
            )
        )
    out.append(ev("capacity", node, t + 30, max_total_num_tokens=pool, context_len=CONTEXT))
    out.append(ev("server_ready", node, t + 60))  # "The server is fired up": warmed up
    return out


def prefill_ok(
    room: int, t: float, prompt: int, cached: int = 0, seconds: float = 1.0, node: str = "prefill-0"
) -> list[Event]:
    rid = f"p{room}"
    return [
        ev("request_received", node, t, rid=rid, bootstrap_room=str(room)),
        ev(
            "request_time_stats",
            node,
            t + seconds,
            rid=rid,
            bootstrap_room=str(room),
            role="prefill",
            input_len=prompt,
            cached_input_len=cached,
            output_len=1,
            queue_duration=0.001,
            forward_duration=seconds,
        ),
        ev(
            "request_finished",
            node,
            t + seconds,
            rid=rid,
            bootstrap_room=str(room),
            prompt_tokens=prompt,
            cached_tokens=cached,
            completion_tokens=1,
            finish_type="length",
            status_code=None,
            e2e_latency=seconds,
            first_token_latency=None,
        ),
    ]


def prefill_refused(
    room: int,
    t: float,
    prompt: int,
    *,
    rejection: bool = True,
    stub: bool = True,
    finish: str = "abort",
) -> list[Event]:
    """Prefill refusing a prompt: its refusal line, and the one-token stub it swapped in,
    finished `abort` (400) as the reference's older logs show, or `length` (200) as real 0.5.19
    finishes the stub it sent on to decode (audit W, against its source)."""
    rid = f"p{room}"
    out = [ev("request_received", "prefill-0", t, rid=rid, bootstrap_room=str(room))]
    if rejection:
        out.append(
            ev(
                "request_rejected",
                "prefill-0",
                t + 0.01,
                rid=rid,
                input_tokens=prompt,
                limit_tokens=POOL - 6,
                reason="input_too_long",
            )
        )
    if stub:
        out.append(
            ev(
                "request_finished",
                "prefill-0",
                t + 0.02,
                rid=rid,
                bootstrap_room=str(room),
                prompt_tokens=1,
                cached_tokens=0,
                completion_tokens=0 if finish == "abort" else 1,
                finish_type=finish,
                status_code=400 if finish == "abort" else None,
                e2e_latency=0.02,
                first_token_latency=None,
            )
        )
    return out


def decode_answer(
    room: int,
    t: float,
    prompt: int,
    *,
    ttft: float | None,
    cached: int = 0,
    finish: str = "stop",
    status: int | None = None,
    node: str = "decode-0",
    e2e: float | None = None,
) -> list[Event]:
    """Decode's answer: its first token after `ttft` (None: not stated, as a 0.5.22 finish),
    its end after `e2e` (default 5 s after the first token)."""
    rid = f"d{room}"
    if e2e is None:
        assert ttft is not None
        e2e = ttft + 5
    return [
        ev("request_received", node, t, rid=rid, bootstrap_room=str(room)),
        ev(
            "request_finished",
            node,
            t + e2e,
            rid=rid,
            bootstrap_room=str(room),
            prompt_tokens=prompt,
            cached_tokens=cached,
            completion_tokens=150,
            finish_type=finish,
            status_code=status,
            e2e_latency=e2e,
            first_token_latency=ttft,
        ),
    ]


def run(detector: Detector, *groups: list[Event]):
    events = sorted((e for g in groups for e in g), key=lambda e: e.time)
    return list(DetectionPipeline(detectors=[detector], raise_errors=True).run(events))


LEAKY = boot("prefill-0", "prefill", T, POOL, "0.5.19") + boot("decode-0", "decode", T, 2_000_000)


# -- over-length answered -----------------------------------------------------------------------


def test_over_length_prompt_answered_on_decode_is_a_critical_exposure():
    (finding,) = run(
        OverLengthAnswered(),
        LEAKY,
        prefill_refused(1001, T + 500, 700_000),
        decode_answer(1001, T + 500, 700_000, ttft=0.05),
    )
    assert finding.severity == "critical" and finding.exposure
    assert finding.bootstrap_room == "1001"
    assert finding.rid == "d1001" and finding.node == "decode-0"
    assert finding.runbook == "KVWatchOverLengthAnswered"
    assert finding.evidence["pool_tokens"] == 681_280
    # SGLang refuses from max_req_input_len = min(context - 1, pool - 1) - 5 = 681,274 tokens on.
    assert finding.evidence["longest_accepted"] == 681_273
    assert finding.evidence["excess_tokens"] == 700_000 - 681_273
    assert finding.evidence["pool_node"] == "prefill-0"
    assert finding.time == T + 500 + 0.05 + 5


def test_a_finding_is_dated_when_the_client_got_the_answer_to_the_microsecond():
    """Audit R: the exposure block said 00:04:56.798Z (meta_info's send time), its findings
    the log line's 00:04:56.000Z."""
    answer = decode_answer(1001, T + 500, 700_000, ttft=0.3)
    finish = next(e for e in answer if e.kind == "request_finished")
    finish.fields["response_sent_to_client_ts"] = finish.time + 0.798
    (finding,) = run(OverLengthAnswered(), LEAKY, prefill_refused(1001, T + 500, 700_000), answer)
    assert finding.time == finish.time + 0.798


def test_same_length_after_a_restart_with_a_bigger_pool_is_not_flagged():
    restarted = boot("prefill-0", "prefill", T + 5_000, 2_040_000, "0.5.21")
    findings = run(
        OverLengthAnswered(),
        LEAKY,
        prefill_refused(1001, T + 500, 700_000),
        decode_answer(1001, T + 500, 700_000, ttft=0.05),
        restarted,
        prefill_ok(2001, T + 6_000, 700_000, seconds=40.0),
        decode_answer(2001, T + 6_000, 700_000, ttft=42.0),
    )
    assert [f.bootstrap_room for f in findings] == ["1001"]


def test_prompts_within_the_pool_and_failed_answers_are_not_flagged():
    findings = run(
        OverLengthAnswered(),
        LEAKY,
        prefill_ok(1, T + 100, 681_273, seconds=30.0),  # the longest the engine accepts
        decode_answer(1, T + 100, 681_273, ttft=31.0),
        prefill_refused(2, T + 200, 700_000),
        decode_answer(2, T + 200, 700_000, ttft=0.05, finish="abort", status=500),
    )
    assert findings == []


def test_a_prompt_prefill_itself_says_it_held_is_not_over_its_pool():
    # The start-up lines of a restart with a bigger pool are missing, so the timeline still has
    # the old pool in force. Prefill's own time stats say it prefilled all 900,000 tokens
    # (a refused prompt is replaced by a one-token stub, reference §5): its pool held them, and
    # the answer is no exposure. The refused one beside it still is.
    findings = run(
        OverLengthAnswered(),
        LEAKY,
        prefill_ok(3001, T + 700, 900_000, seconds=90.0),
        decode_answer(3001, T + 700, 900_000, ttft=92.0),
        prefill_refused(3002, T + 800, 900_000),
        decode_answer(3002, T + 800, 900_000, ttft=0.05),
    )
    assert [f.bootstrap_room for f in findings] == ["3002"]


def test_a_prefill_finish_claiming_the_whole_prompt_does_not_clear_it():
    """Audit O's v04: prefill's finish claims all 877,518 tokens in 35 ms, and its pool
    refuses prompts from 681,274 on: a finish line says what was asked, not what was computed.
    Taken for proof (as time stats are), it hid 20 true exposures."""
    stated = ev(
        "server_info",
        "prefill-0",
        T + 2,
        version="0.5.23",
        max_total_num_tokens=POOL,
        max_req_input_len=POOL - 6,
        disaggregation_mode="prefill",
    )
    claimed = [
        e
        for e in prefill_ok(7001, T + 900, 877_518, seconds=0.035)
        if e.kind != ("request_time_stats")
    ]
    for known in (LEAKY, [*LEAKY, stated]):  # the limit stated or not
        (finding,) = run(
            OverLengthAnswered(), known, claimed, decode_answer(7001, T + 900, 877_518, ttft=0.05)
        )
        assert finding.exposure and finding.evidence["longest_accepted"] == POOL - 7


def test_the_prompt_limit_the_engine_states_is_the_one_judged_against():
    """/server_info's `max_req_input_len` is the engine's own limit: 1,048,570 on a 681,280-token
    pool sharded over two ranks (audit U), so 900,000 tokens were within it."""
    stated = ev(
        "server_info",
        "prefill-0",
        T + 2,
        version="0.5.19",
        max_total_num_tokens=POOL,
        max_req_input_len=1_048_570,
        disaggregation_mode="prefill",
    )
    findings = run(
        OverLengthAnswered(),
        [*LEAKY, stated],
        decode_answer(5001, T + 900, 900_000, ttft=92.0),
        decode_answer(5002, T + 900, 1_048_570, ttft=0.05),
    )
    assert [f.bootstrap_room for f in findings] == ["5002"]
    assert findings[0].evidence["longest_accepted"] == 1_048_569
    # A limit no engine states (garbled) is not taken: the pool's own is.
    garbled = ev("server_info", "prefill-0", T + 2, max_total_num_tokens=POOL, max_req_input_len=0)
    findings = run(
        OverLengthAnswered(),
        [*LEAKY, garbled],
        decode_answer(5003, T + 900, 600_000, ttft=92.0),
        decode_answer(5004, T + 900, 700_000, ttft=0.05),
    )
    assert [f.bootstrap_room for f in findings] == ["5004"]


def test_with_the_pool_unknown_a_truncation_warning_states_the_limit_judged_against():
    """Audit W (0.5.21, `--allow-auto-truncate`): a PD prefill cuts a prompt over its limit to
    `max_req_input_len` and says so, without a rid; decode answers over the whole prompt, and
    the pages prefill never wrote held other requests' KV. With no start-up line or snapshot
    giving the pool, the limit the warning states is the one judged against."""
    unbooted = [
        ev("server_args", "prefill-0", T, disaggregation_mode="prefill"),
        ev("server_args", "decode-0", T, disaggregation_mode="decode"),
    ]
    limit = POOL - 6

    def truncation(kind: str, stated: int) -> Event:
        return ev(
            "auto_truncated",
            "prefill-0",
            T + 900,
            input_tokens=750_000,
            limit_tokens=stated,
            limit_kind=kind,
        )

    requests = [
        *prefill_ok(8001, T + 900, limit, seconds=30.0),  # prefill ran the cut prompt
        *decode_answer(8001, T + 900, 750_000, ttft=32.0),
        *prefill_ok(8002, T + 1_000, 500_000, seconds=20.0),
        *decode_answer(8002, T + 1_000, 500_000, ttft=22.0),
    ]
    (finding,) = run(
        OverLengthAnswered(), unbooted, [truncation("max_req_input_len", limit)], requests
    )
    assert finding.bootstrap_room == "8001" and finding.exposure
    assert finding.evidence["pool_tokens"] is None
    assert finding.evidence["pool_basis"] == "stated limit"
    # A prompt of the limit's own length is cut to itself, whole (blind review 49 D1).
    assert finding.evidence["longest_accepted"] == limit
    assert "stated limit" in finding.summary
    # Without it the pool is unknown and nothing is judged; the tokenizer's truncation states
    # the context, not this limit.
    assert run(OverLengthAnswered(), unbooted, requests) == []
    assert (
        run(OverLengthAnswered(), unbooted, [truncation("context_length", limit)], requests) == []
    )


def test_a_prompt_the_engine_refuses_though_shorter_than_the_pool_is_over_length():
    # 681,274 to 681,280 tokens fit the pool but are refused (max_req_input_len is pool - 6):
    # answered with success on decode, they were answered from a one-token stub.
    for prompt in (681_274, 681_280):
        (finding,) = run(OverLengthAnswered(), LEAKY, decode_answer(3, T + 300, prompt, ttft=0.05))
        assert finding.exposure and finding.evidence["excess_tokens"] == prompt - 681_273


def test_decode_first_then_prefill_still_judged_against_the_prefill_pool():
    decode = decode_answer(7, T + 500, 700_000, ttft=0.05)
    prefill = [
        Event(e.kind, e.node, e.time + 8, e.source, e.fields)  # prefill clock runs late
        for e in prefill_refused(7, T + 500, 700_000)
    ]
    findings = run(OverLengthAnswered(), LEAKY, decode, prefill)
    assert [(f.bootstrap_room, f.evidence["pool_basis"]) for f in findings] == [
        ("7", "prefill node")
    ]


def test_without_the_prefill_side_the_largest_prefill_pool_in_force_is_used():
    two_prefills = LEAKY + boot("prefill-1", "prefill", T, 800_000, "0.5.19")
    findings = run(
        OverLengthAnswered(),
        two_prefills,
        decode_answer(1, T + 100, 700_000, ttft=0.05),  # fits prefill-1: no exposure
        decode_answer(2, T + 200, 900_000, ttft=0.05),  # fits nowhere
    )
    assert [(f.bootstrap_room, f.severity, f.exposure) for f in findings] == [
        ("1", "warning", False),
        ("2", "critical", True),
    ]
    assert findings[1].evidence["pool_tokens"] == 800_000
    assert findings[1].evidence["pool_basis"] == "largest prefill pool in force"
    # 700,000 tokens fit prefill-1 and not prefill-0, and nothing says which it met.
    assert findings[0].evidence["strictest_pool_node"] == "prefill-0"


def _fetched_from(host: str, events: list[Event], port: int = 8998) -> list[Event]:
    """Decode's request records naming the prefill host and port it was told to fetch from."""
    return [
        Event(
            e.kind,
            e.node,
            e.time,
            e.source,
            {**e.fields, "bootstrap_host": host, "bootstrap_port": port},
        )
        for e in events
    ]


def _announces(node: str, host: str, port: int = 8998, t: float = T + 2) -> Event:
    return ev("bootstrap_server", node, t, host=host, port=port)


def _judged(fleet: list[Event], *requests: list[Event]) -> list[tuple[str | None, str, str]]:
    findings = run(OverLengthAnswered(), fleet, *requests)
    return [(f.bootstrap_room, f.evidence["pool_node"], f.evidence["pool_basis"]) for f in findings]


SMALL_AND_BIG = LEAKY + boot("prefill-1", "prefill", T, 2_040_000, "0.5.19")


def test_two_prefill_servers_on_one_host_are_told_apart_by_port() -> None:
    fleet = SMALL_AND_BIG + [
        _announces("prefill-0", "10.0.1.10", 8998),
        _announces("prefill-1", "10.0.1.10", 8999),
    ]
    honest = _fetched_from("10.0.1.10", decode_answer(1, T + 100, 900_000, ttft=80.0), 8999)
    leaked = _fetched_from("10.0.1.10", decode_answer(2, T + 200, 900_000, ttft=0.05), 8998)
    assert _judged(fleet, honest, leaked) == [("2", "prefill-0", "bootstrap host")]


def test_an_address_taken_over_after_a_restart_names_the_node_that_had_it_then() -> None:
    # Rescheduled pods swap addresses at T + 1000: a request before names the node of before.
    fleet = SMALL_AND_BIG + [
        _announces("prefill-0", "10.0.1.10"),
        _announces("prefill-1", "10.0.1.11"),
        _announces("prefill-0", "10.0.1.11", t=T + 1000),
        _announces("prefill-1", "10.0.1.10", t=T + 1000),
    ]
    honest = _fetched_from("10.0.1.11", decode_answer(1, T + 100, 900_000, ttft=80.0))
    leaked = _fetched_from("10.0.1.11", decode_answer(2, T + 2000, 900_000, ttft=0.05))
    assert _judged(fleet, honest, leaked) == [("2", "prefill-0", "bootstrap host")]


def test_ipv6_hosts_match_in_any_spelling() -> None:
    fleet = SMALL_AND_BIG + [
        _announces("prefill-0", "fd00::11"),
        _announces("prefill-1", "[fd00::12]"),
    ]
    bracketed = _fetched_from("[fd00::11]", decode_answer(1, T + 100, 900_000, ttft=0.05))
    spelt_out = _fetched_from("fd00:0:0:0:0:0:0:11", decode_answer(2, T + 200, 900_000, ttft=0.05))
    honest = _fetched_from("fd00::12", decode_answer(3, T + 300, 900_000, ttft=80.0))
    assert [room for room, _, _ in _judged(fleet, bracketed, spelt_out, honest)] == ["1", "2"]


def test_an_unannounced_address_rules_out_only_nodes_it_can_be_compared_with() -> None:
    # prefill-0 (small) bound 0.0.0.0 and announced nothing usable; prefill-1 (big) announced
    # 10.0.1.12. A request fetched from 10.0.1.11, in their subnet, was not prefill-1's: it
    # can only have met prefill-0's pool.
    fleet = SMALL_AND_BIG + [
        _announces("prefill-0", "0.0.0.0"),
        _announces("prefill-1", "10.0.1.12"),
    ]
    leaked = _fetched_from("10.0.1.11", decode_answer(1, T + 100, 900_000, ttft=0.05))
    assert _judged(fleet, leaked) == [("1", "prefill-0", "prefill node not announcing it")]
    # A Service address in another range, which no request's host ever matched, may be
    # either node under another name: the most lenient pool, as without hosts.
    fleet = SMALL_AND_BIG + [_announces("prefill-0", "10.0.1.10")]
    service = _fetched_from("10.96.0.15", decode_answer(2, T + 100, 2_100_000, ttft=0.05))
    assert _judged(fleet, service) == [("2", "prefill-1", "largest prefill pool in force")]


def test_without_the_prefill_side_decodes_bootstrap_host_names_the_prefill_node():
    # prefill-0 (681,280) announced 10.0.1.10, prefill-1 (2,040,000) 10.0.1.11.
    fleet = (
        LEAKY
        + boot("prefill-1", "prefill", T, 2_040_000, "0.5.19")
        + [_announces("prefill-0", "10.0.1.10"), _announces("prefill-1", "10.0.1.11")]
    )
    findings = run(
        OverLengthAnswered(),
        fleet,
        # Fetched from the small node: over-length, on its pool.
        _fetched_from("10.0.1.10", decode_answer(1, T + 100, 700_000, ttft=0.05)),
        # Fetched from the big node: fits, whatever the small node's pool.
        _fetched_from("10.0.1.11", decode_answer(2, T + 200, 900_000, ttft=80.0)),
        # From an address no node read announced: a prefill node whose logs are not here.
        _fetched_from("10.0.1.12", decode_answer(3, T + 300, 900_000, ttft=80.0)),
    )
    assert [
        (f.bootstrap_room, f.evidence["pool_node"], f.evidence["pool_basis"]) for f in findings
    ] == [("1", "prefill-0", "bootstrap host")]


def test_a_bootstrap_host_that_cannot_be_compared_leaves_the_largest_pool_rule():
    # A node bound to every interface names no host; a DNS name beside announced addresses may
    # be one of them: neither says the request went elsewhere.
    fleet = LEAKY + [_announces("prefill-0", "0.0.0.0")]
    findings = run(
        OverLengthAnswered(),
        fleet,
        _fetched_from("10.0.1.10", decode_answer(1, T + 100, 700_000, ttft=0.05)),
    )
    assert [f.evidence["pool_basis"] for f in findings] == ["largest prefill pool in force"]
    fleet = LEAKY + [_announces("prefill-0", "10.0.1.10")]
    findings = run(
        OverLengthAnswered(),
        fleet,
        _fetched_from("prefill-0.sglang.svc", decode_answer(2, T + 100, 700_000, ttft=0.05)),
    )
    assert [f.evidence["pool_basis"] for f in findings] == ["largest prefill pool in force"]


def test_outside_pd_an_over_length_success_is_a_warning_not_an_exposure():
    events = [
        ev("server_args", "u0", T, disaggregation_mode=None),
        ev("capacity", "u0", T + 30, max_total_num_tokens=20_480, context_len=32_768),
        ev(
            "request_finished",
            "u0",
            T + 100,
            rid="u1",
            bootstrap_room=None,
            prompt_tokens=30_000,
            cached_tokens=0,
            completion_tokens=10,
            finish_type="stop",
            status_code=None,
            e2e_latency=2.0,
            first_token_latency=1.0,
        ),
    ]
    (finding,) = run(OverLengthAnswered(), events)
    assert finding.severity == "warning" and not finding.exposure
    assert finding.rid == "u1" and finding.bootstrap_room is None


# -- rejected then served -----------------------------------------------------------------------


def test_refusal_on_prefill_and_success_on_decode_is_a_critical_exposure():
    (finding,) = run(
        RejectedThenServed(),
        LEAKY,
        prefill_refused(1001, T + 500, 700_000),
        decode_answer(1001, T + 500, 700_000, ttft=0.05),
    )
    assert finding.severity == "critical" and finding.exposure
    assert finding.bootstrap_room == "1001" and finding.rid == "d1001"
    assert finding.evidence["refusal"] == "rejected"
    assert finding.evidence["reject_input_tokens"] == 700_000
    assert finding.evidence["prefill_rid"] == "p1001"
    assert "refused" in finding.summary and "1001" in finding.summary
    # The limit refuses what reaches it: said as a limit, not as "n > limit".
    assert f"700,000 tokens against a limit of {POOL - 6:,}" in finding.summary


def test_a_one_token_stub_abort_alone_counts_as_a_refusal():
    (finding,) = run(
        RejectedThenServed(),
        LEAKY,
        prefill_refused(5, T + 500, 700_000, rejection=False),
        decode_answer(5, T + 500, 700_000, ttft=0.05),
    )
    assert finding.evidence["refusal"] == "stub_abort"
    assert (
        run(
            RejectedThenServed(count_stub_aborts=False),
            LEAKY,
            prefill_refused(5, T + 500, 700_000, rejection=False),
            decode_answer(5, T + 500, 700_000, ttft=0.05),
        )
        == []
    )


def test_refusal_that_decode_also_aborted_is_not_flagged():
    assert (
        run(
            RejectedThenServed(),
            LEAKY,
            prefill_refused(6, T + 500, 700_000),
            decode_answer(6, T + 500, 700_000, ttft=0.05, finish="abort", status=400),
        )
        == []
    )


def _streamed_abort(
    room: int, t: float, prompt: int, *, tokens: int, streamed: bool
) -> list[Event]:
    # A streamed answer cut short: the client gone, or the running timeout (503) after
    # thousands of tokens (reference §2.5's sample). The tokens went out as they were made.
    answer = decode_answer(room, t, prompt, ttft=0.05, finish="abort", status=None)
    answer[-1].fields.update(completion_tokens=tokens, streamed=streamed)
    return answer


@pytest.mark.parametrize(
    ("tokens", "streamed", "exposed"),
    [(20, True, True), (20, False, False), (0, True, False)],
)
def test_a_refused_prompt_whose_answer_was_streamed_before_an_abort_is_an_exposure(
    tokens: int, streamed: bool, exposed: bool
) -> None:
    # The client had 20 tokens made from other requests' KV before it went away: exposed,
    # although decode's finish says abort. Not streamed, an abort sent nothing but the error.
    findings = run(
        RejectedThenServed(),
        LEAKY,
        prefill_refused(11, T + 500, 700_000),
        _streamed_abort(11, T + 500, 700_000, tokens=tokens, streamed=streamed),
    )
    assert [(f.bootstrap_room, f.exposure) for f in findings] == ([("11", True)] if exposed else [])
    if exposed:
        assert "streamed 20 tokens in answer to bootstrap_room 11" in findings[0].summary
    over_length = run(
        OverLengthAnswered(),
        LEAKY,
        prefill_refused(11, T + 500, 700_000),
        _streamed_abort(11, T + 500, 700_000, tokens=tokens, streamed=streamed),
    )
    assert bool(over_length) == exposed


def test_an_honest_streamed_answer_cut_short_is_not_flagged() -> None:
    findings = run(
        RejectedThenServed(),
        LEAKY,
        prefill_ok(12, T + 500, 5_000),
        _streamed_abort(12, T + 500, 5_000, tokens=300, streamed=True),
    )
    assert findings == []


def test_a_successful_retry_on_another_prefill_node_clears_the_refusal():
    assert (
        run(
            RejectedThenServed(),
            LEAKY,
            prefill_refused(8, T + 500, 5_000),
            prefill_ok(8, T + 501, 5_000, node="prefill-1"),
            decode_answer(8, T + 500, 5_000, ttft=2.0),
        )
        == []
    )


def test_a_genuine_one_token_prompt_aborted_on_prefill_is_not_a_refusal():
    assert (
        run(
            RejectedThenServed(),
            LEAKY,
            prefill_refused(9, T + 500, 1, rejection=False),
            decode_answer(9, T + 500, 1, ttft=0.05),
        )
        == []
    )


def prefill_stub_stats(room: int, t: float) -> list[Event]:
    """All that prefill logs of a refused request with request logging off: the refusal line
    without its rid (2025 builds), then the one-token stub's time stats."""
    return [
        ev("request_rejected", "prefill-0", t, input_tokens=700_000, reason="input_too_long"),
        ev(
            "request_time_stats",
            "prefill-0",
            t + 0.01,
            rid=f"p{room}",
            bootstrap_room=str(room),
            role="prefill",
            input_len=1,
            cached_input_len=0,
            output_len=1,
            queue_duration=0.0004,
            forward_duration=0.004,
        ),
    ]


def test_time_stats_of_a_one_token_stub_for_a_longer_prompt_count_as_a_refusal():
    (finding,) = run(
        RejectedThenServed(),
        LEAKY,
        prefill_stub_stats(21, T + 500),
        decode_answer(21, T + 500, 700_000, ttft=0.05),
    )
    assert finding.severity == "critical" and finding.exposure
    assert (finding.bootstrap_room, finding.evidence["refusal"]) == ("21", "stub_time_stats")
    assert finding.evidence["prefill_rid"] == "p21"
    # A genuine one-token prompt leaves the same time stats; decode then reports one token too.
    assert (
        run(
            RejectedThenServed(),
            LEAKY,
            prefill_stub_stats(22, T + 500),
            decode_answer(22, T + 500, 1, ttft=0.05),
        )
        == []
    )
    # Prefill that ran the whole prompt is no stub.
    assert (
        run(
            RejectedThenServed(),
            LEAKY,
            prefill_ok(23, T + 500, 700_000)[1:2],
            decode_answer(23, T + 500, 700_000, ttft=0.05),
        )
        == []
    )


# -- impossibly fast prefill --------------------------------------------------------------------

GLM = {"model_active_params": 3.2e10}  # 2 * 3.2e10 FLOPs/token on 8 x 989 TFLOP/s


def test_stub_prefill_is_below_the_physical_floor_and_critical():
    (finding,) = run(
        ImpossiblyFastPrefill(**GLM),
        LEAKY,
        prefill_refused(1001, T + 500, 700_000),
        decode_answer(1001, T + 500, 700_000, ttft=0.3),
    )
    assert finding.severity == "critical" and finding.exposure
    assert finding.bootstrap_room == "1001"
    # 700,000 tokens * 6.4e10 FLOPs of weights, plus attention's default 4 layers x 4 x 2048
    # FLOPs per pair over 700,000 x 700,001 / 2 pairs, on 8 x 9.89e14 FLOP/s: 5.662 s + 1.015 s.
    assert abs(finding.evidence["physical_floor_seconds"] - 6.677) < 0.001
    assert finding.evidence["uncached_tokens"] == 700_000
    assert finding.evidence["score"] >= 1.0 and finding.evidence["threshold"] == 1.0
    assert finding.evidence["source"] in ("first_token_latency", "e2e_latency")


@pytest.mark.parametrize(("tp", "pp", "gpus"), [(8, None, 8), (4, 2, 8), (4, None, 4)])
def test_the_physical_floor_counts_every_gpu_of_the_prefill(tp: int, pp: int | None, gpus: int):
    """Blind review 61 D4: a TP4 x PP2 prefill's honest answers read 1.1x under a floor that
    counted its tp_size alone; its pipeline stages run a chunked prompt's chunks at once."""
    shape = {"tp_size": tp, **({"pp_size": pp} if pp else {})}
    reshaped = [
        ev(e.kind, e.node, e.time, **{**e.fields, **shape}) if e.kind == "server_args" else e
        for e in LEAKY
    ]
    (finding,) = run(
        ImpossiblyFastPrefill(**GLM),
        reshaped,
        prefill_refused(1001, T + 500, 700_000),
        decode_answer(1001, T + 500, 700_000, ttft=0.3),
    )
    # As above, 6.677 s on 8 GPUs.
    assert finding.evidence["physical_floor_seconds"] == pytest.approx(6.677 * 8 / gpus, abs=0.002)


def test_attention_s_pairs_put_a_long_stub_under_the_unconfigured_floor():
    """Blind review 36: with the defaults (1B active parameters), a 900k-token prompt answered
    in 0.3 s passed the weights' floor of 0.23 s; attention over its 4e11 pairs of tokens
    costs seven times that on any model served at that context."""
    (finding,) = run(
        ImpossiblyFastPrefill(),
        LEAKY,
        prefill_refused(1002, T + 500, 900_000),
        decode_answer(1002, T + 500, 900_000, ttft=0.3),
    )
    assert finding.severity == "critical" and finding.exposure
    # (2e9 x 900,000 + 4 x 4 x 2048 x 900,000 x 900,001 / 2) / (8 x 9.89e14) = 1.905 s.
    assert finding.evidence["physical_floor_seconds"] == pytest.approx(1.905, abs=0.001)
    # Without the pairs (no full-attention layer configured) the stub passes, as before.
    assert (
        run(
            ImpossiblyFastPrefill(attention_layers=0, learn=False),
            LEAKY,
            prefill_refused(1002, T + 500, 900_000),
            decode_answer(1002, T + 500, 900_000, ttft=0.3),
        )
        == []
    )


def _decode_only(room: int, t: float, prompt: int, *, e2e: float, **durations: float) -> list:
    """A 0.5.22 decode's answer as its logs alone tell it: a finish stating only `e2e_latency`
    (no `first_token_latency`), and its time stats when `durations` are given."""
    rid = f"d{room}"
    answer = decode_answer(room, t, prompt, ttft=None, e2e=e2e)
    if durations:
        answer.append(
            ev("request_time_stats", "decode-0", t + e2e, rid=rid, bootstrap_room=str(room),
               role="decode", input_len=prompt, cached_input_len=0, output_len=150,
               **durations)
        )  # fmt: skip
    return answer


def test_decode_s_wait_for_the_kv_times_a_leak_its_logs_alone_tell():
    """Blind review 37 D2: decode's logs alone, finishes with no first-token latency, and an
    end-to-end time carrying seconds of decoding: a 784,536-token prompt's KV came in 110 ms,
    its answer in 2.67 s, over the unconfigured floor of 1.47 s; 3 of 61 leaks were named.
    Decode's stages before its first forward pass bound the prefill as a first token does."""
    stages = {"bootstrap_duration": 0.004, "alloc_wait_duration": 0.001, "queue_duration": 0.001}
    leak = _decode_only(7, T + 100, 784_536, e2e=2.67, transfer_duration=0.11,
                        forward_duration=2.5, **stages)  # fmt: skip
    (finding,) = run(ImpossiblyFastPrefill(), leak)
    assert finding.severity == "critical" and finding.exposure
    assert finding.evidence["source"] == "decode_wait"
    assert finding.evidence["seconds"] == pytest.approx(0.115)  # bootstrap, allocation, transfer
    # Without decode's time stats nothing tells it: the end-to-end time passes.
    assert run(ImpossiblyFastPrefill(), leak[:2]) == []
    # An honest prompt's KV, 48.8 s in coming, passes; so does one an older build timed as
    # `prealloc_queue_duration(...) = alloc_wait(...) + bootstrap(...)`.
    honest = _decode_only(8, T + 100, 522_463, e2e=52.1, transfer_duration=48.8,
                          forward_duration=3.26, **stages)  # fmt: skip
    older = _decode_only(9, T + 100, 784_536, e2e=60.0, prealloc_queue_duration=55.0,
                         alloc_wait_duration=0.5, bootstrap_duration=0.5,
                         transfer_duration=1.0, forward_duration=3.0)  # fmt: skip
    assert run(ImpossiblyFastPrefill(), honest, older) == []
    # Blind review 61 D2: a leak's page of KV in 39 ms, then 35 s in decode's queue for a slot
    # in its batch (its first token 35.1 s after it came): the queue holds no prefill work.
    queued = _decode_only(10, T + 100, 118_000, e2e=36.0, transfer_duration=0.039,
                          bootstrap_duration=0.002, alloc_wait_duration=0.001,
                          queue_duration=35.02, forward_duration=0.9)  # fmt: skip
    (finding,) = run(ImpossiblyFastPrefill(**GLM), queued)
    assert finding.evidence["source"] == "decode_wait"
    assert finding.evidence["seconds"] == pytest.approx(0.042)
    # Prefill's own forward time showing the prompt computed is the measure: a wait decode's
    # clock cut short says nothing against it.
    computed = prefill_ok(7, T + 100, 784_536, seconds=41.0)
    assert run(ImpossiblyFastPrefill(), computed, leak) == []


def test_a_negative_duration_is_no_measure():
    """Blind review 38 D2: a prefill forward time of -0.041 s (a clock that stepped back) on an
    honest 506,383-token prompt was scored 2,038,169x too fast and named exposed."""
    answer = decode_answer(11, T + 100, 506_383, ttft=25.0)
    stepped_back = prefill_ok(11, T + 100, 506_383, seconds=-0.041)
    assert run(ImpossiblyFastPrefill(), stepped_back, answer) == []
    # The same prompt's forward time stated as 0.041 s is a stub's, and found.
    stub = prefill_ok(11, T + 100, 506_383, seconds=0.041)
    (found,) = run(ImpossiblyFastPrefill(), stub, answer)
    assert found.evidence["source"] == "prefill_forward"
    from detectors.impossibly_fast_prefill import decode_wait

    assert decode_wait({"transfer_duration": -2.0, "queue_duration": 0.1}) is None


def test_decode_wait_counts_each_stage_once():
    from detectors.impossibly_fast_prefill import decode_wait

    assert decode_wait({"forward_duration": 3.0}) is None  # no transfer stated: no bound
    # Not the queue after the KV came: a wait for a slot in decode's batch (blind review 61 D2).
    newer = {"bootstrap_duration": 0.5, "alloc_wait_duration": 0.25, "transfer_duration": 2.0,
             "queue_duration": 35.0, "forward_duration": 9.0}  # fmt: skip
    assert decode_wait(newer) == 2.75
    older = {"prealloc_queue_duration": 1.0, "alloc_wait_duration": 0.5,
             "bootstrap_duration": 0.25, "other_duration": 0.25,
             "transfer_duration": 2.0}  # fmt: skip
    assert decode_wait(older) == 3.0


def test_heavily_cached_long_prompts_and_honest_long_prompts_are_not_anomalies():
    findings = run(
        ImpossiblyFastPrefill(**GLM),
        boot("prefill-0", "prefill", T, 2_040_000, "0.5.22"),
        boot("decode-0", "decode", T, 2_040_000, "0.5.22"),
        # 900k prompt, 898k cached: 2,000 uncached tokens in 0.25 s is ordinary.
        prefill_ok(1, T + 100, 900_000, cached=898_000, seconds=0.25),
        decode_answer(1, T + 100, 900_000, cached=898_000, ttft=0.4),
        # 700k uncached in 40 s: honest (floor 5.66 s).
        prefill_ok(2, T + 200, 700_000, seconds=40.0),
        decode_answer(2, T + 200, 700_000, ttft=42.0),
    )
    assert findings == []


def test_mid_length_prompts_below_the_floor_are_warnings_without_exposure():
    (finding,) = run(
        ImpossiblyFastPrefill(**GLM),
        LEAKY,
        prefill_ok(3, T + 100, 10_000, seconds=0.01),
        decode_answer(3, T + 100, 10_000, ttft=0.02),
    )
    # 10,000 tokens: floor 0.0809 s; 0.01 s of prefill forward is too fast, but short.
    assert finding.severity == "warning" and not finding.exposure
    assert finding.evidence["source"] == "prefill_forward"


def test_learned_floor_catches_what_an_unconfigured_physical_floor_misses():
    detector = ImpossiblyFastPrefill(model_active_params=1e6, min_history=20, refit_every=10)
    history = []
    for k in range(40):
        prompt = 4_000 + 1_000 * k
        seconds = 0.1 + 2e-5 * prompt * (1.0 + (k % 3) * 0.2)
        # A sample every 30 s: the first fit needs a quarter hour of history.
        history += prefill_ok(100 + k, T + 100 + 30 * k, prompt, seconds=seconds)
        history += decode_answer(100 + k, T + 100 + 30 * k, prompt, ttft=seconds + 0.2)
    # A prefill pool under the last prompt: the incident's path is open to it.
    findings = run(
        detector,
        boot("prefill-0", "prefill", T, 300_000),
        boot("decode-0", "decode", T, 2_040_000),
        history,
        prefill_ok(9, T + 5_000, 400_000, seconds=0.05),
        decode_answer(9, T + 5_000, 400_000, ttft=0.3),
    )
    assert [(f.bootstrap_room, f.severity) for f in findings] == [("9", "critical")]
    evidence = findings[0].evidence
    assert evidence["learned_floor_seconds"] > evidence["physical_floor_seconds"]
    assert "learned floor" in findings[0].summary
    # The lower envelope of the history is 0.1 s + 2e-5 s/token: 8.1 s at 400k tokens, and
    # divided by the safety factor of 8 about 1.01 s.
    assert evidence["learned_floor_seconds"] == pytest.approx(8.1 / 8, rel=0.05)


def test_a_leak_before_any_floor_was_learned_is_judged_by_the_first_one():
    """Blind review 59 D1: a 129,500-token prompt answered 110 times faster than the node's
    honest answers, a minute into the logs. No history yet; the unconfigured physical floor
    passed it, and the run was an all-clear. It waits for its node's first floor."""

    def case(**params: float) -> list:
        detector = ImpossiblyFastPrefill(
            model_active_params=1e6, min_history=20, refit_every=10, **params
        )
        history = []
        for k in range(40):  # from a minute after the leak, a sample every 30 s
            prompt = 4_000 + 1_000 * k
            seconds = 0.1 + 2e-5 * prompt * (1.0 + (k % 3) * 0.2)
            history += prefill_ok(100 + k, T + 160 + 30 * k, prompt, seconds=seconds)
            history += decode_answer(100 + k, T + 160 + 30 * k, prompt, ttft=seconds + 0.2)
        # An honest long answer before the history as well: judged by the same floor, passed.
        history += prefill_ok(8, T + 90, 400_000, seconds=9.0)
        history += decode_answer(8, T + 90, 400_000, ttft=9.3)
        return run(
            detector,
            boot("prefill-0", "prefill", T, 300_000),
            boot("decode-0", "decode", T, 2_040_000),
            # Over the physical floor of 0.33 s, half the learned one of 1.01 s.
            prefill_ok(9, T + 100, 400_000, seconds=0.5),
            decode_answer(9, T + 100, 400_000, ttft=0.6),
            history,
        )

    (finding,) = case()
    assert (finding.bootstrap_room, finding.severity, finding.exposure) == ("9", "critical", True)
    assert finding.evidence["floor_learned_after"] is True
    assert "learned from its node's answers after it" in finding.summary
    assert finding.time is not None and finding.time < T + 160  # the answer's, not the fit's
    # A floor first learned longer after the answer than `floor_wait_seconds` judges nothing.
    assert case(floor_wait_seconds=60.0) == []
    assert case(max_waiting=0) == []


def test_the_samples_of_a_parallel_sampling_request_are_not_timed():
    """Blind review 40 (h22): `n` = 4 on a 240k-token prompt, prefill logging no request line
    and decode stating nothing cached. The warm-up (a prompt-only pass, finished `length` at no
    token) read the prompt; the samples after it reuse its prefix, and their 0.15 s were
    called 1.2x under the physical floor of reading it all."""
    started = boot("prefill-0", "prefill", T, 2_040_000) + boot("decode-0", "decode", T, 2_040_000)
    room, prompt, t = 77, 240_000, T + 600
    warm_up = decode_answer(room, t, prompt, ttft=None, e2e=30.0)
    warm_up[0].fields["rid"] = warm_up[1].fields["rid"] = "warm"
    warm_up[1].fields.update(finish_type="length", completion_tokens=0)
    samples = []
    for k in range(4):
        answer = decode_answer(room, t + 31 + k, prompt, ttft=0.15)
        for event in answer:
            event.fields["rid"] = f"sample-{k}"
        samples += answer
    assert run(ImpossiblyFastPrefill(), started, warm_up, samples) == []
    # The same fast answer to a prompt of its own, in a room of its own, is judged.
    alone = decode_answer(78, t + 60, prompt, ttft=0.15)
    assert [f.bootstrap_room for f in run(ImpossiblyFastPrefill(), started, alone)] == ["78"]


def test_a_queue_in_a_node_s_first_minutes_teaches_no_floor():
    """Blind review 40 (h12b, h20): a fresh node's first 50 answers waited 60 to 140 s behind an
    honest 900k-token prompt, and decode's time to first token was the only timing. A line
    fitted on them alone put every honest answer after it 2x "too fast", and those, judged
    leaks, were never learned: 13 and 15 false exposures. The first fit waits for a quarter
    hour of history, and reads the node's first pace low in its window."""
    started = boot("prefill-0", "prefill", T, 2_040_000) + boot("decode-0", "decode", T, 2_040_000)
    queued, after = [], []
    for k in range(50):  # arriving over 140 s, all first served once the long prompt is done
        t = T + 60 + 2.8 * k
        prompt = 33_000 + 200 * k
        queued += decode_answer(100 + k, t, prompt, ttft=T + 200 - t + 1.2 * (k + 1))
    for k in range(60):  # then a normal pace: 35 us a token, first token and all
        t = T + 400 + 30 * k
        prompt = 33_000 + 500 * (k % 20)
        after += decode_answer(300 + k, t, prompt, ttft=35e-6 * prompt)
    detector = ImpossiblyFastPrefill()
    assert run(detector, started, queued, after) == []
    # The history was learned, and is fitted by now: the honest answers taught it.
    (bands,) = detector.models_.values()
    assert any(model.fitted for model in bands.values())
    assert sum(len(model.samples) for model in bands.values()) >= 110


def test_a_queue_learned_into_time_to_first_token_does_not_accuse_the_quiet_hour_after():
    """Audit Z (0.5.23): decode's `first_token_latency` runs from when its tokenizer got the
    request, so it carries prefill's queue. Hours of backlog (60 s waits) taught its floor; the
    quiet hour's honest answers, 2.9 s for 48k tokens, fell 2.3x below it and were all called
    exposures, while prefill's own forward time, the same 2.85 s, showed the prompt computed."""
    detector = ImpossiblyFastPrefill(min_history=20, refit_every=10)
    backlog = []
    for k in range(40):
        prompt = 33_000 + 1_400 * k
        compute = 6e-5 * prompt
        t = T + 100 + 30 * k
        backlog += prefill_ok(100 + k, t, prompt, seconds=compute)
        backlog += decode_answer(100 + k, t, prompt, ttft=compute + 60.0)
    quiet = []
    for k in range(5):
        t = T + 4_000 + 60 * k
        quiet += prefill_ok(200 + k, t, 48_000, seconds=2.85)
        quiet += decode_answer(200 + k, t, 48_000, ttft=2.9)
    stub = prefill_ok(9, T + 5_000, 400_000, seconds=0.02)
    stub[1].fields["input_len"] = 1  # time stats of the stub prefill really ran
    findings = run(
        detector,
        boot("prefill-0", "prefill", T, 300_000),  # under the stub's prompt: the path is open
        boot("decode-0", "decode", T, 2_040_000),
        backlog,
        quiet,
        stub,
        decode_answer(9, T + 5_000, 400_000, ttft=0.3),
    )
    assert [(f.bootstrap_room, f.severity) for f in findings] == [("9", "critical")]


def test_a_queue_in_time_to_first_token_without_prefill_timings_does_not_accuse_the_quiet_hour():
    """Audit Z's backlog with prefill's time stats off, or its logs gone: decode's time to
    first token is the only timing. Sixty seconds of queue in every backlog answer taught its
    floor a fixed cost that no prompt of the quiet hour after could meet (30 of 30 honest
    answers were exposures). The queue is a cost per request, not per token: the learned line
    keeps its slope, and a stub answered in 0.3 s for 400k tokens is still far below it."""
    backlog, quiet = [], []
    for k in range(40):
        prompt = 33_000 + 1_400 * k
        backlog += decode_answer(100 + k, T + 100 + 30 * k, prompt, ttft=6e-5 * prompt + 60.0)
    for k in range(5):
        quiet += decode_answer(200 + k, T + 4_000 + 60 * k, 48_000, ttft=2.9)
    findings = run(
        ImpossiblyFastPrefill(min_history=20, refit_every=10),
        boot("decode-0", "decode", T, 2_040_000),
        backlog,
        quiet,
        decode_answer(9, T + 5_000, 400_000, ttft=0.3),
    )
    assert [(f.bootstrap_room, f.severity) for f in findings] == [("9", "critical")]
    # 6e-5 s a token, over the safety factor of 8 and the queue's 4: 0.75 s at 400k tokens.
    assert findings[0].evidence["learned_floor_seconds"] == pytest.approx(0.75, rel=0.05)


def test_a_redone_optimistic_prefill_is_not_timed_by_its_last_attempt():
    """Audit Z (0.5.19, `--optimistic-prefill-attempts`): a prefill that yielded mid-prompt
    and was redone logs `attempts=1` and the forward time of the last attempt alone, 0.68 s for
    118,000 tokens its first attempt had cached; `cached_tokens` stays 0. Against a 70B
    model's physical floor (2.09 s) that was an exposure; the answer's own end-to-end time, over
    both attempts, is the measure."""
    detector = ImpossiblyFastPrefill(model_active_params=7e10)
    redone = prefill_ok(5, T + 100, 118_000, seconds=0.68)
    redone[1].fields["attempts"] = 1
    healthy = run(
        detector,
        boot("prefill-0", "prefill", T, 2_040_000),
        boot("decode-0", "decode", T, 2_040_000),
        redone,
        decode_answer(5, T + 100, 118_000, ttft=14.0),
    )
    assert healthy == []
    # The same time on a first attempt is faster than the hardware: still judged.
    first = prefill_ok(6, T + 100, 118_000, seconds=0.68)
    (finding,) = run(
        ImpossiblyFastPrefill(model_active_params=7e10),
        boot("prefill-0", "prefill", T, 2_040_000),
        boot("decode-0", "decode", T, 2_040_000),
        first,
        decode_answer(6, T + 100, 118_000, ttft=14.0),
    )
    assert finding.evidence["source"] == "prefill_forward"


def test_requests_that_cannot_be_honest_do_not_teach_the_floor():
    detector = ImpossiblyFastPrefill(model_active_params=1e6, min_history=5)
    run(
        detector,
        LEAKY,
        prefill_refused(1, T + 100, 700_000),
        decode_answer(1, T + 100, 700_000, ttft=0.05),
        prefill_ok(2, T + 200, 5_000, seconds=0.2),
        decode_answer(2, T + 200, 5_000, ttft=0.4),
    )
    learned = {
        (key, band): len(model.samples)
        for key, bands in detector.models_.items()
        for band, model in bands.items()
    }
    # Only the honest request taught the floor, in its context band (2,500 tokens attended);
    # e2e latency is never learned.
    assert learned == {
        ("prefill-0|prefill_forward||8", 12): 1,
        ("decode-0|first_token_latency||8", 12): 1,
    }


@pytest.mark.parametrize("new_model", ["zai-org/GLM-5.3", "Qwen/Qwen3-0.6B"])
def test_a_node_restarted_on_another_model_does_not_judge_it_by_the_old_one_s_speed(
    new_model: str,
) -> None:
    # Forty long GLM prompts teach prefill-0 its speed; both nodes then restart on a model a
    # hundred times smaller, which prefills 30k-token prompts in a twentieth of the old time,
    # honestly (its own time stats show the whole prompt prefilled). Kept on the old model,
    # the same speed is still too fast for it.
    def started(node: str, role: str, t: float, model: str) -> list[Event]:
        args = ev("server_args", node, t, disaggregation_mode=role, model=model, tp_size=8)
        return [args, ev("capacity", node, t + 30, max_total_num_tokens=2_040_000,
                         context_len=CONTEXT)]  # fmt: skip

    detector = ImpossiblyFastPrefill(model_active_params=1e6, min_history=20, refit_every=10)
    history = []
    for k in range(40):
        prompt = 34_000 + 1_000 * k
        seconds = 0.1 + 2e-5 * prompt * (1.0 + (k % 3) * 0.2)
        # A sample every 30 s: the first fit needs a quarter hour of history.
        history += prefill_ok(100 + k, T + 100 + 30 * k, prompt, seconds=seconds)
        history += decode_answer(100 + k, T + 100 + 30 * k, prompt, ttft=seconds + 0.2)
    restart = T + 5_000
    small = []
    for k in range(5):
        prompt, seconds = 38_000 + 100 * k, 0.04
        small += prefill_ok(300 + k, restart + 100 + 10 * k, prompt, seconds=seconds)
        small += decode_answer(300 + k, restart + 100 + 10 * k, prompt, ttft=seconds + 0.02)
    findings = run(
        detector,
        started("prefill-0", "prefill", T, "zai-org/GLM-5.3"),
        started("decode-0", "decode", T, "zai-org/GLM-5.3"),
        history,
        started("prefill-0", "prefill", restart, new_model),
        started("decode-0", "decode", restart, new_model),
        small,
    )
    flagged = sorted({f.bootstrap_room for f in findings})
    if new_model == "zai-org/GLM-5.3":
        assert flagged == [str(300 + k) for k in range(5)]
    else:
        assert flagged == []


def test_score_one_and_learn_one_follow_the_sign_convention():
    detector = ImpossiblyFastPrefill(model_active_params=1e6, min_history=5, refit_every=5)
    timing = {
        "node": "n",
        "source": "first_token_latency",
        "uncached_tokens": 100_000,
        "seconds": 0.5,
        "gpus": 8,
    }
    before = detector.score_one(timing)
    for k in range(10):
        detector.learn_one(
            dict(timing, uncached_tokens=10_000 * (k + 1), seconds=0.2 + 2e-4 * 10_000 * (k + 1))
        )
    after = detector.score_one(timing)
    assert before < 1.0 <= after  # the learned floor (about 5 s) makes 0.5 s anomalous


def test_leaked_answers_in_the_history_do_not_teach_the_floor_that_leaks_are_normal():
    """Blind review 12f: with decode's logs alone (no pool, no refusal), the leaked answers of
    the first hours entered the history; a 2% quantile of a window 6% leaked is a leaked
    answer's speed, and the floor passed 59 of 150 leaks. Honest speeds vary within a few
    times of each other; a leak answers hundreds of times faster."""
    detector = ImpossiblyFastPrefill(model_active_params=1e6)
    rng = np.random.default_rng(7)
    for k in range(400):
        tokens = int(rng.integers(40_000, 900_000))
        if k % 16 == 3:  # 25 of 400 answered from another request's KV in 0.2 to 0.7 s
            seconds = float(rng.uniform(0.2, 0.7))
        else:  # honest: 40 to 120 us a token, the queue on top
            seconds = tokens * float(rng.uniform(4e-5, 1.2e-4)) + float(rng.exponential(2.0))
        detector.learn_one(
            {
                "node": "d",
                "source": "first_token_latency",
                "uncached_tokens": tokens,
                "seconds": seconds,
                "gpus": 8,
            }
        )
    leak = {"node": "d", "source": "first_token_latency", "uncached_tokens": 864_512, "gpus": 8}
    assert detector.score_one(dict(leak, seconds=0.45)) >= 1.0
    # An honest answer twice as fast as any before is still no leak.
    assert detector.score_one(dict(leak, seconds=864_512 * 2e-5)) < 1.0


def test_a_backlog_in_a_fresh_node_s_first_fits_does_not_make_its_honest_answers_leaks():
    """Blind review 33 D4: prefill on SGLang's default logging, so decode's time to first
    token is the only timing. Minutes after a decode node started, a backlog gave its answers
    150 to 300 s to a first token and filled more than half of the window its fourth fit
    learned from; its median was the queue's, the node's honest answers were left out as
    leaks, and the line of the queue that remained (kept 3 h, until the next refit) called
    honest answers of 40k to 50k tokens exposures. Queued answers are slow, not a measure of
    the node: a leak is still told by the pace the node showed before the backlog."""
    rng = np.random.default_rng(33)

    def honest(room: int, t: float, prompt: int) -> list[Event]:
        seconds = 0.02 + 3e-5 * prompt * float(rng.uniform(1.0, 1.3))
        return decode_answer(room, t, prompt, ttft=seconds)

    def prompts(n: int) -> list[int]:  # one context band (16k to 32k tokens attended at most)
        return [int(p) for p in rng.integers(16_400, 32_000, n)]

    started = T + 100  # the node's first answer
    first = [honest(100 + k, started + 10 * k, p) for k, p in enumerate(prompts(50))]
    # The backlog, shared by the prompts in it: each waits 8 to 10 ms a token of its own.
    backlog = [
        decode_answer(200 + k, started + 600 + 2 * k, p, ttft=p * float(rng.uniform(8e-3, 1e-2)))
        for k, p in enumerate(prompts(150))
    ]
    after = [honest(400 + k, started + 1_200 + 10 * k, p) for k, p in enumerate(prompts(42))]
    # The 242nd answer is the fourth fit's; these come after it, within the 3 h to the next.
    judged = [honest(500 + k, started + 2_000 + 60 * k, 40_000 + 2_000 * k) for k in range(6)]
    # A leaked answer: 600k tokens in 0.1 s, where the node's honest pace takes 18 s.
    leak = decode_answer(9, started + 2_500, 600_000, ttft=0.1)
    findings = run(
        # Attention's part of the physical floor left out: the learned floor is under test.
        ImpossiblyFastPrefill(attention_layers=0),
        boot("decode-0", "decode", T, 2_040_000),
        *first,
        *backlog,
        *after,
        *judged,
        leak,
    )
    assert [(f.bootstrap_room, f.severity) for f in findings] == [("9", "critical")]
    assert "below the learned floor" in findings[0].summary


def test_a_one_token_stub_prefill_finished_with_success_is_a_refusal():
    """0.5.19 with no refusal line for the room (DP attention: only the global rank 0 logs
    it): all prefill says is the stub it finished `length`."""
    (finding,) = run(
        RejectedThenServed(),
        LEAKY,
        prefill_refused(31, T + 500, 700_000, rejection=False, finish="length"),
        decode_answer(31, T + 500, 700_000, ttft=0.05),
    )
    assert finding.exposure and finding.evidence["refusal"] == "stub_finish"
    assert "finished it as a one-token stub (length)" in finding.summary
    # A genuine one-token prompt finishes the same way; decode then reports one token too.
    assert (
        run(
            RejectedThenServed(),
            LEAKY,
            prefill_refused(32, T + 500, 1, rejection=False, finish="length"),
            decode_answer(32, T + 500, 1, ttft=0.05),
        )
        == []
    )


def test_prompts_a_pool_sharded_over_dcp_ranks_takes_are_not_over_length():
    """With prefill's request logs and time stats off, only `dcp_size` in its server args says
    the 681,280-token pool takes prompts up to 1,362,554 tokens (audit U)."""
    sharded = [
        ev("server_args", "prefill-0", T, disaggregation_mode="prefill", dcp_size=2),
        ev("capacity", "prefill-0", T + 30, max_total_num_tokens=POOL, context_len=CONTEXT),
        *boot("decode-0", "decode", T, 2_000_000),
    ]
    findings = run(
        OverLengthAnswered(),
        sharded,
        decode_answer(6001, T + 900, 900_000, ttft=92.0),
        decode_answer(6002, T + 900, 1_362_555, ttft=0.05),
    )
    assert [f.bootstrap_room for f in findings] == ["6002"]
    assert findings[0].evidence["longest_accepted"] == 1_362_553


# -- parallel sampling (`n` > 1) ---------------------------------------------------------------


def _sampled(room: int, t: float, prompt: int, answers: list[float], pool_refuses: bool):
    """One prompt with `n` = len(answers) samples, as SGLang sends it in PD (audit P, from the
    0.5.19 and 0.5.23 tokenizer manager): a warm-up (`max_new_tokens=0`) and then the samples,
    each under a fresh rid on prefill and on decode alike, all in the prompt's room. Decode ends
    the warm-up `length` at no token; each sample ends `answers[k]` seconds after the call."""
    out: list[Event] = []
    for k in range(len(answers) + 1):
        rid = f"p{room}-{k}"
        if pool_refuses:
            out.append(
                ev("request_rejected", "prefill-0", t + 0.01 * k, rid=rid, input_tokens=prompt,
                   limit_tokens=POOL - 6, reason="input_too_long")
            )  # fmt: skip
        out.append(
            ev("request_finished", "prefill-0", t + 0.01 * k + 0.02, rid=rid,
               bootstrap_room=str(room), prompt_tokens=1 if pool_refuses else prompt,
               completion_tokens=1, finish_type="length", e2e_latency=0.02)
        )  # fmt: skip
    ends = [0.1, *answers]
    for k, end in enumerate(ends):
        out.append(
            ev("request_finished", "decode-0", t + end, rid=f"d{room}-{k}",
               bootstrap_room=str(room), prompt_tokens=prompt, cached_tokens=0,
               completion_tokens=0 if k == 0 else 300, finish_type="length" if k == 0 else "stop",
               e2e_latency=end, first_token_latency=0.05 if k else None)
        )  # fmt: skip
    return out


def test_each_sample_of_a_parallel_sampling_request_is_its_own_exposed_response():
    # Samples ending 14 s to 2 min after the warm-up: long after the warm-up pair was judged.
    events = sorted([*LEAKY, *_sampled(31, T + 500, 700_000, [14.0, 15.0, 130.0], True)],
                    key=lambda e: e.time)  # fmt: skip
    pipeline = DetectionPipeline(detectors=[RejectedThenServed(), OverLengthAnswered()])
    findings = list(pipeline.run(events))
    exposed = sorted({(f.detector, f.rid) for f in findings if f.exposure})
    assert exposed == [
        (detector, f"d31-{k}")
        for detector in ("over_length_answered", "rejected_then_served")
        for k in (1, 2, 3)
    ]  # each sample named; the warm-up, whose output nobody got, is not
    assert all(f.bootstrap_room == "31" for f in findings if f.exposure)
    assert pipeline.ledger.stats.late_events == 0


def test_parallel_sampling_on_a_healthy_pool_is_judged_whole_and_clean():
    fleet = boot("prefill-0", "prefill", T, 2_000_000, "0.5.22") + boot(
        "decode-0", "decode", T, 2_000_000
    )
    events = sorted([*fleet, *_sampled(32, T + 500, 700_000, [14.0, 130.0], False)],
                    key=lambda e: e.time)  # fmt: skip
    pipeline = DetectionPipeline(detectors=[RejectedThenServed(), OverLengthAnswered()])
    assert list(pipeline.run(events)) == []
    # Three requests judged (the warm-up and two samples), no line counted late.
    assert pipeline.stats.records == 3 and pipeline.ledger.stats.late_events == 0


def test_two_rids_of_one_decode_node_in_a_room_without_a_warm_up_stay_one_request():
    # No warm-up, no parallel sampling: the same answer under two spellings of its rid (a
    # client's rid with a quote: the time stats print it raw, the finish as a Python literal),
    # or a room a client reused. Split, they doubled exposures (audit K's i_rid_html: 3 to 6)
    # or lent one request the other's refusal (audit C's c12b).
    answer = decode_answer(41, T + 500, 700_000, ttft=0.05)
    stats = ev(
        "request_time_stats", "decode-0", T + 505.05, rid="d41-'x", bootstrap_room="41",
        role="decode", input_len=700_000, cached_input_len=0, output_len=150,
    )  # fmt: skip
    events = sorted([*LEAKY, *prefill_refused(41, T + 500, 700_000), *answer, stats],
                    key=lambda e: e.time)  # fmt: skip
    pipeline = DetectionPipeline(detectors=[RejectedThenServed(), OverLengthAnswered()])
    exposed = [f for f in pipeline.run(events) if f.exposure]
    assert sorted(f.detector for f in exposed) == ["over_length_answered", "rejected_then_served"]
    assert pipeline.stats.records == 1


def test_parallel_sampling_told_by_time_stats_alone_names_each_sample_not_the_warm_up():
    # Request logging off: decode's time stats say `output_len=1` for the warm-up (the token
    # prefill sent), as for a one-token answer. The room waits to see whether samples follow
    # (audit P's P4 with time stats alone: 8 warm-ups named and 28 of 51 samples missed).
    room, t, prompt = 33, T + 500, 700_000
    events = [*LEAKY]
    for k in range(4):  # prefill refused the warm-up and three samples: one-token stubs
        events.append(
            ev("request_time_stats", "prefill-0", t + 0.01 * k, rid=f"p{room}-{k}",
               bootstrap_room=str(room), role="prefill", input_len=1, cached_input_len=0,
               output_len=1, forward_duration=0.02)
        )  # fmt: skip
    for k, (end, tokens) in enumerate([(0.1, 1), (3.0, 120), (14.0, 300), (40.0, 500)]):
        events.append(
            ev("request_time_stats", "decode-0", t + end, rid=f"d{room}-{k}",
               bootstrap_room=str(room), role="decode", input_len=prompt, cached_input_len=0,
               output_len=tokens, forward_duration=end)
        )  # fmt: skip
    pipeline = DetectionPipeline(detectors=[RejectedThenServed()])
    findings = list(pipeline.run(sorted(events, key=lambda e: e.time)))
    assert sorted(f.rid for f in findings if f.exposure) == [f"d{room}-{k}" for k in (1, 2, 3)]
    assert pipeline.ledger.stats.late_events == 0
    # A one-token answer with no sample after it is still judged as an answer.
    alone = [e for e in events if e.fields.get("rid") in (None, f"p{room}-0", f"d{room}-0")]
    (finding,) = [f for f in run(RejectedThenServed(), alone) if f.exposure]
    assert finding.rid == f"d{room}-0"


def _agentic_turn(room: int, t: float, context: int, new: int) -> list[Event]:
    """One turn extending a long conversation: `new` tokens prefilled after `context` cached
    ones, each attending the whole context (the generator's model: 5e-5 s a token, and 1e-9 s
    a token for every token it attends)."""
    seconds = 0.04 + new * 5e-5 + 1e-9 * new * (context + new / 2)
    prompt = context + new
    return prefill_ok(room, t, prompt, cached=context, seconds=seconds) + decode_answer(
        room, t, prompt, cached=context, ttft=seconds + 0.05
    )


def test_a_floor_learned_over_long_contexts_does_not_judge_a_fresh_prompt():
    """Blind review (agentic coding, 99.5% of turns extend 700k-1M-token conversations): each
    of their new tokens attends to the whole conversation, about 1e-3 s a token, and the one
    floor learned from them called two fresh 40-60k-token prompts, honestly computed at 8e-5 s
    a token, exposures. A floor learned only from contexts as long as theirs judges them: none
    here, so only physics does."""
    history = []
    for k in range(120):
        history += _agentic_turn(100 + k, T + 100 + 60 * k, 700_000 + 2_500 * k, 2_000 + 250 * k)
    fresh = _agentic_turn(9, T + 8_000, 2_816, 58_348)
    detector = ImpossiblyFastPrefill(min_history=20, refit_every=10)
    findings = run(detector, boot("prefill-0", "prefill", T, 4_000_000), history, fresh)
    assert findings == []
    # The long conversations did teach a floor, for contexts as long as theirs.
    model = detector.judging_model("prefill-0|prefill_forward||8", 20)
    assert model is not None and model.coef is not None
    # ... which the fresh prompt would have broken (the defect): 58k tokens in 2.9 s.
    assert model.floor(58_348, 8.0) > fresh[1].fields["forward_duration"]


def test_a_longer_context_is_judged_by_the_floor_of_shorter_ones():
    """A context longer than any the node has seen is judged by the nearest shorter band's
    floor: its tokens cost at least as much, so a 600k-token prompt answered in 0.3 s after a
    history of 40-100k-token prompts is still caught."""
    history = []
    for k in range(60):
        history += _agentic_turn(100 + k, T + 100 + 60 * k, 0, 40_000 + 1_000 * k)
    stub = prefill_ok(9, T + 8_000, 600_000, seconds=0.3)
    findings = run(
        ImpossiblyFastPrefill(min_history=20, refit_every=10),
        boot("prefill-0", "prefill", T, 500_000),  # under the stub's prompt: the path is open
        history,
        stub,
        decode_answer(9, T + 8_000, 600_000, ttft=0.35),
    )
    assert [(f.bootstrap_room, f.severity) for f in findings] == [("9", "critical")]
    assert findings[0].evidence["learned_floor_seconds"] > 0.3


def test_a_fit_read_later_is_the_line_of_the_window_when_it_fell_due():
    """Fits are solved when a floor is first read (most context bands are seldom judged), yet
    the line read must be the one of the samples when the fit fell due, not of those since."""
    cfg = ImpossiblyFastPrefillConfig(min_history=5, refit_every=5, quantile=0.2)
    model = FloorModel(max_history=10)
    due = [(10_000.0 * k, 0.5 + 1e-4 * k * 10_000) for k in range(1, 6)]
    since = [(10_000.0 * k, 0.1 + 1e-6 * k * 10_000) for k in range(6, 9)]
    for tokens, seconds in due + since:
        model.add(tokens, seconds, None, cfg)
    assert model.fits == 1 and model.since_fit == len(since)
    x, y = np.array(due).T
    everything = np.array(due + since).T
    assert quantile_line(x, y, 0.2) != quantile_line(*everything, 0.2)  # the test can tell
    assert model.coef == quantile_line(x, y, 0.2)
    assert model.rate == sorted(y / x)[0]
    # A saved state holds the same line.
    assert FloorModel.from_state(model.to_state(), 10).coef == model.coef


def test_a_state_saved_before_context_bands_is_learned_anew():
    """Floors saved as one per node and source were learned across all contexts (the ones that
    called fresh prompts exposures): a restarted collector drops them rather than judge by
    them, and keeps the banded ones."""
    fitted = ImpossiblyFastPrefill(min_history=5, refit_every=5)
    for k in range(10):
        fitted.learn_one(
            {
                "node": "n",
                "source": "prefill_forward",
                "uncached_tokens": 50_000 + k,
                "seconds": 3.0 + k * 1e-3,
            }
        )
    state = fitted.to_state()
    restored = ImpossiblyFastPrefill.from_state(state)
    assert restored.models_.keys() == fitted.models_.keys() == {"n|prefill_forward"}
    assert (
        restored.models_["n|prefill_forward"][15].coef
        == fitted.models_["n|prefill_forward"][15].coef
    )
    old = dict(
        state,
        learned={
            "n_seen_": 10,
            "models_": {
                "n|prefill_forward": state["learned"]["models_"]["n|prefill_forward"]["15"]
            },
        },
    )
    assert ImpossiblyFastPrefill.from_state(old).models_ == {}


def test_honest_answers_once_a_growing_backlog_clears_are_not_exposures():
    """Blind review 16: a unified server under sustained load, its queue growing with every
    long prompt, taught the floor of time to first token a wait in every sample; once the
    backlog cleared, honest answers at the node's real speed came 1.0 to 2.1x "too fast" for
    it and were called critical exposures. A floor learned from timings that carry the queue
    judges with a further margin (`queued_safety_factor`): the honest answers pass, and a
    stub's first token, tens of times under it, is still found."""
    backlog, cleared = [], []
    for k in range(60):
        prompt = 33_000 + 1_000 * k
        # 6e-5 s a token of compute, and a wait of 8e-4 s a token of prompt: long prompts wait
        # for the token budget longest.
        backlog += decode_answer(100 + k, T + 100 + 30 * k, prompt, ttft=8.6e-4 * prompt)
    for k in range(6):
        prompt = 150_000 + 50_000 * k
        cleared += decode_answer(200 + k, T + 4_000 + 120 * k, prompt, ttft=6e-5 * prompt)
    findings = run(
        ImpossiblyFastPrefill(min_history=20, refit_every=10),
        boot("decode-0", "decode", T, 2_040_000),
        backlog,
        cleared,
        decode_answer(9, T + 5_000, 400_000, ttft=0.3),
    )
    assert [(f.bootstrap_room, f.severity) for f in findings] == [("9", "critical")]


def test_a_too_fast_answer_the_incident_s_path_cannot_have_served_is_no_exposure():
    """Blind review 47 D1: a healthy 0.5.23 fleet, pools over the context, agentic turns whose
    prefix hits only multi-sequence batch lines stated: 61 honest answers named exposed. A leak
    is a prefill's refusal for length handed to decode: a release that refuses for good, or a
    prefill pool that took the prompt, closes that path; the timing tell stays a warning."""

    def judged(pool: int, version: str | None) -> Finding:
        (finding,) = run(
            ImpossiblyFastPrefill(**GLM),
            boot("prefill-0", "prefill", T, pool, version),
            boot("decode-0", "decode", T, 2_040_000, version),
            decode_answer(9, T + 5_000, 600_000, ttft=0.05),
        )
        return finding

    fixed = judged(2_040_000, "0.5.23")
    assert (fixed.severity, fixed.exposure) == ("warning", False)
    assert "prefill-0 ran 0.5.23, which refuses an over-length prompt for good" in fixed.summary
    held = judged(2_040_000, "0.5.19")
    assert (held.severity, held.exposure) == ("warning", False)
    assert "prefill-0's pool took prompts of up to 2,039,993 tokens" in held.summary
    # Over the pool on a release that hands refusals to decode: the incident's path.
    leaked = judged(500_000, "0.5.19")
    assert (leaked.severity, leaked.exposure) == ("critical", True)


def _prefill_read(start: float, end: float, room: int) -> list[Event]:
    """prefill-0 at work: a short prompt prefilled every two minutes from `start` to `end`."""
    return [
        e
        for k, t in enumerate(np.arange(start, end, 120.0))
        for e in prefill_ok(room + k, float(t), 2_000)
    ]


@pytest.mark.parametrize(
    ("read_again_with", "expected"),
    [
        (900_000, ("warning", False, "prefill read past its pool later")),
        (2_000, ("critical", True, None)),
    ],
)
def test_an_answer_in_a_span_its_prefill_was_not_read_waits_for_what_it_ran_next(
    read_again_with: int, expected: tuple[str, bool, str | None]
) -> None:
    """prefill-0's log lost 50 minutes (a cut archive, with its restart onto a bigger pool):
    decode answered an 800k-token prompt in that span, in two minutes, its prefill side unread.
    When prefill-0 is read again prefilling a 900k-token prompt whole, past its pool as read,
    it had restarted unread, perhaps before the answer: a warning (blind review 53 D1: 20
    honest answers named exposed). Read again with short prompts, the answer stays an
    exposure."""
    (finding,) = run(
        OverLengthAnswered(),
        LEAKY,
        _prefill_read(T + 300, T + 3_600, 5_000),
        decode_answer(1001, T + 4_500, 800_000, ttft=120.0),
        prefill_ok(2001, T + 6_600, read_again_with, seconds=150.0),
        decode_answer(2001, T + 6_600, read_again_with, ttft=151.0),
        _prefill_read(T + 6_900, T + 12_000, 6_000),
    )
    assert (
        finding.severity,
        finding.exposure,
        finding.evidence.get("pool_basis") if not finding.exposure else None,
    ) == expected


@pytest.mark.parametrize(("refused_between", "exposed"), [(False, False), (True, True)])
def test_short_prompts_read_before_the_pool_is_outgrown_tell_nothing_a_refusal_does(
    refused_between: bool, exposed: bool
) -> None:
    """The same lost span, but prefill-0 is read again prefilling short prompts for 20 minutes
    before the 900k-token one: both pools take short prompts, so the restart may still have
    come before the answer (a `.gz` cut in the incident's replay: an honest 1M-token answer
    named exposed). A refusal read after the answer says the small pool still held then."""
    refusal = prefill_refused(3001, T + 6_300, 700_000) if refused_between else []
    (finding,) = run(
        OverLengthAnswered(),
        LEAKY,
        _prefill_read(T + 300, T + 3_600, 5_000),
        decode_answer(1001, T + 4_500, 800_000, ttft=120.0),
        _prefill_read(T + 6_000, T + 7_200, 6_000),
        refusal,
        prefill_ok(2001, T + 7_300, 900_000, seconds=150.0),
        decode_answer(2001, T + 7_300, 900_000, ttft=151.0),
    )
    assert (finding.severity == "critical", finding.exposure) == (exposed, exposed)
    assert finding.bootstrap_room == "1001"


def test_lines_read_only_just_after_an_answer_do_not_say_what_its_prefill_ran() -> None:
    """Blind review 62 D1: prefill-0's log lost an hour, its restart onto a bigger pool in it;
    decode answered an honest 975k-token prompt in 41 s a minute before the log resumed. Read
    again 66 s after the answer, prefill-0 counted as read around it, and the answer was named
    exposed against the old pool, the window stretched by half an hour."""
    (finding,) = run(
        OverLengthAnswered(),
        LEAKY,
        _prefill_read(T + 300, T + 3_600, 5_000),
        decode_answer(1001, T + 6_534, 800_000, ttft=41.0),
        prefill_ok(2001, T + 6_600, 900_000, seconds=150.0),
        decode_answer(2001, T + 6_600, 900_000, ttft=151.0),
        _prefill_read(T + 6_900, T + 12_000, 6_000),
    )
    assert (finding.severity, finding.exposure) == ("warning", False)
    assert finding.evidence["pool_basis"] == "prefill read past its pool later"


def test_an_answer_while_its_prefill_was_read_is_judged_by_the_pool_read() -> None:
    # prefill-0 read around the answer: its pool then is the one read, whatever came later.
    (finding,) = run(
        OverLengthAnswered(),
        LEAKY,
        _prefill_read(T + 300, T + 6_000, 5_000),
        decode_answer(1001, T + 4_500, 800_000, ttft=120.0),
        prefill_ok(2001, T + 6_600, 900_000, seconds=150.0),
        decode_answer(2001, T + 6_600, 900_000, ttft=151.0),
    )
    assert finding.severity == "critical" and finding.exposure


def with_host(events: list[Event], host: str) -> list[Event]:
    """`events` of a decode answer whose `Receive:` names the prefill `host` it met."""
    for event in events:
        if event.kind == "request_received":
            event.fields.update(bootstrap_host=host, bootstrap_port=8998)
    return events


def _prefill_0_met_at_its_host() -> tuple[list[Event], list[Event]]:
    """prefill-0 announcing 10.0.0.10, and five answers that met it there."""
    announced = [ev(BOOTSTRAP_SERVER, "prefill-0", T + 50, host="10.0.0.10", port=8998)]
    met = [
        event
        for k in range(5)
        for event in prefill_ok(100 + k, T + 300 + 60 * k, 20_000)
        + with_host(decode_answer(100 + k, T + 300 + 60 * k, 20_000, ttft=2.0), "10.0.0.10")
    ]
    return announced, met


def test_a_fast_answer_decode_names_another_prefill_host_for_is_judged_by_that_nodes_pool():
    """Blind review 53 D2: a leaking prefill-0 (10.0.0.10) and a healthy prefill-1 whose logs
    are missing (its snapshots say a 2.04M pool) share decode-0, which says `cached_tokens: 0`
    of prefill-1's cache hits. Decode names 10.0.1.11, not prefill-0's address, and every
    answer that met prefill-0 named 10.0.0.10: the prompt met prefill-1, whose pool took it.
    26 such answers were named exposed against prefill-0's pool."""

    announced, met = _prefill_0_met_at_its_host()
    elsewhere = with_host(decode_answer(9, T + 5_000, 800_000, ttft=0.05), "10.0.1.11")
    (finding,) = run(
        ImpossiblyFastPrefill(**GLM),
        LEAKY,
        announced,
        boot("prefill-1", "prefill", T, 2_040_000, "0.5.19"),
        met,
        elsewhere,
    )
    assert (finding.bootstrap_room, finding.severity, finding.exposure) == ("9", "warning", False)
    assert "prefill-1's pool took prompts of up to 2,039,993 tokens" in finding.summary
    # Decode naming prefill-0's own address: the incident's path.
    (leaked,) = run(
        ImpossiblyFastPrefill(**GLM),
        LEAKY,
        announced,
        boot("prefill-1", "prefill", T, 2_040_000, "0.5.19"),
        met,
        with_host(decode_answer(9, T + 5_000, 800_000, ttft=0.05), "10.0.0.10"),
    )
    assert (leaked.severity, leaked.exposure) == ("critical", True)


def test_an_over_length_answer_decode_names_another_prefill_host_for_is_not_warned_of():
    """Blind review 63 J1: a healthy deployment's prefill known only from its snapshot (2.04M
    pool), its decode's answers naming 10.0.1.11, beside a leaking prefill-0 announced at
    10.0.0.10 whose own answers name it: 14 honest answers of 700k to 1M tokens warned "if it
    went to prefill-0". Decode names the host it met; prefill-0 announced another."""

    announced, met = _prefill_0_met_at_its_host()
    healthy = boot("prefill-1", "prefill", T, 2_040_000, "0.5.22")
    for host, warned in (("10.0.1.11", False), (None, True)):
        answer = decode_answer(9, T + 5_000, 800_000, ttft=70.0)
        findings = run(
            OverLengthAnswered(),
            LEAKY,
            announced,
            healthy,
            met,
            with_host(answer, host) if host else answer,
        )
        # Naming no host, it may have met prefill-0: a warning, never an exposure.
        assert [(f.bootstrap_room, f.severity, f.exposure) for f in findings] == (
            [("9", "warning", False)] if warned else []
        )
