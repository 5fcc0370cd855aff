"""Deferred-release timeouts are judged by their share of the holds the logs show, where the
logs show them (blind review 52 D2/D3).

Where lost drain acks make timeouts routine, their count follows the clients' aborts: a morning
with thirty times the night's traffic, or a cancelled load test, brings thirty times the
timeouts at the share of every other hour. The reference asks for the share against the
deployment's own, not the count; a share that rises is still a storm.
"""

from __future__ import annotations

from collector.events import Event
from detectors.deferred_release_timeouts import DeferredReleaseTimeouts
from tests.test_storm_reporting import HOUR, T, failed, reporting, run, startup, timeout


def _abort(t: float, room: int, node: str) -> Event:
    """A client's abort mid-transfer as decode logs it, parsed (reason `aborted`)."""
    event = failed(t, room, node)
    event.fields["reason"] = "aborted"
    return event


def _aborts(
    start: float,
    end: float,
    per_window: int,
    timed_out: int,
    room: int,
    *,
    logged: bool = True,
) -> list[Event]:
    """`per_window` aborts every 5 minutes on decode-0, `timed_out` of every 5 of them
    ending by timeout 30 s later; `logged=False`: the aborts' lines missing."""
    step = 300.0 / per_window
    events: list[Event] = []
    for k in range(int((end - start) / step)):
        at = start + 7 + step * k
        if logged:
            events.append(_abort(at, room + k, "decode-0"))
        if k % 5 < timed_out:
            events.append(timeout(at + 30, room + k, "decode-0"))
    return events


def _day(morning_per_window: int, morning_timed_out: int, *, logged: bool = True) -> list[Event]:
    """A quiet night (one abort a window, 2 of 5 timing out) for four hours, then two hours
    of `morning_per_window` aborts a window, `morning_timed_out` of 5 timing out."""
    events = [
        *startup("decode-0", "decode", T, pool=400_000, version="0.5.23"),
        *reporting("decode-0", T, T + 6 * HOUR),
    ]
    events += _aborts(T, T + 4 * HOUR, 1, 2, 0, logged=logged)
    events += _aborts(
        T + 4 * HOUR, T + 6 * HOUR, morning_per_window, morning_timed_out, 10_000, logged=logged
    )
    return events


def test_a_morning_ramp_at_the_nights_share_is_no_storm() -> None:
    # 30 aborts a window from 4 h, 12 of them timing out: 30 times the night's count, its share.
    assert run(DeferredReleaseTimeouts(), _day(30, 2)) == []


def test_the_same_morning_with_every_hold_timing_out_is_a_storm() -> None:
    (finding,) = run(DeferredReleaseTimeouts(), _day(30, 5))
    assert finding.severity == "warning"
    assert finding.time == T + 4 * HOUR + 300


def test_timeouts_whose_holds_the_logs_do_not_show_are_still_counted() -> None:
    # No abort lines at all: the share is not known, and the count rules judge as before.
    (finding,) = run(DeferredReleaseTimeouts(), _day(30, 2, logged=False))
    assert finding.severity == "warning"


def test_a_cancelled_load_test_at_the_routine_share_is_no_storm() -> None:
    """A load test's client cancelled at 4 h: 200 aborts in one window, 2 of 5 timing out as
    every hour before; then quiet again."""
    events = _day(1, 2)
    events = [e for e in events if (e.time or 0.0) < T + 4 * HOUR or e.kind == "node_window"]
    events += _aborts(T + 4 * HOUR, T + 4 * HOUR + 300, 200, 2, 50_000)
    events += _aborts(T + 4 * HOUR + 300, T + 6 * HOUR, 1, 2, 60_000)
    assert run(DeferredReleaseTimeouts(), events) == []
    # Its timeouts at four in five are a storm.
    events += _aborts(T + 5 * HOUR, T + 5 * HOUR + 300, 200, 4, 70_000)
    (finding,) = run(DeferredReleaseTimeouts(), events)
    assert finding.time == T + 5 * HOUR + 300
