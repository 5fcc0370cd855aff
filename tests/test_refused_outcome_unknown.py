"""A refused request decode received and logged no end for: not an all-clear.

From an audit of logs written with `SGLANG_LOG_REQUEST_EXCEEDED_MS` (decode logs only the
finishes slower than N ms) and no time-stats lines: the answers decode gave from stale pages are
the fast ones, so none of them has a `Finish` line. Prefill's refusal and decode's `Receive` of
the same room were there, and the run said "no exposed responses found". Whether decode answered
cannot be told; that it might have, and for which rooms, can.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from collector.forensics.driver import run_forensics

REFERENCE = Path(__file__).parent / "testdata" / "reference_incident"
EXPOSED_RID = "e5f4a3b2c1d0e9f8a7b6554433221100"
EXPOSED_ROOM = "5523401987766512300"


def _case(tmp_path: Path) -> Path:
    """The reference incident with decode's end of the exposed request left out."""
    case = tmp_path / "case"
    shutil.copytree(REFERENCE, case)
    decode = case / "decode-0.log"
    ends = (f"ReqTimeStats(rid={EXPOSED_RID}", "Finish: obj=GenerateReqInput(", '"POST /generate')
    lines = decode.read_text().splitlines(keepends=True)
    kept = [
        line
        for line in lines
        if not (any(mark in line for mark in ends) and EXPOSED_RID in line or '"POST' in line)
    ]
    decode.write_text("".join(kept))
    return case


def _forensics(case: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", str(case), "--out", str(out)]
        + ["--quiet", "--no-parquet", "--fail-on", "never"],
        capture_output=True,
        text=True,
    )


def test_a_refused_request_decode_never_ended_is_named_and_the_run_not_judged(
    tmp_path: Path,
) -> None:
    case = _case(tmp_path)
    assert EXPOSED_RID in (case / "decode-0.log").read_text()  # its Receive is still there
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert summary["exposure"]["count"] == 0
    unknown = [
        f
        for f in summary["findings"]
        if f["detector"] == "rejected_then_served" and f["severity"] == "warning"
    ]
    assert [(f["bootstrap_room"], f["node"], f["rid"]) for f in unknown] == [
        (EXPOSED_ROOM, "decode-0", EXPOSED_RID)
    ]
    assert summary["requests"]["refused_outcome_unknown"] == 1
    done = _forensics(case, tmp_path / "cli")
    assert done.returncode == 2
    assert "no exposed responses found" not in done.stdout
    said = "1 request prefill refused reached decode, and decode logged no end for it"
    assert f"NOT JUDGED: {said}" in done.stdout and f"NOT JUDGED: {said}" in done.stderr
    assert f"room {EXPOSED_ROOM}" in done.stdout
    assert f"Not judged: {said}" in (tmp_path / "cli" / "report.md").read_text()


def test_a_refusal_decode_ended_with_an_error_is_no_unknown(tmp_path: Path) -> None:
    """Decode's abort (the engine's handling of a refusal) is an end: nothing unknown."""
    case = _case(tmp_path)
    with open(case / "decode-0.log", "a") as log:
        log.write(
            f"[2026-08-27 10:14:52] Finish: obj=GenerateReqInput(rid='{EXPOSED_RID}', "
            f"bootstrap_room={EXPOSED_ROOM}), out={{'meta_info': {{'id': '{EXPOSED_RID}', "
            "'finish_reason': {'type': 'abort', 'message': 'bootstrap failed', "
            "'status_code': 500}, 'prompt_tokens': 912384, 'completion_tokens': 0}}\n"
        )
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert summary["exposure"]["count"] == 0
    assert summary["requests"]["refused_outcome_unknown"] == 0
    assert not [f for f in summary["findings"] if f["detector"] == "rejected_then_served"]
    done = _forensics(case, tmp_path / "cli")
    assert done.returncode == 0 and "no exposed responses found" in done.stdout
