"""A prefill refusal read after decode's last line of the same request still joins it.

Blind review 49 D2: a 0.5.20-style deployment (release unknown: no snapshot) whose prefill logs
no request lines refused three over-length prompts, and decode failed each transfer and ended
it with an abort in the same second. The refusal names only prefill's rid; decode's room is
joined to it by the prompt's length, near decode's start. Read after decode's lines (the same
second, the prefill's file second in the merge), no room took it: "NOT JUDGED: 3 requests
prefill refused ... joined to no decode answer", and a critical pool finding. With prefill's
clock a second behind, the same logs joined, and the run was clean. A clock under a minute
behind, which the README says every join tolerates, did not join either.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics
from collector.forensics.report import ambiguous_refusals_line

LIMIT = 681_274
_ABORTED = (
    "{'type': 'abort', 'message': 'Failed due to an unknown reason from another rank', "
    "'status_code': 500, 'err_type': None}"
)
_ANSWERED = "{'type': 'stop', 'matched': 151336}"
REFUSED = (
    ("a1" * 16, "b1" * 16, "5612107234864407606", 681_274, "10:34:00"),
    ("a2" * 16, "b2" * 16, "7118542333137851693", 700_000, "10:37:00"),
    ("a3" * 16, "b3" * 16, "7614328899447117767", 800_000, "10:40:00"),
)


def _args(role: str) -> str:
    return (
        "[2026-09-01 10:00:00] server_args={'model_path': 'zai-org/GLM-5.3', 'tp_size': 2, "
        f"'log_requests': {role == 'decode'}, 'disaggregation_mode': '{role}', "
        "'disaggregation_transfer_backend': 'mooncake', 'disaggregation_bootstrap_port': 8998}\n"
    )


def _capacity(pool: int) -> str:
    return (
        f"[2026-09-01 10:01:10 TP0] max_total_num_tokens={pool}, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=128, context_len=1048576, "
        "available_gpu_mem=8.95 GB\n"
    )


def _moved(clock: str, seconds: int) -> str:
    return (datetime.strptime(clock, "%H:%M:%S") + timedelta(seconds=seconds)).strftime("%H:%M:%S")


def _case(
    folder: Path,
    prefill_ahead: int,
    answered: bool = False,
    refused: tuple[tuple[str, str, str, int, str], ...] = REFUSED,
) -> Path:
    folder.mkdir()
    prefill = [_args("prefill"), _capacity(681_280)]
    decode = [_args("decode"), _capacity(2_048_000)]
    for prefill_rid, decode_rid, room, prompt, clock in refused:
        prefill.append(
            f"[2026-09-01 {_moved(clock, prefill_ahead)} TP0] Input length ({prompt} tokens) "
            f"exceeds the maximum allowed length ({LIMIT} tokens). Use a shorter input or enable "
            f"--allow-auto-truncate., self.rid='{prefill_rid}'\n"
        )
        ids = f"rid='{decode_rid}', bootstrap_host='10.0.0.5', bootstrap_port=8998, "
        ids += f"bootstrap_room={room}"
        decode += [
            f"[2026-09-01 {clock}] Receive: obj=GenerateReqInput({ids})\n",
            f"[2026-09-01 {clock} TP0] Decode transfer failed for request rank=0 "
            f"decode_req.req.rid='{decode_rid}' decode_req.req.bootstrap_room={room} with "
            f"exception KVTransferError(bootstrap_room={room}): Failed due to an unknown reason "
            "from another rank\n",
            f"[2026-09-01 {clock}] Finish: obj=GenerateReqInput({ids}), out={{'meta_info': "
            f"{{'id': '{decode_rid}', 'finish_reason': {_ANSWERED if answered else _ABORTED}, "
            f"'prompt_tokens': {prompt}, 'completion_tokens': {200 if answered else 0}, "
            "'cached_tokens': 0, 'e2e_latency': 0.2}}\n",
        ]
        if answered:  # the leak: no transfer failed, decode answered over stale pages
            del decode[-2]
    (folder / "prefill-0.log").write_text("".join(prefill))
    (folder / "decode-0.log").write_text("".join(decode))
    return folder


@pytest.mark.parametrize(
    "prefill_ahead", [0, 1, -45], ids=["same-second", "ahead-1s", "behind-45s"]
)
def test_a_refusal_of_a_request_decode_already_ended_joins_it(
    tmp_path: Path, prefill_ahead: int
) -> None:
    summary = run_forensics(
        [str(_case(tmp_path / "case", prefill_ahead))], tmp_path / "out", write_parquet=False
    ).summary
    assert summary["requests"]["refused_without_decode"]["count"] == 0
    assert summary["verdict"]["outcome"] == "none_found"
    assert not [f for f in summary["findings"] if f["severity"] == "critical"]


def test_the_answers_of_refusals_read_after_them_are_rejected_then_served(tmp_path: Path) -> None:
    """The leak itself, prefill's clock 45 s behind: each answer is named with its refusal, and
    no refusal is said to have reached no decode node (review 49 D3: "NO DECODE SIDE: 3")."""
    summary = run_forensics(
        [str(_case(tmp_path / "case", -45, answered=True))], tmp_path / "out", write_parquet=False
    ).summary
    assert summary["requests"]["refused_without_decode"]["count"] == 0
    rooms = {room for _, _, room, _, _ in REFUSED}
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == rooms
    joined = {
        f["bootstrap_room"] for f in summary["findings"] if f["detector"] == "rejected_then_served"
    }
    assert joined == rooms


def test_an_answer_ending_35_minutes_after_its_refusal_still_meets_it(tmp_path: Path) -> None:
    """Blind review 49 D3: a decode answer tells its prompt's length, by which a refusal naming
    prefill's rid alone is joined, only when it ends; the refusal had waited 30 minutes, and a
    generation ending 35 minutes after it was "NO DECODE SIDE" (the README says a long
    generation an hour after its refusal still meets it)."""
    folder = _case(tmp_path / "case", 0, answered=True)
    decode = folder / "decode-0.log"
    lines = decode.read_text().splitlines(keepends=True)
    _, decode_rid, room, _, clock = REFUSED[0]
    late = _moved(clock, 35 * 60)
    (finish,) = [line for line in lines if decode_rid in line and "Finish" in line]
    # Batch lines each minute: the logs' time moves on while the answer is written.
    busy = [
        f"[2026-09-01 {_moved(clock, minute * 60)} TP0] Decode batch, #running-req: 1, "
        "#token: 700000, token usage: 0.34, gen throughput (token/s): 20.00, #queue-req: 0\n"
        for minute in range(7, 35)
    ]
    moved = finish.replace(f"[2026-09-01 {clock}] Finish", f"[2026-09-01 {late}] Finish")
    decode.write_text("".join([line for line in lines if line is not finish] + busy + [moved]))
    assert f"{late}] Finish" in decode.read_text()
    summary = run_forensics([str(folder)], tmp_path / "out", write_parquet=False).summary
    assert summary["requests"]["refused_without_decode"]["count"] == 0
    joined = {
        f["bootstrap_room"] for f in summary["findings"] if f["detector"] == "rejected_then_served"
    }
    assert room in joined


def test_refusals_several_answers_of_their_length_could_be_are_not_said_unanswered(
    tmp_path: Path,
) -> None:
    """Blind review 49 D3: two refusals of one length seconds apart, each answered; which answer
    is whose is not known, so neither is joined, and both were said "joined to no decode
    answer" (NO DECODE SIDE) beside the two exposures they stood for."""
    twins = (
        ("c1" * 16, "d1" * 16, "5000000000000000001", 700_000, "10:34:00"),
        ("c2" * 16, "d2" * 16, "5000000000000000002", 700_000, "10:34:05"),
    )
    summary = run_forensics(
        [str(_case(tmp_path / "case", 0, answered=True, refused=twins))],
        tmp_path / "out",
        write_parquet=False,
    ).summary
    rooms = {room for _, _, room, _, _ in twins}
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == rooms
    assert summary["requests"]["refused_without_decode"]["count"] == 0
    assert summary["requests"]["refusals_matched_ambiguously"] == 2
    assert ambiguous_refusals_line(summary).startswith("2 refusals naming prefill's rid alone")
