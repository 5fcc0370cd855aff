"""Small, hand-built event streams: the bundled fixture for docstring examples and contract tests.

Each function returns a fresh list of `Event`s in time order, shaped like the parsers' output
(see the design's event table). They are tiny on purpose: a docstring example must run in
milliseconds. The numbers follow the incident: a 681,280-token prefill pool under a
1,048,576-token context on SGLang 0.5.19, then a restart on 0.5.21 with a 2,040,000-token pool.
"""

from __future__ import annotations

import calendar
from typing import Any, Final

from collector.events import Event

T0: Final = float(calendar.timegm((2026, 8, 27, 9, 0, 0, 0, 0, 0)))
POOL: Final = 681_280
CONTEXT: Final = 1_048_576
BIG_POOL: Final = 2_040_000


def _ev(kind: str, node: str, time: float, fields: dict[str, Any], line: int = 0) -> Event:
    return Event(kind, node, time, f"{node}.log:{line or int(time - T0)}", fields)


def startup(node: str, role: str, t: float, *, pool: int, version: str | None) -> list[Event]:
    """Server args, `/server_info` (when the version is known) and the capacity line."""
    events = [
        _ev(
            "server_args",
            node,
            t,
            {
                "disaggregation_mode": role,
                "transfer_backend": "mooncake",
                "kv_checksum": False,
                "kv_canary": "none",
                "context_length": None,
                "tp_size": 8,
                "model": "zai-org/GLM-5.3-FP8",
            },
        )
    ]
    if version is not None:
        events.append(
            _ev(
                "server_info",
                node,
                t + 1,
                {
                    "version": version,
                    "max_total_num_tokens": pool,
                    "max_req_input_len": min(CONTEXT - 1, pool - 1) - 5,
                    "context_len": CONTEXT,
                    "disaggregation_mode": role,
                    "transfer_backend": "mooncake",
                    "kv_checksum": False,
                },
            )
        )
    events.append(
        _ev(
            "capacity",
            node,
            t + 60,
            {
                "max_total_num_tokens": pool,
                "context_len": CONTEXT,
                "chunked_prefill_size": 8192,
                "max_prefill_tokens": 16384,
                "max_running_requests": 128,
            },
        )
    )
    return events


def request(
    room: int,
    t: float,
    *,
    prompt: int,
    cached: int = 0,
    prefill_seconds: float,
    ttft: float,
    completion: int = 100,
    prefill: str = "prefill-0",
    decode: str = "decode-0",
) -> list[Event]:
    """One honest PD request: prefill receives, computes and finishes; decode answers."""
    p_rid, d_rid = f"p{room:x}", f"d{room:x}"
    end = t + ttft + 0.03 * completion
    return [
        _ev("request_received", prefill, t, {"rid": p_rid, "bootstrap_room": str(room)}),
        _ev("request_received", decode, t, {"rid": d_rid, "bootstrap_room": str(room)}),
        _ev(
            "request_time_stats",
            prefill,
            t + prefill_seconds,
            {
                "rid": p_rid,
                "bootstrap_room": str(room),
                "role": "prefill",
                "input_len": prompt,
                "cached_input_len": cached,
                "output_len": 1,
                "queue_duration": 0.01,
                "forward_duration": prefill_seconds,
            },
        ),
        _ev(
            "request_finished",
            prefill,
            t + prefill_seconds + 0.01,
            {
                "rid": p_rid,
                "bootstrap_room": str(room),
                "prompt_tokens": prompt,
                "cached_tokens": cached,
                "completion_tokens": 1,
                "finish_type": "length",
                "status_code": None,
                "e2e_latency": prefill_seconds + 0.01,
                "first_token_latency": None,
            },
        ),
        _ev(
            "request_finished",
            decode,
            end,
            {
                "rid": d_rid,
                "bootstrap_room": str(room),
                "prompt_tokens": prompt,
                "cached_tokens": cached,
                "completion_tokens": completion,
                "finish_type": "stop",
                "status_code": None,
                "e2e_latency": end - t,
                "first_token_latency": ttft,
            },
        ),
    ]


def leaked_request(room: int, t: float, *, prompt: int, limit: int) -> list[Event]:
    """The incident's path: prefill refuses and finishes a one-token stub; decode answers fast."""
    p_rid, d_rid = f"p{room:x}", f"d{room:x}"
    return [
        _ev("request_received", "prefill-0", t, {"rid": p_rid, "bootstrap_room": str(room)}),
        _ev("request_received", "decode-0", t, {"rid": d_rid, "bootstrap_room": str(room)}),
        _ev(
            "request_rejected",
            "prefill-0",
            t + 0.01,
            {
                "rid": p_rid,
                "input_tokens": prompt,
                "limit_tokens": limit,
                "reason": "input_too_long",
            },
        ),
        _ev(
            "request_time_stats",
            "prefill-0",
            t + 0.03,
            {
                "rid": p_rid,
                "bootstrap_room": str(room),
                "role": "prefill",
                "input_len": 1,
                "cached_input_len": 0,
                "output_len": 1,
                "queue_duration": 0.001,
                "forward_duration": 0.02,
            },
        ),
        _ev(
            "request_finished",
            "prefill-0",
            t + 0.04,
            {
                "rid": p_rid,
                "bootstrap_room": str(room),
                "prompt_tokens": 1,
                "cached_tokens": 0,
                "completion_tokens": 0,
                "finish_type": "abort",
                "status_code": 400,
                "e2e_latency": 0.04,
                "first_token_latency": None,
            },
        ),
        _ev(
            "request_finished",
            "decode-0",
            t + 6.05,
            {
                "rid": d_rid,
                "bootstrap_room": str(room),
                "prompt_tokens": prompt,
                "cached_tokens": 0,
                "completion_tokens": 200,
                "finish_type": "stop",
                "status_code": None,
                "e2e_latency": 6.05,
                "first_token_latency": 0.05,
            },
        ),
    ]


def incident_events() -> list[Event]:
    """Leaky PD deployment, one exposed response (room 1001), then a restart with a big pool.

    Also carries honest short requests, a long prompt that is almost entirely cached, and the
    same long length served honestly after the restart: none of those is an exposure.
    """
    events = startup("prefill-0", "prefill", T0, pool=POOL, version="0.5.19")
    events += startup("decode-0", "decode", T0, pool=BIG_POOL, version=None)
    for k in range(12):
        prompt = 2_000 + 1_500 * k
        events += request(
            2000 + k,
            T0 + 120 + 30 * k,
            prompt=prompt,
            prefill_seconds=0.05 + prompt * 2e-5,
            ttft=0.2 + prompt * 2.2e-5,
        )
    events += leaked_request(1001, T0 + 1000, prompt=700_000, limit=min(POOL, CONTEXT) - 6)
    events += request(
        3001, T0 + 1100, prompt=600_000, cached=598_000, prefill_seconds=0.3, ttft=0.45
    )
    events += startup("prefill-0", "prefill", T0 + 2000, pool=BIG_POOL, version="0.5.21")
    events += request(4001, T0 + 2200, prompt=700_000, prefill_seconds=40.0, ttft=42.0)
    return sorted(events, key=lambda e: e.time or 0.0)


def cached_long_prompt_events() -> list[Event]:
    """A healthy deployment answering long prompts that are almost entirely prefix-cached."""
    events = startup("prefill-0", "prefill", T0, pool=BIG_POOL, version="0.5.22")
    events += startup("decode-0", "decode", T0, pool=BIG_POOL, version="0.5.22")
    for k in range(5):
        events += request(
            5000 + k,
            T0 + 200 + 60 * k,
            prompt=900_000 + k,
            cached=898_000,
            prefill_seconds=0.25,
            ttft=0.4,
        )
    return sorted(events, key=lambda e: e.time or 0.0)


def deferred_timeout_events(*, storm: bool, mismatches: int = 0) -> list[Event]:
    """Six quiet hours with a lone deferred-release timeout now and then; optionally a storm."""
    events = startup("decode-0", "decode", T0, pool=BIG_POOL, version="0.5.22")
    for k in range(18):
        t = T0 + 600 + 1200 * k
        events.append(
            _ev(
                "deferred_release",
                "decode-0",
                t,
                {"bootstrap_room": str(7000 + k), "outcome": "timeout", "seconds": 30.0},
            )
        )
    if storm:
        start = T0 + 6 * 3600 + 30
        for k in range(30):
            events.append(
                _ev(
                    "deferred_release",
                    "decode-0",
                    start + 3 * k,
                    {"bootstrap_room": str(8000 + k), "outcome": "timeout", "seconds": 30.0},
                )
            )
        for k in range(mismatches):
            events.append(
                _ev(
                    "checksum_mismatch",
                    "decode-0",
                    start + 5 + 7 * k,
                    {
                        "rid": f"m{k}",
                        "bootstrap_room": str(9000 + k),
                        "expected": "0x5e1a03c7",
                        "got": "0x5e1a03c6",
                    },
                )
            )
    return sorted(events, key=lambda e: e.time or 0.0)


def mixed_events() -> list[Event]:
    """Something for every detector: the contract suite's stream."""
    events = incident_events()
    events += deferred_timeout_events(storm=True, mismatches=2)
    events.append(
        _ev(
            "checksum_skipped",
            "decode-0",
            T0 + 300,
            {"prefill_signature": "0x1f2e", "decode_signature": "0x2e1f"},
        )
    )
    events.append(
        _ev(
            "kv_canary_violation",
            "decode-0",
            T0 + 400,
            {
                "launch_tag": "TAIL_K_FULL",
                "fail_reason": "verify_chain_hash",
                "slot_idx": 18433,
                "position": 511,
            },
        )
    )
    events.append(
        _ev(
            "metadata_corruption",
            "decode-0",
            T0 + 410,
            {"rid": "dmc", "bootstrap_room": "6001", "actual_room": "6002"},
        )
    )
    for k in range(12):
        events.append(
            _ev(
                "transfer_failed",
                "decode-0",
                T0 + 6 * 3600 + 60 + k,
                {
                    "rid": f"tf{k}",
                    "bootstrap_room": str(9500 + k),
                    "side": "decode",
                    "stage": "transfer",
                    "reason": "Aborted by AbortReq.",
                },
            )
        )
    for k in range(0, 6 * 3600 + 300, 45):
        events.append(
            _ev(
                "decode_batch",
                "decode-0",
                T0 + 90 + k,
                {
                    "running_req": 8 + k % 5,
                    "token": 20_000,
                    "token_usage": 0.3 + 0.01 * (k % 7),
                    "pre_allocated_usage": 0.01,
                    "prealloc_req": 0,
                    "transfer_req": 1,
                    "retracted_req": 0,
                    "gen_throughput": 900.0 + k % 50,
                    "queue_req": 0,
                },
            )
        )
    return sorted(events, key=lambda e: e.time or 0.0)
