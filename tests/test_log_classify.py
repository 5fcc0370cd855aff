"""What the second look (a message found inside a line, not at its head) may classify."""

from __future__ import annotations

import pytest

from collector.sglang.logs import (
    _CRASH,
    _CRASH_RULE,
    _HEADS,
    RULES,
    UNCLASSIFIED_OTHER,
    LineParser,
)
from collector.sglang.values import as_int, number


def test_a_note_quoting_engine_messages_is_not_an_engine_event() -> None:
    parser = LineParser("README")
    for line in (
        "one KV checksum mismatch: TP3 full form + 7 peer ranks",
        "the pool was max_total_num_tokens=180000 on prefill",
        "watchdog timeout, then a restart",
    ):
        assert parser.parse(line, "README.txt:3") == (UNCLASSIFIED_OTHER, None)


def test_the_engine_line_that_carries_a_glued_message_still_yields_it() -> None:
    parser = LineParser("prefill-0")
    bucket, event = parser.parse(
        "[2026-08-27 09:01:14 TP0] Memory pool end. avail mem=11.20 GB"
        "max_total_num_tokens=681280, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=128, context_len=1048576, available_gpu_mem=11.20 GB",
        "prefill-0.log:3",
    )
    assert bucket == "capacity" and event is not None
    assert event.fields["max_total_num_tokens"] == 681280
    bucket, event = parser.parse(  # the mismatch glued behind another engine message
        "[2026-11-02 10:16:40 DP1 TP1 EP1] Capture cuda graph end. KV checksum mismatch "
        "req=7c2e9d0b bootstrap_room=2170015846053279415 expected=0x5e1a03c7 got=0x5e1a03c6",
        "decode-0.log:9",
    )
    assert bucket == "checksum_mismatch" and event is not None
    assert event.fields["bootstrap_room"] == "2170015846053279415"


def test_a_prefix_with_a_date_that_does_not_exist_is_no_prefix() -> None:
    parser = LineParser("decode-0")
    for line in (
        "[2026-13-08 12:00:00] max_total_num_tokens=681280, context_len=1048576",
        "[2026-00-08 12:00:00 TP0] Decode batch, #running-req: 1, token usage: 0.01",
        "[0000-01-08 12:00:00] The server is fired up and ready to roll!",
        "[2026-01-08 25:61:61] The server is fired up and ready to roll!",
        "2026-01-08T12:00:00Z stdout F [2026-13-08 12:00:00] Receive: obj=GenerateReqInput()",
    ):
        bucket, event = parser.parse(line, "decode-0.log:1")  # no exception: a line unread
        assert event is None or event.time is None, line


BIG = "9" * 5000  # Python refuses to read an int this long; a reader must not pass that on


@pytest.mark.parametrize(
    "message",
    [
        "Decode batch, #running-req: {n}, #token: 9, token usage: 0.01",
        "max_total_num_tokens={n}, chunked_prefill_size=8192, context_len=1048576",
        "Input length ({n} tokens) exceeds the maximum allowed length (681274 tokens). Use a "
        "shorter input or enable --allow-auto-truncate., self.rid='b2'",
        "KV checksum mismatch req=7c bootstrap_room={n} expected=0x1 got=0x2",
        "ReqTimeStats(rid=a1, bootstrap_room=1, input_len={n}, cached_input_len=0, output_len=1,"
        " attempts=0, type=prefill): bootstrap_duration=1.2ms, forward_duration=9.1ms",
        "Finish: obj=GenerateReqInput(rid='a1', bootstrap_room=7), out={{'meta_info': {{"
        "'id': 'a1', 'finish_reason': {{'type': 'stop'}}, 'prompt_tokens': {n}}}}}",
    ],
)
def test_a_number_of_thousands_of_digits_is_no_number_and_no_crash(message: str) -> None:
    parser = LineParser("decode-0")
    line = "[2026-08-27 10:15:00 TP0] " + message.format(n=BIG)
    for _ in range(3):  # learnt layouts included
        _, event = parser.parse(line, "decode-0.log:1")
        fields = event.fields if event is not None else {}
        assert not any(isinstance(v, int) and v > 10**64 for v in fields.values())


def test_readers_of_numbers_refuse_what_is_no_count() -> None:
    assert number(BIG) == BIG and number("-" + BIG) == "-" + BIG
    assert as_int(BIG) is None and as_int("1e309") is None
    assert number("5523401987766512300") == 5523401987766512300  # a bootstrap room still is


def test_a_prefix_of_absurd_ranks_is_read_without_a_crash_or_a_cache_of_megabytes() -> None:
    from collector.sglang import envelope

    parser = LineParser("decode-0")
    many = " ".join(f"A{i}" for i in range(20_000))  # a 150 KB prefix
    for ranks in (f"TP{BIG}", many):
        line = f"[2026-08-27 10:15:00 {ranks}] The server is fired up and ready to roll!"
        parser.parse(line, "decode-0.log:1")  # no exception
    keys = [*envelope._head_cache, *envelope._minute_cache, *envelope._rank_cache]
    assert max(map(len, keys), default=0) <= envelope.MAX_CACHED_KEY


def test_an_access_line_a_wrapper_rerendered_is_still_an_access_line() -> None:
    # Dynamo re-renders uvicorn's `INFO:     <client> - "<request>" <status>` as a record of
    # the `uvicorn.access` logger, without that head (sglang-telemetry.md §2.1 wrappers).
    wrapped = (
        '2026-09-03T10:02:11.313909Z  INFO uvicorn.access: 10.0.0.2:41931 - "POST /generate '
        'HTTP/1.1" 503'
    )
    bucket, event = LineParser("decode-0").parse(wrapped, "d.log:1")
    assert bucket == "http_access" and event is not None
    assert (event.fields["path"], event.fields["status"]) == ("/generate", 503)
    # Another logger's record of the same words is not taken for one.
    other = wrapped.replace("uvicorn.access", "sglang.srt.entrypoints.http_server")
    assert LineParser("decode-0").parse(other, "d.log:2")[0] != "http_access"


@pytest.mark.parametrize(
    ("line", "bucket"),
    [
        (
            "2026-09-06T00:00:01.123456Z  INFO sgl_model_gateway::routers::http::pd_router: "
            "src/routers/http/pd_router.rs:812: PD request routed bootstrap_room=77",
            "noise:router",
        ),
        (  # colours, as `kubectl logs` of the router's pod keeps them
            "\x1b[2m2026-09-06T00:00:01.123456Z\x1b[0m \x1b[32m INFO\x1b[0m "
            "\x1b[2msgl_router::server\x1b[0m\x1b[2m:\x1b[0m Starting router on 0.0.0.0:8000",
            "noise:router",
        ),
        (
            "2026-09-06T00:00:01.5+02:00 WARN request{id=ab method=POST}: smg::routers::pd: retry",
            "noise:router",
        ),
        ("2026-09-06T00:00:01Z ERROR tokio_postgres::connection: closed", "noise:rust"),
        ("Scheduler::run: not a Rust line without its module path", UNCLASSIFIED_OTHER),
        ("std: : spaced is no module path", UNCLASSIFIED_OTHER),
    ],
)
def test_a_rust_program_s_tracing_line_is_its_own_noise(line: str, bucket: str) -> None:
    """The router's log beside the engines' (a PD deployment always has one) is the router's,
    not engine lines kvwatch failed to read: before, a case folder with it said a quarter of
    its lines could not be used."""
    assert LineParser("sgl-router").parse(line, "sgl-router.log:1") == (bucket, None)


def test_an_abort_of_a_request_already_finished_is_noise_not_drift() -> None:
    """Audit X: 0.5.23's tokenizer logs it at INFO for every client that disconnects after its
    answer; as an unclassified engine line it counted as format drift."""
    line = (
        "[2026-11-02 09:12:44] Abort request for rid=9f3c0d2e7b5a4c1d8e6f0a1b2c3d4e5f not found "
        "in rid_to_state; likely already finished/removed."
    )
    assert LineParser("decode-0").parse(line, "d.log:1") == (
        "noise:abort_of_finished_request",
        None,
    )


@pytest.mark.parametrize(
    "message",
    [
        "Update engine weights online from disk begin. avail mem=10.62 GB",
        "Update weights end.",
        "Cache flushed successfully!",
        "Cache not flushed because there are pending requests. #queue-req: 3, #running-req: 12",
        "init custom process group: master_address=10.0.0.5, master_port=29600, rank_offset=1, "
        "rank=1, world_size=9, group_name=rl_weights, backend=nccl",
    ],
)
def test_updating_weights_in_place_is_noise_not_drift(message: str) -> None:
    """Audit H3: a reinforcement-learning fleet updating weights between rollouts logs these
    every few minutes (0.5.19 and 0.5.23 `weight_updater.py`, `Scheduler.flush_cache`)."""
    line = f"[2026-11-11 08:15:02 TP0] {message}"
    assert LineParser("decode-0").parse(line, "d.log:1") == ("noise:weight_update", None)


@pytest.mark.parametrize(
    "head",
    [
        # `%(asctime)s %(levelname)s %(name)s: %(message)s`
        "2026-09-05 22:10:07,859 INFO sglang.srt.managers.scheduler: ",
        "2026-09-05 22:10:07.859 WARNING sglang.srt.managers.scheduler: ",
        "2026-09-05 22:10:07,859 - sglang.srt.managers.scheduler - INFO - ",  # `… - %(name)s - …`
    ],
)
def test_lines_in_a_python_logging_format_a_dictconfig_sets_are_the_engine_s(head: str) -> None:
    # `SGLANG_LOGGING_CONFIG_PATH` replaces SGLang's prefix with the user's dictConfig format
    # (reference §2.1); Python's own asctime is `YYYY-MM-DD HH:MM:SS,mmm`, local time.
    parser = LineParser("decode-0")
    line = head + (
        "Decode batch, #running-req: 3, #token: 21629, token usage: 0.01, "
        "gen throughput (token/s): 52.10, #queue-req: 0"
    )
    bucket, event = parser.parse(line, "d.log:1")
    assert bucket == "decode_batch" and event is not None
    assert event.time == 1788646207.859 and event.fields["running_req"] == 3
    # A program's line in the same format that says nothing SGLang says is still not an event.
    other = head.replace("sglang.srt.managers.scheduler", "cron") + "job done"
    assert parser.parse(other, "d.log:2")[1] is None


@pytest.mark.parametrize(
    ("message", "kind", "numbers"),
    [
        (
            "The input (1100000 tokens) is longer than the model's context length (1048576 "
            "tokens). Truncating the input.",
            "auto_truncated",
            (1_100_000, 1_048_576),
        ),
        (
            "Requested token count (1040000 input + 9000 new) exceeds the model's context length "
            "(1048576 tokens). Truncating max_new_tokens.",
            "auto_truncated",
            (1_040_000, 1_048_576),
        ),
        (
            "[http_server] Error: The input (1100000 tokens) is longer than the model's context "
            "length (1048576 tokens).",
            "request_rejected",
            (1_100_000, 1_048_576),
        ),
    ],
)
def test_a_context_check_that_truncates_is_served_not_refused(
    message: str, kind: str, numbers: tuple[int, int]
) -> None:
    """Audit U: with `--allow-auto-truncate` the tokenizer's context checks (0.5.19) warn,
    truncate and serve; read as refusals, a served request could join one."""
    bucket, event = LineParser("prefill-0").parse(f"[2026-09-06 10:00:00] {message}", "p.log:1")
    assert bucket == kind and event is not None
    assert (event.fields["input_tokens"], event.fields["limit_tokens"]) == numbers
    if kind == "auto_truncated":
        # The tokenizer's limit is the context, not the engine's prompt limit: the timeline
        # must not take it for `max_req_input_len`.
        assert event.fields["limit_kind"] == "context_length"


_RAISED_CANARY = (
    "RuntimeError: kv_canary violation: launch_tag=TAIL_K_FULL fail_reason=verify_chain_hash "
    "slot_idx=466732 position=494 stored_token=1024 expected_token=1024 "
    "stored_chain_hash=0x87171dc732993eeb expected_aux=0x411ba4a2f461b119"
)


def test_a_canary_violation_raised_as_the_schedulers_crash_is_a_violation_at_its_time() -> None:
    """`--kv-canary raise` ends the scheduler's traceback with the violation's summary, unstamped:
    it was filed as traceback noise, and the stricter mode detected nothing (review)."""
    parser = LineParser("decode-0")
    lines = [
        "[2026-09-03 06:09:59 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 3021, in run_scheduler',
        "    raise RuntimeError(msg)",
        _RAISED_CANARY,
        "KV cache canary violation detected (kernel_kind=TAIL_K_FULL, slot_idx=466732, "
        "position=494)",
    ]
    parsed = [parser.parse(line, f"decode-0.log:{n}") for n, line in enumerate(lines, 1)]
    violations = [event for kind, event in parsed if kind == "kv_canary_violation"]
    assert len(violations) == 1 and violations[0] is not None
    assert violations[0].time == 1788415799.0  # 2026-09-03T06:09:59Z, the crash line's
    assert violations[0].fields["slot_idx"] == 466732
    assert violations[0].fields["raised"] is True  # the server died with the batch


def test_a_raised_canary_line_outside_a_crash_is_not_a_violation() -> None:
    """Only the scheduler's traceback makes the unstamped line the engine's: after any other
    stamped line (a request's, a batch's) it stays a traceback's line."""
    parser = LineParser("decode-0")
    parser.parse("[2026-09-03 06:09:58 TP0] Decode batch, #running-req: 1, #token: 9", "d:1")
    assert parser.parse(_RAISED_CANARY, "d:2") == ("noise:traceback", None)
    parser.parse("[2026-09-03 06:09:59 TP0] Scheduler hit an exception: Traceback", "d:3")
    parser.parse("[2026-09-03 06:09:59 TP0] Decode batch, #running-req: 1, #token: 9", "d:4")
    assert parser.parse(_RAISED_CANARY, "d:5") == ("noise:traceback", None)


def test_a_line_meets_the_crash_rule_exactly_when_it_starts_with_the_crash() -> None:
    """`LineParser.parse` tells the scheduler's crash by the rule its head meets: no rule before
    the crash's may take its lines, and none may start with it."""
    before = RULES[: RULES.index(_CRASH_RULE)]
    assert not [rule.head for rule in before if _CRASH.startswith(rule.head)]
    assert [rule for rule in RULES if rule.head.startswith(_CRASH)] == [_CRASH_RULE]
    hit = _HEADS.match("[x] " + _CRASH + ": Traceback", 4)
    assert hit is not None and hit[0] is _CRASH_RULE
