"""A 2025 build's refusal line names no request; the refused request's own finish record does.

Blind review 4a: prefill logs `Input length (N tokens) exceeds the maximum allowed length (M
tokens)...` without `self.rid=`, and in the same second its request logger finishes the refused
request as an abort with that sentence, `prompt_tokens: 1` and status 400, under its rid and
room. The refusal line was held for a decode answer to take by its length and, none taking
it, became a request of its own: "NOT JUDGED: 10 requests prefill refused ... joined to no
decode answer" (exit 2) where decode had aborted each, and "NO DECODE SIDE: 13" beside the 10
exposures it named. The finish's abort states the length (numbers only are kept): the line is
that request's.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics
from tests.engine_lines import prefill_start, server_args

DAY = "2026-09-04"
LIMIT = 681_274
ANSWERED_ROOM, ABORTED_ROOM = "6100000000000000001", "6100000000000000002"
ANSWERED_PROMPT, ABORTED_PROMPT = 877_251, 912_004


def _refusal(stamp: str, prompt: int) -> str:
    return (
        f"[{stamp} TP0] Input length ({prompt} tokens) exceeds the maximum allowed length "
        f"({LIMIT} tokens). Use a shorter input or enable --allow-auto-truncate.\n"
    )


def _finish(stamp: str, role: str, room: str, prompt: int, *, answered: bool) -> str:
    rid = f"{role[0]}{room[-6:]}"
    ids = f"rid='{rid}', bootstrap_host='10.0.0.5', bootstrap_port=8998, bootstrap_room={room}"
    if role == "prefill":
        message = (
            f"Input length ({prompt} tokens) exceeds the maximum allowed length ({LIMIT} "
            "tokens). Use a shorter input or enable --allow-auto-truncate."
        )
        finish = f"{{'type': 'abort', 'message': '{message}', 'status_code': 400}}"
        prompt_tokens, completion = 1, 0
    elif answered:
        finish, prompt_tokens, completion = "{'type': 'stop', 'matched': 151336}", prompt, 300
    else:
        finish = "{'type': 'abort', 'message': 'KV transfer failed', 'status_code': 500}"
        prompt_tokens, completion = prompt, 0
    return (
        f"[{stamp}] Receive: obj=GenerateReqInput({ids})\n"
        f"[{stamp}] Finish: obj=GenerateReqInput({ids}), out={{'text': '', 'meta_info': "
        f"{{'id': '{rid}', 'finish_reason': {finish}, 'prompt_tokens': {prompt_tokens}, "
        f"'completion_tokens': {completion}, 'cached_tokens': 0, 'e2e_latency': 0.2}}}}\n"
    )


def _stub_time_stats(stamp: str, room: str) -> str:
    entry = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp() - 0.02
    return (
        f"[{stamp} TP0] ReqTimeStats(rid=p{room[-6:]}, bootstrap_room={room}, input_len=1, "
        "cached_input_len=0, output_len=1, attempts=0, type=prefill): bootstrap_duration=1.00ms, "
        f"queue_duration=1.00ms, forward_duration=14.57ms, entry_time={entry:.3f}\n"
    )


def _case(folder: Path, *, refusal_after_finish: bool, request_log_apart: bool) -> Path:
    folder.mkdir()
    engine = server_args(DAY, "prefill") + prefill_start(DAY, "10.0.0.5", 681_280)
    requests = ""
    for minute, room, prompt in (
        (10, ANSWERED_ROOM, ANSWERED_PROMPT),
        (20, ABORTED_ROOM, ABORTED_PROMPT),
    ):
        stamp = f"2026-09-04 00:{minute}:01"
        finish = _finish(stamp, "prefill", room, prompt, answered=False)
        if request_log_apart:  # the engine's log keeps the refusal and the stub's time stats
            engine += _refusal(stamp, prompt) + _stub_time_stats(stamp, room)
            requests += finish
        elif refusal_after_finish:
            engine += finish + _refusal(stamp, prompt)
        else:
            engine += _refusal(stamp, prompt) + finish
    (folder / "prefill-0.log").write_text(engine)
    if request_log_apart:  # the request logger's own files, named after the host
        (folder / "reqlogs").mkdir()
        (folder / "reqlogs" / "glm53-prefill-0-7d9f4_0.log").write_text(requests)
    (folder / "decode-0.log").write_text(
        server_args(DAY, "decode")
        + _finish("2026-09-04 00:10:09", "decode", ANSWERED_ROOM, ANSWERED_PROMPT, answered=True)
        + _finish("2026-09-04 00:20:02", "decode", ABORTED_ROOM, ABORTED_PROMPT, answered=False)
    )
    return folder


@pytest.mark.parametrize(
    ("refusal_after_finish", "request_log_apart"),
    [(False, False), (True, False), (False, True)],
    ids=["refusal-first", "finish-first", "request-log-apart"],
)
def test_a_refusal_naming_no_request_is_the_one_its_finish_record_states(
    tmp_path: Path, refusal_after_finish: bool, request_log_apart: bool
) -> None:
    case = _case(
        tmp_path / "case",
        refusal_after_finish=refusal_after_finish,
        request_log_apart=request_log_apart,
    )
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert [r["bootstrap_room"] for r in summary["exposure"]["requests"]] == [ANSWERED_ROOM]
    assert summary["requests"]["refused_without_decode"]["count"] == 0
    assert summary["requests"]["total"] == 2
