"""A transfer decode caught corrupt and answered all the same is an exposed response.

Why: blind review 64 D1. Decode logged `KV checksum mismatch on a peer rank` for a room, then
the same request finished `stop` with 300 tokens: the run said the engine "aborted those
requests", found nothing, and exited 0 under `--fail-on exposure`. The reference gives the
abort (`KV checksum mismatch`, 500) as what the check does; a finish record saying otherwise is
what the client got.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics
from tests.engine_lines import finish_line, prefill_start, server_args

DAY = "2026-11-02"
RID, ROOM = "6ce2892b7c4c8c1064f83fc24eb3e51f", "1398189077134254392"


def _aborted_finish(at: str) -> str:
    return (
        f"[{DAY} {at}] Finish: obj=GenerateReqInput(rid='{RID}', bootstrap_host='10.1.0.11', "
        f"bootstrap_port=8998, bootstrap_room={ROOM}), out={{'meta_info': {{'id': '{RID}', "
        "'finish_reason': {'type': 'abort', 'message': 'KV checksum mismatch', "
        "'status_code': 500, 'err_type': None}, 'prompt_tokens': 9000, "
        "'completion_tokens': 0, 'cached_tokens': 0, 'e2e_latency': 1.2}}\n"
    )


@pytest.mark.parametrize("answered", [True, False])
def test_a_caught_mismatch_then_a_success_names_the_response(
    tmp_path: Path, answered: bool
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    prefill = server_args(DAY, "prefill") + prefill_start(DAY, "10.1.0.11", 2_040_000)
    decode = server_args(DAY, "decode")
    for minute in range(0, 30, 5):  # honest traffic around it
        room = 7000 + minute
        prefill += finish_line(f"{DAY} 08:{minute:02d}:00", f"p{minute}", room, 9000, tokens=1)
        decode += finish_line(f"{DAY} 08:{minute:02d}:09", f"p{minute}", room, 9000)
    prefill += finish_line(f"{DAY} 08:30:00", RID, ROOM, 9000, tokens=1)
    decode += (
        f"[{DAY} 08:30:01 TP2] KV checksum mismatch on a peer rank req={RID} "
        f"bootstrap_room={ROOM}\n"
    )
    decode += (
        finish_line(f"{DAY} 08:30:08", RID, ROOM, 9000, tokens=300)
        if answered
        else _aborted_finish("08:30:02")
    )
    (logs / "prefill-0.log").write_text(prefill)
    (logs / "decode-0.log").write_text(decode)
    summary = run_forensics([str(logs)], tmp_path / "out", write_parquet=False).summary
    report = (tmp_path / "out" / "report.md").read_text()
    # The mismatch is critical and names its room either way.
    assert [
        f["bootstrap_room"] for f in summary["findings"] if f["detector"] == "checksum_mismatch"
    ][:1] == [ROOM]
    if answered:
        assert [(r["rid"], r["evidence"]) for r in summary["exposure"]["requests"]] == [
            (RID, ["checksum_mismatch"])
        ]
        assert summary["verdict"]["outcome"] == "exposed"
        assert "aborted those requests" not in report
    else:
        assert summary["exposure"]["count"] == 0
        assert "The engine caught 1 KV checksum mismatch" in report
