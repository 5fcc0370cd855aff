"""What the verdict covers is what the logs cover: a snapshot saved before the first log line
(or after the last) tells a configuration, not what was served.

Why: blind review 65 D3. The current logs began at 11:30 with a restart; a `.prom` snapshot of
10:30 made "the logs cover 10:30 to 13:00", and with no request line read in 10:30 to 11:30,
where the leak ran, the run said "no exposed responses found" over it.
"""

from __future__ import annotations

from pathlib import Path

from collector.forensics.driver import run_forensics
from tests.engine_lines import finish_line, prefill_start, server_args

DAY = "2026-09-03"
PROM = (
    "# TYPE sglang:max_total_num_tokens gauge\n"
    'sglang:max_total_num_tokens{engine_type="decode",model_name="glm-5.3",tp_rank="0"} '
    "2000000.0\n"
    "# TYPE sglang:context_len gauge\n"
    'sglang:context_len{engine_type="decode",model_name="glm-5.3",tp_rank="0"} 1048576.0\n'
)


def _case(folder: Path, *, logs: bool) -> Path:
    folder.mkdir()
    if logs:
        (folder / "prefill-0.log").write_text(
            server_args(DAY, "prefill").replace("00:00:00", "11:30:00")
            + prefill_start(DAY, "10.1.0.11", 2_040_000).replace("00:00:", "11:30:")
            + "".join(
                finish_line(f"{DAY} 11:{m:02d}:00", f"p{m}", 7000 + m, 9000, tokens=1)
                for m in range(35, 60, 5)
            )
        )
        (folder / "decode-0.log").write_text(
            server_args(DAY, "decode").replace("00:00:00", "11:30:00")
            + "".join(
                finish_line(f"{DAY} 11:{m:02d}:05", f"p{m}", 7000 + m, 9000)
                for m in range(35, 60, 5)
            )
        )
    (folder / "decode-0@20260903T103000Z.prom").write_text(PROM)
    return folder


def test_a_snapshot_before_the_first_log_line_does_not_widen_the_cover(tmp_path: Path) -> None:
    case = _case(tmp_path / "case", logs=True)
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert summary["input"]["first_time"] == f"{DAY}T11:30:00.000Z"
    assert summary["input"]["last_time"] == f"{DAY}T11:55:05.000Z"
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"The logs cover {DAY}T11:30:00.000Z to {DAY}T11:55:05.000Z." in report


def test_snapshots_alone_still_say_when_they_were_saved(tmp_path: Path) -> None:
    case = _case(tmp_path / "case", logs=False)
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert summary["input"]["first_time"] == f"{DAY}T10:30:00.000Z"
    assert summary["verdict"]["outcome"] == "not_judged"
