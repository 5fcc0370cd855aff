"""`--allow-auto-truncate` on a PD prefill, with the pool unknown: the leak is still named.

Audit W read it in 0.5.21's source: the prefill scheduler cuts a prompt over its limit to
`max_req_input_len`, warns without a rid, prefills the cut prompt and sends its KV on; decode
holds the whole prompt and answers over pages prefill never wrote. The lines below are in the
shapes that audit rendered from that source. With no start-up capacity line, KV allocation line
or snapshot, the warning's own `max_req_input_len` is the only figure that says the prompt was
over the limit; before it was read, the run said "no exposed responses found".
"""

from __future__ import annotations

from pathlib import Path

from collector.forensics.driver import run_forensics
from collector.forensics.report import pool_unknown_line

LIMIT = 681_274
CUT_ROOM, CUT_PROMPT = "7000000000000087109", 750_000
WHOLE_ROOM, WHOLE_PROMPT = "7000000000000095028", 400_000
TRUNCATION = (
    "[2026-08-29 10:46:40 TP0] Request length is longer than the KV cache pool size or the max "
    f"context length. Truncated. len(req.origin_input_ids)={CUT_PROMPT}, "
    f"max_req_input_len={LIMIT}.\n"
)


def _args(role: str) -> str:
    return (
        "[2026-08-29 09:40:00] server_args=ServerArgs(model_path='zai-org/GLM-5.3', tp_size=8, "
        f"context_length=1048576, disaggregation_mode='{role}', "
        "disaggregation_transfer_backend='mooncake', log_requests=True)\n"
    )


def _request(role: str, room: str, stamp: str, prompt: int, seconds: float) -> str:
    rid = f"{role[0]}{room[-6:]}"
    ids = f"rid='{rid}', bootstrap_host='10.0.0.1', bootstrap_port=8998, bootstrap_room={room}"
    if role == "prefill":
        finish, completion, first = "{'type': 'length', 'length': 0}", 1, ""
    else:
        finish, completion = "{'type': 'stop', 'matched': 151336}", 200
        first = f", 'first_token_latency': {seconds - 6:.3f}"
    return (
        f"[2026-08-29 10:46:40] Receive: obj=GenerateReqInput({ids})\n"
        f"[{stamp} TP0] ReqTimeStats(rid={rid}, bootstrap_room={room}, input_len={prompt}, "
        f"cached_input_len=0, output_len={completion}, attempts=0, type={role}): "
        f"queue_duration=1.00ms, forward_duration={seconds * 1000:.2f}ms, "
        "entry_time=1788000400.000\n"
        f"[{stamp}] Finish: obj=GenerateReqInput({ids}), out={{'text': '', 'meta_info': "
        f"{{'id': '{rid}', 'finish_reason': {finish}, 'prompt_tokens': {prompt}, "
        f"'completion_tokens': {completion}, 'cached_tokens': 0, "
        f"'e2e_latency': {seconds:.3f}{first}}}}}\n"
    )


def _case(folder: Path, *, warning: bool) -> Path:
    folder.mkdir()
    (folder / "prefill-0.log").write_text(
        _args("prefill")
        + "[2026-08-29 09:40:43] CommonKVBootstrapServer started successfully on 10.0.0.1:8998\n"
        + (TRUNCATION if warning else "")
        + _request("prefill", CUT_ROOM, "2026-08-29 10:46:57", LIMIT, 17.0)
        + _request("prefill", WHOLE_ROOM, "2026-08-29 10:46:50", WHOLE_PROMPT, 10.0)
    )
    (folder / "decode-0.log").write_text(
        _args("decode")
        + _request("decode", WHOLE_ROOM, "2026-08-29 10:46:58", WHOLE_PROMPT, 18.0)
        + _request("decode", CUT_ROOM, "2026-08-29 10:47:05", CUT_PROMPT, 25.0)
    )
    return folder


def test_the_truncation_warning_names_the_answer_decode_gave_over_the_cut_prompt(
    tmp_path: Path,
) -> None:
    summary = run_forensics(
        [str(_case(tmp_path / "case", warning=True))], tmp_path / "out", write_parquet=False
    ).summary
    exposed = summary["exposure"]["requests"]
    assert [(r["bootstrap_room"], r["node"]) for r in exposed] == [(CUT_ROOM, "decode-0")]
    (finding,) = [
        f
        for f in summary["findings"]
        if f["detector"] == "over_length_answered" and f["bootstrap_room"] == CUT_ROOM
    ]
    assert finding["severity"] == "critical"
    # Cut to the limit, a prompt of the limit's own length is whole.
    assert finding["evidence"]["longest_accepted"] == LIMIT
    assert finding["evidence"]["pool_tokens"] is None
    assert pool_unknown_line(summary) == ""  # judged by length, against the stated limit


def test_without_the_warning_the_pool_is_unknown_and_nothing_is_judged_by_length(
    tmp_path: Path,
) -> None:
    """The control: the same requests without the warning. Prefill's own figures (a finish and
    time stats for 681,274 tokens) say nothing of a pool; the run names no exposure, which is
    what the warning changes."""
    summary = run_forensics(
        [str(_case(tmp_path / "case", warning=False))], tmp_path / "out", write_parquet=False
    ).summary
    assert summary["exposure"]["count"] == 0
    assert not [f for f in summary["findings"] if f["detector"] == "over_length_answered"]
    assert pool_unknown_line(summary).startswith("prefill-0: no KV pool stated")


def test_an_answer_to_a_prompt_of_the_limit_s_own_length_is_whole(tmp_path: Path) -> None:
    """Blind review 49 D1: the scheduler cuts a prompt of `max_req_input_len` tokens or more to
    that many, so one of exactly that length loses nothing; its honest answer was named exposed
    with "takes prompts of up to 681,273 tokens". One token longer is still cut, and named."""
    folder = _case(tmp_path / "case", warning=True)
    at_limit, over_limit = "7000000000000011111", "7000000000000022222"
    with (folder / "decode-0.log").open("a") as log:
        log.write(_request("decode", at_limit, "2026-08-29 10:48:05", LIMIT, 20.0))
        log.write(_request("decode", over_limit, "2026-08-29 10:49:05", LIMIT + 1, 20.0))
    summary = run_forensics([str(folder)], tmp_path / "out", write_parquet=False).summary
    exposed = {r["bootstrap_room"] for r in summary["exposure"]["requests"]}
    assert exposed == {CUT_ROOM, over_limit}
