"""What the logs cover includes every exposure they date.

Lines are stamped to the second; a request's answer is dated to the millisecond it was sent
(`response_sent_to_client_ts`). The last exposure came 0.8 s after "the logs end", and the
status said it came "0 s before" it (blind review 9b).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from collector.forensics.driver import run_forensics
from tests.engine_lines import prefill_start, server_args

DAY = "2026-08-27"
SENT = datetime(2026, 8, 27, 10, 0, 0, 815_000, tzinfo=UTC).timestamp()


def test_the_logs_cover_the_last_exposure_they_date(tmp_path: Path) -> None:
    rid, room = "a" * 32, "5523401987766512300"
    (tmp_path / "prefill-0.log").write_text(
        server_args(DAY, "prefill")
        + prefill_start(DAY, "10.1.0.11", 681_280)
        + f"[{DAY} 09:59:59 TP0] Input length (912384 tokens) exceeds the maximum allowed "
        f"length (681274 tokens). Use a shorter input or enable --allow-auto-truncate., "
        f"self.rid='{rid}'\n"
    )
    (tmp_path / "decode-0.log").write_text(
        server_args(DAY, "decode") + f"[{DAY} 10:00:00] Finish: obj=GenerateReqInput(rid='{rid}', "
        f"bootstrap_host='10.1.0.11', bootstrap_port=8998, bootstrap_room={room}), "
        f"out={{'meta_info': {{'id': '{rid}', 'finish_reason': {{'type': 'stop'}}, "
        "'prompt_tokens': 912384, 'completion_tokens': 612, 'cached_tokens': 0, "
        f"'e2e_latency': 1.2, 'response_sent_to_client_ts': {SENT}}}}}\n"
    )
    summary = run_forensics([str(tmp_path)], tmp_path / "out", write_parquet=False).summary
    assert summary["exposure"]["last"] == "2026-08-27T10:00:00.815Z"
    assert summary["input"]["last_time"] == "2026-08-27T10:00:00.815Z"
