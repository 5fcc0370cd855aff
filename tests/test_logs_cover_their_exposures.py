"""What the logs cover includes every exposure they date.

Lines are stamped to the second; a request's answer is dated to the millisecond it was sent
(`response_sent_to_client_ts`). The last exposure came 0.8 s after "the logs end", and the
status said it came "0 s before" it (blind review 9b).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from collector.forensics.driver import run_forensics
from tests.engine_lines import finish_line, prefill_start, refusal_line, server_args

DAY = "2026-08-27"
SENT = datetime(2026, 8, 27, 10, 0, 0, 815_000, tzinfo=UTC).timestamp()


def test_the_logs_cover_the_last_exposure_they_date(tmp_path: Path) -> None:
    rid, room = "a" * 32, "5523401987766512300"
    (tmp_path / "prefill-0.log").write_text(
        server_args(DAY, "prefill")
        + prefill_start(DAY, "10.1.0.11", 681_280)
        + refusal_line(f"{DAY} 09:59:59", rid, 912_384, 681_280)
    )
    (tmp_path / "decode-0.log").write_text(
        server_args(DAY, "decode")
        + finish_line(
            f"{DAY} 10:00:00",
            rid,
            room,
            912_384,
            tokens=612,
            e2e=1.2,
            extra=f", 'response_sent_to_client_ts': {SENT}",
        )
    )
    summary = run_forensics([str(tmp_path)], tmp_path / "out", write_parquet=False).summary
    assert summary["exposure"]["last"] == "2026-08-27T10:00:00.815Z"
    assert summary["input"]["last_time"] == "2026-08-27T10:00:00.815Z"
