"""What the second look (a message found inside a line, not at its head) may classify."""

from __future__ import annotations

from collector.sglang.logs import UNCLASSIFIED_OTHER, LineParser


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
