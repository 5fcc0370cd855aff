"""A counter that starts again at a restart and passes its old value before the next scrape.

Blind review 51 D2: decode's deferred-release timeouts, scraped every 15 minutes, stood at 30
when decode restarted (its start-up lines say when), and at 38 in the next scrape: 38 timeouts
in 13 minutes, counted as 8 (38 - 30) because the counter had not gone down. No finding, an
all-clear. Prometheus' own `increase()` sees a reset only as a fall; the log's restart says it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from collector.forensics.driver import run_forensics

DAY = datetime(2026, 11, 2, tzinfo=UTC)
LABELS = 'engine_type="decode",model_name="glm-5.3",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
RELEASES = "sglang:decode_deferred_kv_release_total"
RESTART = DAY + timedelta(hours=10, minutes=5)


def _start_up(at: datetime) -> list[str]:
    stamp = at.strftime("%Y-%m-%d %H:%M:%S")
    ready = (at + timedelta(seconds=68)).strftime("%Y-%m-%d %H:%M:%S")
    return [
        f"[{stamp}] server_args={{'model_path': 'zai-org/GLM-5.3', 'tp_size': 8, "
        "'disaggregation_mode': 'decode', 'disaggregation_transfer_backend': 'mooncake', "
        "'enable_metrics': True}",
        f"[{stamp} TP0] max_total_num_tokens=2040000, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=128, context_len=1048576, "
        "available_gpu_mem=10.00 GB",
        f"[{ready}] The server is fired up and ready to roll!",
    ]


def _case(root: Path, after_restart: float) -> Path:
    """Six hours of decode-0, restarted at 10:05, scraped every 15 minutes from 06:03: the
    timeouts counter rises by two an hour (30 by 10:03), and reads `after_restart` from the
    first scrape after the restart on."""
    case = root / "case"
    (case / "logs").mkdir(parents=True)
    (case / "snapshots").mkdir()
    lines = _start_up(DAY + timedelta(hours=6))
    for minute in range(2, 6 * 60):
        at = DAY + timedelta(hours=6, minutes=minute)
        if at == RESTART:
            lines += _start_up(RESTART)
        lines.append(
            f"[{at.strftime('%Y-%m-%d %H:%M:%S')} TP0] Decode batch, #running-req: 27, "
            "#token: 81000, token usage: 0.04, gen throughput (token/s): 2890.15, "
            "#queue-req: 0"
        )
    (case / "logs" / "decode-0.log").write_text("\n".join(lines) + "\n")
    for k in range(24):
        at = DAY + timedelta(hours=6, minutes=3 + 15 * k)
        timeouts = after_restart if at > RESTART else float(min(30, 2 * k // 4 + 22))
        prom = [
            f"# TYPE {RELEASES} counter",
            f'{RELEASES}{{{LABELS},outcome="timeout"}} {timeouts}',
        ]
        name = f"decode-0@{at.strftime('%Y%m%dT%H%M%SZ')}.prom"
        (case / "snapshots" / name).write_text("\n".join(prom) + "\n")
    return case


def _storms(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in summary["findings"] if f["detector"] == "deferred_release_timeouts"]


@pytest.mark.parametrize("after_restart", [38.0, 25.0], ids=["passed-its-old-value", "fell"])
def test_a_storm_in_a_counter_that_began_again_at_a_restart_is_counted_whole(
    tmp_path: Path, after_restart: float
) -> None:
    summary = run_forensics(
        [str(_case(tmp_path, after_restart))], tmp_path / "out", write_parquet=False
    ).summary
    (storm,) = [f for f in _storms(summary) if f["severity"] != "info"]
    # Dated in the span after the restart, where its timeouts fell.
    assert storm["time"] >= RESTART.strftime("%Y-%m-%dT%H:%M")
