"""Decode logs whose requests overlap no prefill node's in time are said.

Why: blind review 18. A prefill log of the day before decode's: every decode answer was judged
by the prefill pool last logged, a day earlier, nothing of prefill's could be joined to them,
and the report read as if the logs covered both days without a word of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics
from tests.engine_lines import finish_line, prefill_start, server_args


def _pair(folder: Path, prefill_day: str, decode_day: str) -> None:
    folder.mkdir()
    (folder / "prefill-0.log").write_text(
        server_args(prefill_day, "prefill")
        + prefill_start(prefill_day, "10.1.0.11", 2_040_000)
        + "".join(
            finish_line(f"{prefill_day} 09:0{i}:00", f"p{i}", 7000 + i, 50_000, tokens=1)
            for i in range(3)
        )
    )
    (folder / "decode-0.log").write_text(
        server_args(decode_day, "decode")
        + "".join(
            finish_line(f"{decode_day} 09:0{i}:05", f"d{i}", 8000 + i, 50_000) for i in range(3)
        )
    )


@pytest.mark.parametrize(("prefill_day", "apart"), [("2026-09-02", True), ("2026-09-03", False)])
def test_decode_requests_no_prefill_request_overlaps_are_said(
    tmp_path: Path, prefill_day: str, apart: bool
) -> None:
    _pair(tmp_path / "logs", prefill_day, "2026-09-03")
    result = run_forensics([str(tmp_path / "logs")], tmp_path / "out", write_parquet=False)
    said = result.summary["input"]["decode_apart"]
    markdown = (tmp_path / "out" / "report.md").read_text()
    if not apart:
        assert said == [] and "overlap no prefill node's" not in markdown
        return
    assert [(row["node"], row["first"], row["last"]) for row in said] == [
        ("decode-0", "2026-09-03T09:00:05.000Z", "2026-09-03T09:02:05.000Z")
    ]
    assert said[0]["prefill"]["prefill-0"][1].startswith("2026-09-02")
    assert "decode-0's requests" in markdown and "overlap no prefill node's" in markdown


def _cut(folder: Path, decode_until_minute: int) -> None:
    """Prefill's requests every 5 minutes to 10:00; decode's answers to them, its log ending
    after `decode_until_minute`."""
    folder.mkdir()
    day = "2026-09-03"
    times = [(9 + m // 60, m % 60) for m in range(0, 61, 5)]
    (folder / "prefill-0.log").write_text(
        server_args(day, "prefill")
        + prefill_start(day, "10.1.0.11", 2_040_000)
        + "".join(
            finish_line(f"{day} {h:02d}:{m:02d}:00", f"p{i}", 7000 + i, 50_000, tokens=1)
            for i, (h, m) in enumerate(times)
        )
    )
    (folder / "decode-0.log").write_text(
        server_args(day, "decode")
        + "".join(
            finish_line(f"{day} {h:02d}:{m:02d}:05", f"d{i}", 7000 + i, 50_000)
            for i, (h, m) in enumerate(times)
            if (h - 9) * 60 + m <= decode_until_minute
        )
    )


@pytest.mark.parametrize(("decode_until", "early"), [(30, True), (50, False), (60, False)])
def test_a_decode_log_ending_well_before_prefill_s_is_said(
    tmp_path: Path, decode_until: int, early: bool
) -> None:
    """Blind review 34 (D6): a decode log cut 40 minutes before prefill's, most exposures and
    timeouts after its end, and nothing said that decode's lines had stopped."""
    _cut(tmp_path / "logs", decode_until)
    result = run_forensics([str(tmp_path / "logs")], tmp_path / "out", write_parquet=False)
    said = result.summary["input"]["decode_ended_early"]
    markdown = (tmp_path / "out" / "report.md").read_text()
    if not early:  # 10 minutes short of prefill's, or not at all: within a quiet stretch
        assert said == [] and "request lines end at" not in markdown
        return
    assert said == [
        {
            "node": "decode-0",
            "last": "2026-09-03T09:30:05.000Z",
            "prefill": {"prefill-0": "2026-09-03T10:00:00.000Z"},
        }
    ]
    assert "decode-0's request lines end at 2026-09-03T09:30:05.000Z" in markdown
