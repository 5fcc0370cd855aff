"""Prefix-cache hits stated only in a prefill's single-sequence batch lines.

Blind review 40 D2: a prefill that logs no request line still prints `Prefill batch, #new-seq: 1,
#new-token: 586, #cached-token: 793600` for a request it prefilled alone, while decode states
`cached_tokens: 0` for it. Read as nothing cached, the honest 794,186-token answer in 0.35 s was
an exposure (7 false criticals). A line of exactly the prompt's length while the request was in
flight says it was prefilled over that cached prefix; an answer with no such line (the leak's:
prefill refused it) is still named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collector.events import Event
from collector.forensics.driver import run_forensics
from collector.state.prefill_hits import PREFILL_HIT, PrefillHits, prefill_hit
from tests.engine_lines import prefill_start, server_args

DAY = "2026-09-14"
PROMPT = 794_186
CACHED = 793_600


def _decode_answer(at: str, room: int, prompt: int) -> str:
    rid = f"{room:032x}"
    obj = (
        f"obj=GenerateReqInput(rid='{rid}', bootstrap_host='10.1.0.11', bootstrap_port=8998, "
        f"bootstrap_room={room})"
    )
    meta = (
        f"{{'id': '{rid}', 'finish_reason': {{'type': 'stop'}}, 'prompt_tokens': {prompt}, "
        "'completion_tokens': 300, 'cached_tokens': 0, 'first_token_latency': 0.35, "
        "'e2e_latency': 9.8}"
    )
    return f"[{DAY} {at}] Receive: {obj}\n[{DAY} {at}] Finish: {obj}, out={{'meta_info': {meta}}}\n"


def _batch(at: str, new: int, cached: int, seqs: int = 1) -> str:
    return (
        f"[{DAY} {at} TP0] Prefill batch, #new-seq: {seqs}, #new-token: {new}, "
        f"#cached-token: {cached}, token usage: 0.80, #running-req: 0, #queue-req: 0, "
        "#pending-token: 0, #bootstrap-req: 0, #inflight-req: 0, #optimistic-req: 0, "
        "cuda graph: False, input throughput (token/s): 1674.00\n"
    )


def _flagged_rooms(tmp_path: Path, answers: str, batches: str) -> set[str]:
    case = tmp_path / "case"
    case.mkdir()
    (case / "decode-0.log").write_text(server_args(DAY, "decode") + answers)
    (case / "prefill-0.log").write_text(
        server_args(DAY, "prefill") + prefill_start(DAY, "10.1.0.11", 1_000_000) + batches
    )
    summary: dict[str, Any] = run_forensics(
        [str(case)], tmp_path / "out", write_parquet=False
    ).summary
    # Flagged, not exposed: a 1,000,000-token prefill pool takes these prompts, so no refusal
    # for length can have sent one to decode (blind review 47); the timing tell stays a warning.
    return {
        str(f["bootstrap_room"])
        for f in summary["findings"]
        if f["detector"] == "impossibly_fast_prefill" and f["severity"] != "info"
    }


def test_a_single_sequence_batch_line_of_the_prompt_s_length_states_its_hits(
    tmp_path: Path,
) -> None:
    answers = _decode_answer("10:00:05", 1001, PROMPT) + _decode_answer("11:00:05", 1002, PROMPT)
    # Room 1001 was prefilled over its cached prefix (its line beside it); room 1002 had no
    # line: nothing says it was prefilled at all.
    assert _flagged_rooms(tmp_path, answers, _batch("10:00:04", PROMPT - CACHED, CACHED)) == {
        "1002"
    }


def test_a_line_of_another_length_a_batch_of_several_or_an_hour_away_states_nothing(
    tmp_path: Path,
) -> None:
    answers = (
        _decode_answer("10:00:05", 2001, PROMPT)
        + _decode_answer("11:00:05", 2002, PROMPT)
        + _decode_answer("12:00:05", 2003, PROMPT)
    )
    batches = (
        _batch("10:00:04", PROMPT - CACHED + 1, CACHED)  # one token longer: another prompt
        + _batch("11:00:04", PROMPT - CACHED, CACHED, seqs=2)  # two requests: whose hits?
        + _batch("13:30:00", PROMPT - CACHED, CACHED)  # long after 2003 was answered
    )
    assert _flagged_rooms(tmp_path, answers, batches) == {"2001", "2002", "2003"}


def test_hits_are_kept_by_length_and_forgotten_after_an_hour() -> None:
    hits = PrefillHits()
    assert prefill_hit("p0", 10.0, "p.log:1", 1, 586, 0) is None  # nothing cached
    assert prefill_hit("p0", 10.0, "p.log:1", 3, 586, 9) is None  # several sequences
    hit = prefill_hit("p0", 10.0, "p.log:1", 1, 586, 793_600)
    assert hit is not None and hit.kind == PREFILL_HIT
    hits.note(hit)
    raw = {"new_seq": 1, "new_token": 10, "cached_token": 90}
    hits.note(Event("prefill_batch", "p1", 20.0, "q.log:7", raw))
    assert hits.cached(PROMPT, 0.0, 15.0) == 793_600
    assert hits.cached(PROMPT, 11.0, 15.0) is None
    assert hits.cached(PROMPT, 0.0, 15.0, frozenset({"p1"})) is None
    assert hits.cached(100, 0.0, 30.0, frozenset({"p1"})) == 90
    hits.note(Event("prefill_batch", "p1", 4000.0, "q.log:9", raw))
    assert len(hits) == 1 and hits.cached(PROMPT, 0.0, 5000.0) is None
