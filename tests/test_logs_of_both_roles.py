"""One plain file of a prefill's and a decode's lines, no name leading a line (blind review 44
D3): read as one node whose pools and roles are the two engines' mixed, it must say so rather
than "no prefill node's logs", and no verdict over it may be "stopped" (the decode engine's start
"closed" the prefill's pool gap)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from collector.forensics.driver import SCHEMA_PATH, run_forensics
from collector.forensics.report import exposure_status, not_judged_reason

REFERENCE = Path(__file__).parent / "testdata" / "reference_incident"
EXPOSED_RID = "e5f4a3b2c1d0e9f8a7b6554433221100"


def _lines(half: str, hours_later: int = 0) -> list[str]:
    lines = (REFERENCE / f"{half}-0.log").read_text().splitlines(keepends=True)
    for hour in (10, 9) if hours_later else ():
        lines = [li.replace(f"2026-08-27 {hour:02d}:", f"2026-08-27 {hour + hours_later:02d}:")
                 for li in lines]  # fmt: skip
    return lines


def _summary(tmp_path: Path, lines: list[str]) -> dict:  # type: ignore[type-arg]
    case = tmp_path / "case"
    case.mkdir()
    (case / "sglang-all.log").write_text("".join(lines))
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    jsonschema.validate(summary, json.loads(SCHEMA_PATH.read_text()))
    return summary


def _merged_by_time(lines: list[str]) -> list[str]:
    return sorted(lines, key=lambda line: line[:21])  # the prefix's time; each half's order kept


def test_an_exposure_read_from_both_engines_mixed_is_not_said_to_have_stopped(
    tmp_path: Path,
) -> None:
    summary = _summary(tmp_path, _merged_by_time(_lines("prefill") + _lines("decode")))
    assert summary["input"]["logs_of_both_roles"] == {
        "sglang-all": {"prefill": "2026-08-27T09:00:02.000Z", "decode": "2026-08-27T09:00:03.000Z"}
    }
    assert [r["rid"] for r in summary["exposure"]["requests"]] == [EXPOSED_RID]
    status, said = exposure_status(summary)
    assert status == "possibly_not_over"
    assert "the log of sglang-all starts a prefill engine at 2026-08-27T09:00:02.000Z" in said


def test_no_answer_named_from_both_engines_mixed_is_not_judged_and_says_why(
    tmp_path: Path,
) -> None:
    lines = _merged_by_time(_lines("prefill") + _lines("decode"))
    summary = _summary(tmp_path, [li for li in lines if EXPOSED_RID not in li])
    assert summary["exposure"]["count"] == 0
    reason = not_judged_reason(summary)
    assert reason.startswith("the log of sglang-all starts a prefill engine")
    assert "Give each engine's log as its own file." in reason


def test_a_host_turned_from_prefill_to_decode_hours_later_is_one_node(tmp_path: Path) -> None:
    summary = _summary(tmp_path, _lines("prefill") + _lines("decode", hours_later=2))
    assert summary["input"]["logs_of_both_roles"] == {}
    assert "starts a prefill engine" not in not_judged_reason(summary)
