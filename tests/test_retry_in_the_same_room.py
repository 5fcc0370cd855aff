"""A router's retry in the same room, answered after the failed leg settled.

Decode's first leg for room 42 fails (prefill-0 never bootstraps it; decode's transfer fails
and it aborts with 500). The router retries the request in the same room on prefill-1, whose
pool is smaller than the 900,000-token prompt: prefill-1 refuses it and runs its one-token
stub, and decode answers 700 tokens from stale pages, ending 20 s after the failure. Judged
at the failure, the room's retry lines came late and its exposure was never named (blind
review 14d: exit 0, "LATE LINES"). A room whose decode side ended with no answer waits the
join window for such a retry.
"""

from __future__ import annotations

from pathlib import Path

from collector.forensics.driver import run_forensics
from tests.engine_lines import finish_line, prefill_start, refusal_line, server_args

DAY = "2026-11-02"
ROOM = "4793981895866140836"
IDS = "bootstrap_host='{host}', bootstrap_port=8998, bootstrap_room=" + ROOM


def _abort(at: str, rid: str, host: str, message: str) -> str:
    return (
        f"[{DAY} {at}] Finish: obj=GenerateReqInput(rid='{rid}', {IDS.format(host=host)}), "
        f"out={{'meta_info': {{'id': '{rid}', 'finish_reason': {{'type': 'abort', "
        f"'message': '{message}', 'status_code': 500}}, 'prompt_tokens': 900000, "
        "'completion_tokens': 0, 'cached_tokens': 0, 'e2e_latency': 300.2}}\n"
    )


def _case(folder: Path, retry_after_seconds: int) -> None:
    """The failed leg at 10:05:00, the retry's answer `retry_after_seconds` later."""
    end = f"10:05:{retry_after_seconds:02d}"
    timeout = f"KVTransferError(bootstrap_room={ROOM}): Request {ROOM} timed out after 300.0s"
    folder.mkdir()
    (folder / "prefill-0.log").write_text(
        server_args(DAY, "prefill")
        + prefill_start(DAY, "10.1.0.11", 2_000_000)
        + f"[{DAY} 10:05:00 TP0] Prefill bootstrap failed for request rank=0 req.rid='p1' "
        f"req.bootstrap_room={ROOM} with exception {timeout} in KVPoll.Bootstrapping\n"
        + _abort("10:05:00", "p1", "10.1.0.11", "Prefill bootstrap failed")
    )
    (folder / "prefill-1.log").write_text(
        server_args(DAY, "prefill")
        + prefill_start(DAY, "10.1.0.12", 681_280)
        + refusal_line(f"{DAY} 10:05:01", "p2", 900_000, 681_280)
        + finish_line(f"{DAY} 10:05:01", "p2", ROOM, 900_000, tokens=1, host="10.1.0.12", e2e=0.1)
    )
    (folder / "decode-0.log").write_text(
        server_args(DAY, "decode")
        + f"[{DAY} 10:05:00 TP0] Decode transfer failed for request rank=0 "
        f"decode_req.req.rid='d1' decode_req.req.bootstrap_room={ROOM} with exception "
        f"{timeout} in KVPoll.WaitingForInput\n"
        + _abort("10:05:00", "d1", "10.1.0.11", "Decode transfer failed")
        + finish_line(f"{DAY} {end}", "d2", ROOM, 900_000, host="10.1.0.12", e2e=19.0)
    )


def test_a_retry_answered_after_the_failed_leg_settled_is_named_exposed(tmp_path: Path) -> None:
    _case(tmp_path / "case", retry_after_seconds=20)
    summary = run_forensics([str(tmp_path / "case")], tmp_path / "out", write_parquet=False).summary
    exposed = summary["exposure"]["requests"]
    assert [(r["bootstrap_room"], r["rid"]) for r in exposed] == [(ROOM, "d2")]
    assert summary["requests"]["late_lines"] == 0
