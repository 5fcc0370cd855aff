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
from collector.state.prefill_hits import PREFILL_HIT, ChunkRuns, PrefillHits, prefill_hit
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


def _batch(at: str, new: int, cached: int, seqs: int = 1, rank: int | None = None) -> str:
    ranks = "TP0" if rank is None else f"DP{rank} TP{rank} EP{rank}"
    return (
        f"[{DAY} {at} {ranks}] Prefill batch, #new-seq: {seqs}, #new-token: {new}, "
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


CHUNK = 16_384
# A prompt whose uncached part is longer than a chunk: prefilled in three chunks.
CHUNKED_CACHED = PROMPT - 2 * CHUNK - 1_418


def test_a_chunked_prefill_states_its_hits_over_its_rank_s_lines(tmp_path: Path) -> None:
    """Blind review 60 D2: HiCache hits with more than a chunk left to prefill; the first
    chunk's line states the hit, the others only their chunk, and other DP ranks' lines come
    between them. 66 honest answers were named exposed with the model configured."""
    answers = (
        _decode_answer("10:00:09", 3001, PROMPT)
        + _decode_answer("11:00:09", 3002, PROMPT)
        + _decode_answer("12:00:09", 3003, PROMPT)
    )
    batches = (
        # 3001: its chunks on DP4, DP2's lines between them.
        _batch("10:00:04", CHUNK, CHUNKED_CACHED, rank=4)
        + _batch("10:00:05", 4_000, 0, rank=2)
        + _batch("10:00:06", CHUNK, 0, rank=4)
        + _batch("10:00:07", 900, 0, rank=2)
        + _batch("10:00:08", 1_418, 0, rank=4)
        # 3002: a batch of two on its rank between its chunks: whose tokens are whose?
        + _batch("11:00:04", CHUNK, CHUNKED_CACHED, rank=4)
        + _batch("11:00:06", CHUNK, 0, seqs=2, rank=4)
        + _batch("11:00:08", 1_418, 0, rank=4)
        # 3003: its last chunk follows one shorter than the first: not this run's.
        + _batch("12:00:04", CHUNK, CHUNKED_CACHED, rank=4)
        + _batch("12:00:06", CHUNK - 1, 0, rank=4)
        + _batch("12:00:08", 1_419, 0, rank=4)
    )
    assert _flagged_rooms(tmp_path, answers, batches) == {"3002", "3003"}


def test_chunk_runs_add_up_each_rank_s_chunks() -> None:
    runs = ChunkRuns()
    steps = [
        (10.0, 4, 1, CHUNK, 300_000),
        (11.0, 2, 1, CHUNK, 0),  # another rank: no run there
        (12.0, 4, 1, CHUNK, 0),
        (13.0, 4, 1, 500, 0),
        (14.0, 4, 1, 500, 0),  # after a part chunk: the run had ended
    ]
    stated = [
        runs.step("p0", t, "p.log", rank, seqs, new, cached) for t, rank, seqs, new, cached in steps
    ]
    said = [
        None if hit is None else (hit.fields["new_tokens"], hit.fields["cached_tokens"])
        for hit in stated
    ]
    assert said == [
        (CHUNK, 300_000),
        None,
        (2 * CHUNK, 300_000),
        (2 * CHUNK + 500, 300_000),
        None,
    ]
