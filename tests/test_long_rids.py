"""A client may choose a rid of a kilobyte: the terminal shows it cut, every report keeps it."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

from collector.forensics.driver import print_outcome, run_forensics

CASE = Path(__file__).parent / "testdata" / "parallel_sampling"
SHORT = "3564e508ab85958c782ba004b98e08ba"  # the first exposed response of the case


def test_a_long_rid_is_cut_on_the_terminal_and_whole_in_the_reports(tmp_path: Path) -> None:
    case = tmp_path / "case"
    shutil.copytree(CASE, case)
    long_rid = "item-" + "x" * 1000
    for log in case.glob("*.log"):
        log.write_text(log.read_text().replace(SHORT, long_rid))
    result = run_forensics([str(case)], tmp_path / "out", write_parquet=False)
    assert long_rid in {r["rid"] for r in result.summary["exposure"]["requests"]}
    assert long_rid in result.outputs["markdown"].read_text()
    out = io.StringIO()
    print_outcome(result, out)
    lines = [line for line in out.getvalue().splitlines() if "rid=item-" in line]
    assert lines and all(long_rid not in line and len(line) < 300 for line in lines)
    assert all(f"rid={long_rid[:63]}…" in line for line in lines)
