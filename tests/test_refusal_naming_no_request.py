"""A refusal line that names no request is its one-token stub's, counted once.

Some 2025 builds print the refusal for length without `self.rid=` (reference §2.8). The stub
0.5.19 makes of the refused request goes on to decode under its room and is judged there; the
refusal line, joined to nothing, was counted as a second request "refused and joined to no
decode answer", and the run warned of exposures that did not exist (blind review 37 D4: 28
leaks named, and 28 more under NO DECODE SIDE, 691 requests of 663).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from collector.forensics.driver import print_outcome, run_forensics
from tests.engine_lines import finish_line, prefill_start, server_args

DAY = "2026-08-29"
POOL = 681_280
# Refused by prefill (a stub sent on) and answered by decode from stale pages.
LEAKED = {f"5351{n:015d}": 750_000 + 40_000 * n for n in range(3)}
HONEST = {f"8432{n:015d}": 20_000 + 10_000 * n for n in range(3)}


def _refusal(at: str, prompt: int) -> str:
    return (
        f"[{at} TP0] Input length ({prompt} tokens) exceeds the maximum allowed length "
        f"({POOL - 6} tokens). Use a shorter input or enable --allow-auto-truncate.\n"
    )


def _case(tmp_path: Path, *, decode: bool = True, stubs: bool = True) -> Path:
    case = tmp_path / "case"
    case.mkdir(parents=True)
    prefill = server_args(DAY, "prefill") + prefill_start(DAY, "10.1.0.11", POOL)
    answers = server_args(DAY, "decode")
    for hour, (room, prompt) in enumerate(sorted({**LEAKED, **HONEST}.items()), start=2):
        rid = f"{int(room):032x}"
        at = f"{DAY} {hour:02d}:06:13"
        if room in LEAKED:
            prefill += _refusal(at, prompt)
            if stubs:
                prefill += finish_line(at, rid, room, 1, tokens=1, e2e=0.21)
        else:
            prefill += finish_line(at, rid, room, prompt, tokens=1, e2e=3.5)
        answers += finish_line(f"{DAY} {hour:02d}:06:40", rid, room, prompt)
    (case / "prefill-0.log").write_text(prefill)
    if decode:
        (case / "decode-0.log").write_text(answers)
    return case


def _run(case: Path, out: Path) -> tuple[dict[str, Any], str]:
    result = run_forensics([str(case)], out, workers=1, write_parquet=False)
    terminal = io.StringIO()
    print_outcome(result, terminal)
    return result.summary, terminal.getvalue()


def test_a_refusal_naming_no_request_is_its_stubs_and_counted_once(tmp_path: Path) -> None:
    summary, terminal = _run(_case(tmp_path), tmp_path / "out")
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == set(LEAKED)
    assert summary["requests"]["total"] == len(LEAKED) + len(HONEST)
    assert summary["requests"]["refused_without_decode"]["count"] == 0
    assert "NO DECODE SIDE" not in terminal


def test_prefill_logs_alone_count_each_refused_request_once(tmp_path: Path) -> None:
    """Prefill's logs alone: each refused request is one "joined to no decode answer", whether
    its stub was logged beside the refusal (by room) or not (the refusal alone)."""
    for stubs in (True, False):
        summary, terminal = _run(
            _case(tmp_path / str(stubs), decode=False, stubs=stubs), tmp_path / f"out{stubs}"
        )
        assert summary["requests"]["refused_without_decode"]["count"] == len(LEAKED), stubs
        assert "prefill refused 3 requests or ran them as one-token stubs" in terminal
