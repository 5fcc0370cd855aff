"""The ledger's cap on requests held at once, met in forensics: said, and what it let go.

Blind review 57 D2: SGLANG_LOG_REQUEST_EXCEEDED_MS logs the finishes of slow requests alone, so
every fast request leaves a `Receive:` line, held until `max_open_seconds`; 600k of them took
1.8 GB. At the cap, such a request is let go unjudged, and a finish read later judges its
request anew; a request with more read of it is judged early, its later lines late.
"""

from __future__ import annotations

from pathlib import Path

from collector.forensics.driver import run_forensics
from collector.forensics.report import held_at_cap_line
from detectors.pipeline import PipelineConfig
from tests.engine_lines import finish_line, prefill_start, server_args

DAY = "2026-09-03"


def _receive(at: str, rid: str, room: int) -> str:
    return (
        f"[{at}] Receive: obj=GenerateReqInput(rid='{rid}', bootstrap_host='10.1.0.11', "
        f"bootstrap_port=8998, bootstrap_room={room})\n"
    )


def test_requests_only_received_are_let_go_at_the_cap_and_said(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "prefill-0.log").write_text(
        server_args(DAY, "prefill") + prefill_start(DAY, "10.1.0.11", 2_040_000)
    )
    fast = "".join(_receive(f"{DAY} 09:{m:02d}:00", f"f{m}", 100 + m) for m in range(40))
    # One slow request: received first, its finish (the only one logged) after the others.
    (logs / "decode-0.log").write_text(
        server_args(DAY, "decode")
        + _receive(f"{DAY} 08:59:00", "slow", 99)
        + fast
        + finish_line(f"{DAY} 09:50:00", "slow", 99, 50_000, e2e=3060.0)
    )
    config = PipelineConfig.model_validate({"ledger": {"max_entries": 10}})
    result = run_forensics([str(logs)], tmp_path / "out", config=config, write_parquet=False)
    requests = result.summary["requests"]
    assert requests["received_only"] >= 30 and requests["judged_at_cap"] == 0
    assert requests["late_lines"] == 0
    said = held_at_cap_line(result.summary)
    assert said.startswith(f"{requests['received_only']:,} requests of which nothing but the ")
    assert "were let go unjudged" in said
