"""A prefill node whose logs are missing, named only by decode's `bootstrap_host`.

Blind review 4b: four prefill nodes, one log not collected; the only exposed answers went
through it. Its pool is unknown, so another node's pool does not judge its requests (it may
have been larger), and the run said "no exposed responses found" with exit 0. Here the prompts
longer than every prefill pool read that met it are warnings naming the host, and the verdict is
not an all-clear; a prompt within the pools read is not, and once that node's log is read its
own pool judges.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from collector.forensics.driver import run_forensics
from detectors.pipeline import PipelineConfig
from detectors.pool_in_force import PREFILL_HOST_UNREAD
from tests.engine_lines import prefill_start, server_args

DAY = "2026-09-01"
READ_HOST, UNREAD_HOST = "10.0.0.11", "10.0.0.14"
HONEST_ROOM, OVER_ROOM, WITHIN_ROOM = (
    "5000000000000000001",
    "5000000000000000002",
    "5000000000000000003",
)


def _request(role: str, host: str, room: str, minute: int, prompt: int, seconds: float) -> str:
    rid = f"{role[0]}{room[-6:]}"
    ids = f"rid='{rid}', bootstrap_host='{host}', bootstrap_port=8998, bootstrap_room={room}"
    if role == "prefill":
        finish, completion = "{'type': 'length', 'length': 0}", 1
    else:
        finish, completion = "{'type': 'stop', 'matched': 151336}", 200
    return (
        f"[2026-09-01 01:{minute:02d}:00] Receive: obj=GenerateReqInput({ids})\n"
        f"[2026-09-01 01:{minute:02d}:30] Finish: obj=GenerateReqInput({ids}), out={{'text': '', "
        f"'meta_info': {{'id': '{rid}', 'finish_reason': {finish}, 'prompt_tokens': {prompt}, "
        f"'completion_tokens': {completion}, 'cached_tokens': 0, 'e2e_latency': {seconds}}}}}\n"
    )


def _case(folder: Path, *, unread_node_logged: bool) -> Path:
    folder.mkdir()
    (folder / "prefill-0.log").write_text(
        server_args(DAY, "prefill")
        + prefill_start(DAY, READ_HOST, 681_280)
        + _request("prefill", READ_HOST, HONEST_ROOM, 1, 400_000, 20.0)
    )
    if unread_node_logged:
        (folder / "prefill-1.log").write_text(
            server_args(DAY, "prefill") + prefill_start(DAY, UNREAD_HOST, 2_040_000)
        )
    (folder / "decode-0.log").write_text(
        server_args(DAY, "decode")
        + _request("decode", READ_HOST, HONEST_ROOM, 1, 400_000, 25.0)
        # Longer than prefill-0 takes, 6 s end to end: no physical floor says anything.
        + _request("decode", UNREAD_HOST, OVER_ROOM, 2, 874_366, 6.0)
        + _request("decode", UNREAD_HOST, WITHIN_ROOM, 3, 500_000, 26.0)
    )
    return folder


def test_an_answer_longer_than_every_pool_read_through_an_unread_prefill_host_is_said(
    tmp_path: Path,
) -> None:
    case = _case(tmp_path / "case", unread_node_logged=False)
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert summary["exposure"]["count"] == 0  # its pool may have been larger: no exposure
    warned = [
        f for f in summary["findings"] if f["evidence"].get("pool_basis") == PREFILL_HOST_UNREAD
    ]
    assert [(f["bootstrap_room"], f["severity"]) for f in warned] == [(OVER_ROOM, "warning")]
    assert warned[0]["evidence"]["bootstrap_host"] == f"{UNREAD_HOST}:8998"
    assert warned[0]["evidence"]["largest_longest_accepted"] < 874_366
    assert summary["requests"]["prefill_host_unread"] == 1

    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", "--quiet", "--no-parquet"]
        + [str(case), "--out", str(tmp_path / "cli"), "--fail-on", "exposure"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr  # not an all-clear
    assert f"prefilled on {UNREAD_HOST}:8998, which no log read announced" in done.stderr


def test_once_that_node_s_log_is_read_its_own_pool_judges(tmp_path: Path) -> None:
    case = _case(tmp_path / "case", unread_node_logged=True)
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert summary["requests"]["prefill_host_unread"] == 0
    assert summary["exposure"]["count"] == 0
    # The 874,366-token prompt met a 2,040,000-token pool: nothing to say of it.
    assert not [f for f in summary["findings"] if f["detector"] == "over_length_answered"]


def test_a_too_fast_answer_through_an_unread_prefill_host_is_no_all_clear(
    tmp_path: Path,
) -> None:
    """Blind review 65 D1: a leaking prefill's logs left out, the leaks' prompts shorter than
    the pools read. Each answer came 35x faster than any prefill could, through a host no log
    read announced: a warning each ("its pool is not known"), and the run "no exposed
    responses found", exit 0. They are counted with the long ones: not an all-clear."""
    case = tmp_path / "case"
    case.mkdir()
    (case / "prefill-0.log").write_text(
        server_args(DAY, "prefill")
        + prefill_start(DAY, READ_HOST, 681_280)
        + _request("prefill", READ_HOST, HONEST_ROOM, 1, 400_000, 20.0)
    )
    fast = _request("decode", UNREAD_HOST, WITHIN_ROOM, 3, 500_000, 6.0).replace(
        "'e2e_latency': 6.0", "'e2e_latency': 6.0, 'first_token_latency': 0.1"
    )
    (case / "decode-0.log").write_text(
        server_args(DAY, "decode")
        + _request("decode", READ_HOST, HONEST_ROOM, 1, 400_000, 25.0)
        + fast
    )
    config = PipelineConfig(detectors={"impossibly_fast_prefill": {"model_active_params": 3.2e10}})
    summary = run_forensics(
        [str(case)], tmp_path / "out", config=config, write_parquet=False
    ).summary
    assert summary["exposure"]["count"] == 0  # a cache hit decode states as none looks alike
    (warned,) = [
        f for f in summary["findings"] if f["evidence"].get("pool_basis") == PREFILL_HOST_UNREAD
    ]
    assert (warned["detector"], warned["bootstrap_room"]) == (
        "impossibly_fast_prefill",
        WITHIN_ROOM,
    )
    assert summary["requests"]["prefill_host_unread"] == 1
    assert summary["verdict"]["outcome"] == "not_judged"
    assert "came faster than a prefill of their prompt could" in summary["verdict"]["said"]
