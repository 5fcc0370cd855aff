"""A line stamped far ahead of the lines around it is read at its stream's time, and counted.

Why: blind review 19. One health-check line two hours (or a day, or until 2099) ahead of its
neighbours in the middle of a decode log moved that stream's clock on: each answer decode logged
after it came "late", its prefill side long judged, and 12 of the 16 exposed responses went
unnamed; the year-2099 line also made the logs "cover" 73 years.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.events import Event, parse_iso_time
from collector.forensics.driver import run_forensics
from collector.parse import MAX_OUT_OF_LINE, OUT_OF_LINE, ParseStats, stamps_in_line
from collector.sglang.log_clock import LogClock
from simulator.offline import run_offline
from simulator.scenario import load_scenario

T = 1_788_600_000.0


def _read(times: list[float | None]) -> tuple[list[float | None], ParseStats]:
    stats = ParseStats()
    events = [Event("http_access", "decode-0", t, f"d.log:{i}") for i, t in enumerate(times)]
    out = [e.time for e in stamps_in_line(events, stats, note_span=True)]
    return out, stats


def test_a_line_ahead_of_the_lines_around_it_takes_their_time() -> None:
    out, stats = _read([T, T + 1, T + 7200, None, T + 2, T + 3])
    assert out == [T, T + 1, T + 1, None, T + 2, T + 3]
    assert stats.dropped[OUT_OF_LINE] == 1
    assert stats.line_span == (T, T + 3)


def test_a_stream_that_moves_on_keeps_its_times() -> None:
    # An idle night: the lines after the gap stay there, and are handed on at once.
    times: list[float | None] = [T, T + 1, T + 36_000, T + 36_001, T + 36_002]
    assert _read(times)[0] == times
    # Two lines ahead agree with each other: where the stream went, even if it comes back.
    out, stats = _read([T, T + 7200, T + 7201, T + 5])
    assert out == [T, T + 7200, T + 7201, T + 5] and not stats.dropped
    # The stream ending ahead: nothing after it says otherwise.
    out, stats = _read([T, T + 1, T + 7200])
    assert out == [T, T + 1, T + 7200] and stats.line_span == (T, T + 7200)
    # Lines a few minutes out of order (time stats printed late) are in line.
    assert _read([T, T + 200, T + 5])[0] == [T, T + 200, T + 5]


def test_unstamped_lines_after_a_line_ahead_wait_with_it_a_bounded_while() -> None:
    out, stats = _read([T, T + 7200, None, None, T + 3])
    assert out == [T, T, None, None, T + 3] and stats.dropped[OUT_OF_LINE] == 1
    many: list[float | None] = [None] * MAX_OUT_OF_LINE
    out, stats = _read([T, T + 7200, *many, T + 3])
    assert out == [T, T + 7200, *many, T + 3] and not stats.dropped


@pytest.mark.parametrize("stamp", ["2026-09-09", "2099-01-01"])
def test_one_line_stamped_ahead_hides_no_exposure(tmp_path: Path, stamp: str) -> None:
    sim = tmp_path / "sim"
    run_offline(load_scenario("incident-replay-small"), sim, seed=None)
    truth = {
        e["bootstrap_room"] for e in json.loads((sim / "ground_truth.json").read_text())["exposed"]
    }
    clean = run_forensics([str(sim / "logs")], tmp_path / "clean", write_parquet=False, workers=1)
    log = sim / "logs" / "decode-0.log"
    lines = log.read_text().splitlines(keepends=True)
    middle = len(lines) // 3
    health = f'[{stamp} 12:26:21] INFO:     10.0.0.2:5 - "GET /health HTTP/1.1" 200 OK\n'
    log.write_text("".join([*lines[:middle], health, *lines[middle:]]))
    result = run_forensics([str(sim / "logs")], tmp_path / "out", write_parquet=False, workers=1)
    found = {r["bootstrap_room"] for r in result.summary["exposure"]["requests"]}
    assert found == truth
    assert result.summary["input"]["dropped_by_reason"][OUT_OF_LINE] == 1
    end = parse_iso_time(result.summary["input"]["last_time"])
    assert end == parse_iso_time(clean.summary["input"]["last_time"])


def _zoned(times: list[float], moves: dict[int, float]) -> list[float | None]:
    """`times` through `StampsInLine` with a `LogClock` whose zone moves by `moves[i]` as the
    `i`-th line is read: as the parser does, that line is read in the zone before, then its vote
    moves the zone for the lines after."""
    clock = LogClock(-4 * 3600.0)

    def lines() -> Iterator[Event]:
        moved = 0.0
        for i, when in enumerate(times):
            read = when - moved
            if i in moves:
                clock.shift += moves[i]
                moved += moves[i]
            yield Event("http_access", "decode-0", read, f"d.log:{i}")

    return [e.time for e in stamps_in_line(lines(), ParseStats(), zone_clock=clock)]


def test_lines_after_a_jump_of_whole_hours_wait_for_the_zone_to_move() -> None:
    """Blind review 30b: a daylight-saving change forward; read in the old zone until its votes
    moved it, the lines between came an hour ahead."""
    ahead = [T + 3600 + 10 * k for k in range(1, 6)]
    assert _zoned([T, T + 5, *ahead], {5: 3600.0}) == [
        T,
        T + 5,
        *(t - 3600 for t in ahead),
    ]
    # The zone moving by another amount (an idle hour, then a zone set back) explains nothing.
    assert _zoned([T, T + 5, *ahead], {5: -3600.0}) == [
        T,
        T + 5,
        *ahead[:4],
        ahead[4] + 3600,
    ]
    # An idle hour, the zone unmoved: the lines stay where the stream went.
    assert _zoned([T, T + 5, *ahead], {}) == [T, T + 5, *ahead]


def test_lines_after_a_jump_back_of_whole_hours_wait_for_the_zone_to_move() -> None:
    """Blind review 48 D1: a daylight-saving change back, the repeated hour; read in the old
    zone until its votes moved it, the lines between came an hour early, their prefill sides
    late, and honest answers after a restart that fixed the pool were named exposed."""
    behind = [T - 3600 + 10 * k for k in range(1, 6)]
    assert _zoned([T, T + 5, *behind], {5: -3600.0}) == [
        T,
        T + 5,
        *(t + 3600 for t in behind),
    ]
    # The zone unmoved (a clock set back by hand, say): the lines stay where they were read.
    assert _zoned([T, T + 5, *behind], {}) == [T, T + 5, *behind]
