"""A prefill known only by its refusals, and detectors that fail.

A prefill log whose start-up lines rotated away, with no snapshot saved, still says its pool:
every refusal for length states the engine's `max_req_input_len` (reference §2.8: the maximum
allowed length), which is the capacity less 6 when the pool is below the context. Blind review
25: with the oldest rotations deleted the gap went unsaid ("POOL UNKNOWN") though 76 refusals
stated it; and once the limit was read, `pool_below_context` raised on a node with no pool and
the run swallowed the error, so the second half here: a detector's error is said, never an
all-clear over it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from matplotlib.figure import Figure

from collector.forensics import driver, plots
from collector.forensics.driver import SCHEMA_PATH, print_outcome, run_forensics
from collector.forensics.plot_data import PlotData
from detectors.pool_below_context import PoolBelowContext
from tests.engine_lines import exceeds_line, finish_line, refusal_line, server_args

DAY = "2026-08-27"
POOL = 681_280
CONTEXT = 1_048_576
# Refused by prefill, answered by decode from stale pages (rooms) at these prompt lengths.
EXPOSED = {f"7702{n:015d}": 700_000 + 50_000 * n for n in range(3)}
# Honest answers under the pool.
HONEST = {f"7703{n:015d}": 20_000 + 100_000 * n for n in range(4)}
_BATCH = (
    f"[{DAY} 06:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, "
    "token usage: 0.01, #running-req: 0, #queue-req: 0, #pending-token: 0, #bootstrap-req: 0, "
    "#inflight-req: 0, #optimistic-req: 0, cuda graph: False, input throughput (token/s): "
    "24000.00\n"
)


def _case(
    tmp_path: Path,
    pool: int,
    refused: dict[str, int],
    answered: dict[str, int],
    refusal: Callable[[str, str, int, int], str] = refusal_line,
) -> Path:
    """Decode's log with its start-up (the context) and its `answered` requests; prefill's
    begun mid-run: a batch line and its refusals of the `refused` prompts, each stating the
    limit a `pool` gives."""
    case = tmp_path / "case"
    case.mkdir()
    hours = {room: 8 + i for i, room in enumerate(sorted({**refused, **answered}))}
    (case / "decode-0.log").write_text(
        server_args(DAY, "decode")
        + "".join(
            finish_line(f"{DAY} {hours[room]:02d}:20:00", f"{int(room):032x}", room, prompt)
            for room, prompt in sorted(answered.items())
        )
    )
    refusals = [
        refusal(f"{DAY} {hours[room]:02d}:19:58", f"{int(room):032x}", prompt, pool)
        for room, prompt in sorted(refused.items())
    ]
    (case / "prefill-0.log").write_text(_BATCH + "".join(refusals))
    return case


def _run(
    tmp_path: Path,
    pool: int,
    refused: dict[str, int],
    answered: dict[str, int],
    refusal: Callable[[str, str, int, int], str] = refusal_line,
) -> tuple[dict[str, Any], str]:
    case = _case(tmp_path, pool, refused, answered, refusal)
    result = run_forensics([str(case)], tmp_path / "out", workers=1)
    terminal = io.StringIO()
    print_outcome(result, terminal)
    jsonschema.validate(result.summary, json.loads(SCHEMA_PATH.read_text()))
    return result.summary, terminal.getvalue()


def _pool_findings(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in summary["findings"] if f["detector"] == "pool_below_context"]


def test_a_pool_gap_only_refusals_state_is_found_and_dated(tmp_path: Path) -> None:
    summary, terminal = _run(tmp_path, POOL, EXPOSED, {**EXPOSED, **HONEST})
    assert "detector_errors" not in summary
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == set(EXPOSED)
    # Judged by length too, not by the refusals alone.
    by_length = {
        f["bootstrap_room"] for f in summary["findings"] if f["detector"] == "over_length_answered"
    }
    assert by_length == set(EXPOSED)
    gaps = _pool_findings(summary)
    critical = [f for f in gaps if f["severity"] == "critical"]
    assert [f["node"] for f in critical] == ["prefill-0"]
    evidence = critical[0]["evidence"]
    assert evidence["prompt_pool_tokens"] == POOL
    assert evidence["pool_tokens"] is None
    assert evidence["context_len"] == CONTEXT
    assert f"stated prompt limit {POOL - 6:,}" in terminal
    assert f"config gap: prefill-0 (prefill) pool {POOL:,}" in terminal
    assert f"< context {CONTEXT:,} from {DAY}T06:00:00.000Z" in terminal
    assert "POOL UNKNOWN" not in terminal


def test_a_pool_gap_only_the_pd_capacity_check_states_is_found(tmp_path: Path) -> None:
    """Blind review 59 J5: a PD prefill's own check (`Request … exceeds the maximum number of
    tokens: n > pool`) states its pool as plainly; read as nothing, the answers were judged by
    refusals and times alone under "POOL UNKNOWN"."""
    summary, terminal = _run(tmp_path, POOL, EXPOSED, {**EXPOSED, **HONEST}, exceeds_line)
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == set(EXPOSED)
    by_length = {
        f["bootstrap_room"] for f in summary["findings"] if f["detector"] == "over_length_answered"
    }
    assert by_length == set(EXPOSED)
    (critical,) = [f for f in _pool_findings(summary) if f["severity"] == "critical"]
    assert critical["node"] == "prefill-0"
    assert critical["evidence"]["pool_tokens"] == POOL
    assert f"config gap: prefill-0 (prefill) pool {POOL:,} < context {CONTEXT:,}" in terminal
    assert "stated prompt limit" not in terminal
    assert "POOL UNKNOWN" not in terminal


def test_refusals_at_the_context_state_no_pool_gap(tmp_path: Path) -> None:
    """A limit of context - 6 is the context's, not a pool's: the pool may be any larger."""
    too_long = {room: CONTEXT + prompt for room, prompt in EXPOSED.items()}
    summary, terminal = _run(tmp_path, CONTEXT, too_long, HONEST)
    assert _pool_findings(summary) == []
    assert "config gap" not in terminal
    assert summary["exposure"]["count"] == 0
    assert summary["nodes"]["prefill-0"]["config"][0]["max_req_input_len"] == CONTEXT - 6


def test_a_failing_detector_is_said_and_no_all_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("a value read from the input")

    monkeypatch.setattr(PoolBelowContext, "_evaluate", broken)
    summary, terminal = _run(tmp_path, POOL, {}, HONEST)
    errors = summary["detector_errors"]
    assert list(errors) == ["pool_below_context"]
    assert errors["pool_below_context"]["count"] >= 1
    raised_at = broken.__code__.co_firstlineno + 1
    assert errors["pool_below_context"]["first"] == (
        f"ValueError at tests/{Path(__file__).name}:{raised_at}"
    )
    assert summary["exposure"]["count"] == 0
    assert summary["verdict"]["outcome"] == "not_judged"
    assert "pool_below_context failed" in summary["verdict"]["said"]
    assert "DETECTOR ERRORS: pool_below_context failed" in terminal
    # Where it failed, never what it was reading.
    assert "a value read from the input" not in json.dumps(summary) + terminal
    assert "pool_below_context failed" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize("refusal", [refusal_line, exceeds_line])
def test_with_no_context_read_the_refused_prompts_show_the_gap(
    tmp_path: Path, refusal: Callable[[str, str, int, int], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blind review 30a: every start-up line rotated away, so no context was read anywhere;
    the scheduler refused prompts of up to 987,311 tokens against its 681,274 limit, which only
    prompts the tokenizer let through (within the context) reach, and the gap went unsaid.
    Blind review 59 J5: the same from a PD prefill's own capacity check."""
    case = _case(tmp_path, POOL, EXPOSED, {**EXPOSED, **HONEST}, refusal)
    decode = case / "decode-0.log"
    batch = (  # a decode node by its batch lines, its start-up gone
        f"[{DAY} 06:00:00 TP0] Decode batch, #running-req: 1, #token: 9000, token usage: 0.01, "
        "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, "
        "cuda graph: True, gen throughput (token/s): 40.00, #queue-req: 0\n"
    )
    decode.write_text(batch + decode.read_text().replace(server_args(DAY, "decode"), ""))
    drawn: list[PlotData] = []
    write_html = driver.write_html

    def drawing(path: Path, summary: dict[str, Any], data: PlotData) -> None:
        drawn.append(data)
        write_html(path, summary, data)

    monkeypatch.setattr(driver, "write_html", drawing)
    result = run_forensics([str(case)], tmp_path / "out", workers=1)
    summary = result.summary
    jsonschema.validate(summary, json.loads(SCHEMA_PATH.read_text()))
    longest = max(EXPOSED.values())
    # Blind review 31c: the gap line and the status the floor gives, not the last exposure's
    # age alone.
    terminal = io.StringIO()
    print_outcome(result, terminal)
    assert f"< a context of at least {longest:,} from " in terminal.getvalue()
    assert summary["verdict"]["status"] == "not_over"
    (critical,) = [f for f in _pool_findings(summary) if f["severity"] == "critical"]
    assert critical["node"] == "prefill-0"
    assert critical["evidence"]["context_at_least"] == longest
    assert critical["evidence"]["context_len"] is None
    # Blind review 59 J3: dated at the gap's start, it says when the prompt it quotes came.
    refused_at = f"{DAY}T10:19:58.000Z"  # the longest refused prompt, its room third in order
    assert critical["time"] < refused_at
    assert critical["evidence"]["context_at_least_refused_at"] == refused_at
    assert (
        f"a context of at least {longest:,} tokens (a {longest:,}-token prompt it refused for "
        f"the pool at {refused_at} had passed the context check)"
    ) in critical["summary"]
    assert f"{DAY}T08:19:58" not in critical["summary"]  # the first refusal's, superseded
    # The plot draws the gap the reports say: the pool the refusals imply and the context
    # floor (it drew "no pool sizes in the input", or a pool with no context above it).
    (data,) = drawn
    assert [(pool, context) for _, pool, context in data.pools["prefill-0"]] == [(POOL, longest)]
    assert data.context_floors == [longest]
    figures: list[Figure] = []
    monkeypatch.setattr(plots, "_png", lambda figure: figures.append(figure) or b"")
    plots.pool_plot(data)
    texts = [text.get_text() for text in figures[0].axes[0].texts]
    assert texts == [f"context at least {longest:,}"]
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == set(EXPOSED)
