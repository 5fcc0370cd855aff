"""A storm seen only in decode's `/metrics`, scraped every 15 minutes (blind review 44 D1).

decode's logs show no timeout (a WARNING), only the checksum mismatches of the storm; its
scrapes count it: 13 timeouts between 11:01:40 and 11:16:40, beside every mismatch, 21 more by
11:31:40. SGLang creates the `outcome="timeout"` series at its first increment, so it first
appears in the 11:16:40 scrape.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from collector.forensics.driver import run_forensics

DAY = datetime(2026, 10, 16, tzinfo=UTC)
LABELS = 'engine_type="decode",model_name="glm-5.3",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
RELEASES = "sglang:decode_deferred_kv_release_total"
# Decode's timeouts counter at each scrape from 11:16:40 (absent before), and the checksum
# mismatches the logs show, all before it.
TIMEOUTS = {"11:16:40": 13.0, "11:31:40": 34.0, "11:46:40": 34.0, "12:01:40": 34.0}
MISMATCHES = ["11:10:05", "11:11:34", "11:12:06"]


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S")


def _case(root: Path, *, drained: bool) -> Path:
    """Four hours of decode-0 scraped every 15 minutes; `drained`: its scrapes hold the drained
    releases' series all along (the timeout series is the only new one), else no release
    series before the storm's."""
    case = root / "case"
    (case / "logs").mkdir(parents=True)
    (case / "snapshots").mkdir()
    lines = [
        "[2026-10-16 08:00:00 TP0] server_args={'model_path': 'zai-org/GLM-5.3', 'tp_size': 8, "
        "'disaggregation_mode': 'decode', 'disaggregation_transfer_backend': 'mooncake', "
        "'enable_metrics': True, 'disaggregation_enable_kv_checksum': True}",
        "[2026-10-16 08:00:41 TP0] max_total_num_tokens=2040000, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=128, context_len=1048576, "
        "available_gpu_mem=10.00 GB",
    ]
    mismatches = {f"2026-10-16 {t}": n for n, t in enumerate(MISMATCHES)}
    for minute in range(1, 4 * 60 + 2):
        at = DAY + timedelta(hours=8, minutes=minute)
        lines.append(
            f"[{_stamp(at)} TP0] Decode batch, #running-req: 27, #token: 81000, token usage: "
            "0.04, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, "
            "#retracted-req: 0, cuda graph: True, gen throughput (token/s): 2890.15, "
            "#queue-req: 0"
        )
        for stamp, n in mismatches.items():
            if _stamp(at)[:16] == stamp[:16]:
                lines.append(
                    f"[{stamp} TP0] KV checksum mismatch req={n:032x} "
                    f"bootstrap_room={5673012764136423952 + n} expected=0xf83b67b6 got=0x9b7984e8"
                )
    (case / "logs" / "decode-0.log").write_text("\n".join(lines) + "\n")
    for k in range(17):
        at = DAY + timedelta(hours=8, minutes=1 + 15 * k, seconds=40)
        prom = [
            "# TYPE sglang:max_total_num_tokens gauge",
            f"sglang:max_total_num_tokens{{{LABELS}}} 2040000.0",
            "# TYPE sglang:num_running_reqs gauge",
            f"sglang:num_running_reqs{{{LABELS}}} 8.0",
            f"# TYPE {RELEASES} counter",
        ]
        if drained:
            prom.append(f'{RELEASES}{{{LABELS},outcome="drained"}} {float(k // 4)}')
        timeouts = TIMEOUTS.get(at.strftime("%H:%M:%S"))
        if timeouts is not None:
            prom.append(f'{RELEASES}{{{LABELS},outcome="timeout"}} {timeouts}')
        name = f"decode-0@{at.strftime('%Y%m%dT%H%M%SZ')}.prom"
        (case / "snapshots" / name).write_text("\n".join(prom) + "\n")
    return case


def _summary(tmp_path: Path, *, drained: bool) -> dict[str, Any]:
    case = _case(tmp_path, drained=drained)
    summary: dict[str, Any] = run_forensics(
        [str(case)], tmp_path / "out", write_parquet=False
    ).summary
    return summary


def _storms(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        f
        for f in summary["findings"]
        if f["detector"] == "deferred_release_timeouts" and f["severity"] != "info"
    ]


def test_the_span_before_a_storm_s_scrape_that_already_counted_it_begins_the_storm(
    tmp_path: Path,
) -> None:
    """13 in 15 minutes, spread over the span, is 4.3 a window, under the volume floor on its
    own: the storm was found only in the next span, dated from 11:16:40 as a warning with
    `mismatches: 0`, the 13 timeouts and every mismatch before it in no finding."""
    (storm,) = _storms(_summary(tmp_path, drained=True))
    assert storm["severity"] == "critical"
    assert storm["evidence"]["window_start"] == "2026-10-16T11:00:00.000Z"
    assert storm["evidence"]["mismatches"] == len(MISMATCHES)
    assert "2026-10-16T11:01:40.000Z" in storm["summary"]


def test_a_series_new_in_a_scrape_of_a_node_scraped_before_counts_from_0(tmp_path: Path) -> None:
    """Forensics' count of decode's releases reads the counters by the detectors' rule: with no
    release series in the earlier scrapes, the timeout series' first value, 13, was taken as
    counted before anyone looked (21 timeouts said beside the storm's 34)."""
    summary = _summary(tmp_path, drained=False)
    assert summary["abort_signals"]["deferred_release_counted"] == {"timeout": 34}
    (storm,) = _storms(summary)
    assert storm["severity"] == "critical"
    assert storm["evidence"]["mismatches"] == len(MISMATCHES)


def test_the_storm_s_tally_counts_both_spans_whole_not_the_windows_shares(tmp_path: Path) -> None:
    """Each span's increase is judged by one window's share (7 of the 21 from 11:16:40 to
    11:31:40, 4.3 of the 13 before), but the storm held all 34: the finding said "7 timeouts
    in 300s" and nothing of the other 27."""
    (storm,) = _storms(_summary(tmp_path, drained=True))
    tally = storm["evidence"]["storm"]
    assert tally["timeouts"] == TIMEOUTS["11:31:40"]
    assert (tally["start"], tally["end"]) == (
        "2026-10-16T11:00:00.000Z",
        "2026-10-16T11:31:40.000Z",  # the later sample: no line of its own after it
    )
    assert tally["windows"] == 7
    assert tally["mismatches"] == len(MISMATCHES)
    assert "34 timeouts on decode-0" in storm["summary"]
    assert "the 21 counted between the samples" in storm["summary"]
    assert "after 13 (4.3 a window" in storm["summary"]
