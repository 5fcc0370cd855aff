"""Decode answers given before the first line of their prefill's log.

A prefill's oldest rotation deleted, or its capture begun later than decode's: every answer
before its first line met no known pool and was judged by none, and said nowhere (blind review
8a: 15 of 36 and 9 of 22 exposures unseen, exit 0). A log that begins mid-run tells the pool its
engine had been running with; such answers are judged again at the end of the input against it.
A log that begins with its engine's start-up tells of a process that did not exist before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from collector.forensics.driver import run_forensics
from collector.forensics.report import pool_unknown_line
from detectors.pipeline import PipelineConfig
from tests.engine_lines import finish_line, prefill_start, refusal_line, server_args

DAY = "2026-08-27"
POOL = 681_280
# Rooms answered before the prefill's log begins (hours 6-9) and after it (hour 13).
EARLY_EXPOSED = {f"5502{n:015d}": (6 + n, 790_000 + n) for n in range(4)}
EARLY_HONEST = {f"5503{n:015d}": (6 + n, 30_000 + n) for n in range(4)}
LATE_EXPOSED = {"5504000000000000000": (13, 800_000)}


def _finish(hour: int, room: str, prompt: int) -> str:
    return finish_line(f"{DAY} {hour:02d}:20:00", f"{int(room):032x}", room, prompt)


def _refusal(hour: int, room: str, prompt: int) -> str:
    return refusal_line(f"{DAY} {hour:02d}:19:58", f"{int(room):032x}", prompt, POOL)


def _summary(
    tmp_path: Path,
    prefill_begins: str,
    *,
    server_info: bool = True,
    config: PipelineConfig | None = None,
) -> dict[str, Any]:
    case = tmp_path / "case"
    case.mkdir()
    answers = sorted({**EARLY_EXPOSED, **EARLY_HONEST, **LATE_EXPOSED}.items(), key=lambda i: i[1])
    (case / "decode-0.log").write_text(
        server_args(DAY, "decode") + "".join(_finish(h, room, p) for room, (h, p) in answers)
    )
    batch = (
        f"[{DAY} 12:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, "
        "token usage: 0.01, #running-req: 0, #queue-req: 0, #pending-token: 0, "
        "#bootstrap-req: 0, #inflight-req: 0, #optimistic-req: 0, cuda graph: False, "
        "input throughput (token/s): 24000.00\n"
    )
    if prefill_begins == "mid-run":
        head = batch
    else:  # its engine starts at noon: before then, another prefilled decode's prompts
        head = server_args(DAY, "prefill").replace("00:00:00", "12:00:00") + prefill_start(
            DAY, "10.1.0.11", POOL
        ).replace("00:00:4", "12:00:4")
    ((room, (hour, prompt)),) = LATE_EXPOSED.items()
    (case / "prefill-0.log").write_text(head + _refusal(hour, room, prompt))
    if server_info:
        (case / "prefill-0.server_info.json").write_text(
            json.dumps(
                {
                    "model_path": "zai-org/GLM-5.3",
                    "disaggregation_mode": "prefill",
                    "context_length": 1048576,
                    "max_total_num_tokens": POOL,
                    "version": "0.5.19",
                }
            )
        )
    summary: dict[str, Any] = run_forensics([str(case)], tmp_path / "out", config=config).summary
    return summary


def test_answers_before_a_log_begun_mid_run_meet_the_pool_it_ran_with(tmp_path: Path) -> None:
    summary = _summary(tmp_path, "mid-run")
    exposed = {r["bootstrap_room"] for r in summary["exposure"]["requests"]}
    assert exposed == set(EARLY_EXPOSED) | set(LATE_EXPOSED)
    assert summary["exposure"]["first"] == f"{DAY}T06:20:00.000Z"
    early = [
        f
        for f in summary["findings"]
        if f["detector"] == "over_length_answered" and f["bootstrap_room"] in EARLY_EXPOSED
    ]
    assert len(early) == len(EARLY_EXPOSED)
    assert all(f["evidence"]["pool_read_after_answer"] for f in early)
    assert all("after this answer" in f["summary"] for f in early)


def test_a_prefill_started_after_an_answer_did_not_prefill_it(tmp_path: Path) -> None:
    summary = _summary(tmp_path, "start-up")
    exposed = {r["bootstrap_room"] for r in summary["exposure"]["requests"]}
    assert exposed == set(LATE_EXPOSED)
    assert not any(
        f["detector"] == "over_length_answered" and f["bootstrap_room"] in EARLY_EXPOSED
        for f in summary["findings"]
    )


def test_answers_before_a_log_begun_mid_run_meet_the_limit_its_refusals_state(
    tmp_path: Path,
) -> None:
    """Blind review 59 D2: no start-up line or snapshot gives the prefill's pool, only the
    limit its refusal states hours later; the answers decode gave before its log begins were
    judged by no pool, and the over-length ones went unnamed."""
    summary = _summary(tmp_path, "mid-run", server_info=False)
    exposed = {r["bootstrap_room"] for r in summary["exposure"]["requests"]}
    assert exposed == set(EARLY_EXPOSED) | set(LATE_EXPOSED)
    early = [
        f
        for f in summary["findings"]
        if f["detector"] == "over_length_answered" and f["bootstrap_room"] in EARLY_EXPOSED
    ]
    # Only the limit is known: no pool is said.
    assert all(
        f"up to {POOL - 7:,} tokens (its engine's stated limit" in f["summary"] for f in early
    )


def test_answers_before_a_prefill_s_start_up_are_said_judged_by_no_pool(tmp_path: Path) -> None:
    """Blind review 59 D1: a prefill whose logs begin with its start-up after decode's first
    answers; another process prefilled those, of a pool no line tells, and the all-clear over
    them said nothing of it."""
    summary = _summary(tmp_path, "start-up")
    answers = len(EARLY_EXPOSED) + len(EARLY_HONEST)
    assert summary["nodes"]["prefill-0"]["answered_before_start"] == answers
    said = pool_unknown_line(summary)
    assert said.startswith(
        f"prefill-0 before its start-up at {DAY}T12:00:00.000Z ({answers} answers came before it)"
    )


def test_a_pool_that_started_after_an_answer_is_no_proof_it_took_the_prompt(
    tmp_path: Path,
) -> None:
    """Blind review 59 D1: with the model's physical floor configured, a leaked answer given
    before its prefill's logs begin with a start-up onto a pool over the context was too fast,
    and said a warning: "prefill-0's pool took prompts of up to ...", the pool of a process
    that did not yet run."""
    case = tmp_path / "case"
    case.mkdir()
    # Two minutes before the start-up: judged once it is read (the ledger's join window).
    room = "5505000000000000000"
    (case / "decode-0.log").write_text(
        server_args(DAY, "decode")
        + finish_line(f"{DAY} 11:58:00", f"{int(room):032x}", room, 790_000)
    )
    (case / "prefill-0.log").write_text(
        server_args(DAY, "prefill").replace("00:00:00", "12:00:00")
        + prefill_start(DAY, "10.1.0.11", 2_040_000).replace("00:00:4", "12:00:4")
    )
    # The physics of a GLM-5.3-class model: 21.9 s is too fast for a 790k-token prompt.
    config = PipelineConfig(
        detectors={
            "impossibly_fast_prefill": {"model_active_params": 4.0e11, "attention_layers": 80}
        }
    )
    summary = run_forensics([str(case)], tmp_path / "out", config=config).summary
    (too_fast,) = [f for f in summary["findings"] if f["detector"] == "impossibly_fast_prefill"]
    assert too_fast["bootstrap_room"] == room
    assert too_fast["severity"] == "critical" and too_fast["exposure"]
    assert "pool took prompts" not in too_fast["summary"]
