"""Windowed detectors: deferred-release timeouts, transfer-failure storms, telemetry anomaly."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import numpy as np
import pytest

from collector.events import Event, iso_time
from collector.state.node_windows import BATCH_KINDS, with_node_windows
from detectors.base import Detector
from detectors.deferred_release_timeouts import DeferredReleaseTimeouts
from detectors.pipeline import DetectionPipeline
from detectors.telemetry_anomaly import TelemetryAnomaly
from detectors.transfer_failure_storm import TransferFailureStorm
from detectors.windows import CounterDeltas, WindowClock

T = 1_793_600_100.0  # a multiple of 300 s, so windows start at T


def ev(kind: str, node: str, t: float, **fields) -> Event:
    return Event(kind, node, t, f"{node}.log", dict(fields))


def timeout(t: float, room: int, node: str = "decode-0") -> Event:
    return ev(
        "deferred_release", node, t, bootstrap_room=str(room), outcome="timeout", seconds=30.0
    )


def counter(t: float, value: float, outcome: str, tp: int = 0) -> Event:
    return ev(
        "metric",
        "decode-0",
        t,
        name="sglang:decode_deferred_kv_release_total",
        labels={"engine_type": "decode", "outcome": outcome, "tp_rank": str(tp)},
        value=value,
        signal="deferred_release_total",
        role="decode",
    )


def failures_counter(t: float, value: float, node: str = "decode-0", role: str = "decode") -> Event:
    """A sample of `sglang:num_transfer_failed_reqs_total`."""
    return ev(
        "metric",
        node,
        t,
        name="sglang:num_transfer_failed_reqs_total",
        labels={"engine_type": role, "tp_rank": "0"},
        value=value,
        signal="transfer_failed_total",
        role=role,
    )


def held(t: float, value: float, node: str = "decode-0") -> Event:
    return ev(
        "metric",
        node,
        t,
        name="sglang:num_decode_deferred_kv_release_reqs",
        labels={"engine_type": "decode", "tp_rank": "0"},
        value=value,
        signal="deferred_release_held",
        role="decode",
    )


def run(detector: Detector, events: list[Event]):
    events = sorted(events, key=lambda e: e.time)
    return list(DetectionPipeline(detectors=[detector], raise_errors=True).run(events))


def quiet_hours(hours: int = 6) -> list[Event]:
    """One timeout every 20 minutes: the deployment's normal."""
    return [timeout(T + 600 + 1200 * k, k) for k in range(hours * 3)]


# -- deferred releases --------------------------------------------------------------------------


def test_a_lone_timeout_and_quiet_hours_raise_nothing():
    assert run(DeferredReleaseTimeouts(), [timeout(T + 10, 1)]) == []
    assert run(DeferredReleaseTimeouts(), quiet_hours()) == []


def test_a_timeout_storm_is_one_warning_even_across_windows():
    storm = [timeout(T + 6 * 3600 + 5 * k, 1000 + k) for k in range(120)]  # 10 minutes
    findings = run(DeferredReleaseTimeouts(), quiet_hours() + storm)
    (finding,) = findings
    assert finding.severity == "warning" and finding.runbook == "KVWatchDeferredReleaseTimeouts"
    assert finding.evidence["timeouts"] == 60  # 300 s / 5 s in the first storm window
    assert finding.evidence["rule"] == "timeouts"
    assert finding.evidence["score"] >= 1.0
    assert finding.time == T + 6 * 3600 + 300


def steady(per_window: int, hours: int, first_room: int = 0, node: str = "decode-0") -> list[Event]:
    """`per_window` timeouts in every 5-minute window from the first line on."""
    step = 300.0 / per_window
    return [timeout(T + 5 + step * k, first_room + k, node) for k in range(hours * 12 * per_window)]


def _poisson_timeouts(
    rate: float, hours: float, node: str, seed: int, first_room: int = 0, start: float = T
) -> list[Event]:
    """Timeouts at `rate` a 300 s window on average, as a Poisson process: the routine timeouts
    of lost drain acks."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(300.0 / rate, size=int(hours * 3600 / 300 * rate * 2) + 10)
    times = start + np.cumsum(gaps)
    times = times[times < start + hours * 3600]
    return [timeout(float(t), first_room + k, node) for k, t in enumerate(times)]


def test_routine_timeouts_at_a_steady_rate_raise_nothing_however_long() -> None:
    """Four days at 1.5 timeouts a window, nothing changing: chance alone put 6 or more in a
    window about once a day, over 4x that normal, and each was a warning."""
    events = _poisson_timeouts(1.5, 96, "decode-0", seed=1)
    counts = np.bincount([int((e.time - T) // 300) for e in events])
    assert (counts >= 6).sum() >= 2  # what chance does at that rate
    assert run(DeferredReleaseTimeouts(), events) == []


def test_a_storm_on_one_decode_of_six_is_a_storm() -> None:
    """Six decodes at 2 timeouts a window each; for an hour decode-3 logs 24 a window (12x its
    own normal). The six together went from 12 to 34: under 4x their sum, and nothing was
    raised."""
    events: list[Event] = []
    for index in range(6):
        node = f"decode-{index}"
        events += steady(2, hours=6, node=node, first_room=index * 100_000)
    storm = [
        timeout(T + 4 * 3600 + k * 300 + 10 * i, 900_000 + k * 100 + i, "decode-3")
        for k in range(12)
        for i in range(22)
    ]
    (finding,) = run(DeferredReleaseTimeouts(), events + storm)
    assert finding.node == "decode-3" and finding.severity == "warning"
    assert T + 4 * 3600 < finding.time <= T + 5 * 3600
    assert "on decode-3" in finding.summary and "its own baseline of 2.0" in finding.summary
    # The others' routine timeouts in its windows are not the storm's (blind review 51 D7: a
    # storm on one decode said to be "across 3 nodes").
    assert "across" not in finding.summary
    assert not any(f"decode-{i}" in finding.summary for i in (0, 1, 2, 4, 5))


def test_timeouts_routine_from_the_first_line_are_the_normal_not_a_storm():
    """Lost drain acks make timeouts routine on some deployments: five in every window from
    the first line were a warning against the prior, before any baseline could exist."""
    assert run(DeferredReleaseTimeouts(), steady(5, hours=3)) == []
    # The same rate after a quiet hour is a rise, and still a storm.
    late = steady(5, hours=1, first_room=10_000)
    for event in late:
        event.time = (event.time or 0.0) + 3600
    (finding,) = run(DeferredReleaseTimeouts(), [timeout(T + 10, 1), *late])
    assert finding.time == T + 3600 + 300


def test_a_storm_over_most_of_the_first_hour_is_still_a_storm():
    """A storm from the first line that ends before the hour does is not the hour's normal:
    45 minutes of it, then quiet, is one warning at its first window."""
    storm = steady(16, hours=1)[: 16 * 9]
    findings = run(DeferredReleaseTimeouts(), storm + quiet_hours(2))
    assert [(f.severity, f.time) for f in findings] == [("warning", T + 300)]


def test_a_storm_that_begins_after_the_logs_and_outlasts_the_first_hour_is_a_storm():
    """Logs that begin a quarter hour before the storm (a responder's last rotated file, the
    small abort-race scenario): the hour's median is the storm, its first third is not."""
    storm = steady(16, hours=1, first_room=20_000)[: 16 * 10]
    for event in storm:
        event.time = (event.time or 0.0) + 900
    findings = run(DeferredReleaseTimeouts(), [timeout(T + 10, 1), *storm, *quiet_hours(3)[6:]])
    assert [(f.severity, f.time) for f in findings] == [("warning", T + 900 + 300)]


def test_a_storm_that_fills_the_first_hour_does_not_hide_the_next_one_for_hours():
    """An hour of storm from the first line cannot be told from a normal, but it starts the
    baseline as one value: the same storm again two quiet hours later is still a storm."""
    first = steady(16, hours=1)
    again = steady(16, hours=1, first_room=50_000)[: 16 * 3]
    for event in again:
        event.time = (event.time or 0.0) + 3 * 3600
    quiet = [e for e in quiet_hours(3) if (e.time or 0.0) >= T + 3600]
    findings = run(DeferredReleaseTimeouts(), first + quiet + again)
    assert ("warning", T + 3 * 3600 + 300) in [(f.severity, f.time) for f in findings]


def _over_an_hour_from_the_first_line() -> list[Event]:
    """16 timeouts a window for 75 minutes from the first line, then two quiet hours."""
    storm = steady(16, hours=2)[: 16 * 15]
    quiet = [e for e in quiet_hours(4) if (e.time or 0.0) >= T + 75 * 60]
    return sorted(storm + quiet, key=lambda e: e.time or 0.0)


def test_a_storm_from_the_first_line_lasting_over_an_hour_is_found_once_the_normal_shows():
    """The warm-up cannot tell an hour of storm from a normal; the hour after it can. Logs a
    responder pulls after a page often begin just before the storm, and one that ran on from
    them for 75 minutes raised nothing while the summary called it below the floors (blind
    review): it is a warning at its first window, raised when the hour after it has shown the
    normal (not before: live, that is the earliest it can be told)."""
    findings = run(DeferredReleaseTimeouts(), _over_an_hour_from_the_first_line())
    assert [(f.severity, f.time) for f in findings] == [("warning", T + 300)]
    (finding,) = findings
    assert finding.raised_at is not None and finding.raised_at >= T + 2 * 3600  # two hours in
    # Without looking back, as before: nothing.
    assert (
        run(DeferredReleaseTimeouts({"hindsight_windows": 0}), _over_an_hour_from_the_first_line())
        == []
    )
    # A rate from the first line that goes on is the normal still.
    assert run(DeferredReleaseTimeouts(), steady(16, hours=4)) == []


def test_a_storm_rising_from_the_first_line_for_90_minutes_is_found_looking_back():
    """Blind review 51 D3: 3, then 6, then 10 timeouts a window from the first line for 90
    minutes, then two an hour. Looking back, the warm-up was judged by a detector that learned
    from it as it went: the rising first windows lifted the normal each later one was judged
    against, and nothing was raised. Judged against the normal that followed, as it was, the
    storm is a warning."""
    first = [timeout(T + 5 + 100 * k, k) for k in range(3)]
    first += [timeout(T + 305 + 50 * k, 10 + k) for k in range(6)]
    storm = [timeout(T + 605 + 30 * k, 100 + k) for k in range(10 * 16)]
    after = [timeout(T + 5400 + 1800 * k + 7, 1_000 + k) for k in range(9)]
    events = sorted(first + storm + after + quiet_hours(6), key=lambda e: e.time or 0.0)
    findings = run(DeferredReleaseTimeouts(), events)
    assert [f.severity for f in findings] == ["warning"]
    assert findings[0].time is not None and findings[0].time < T + 3600


def test_looking_back_at_the_warm_up_goes_on_from_the_detectors_saved_state():
    events = _over_an_hour_from_the_first_line()
    first = DeferredReleaseTimeouts()
    pipeline = DetectionPipeline(detectors=[first], raise_errors=True)
    half = next(i for i, e in enumerate(events) if (e.time or 0.0) >= T + 90 * 60)
    assert [f for e in events[:half] for f in pipeline.process(e)] == []
    assert first.hindsight_
    second = DeferredReleaseTimeouts.from_state(json.loads(json.dumps(first.to_state())))
    resumed = DetectionPipeline(detectors=[second], raise_errors=True)
    resumed.context.now = pipeline.context.now
    findings = [f for e in events[half:] for f in resumed.process(e)] + resumed.finish()
    assert [(f.severity, f.time) for f in findings] == [("warning", T + 300)]


def test_a_warm_up_cut_by_a_restart_of_the_detector_goes_on_from_its_state():
    """The held windows are learned state: a detector saved and loaded mid-hour judges them."""
    events = sorted(steady(16, hours=1)[: 16 * 9] + quiet_hours(2), key=lambda e: e.time or 0.0)
    first = DeferredReleaseTimeouts()
    pipeline = DetectionPipeline(detectors=[first], raise_errors=True)
    half = len(events) // 3
    assert [f for e in events[:half] for f in pipeline.process(e)] == []
    assert first.held_
    second = DeferredReleaseTimeouts.from_state(json.loads(json.dumps(first.to_state())))
    resumed = DetectionPipeline(detectors=[second], raise_errors=True)
    resumed.context.now = pipeline.context.now
    findings = [f for e in events[half:] for f in resumed.process(e)] + resumed.finish()
    assert [(f.severity, f.time) for f in findings] == [("warning", T + 300)]


def test_the_same_room_logged_by_every_tp_rank_counts_once():
    lines = [timeout(T + 7200 + k, 1000 + k // 8) for k in range(32)]  # 4 rooms x 8 ranks
    assert run(DeferredReleaseTimeouts(), quiet_hours() + lines) == []


def test_storm_with_checksum_mismatches_is_critical_and_escalation_is_re_raised():
    start = T + 6 * 3600
    storm = [timeout(start + 5 * k, 1000 + k) for k in range(120)]
    mismatch = ev(
        "checksum_mismatch",
        "decode-0",
        start + 400,
        rid="m",
        bootstrap_room="77",
        expected="0x1",
        got="0x2",
    )
    findings = run(DeferredReleaseTimeouts(), quiet_hours() + storm + [mismatch])
    assert [f.severity for f in findings] == ["warning", "critical"]
    assert findings[1].evidence["mismatches"] == 1


@pytest.mark.parametrize("after_minutes", [4, 12, 40])
def test_a_mismatch_in_the_quiet_windows_after_a_storm_turns_it_critical(
    after_minutes: int,
) -> None:
    """Blind review 11c: a late write lands in pages re-let after a timeout, and the request
    reading them fails its checksum after the storm, not in it. A mismatch five minutes after
    the storm's last timeout left the storm a warning. Within the storm's gap of quiet windows
    (three) it turns critical; 40 minutes on, the storm is over and the mismatch is its own
    finding's."""
    start = T + 6 * 3600
    storm = [timeout(start + 5 * k, 1000 + k) for k in range(120)]  # 10 minutes
    at = start + 600 + after_minutes * 60
    mismatch = ev(
        "checksum_mismatch", "decode-0", at, rid="m", bootstrap_room="77", expected="0x1", got="0x2"
    )
    findings = run(DeferredReleaseTimeouts(), quiet_hours() + storm + [mismatch])
    if after_minutes == 40:
        assert [f.severity for f in findings] == ["warning"]
        return
    assert [f.severity for f in findings] == ["warning", "critical"]
    turned = findings[1]
    assert turned.evidence["mismatches"] == 1 and turned.evidence["rule"] == "corrupt_after"
    assert turned.time == at - at % 300 + 300  # when the window holding it closed
    assert turned.evidence["window_start"] == iso_time(start)
    assert "1 sign of corrupt KV" in turned.summary
    assert turned.dedup_key != findings[0].dedup_key


def test_storm_with_kv_canary_violations_is_critical_each_slot_counted_once():
    """Review (abort race): the storm during which the canary caught 19 overwritten pages, and
    most responses were exposed, stayed a warning: only checksum and metadata mismatches
    raised it. A violation is the same proof; every TP rank may report its slot."""
    start = T + 6 * 3600
    storm = [timeout(start + 5 * k, 1000 + k) for k in range(120)]
    violation = {"launch_tag": "TAIL_K_FULL", "fail_reason": "verify_chain_hash", "position": 9}
    canary = [
        ev("kv_canary_violation", "decode-0", start + 400, slot_idx=18433, **violation)
        for _ in range(8)  # one slot, eight ranks
    ] + [ev("kv_canary_violation", "decode-0", start + 410, slot_idx=7, **violation)]
    findings = run(DeferredReleaseTimeouts(), quiet_hours() + storm + canary)
    assert [f.severity for f in findings] == ["warning", "critical"]
    assert findings[1].evidence["mismatches"] == 2
    assert "2 signs of corrupt KV alongside" in findings[1].summary


def _burst(start: float, rooms: int, first_room: int) -> list[Event]:
    """`rooms` timeouts spread over the 5-minute window that begins at `start`."""
    return [timeout(start + 10 + 280 * k / rooms, first_room + k) for k in range(rooms)]


def test_a_storm_that_dips_under_the_bar_for_a_few_windows_is_still_one_storm():
    start = T + 6 * 3600
    # Firing windows with one, two and three quiet windows between them: one storm.
    fired = [0, 2, 5, 9]
    storm = [e for n, w in enumerate(fired) for e in _burst(start + 300 * w, 8, 1000 + 10 * n)]
    findings = run(DeferredReleaseTimeouts(), quiet_hours() + storm)
    assert [f.time for f in findings] == [start + 300]
    # Four quiet windows end it: the next burst is a storm of its own.
    again = _burst(start + 300 * 14, 8, 2000)
    findings = run(DeferredReleaseTimeouts(), quiet_hours() + storm + again)
    assert [f.time for f in findings] == [start + 300, start + 300 * 15]


def test_a_mismatch_while_the_storm_dips_makes_the_storm_critical_as_its_window_closes():
    """Not when the storm fires again (it may not): the quiet window is still the storm's."""
    start = T + 6 * 3600
    storm = _burst(start, 8, 1000) + _burst(start + 900, 8, 1100)  # firing, 2 quiet, firing
    mismatch = ev("metadata_corruption", "decode-0", start + 400, bootstrap_room="5")
    findings = run(DeferredReleaseTimeouts(), quiet_hours() + storm + [mismatch])
    assert [(f.severity, f.time) for f in findings] == [
        ("warning", start + 300),
        ("critical", start + 600),
    ]


def test_transfer_failure_storm_outlasts_a_quiet_window_or_two():
    start = T + 30_000
    bursts = [
        failed(start + 300 * w + 10 + 20 * k, 100 * w + k) for w in (0, 2, 4) for k in range(12)
    ]
    (finding,) = run(TransferFailureStorm(), bursts)
    assert finding.time == start + 300


def test_timeout_share_from_counters_against_a_baseline_of_drained_releases():
    events = []
    drained = timeouts = 0.0
    for k in range(24):  # two quiet hours: 40 drained, 2 timeouts per window (5%)
        t = T + 300 * k + 150
        drained += 40
        timeouts += 2
        events += [counter(t, drained, "drained"), counter(t, timeouts, "timeout")]
    t = T + 300 * 24 + 150  # then 20 drained, 30 timeouts: 60%
    events += [counter(t, drained + 20, "drained"), counter(t, timeouts + 30, "timeout")]
    (finding,) = run(DeferredReleaseTimeouts(), events)
    assert finding.evidence["timeout_share"] == 0.6
    assert finding.evidence["drained"] == 20 and finding.evidence["timeouts"] == 30
    # 30 timeouts against a baseline of 2 per window trips the count rule as well.
    assert finding.evidence["score"] >= 1.0


def test_counters_of_several_tp_ranks_are_not_added_up():
    events = []
    for tp in range(8):
        events += [counter(T + 10, 0, "timeout", tp), counter(T + 250, 3, "timeout", tp)]
    # Each of 8 ranks reports the same 3 timeouts in one window: 3 is below the volume floor
    # of 5, while the 24 of a naive sum would be a storm.
    assert run(DeferredReleaseTimeouts(), events) == []


def test_held_gauge_rising_far_above_its_baseline():
    events = [held(T + 60 * k, 1.0) for k in range(120)]  # two hours at 1 held
    events += [held(T + 7200 + 60 * k, 40.0) for k in range(5)]
    (finding,) = run(DeferredReleaseTimeouts(), events)
    assert finding.evidence["rule"] == "held" and finding.evidence["held"] == 40.0


def test_a_hold_rising_after_it_fired_is_said_at_its_peak() -> None:
    """Blind review 51 D6: a held gauge that fired at 8 and rose to 60 was said as "up to 8
    requests' pages held", the first window's reading; the whole storm says its peak, and a
    hold is not told to raise the release timeout, which would hold pages longer."""
    events = [held(T + 60 * k, 0.0) for k in range(120)]
    events += [held(T + 7200 + 300 * k, value) for k, value in enumerate((8.0, 24.0, 60.0, 60.0))]
    events += [held(T + 8400 + 300 * k, 0.0) for k in range(12)]
    findings = _revised(events)
    assert findings and findings[0].evidence["rule"] == "held"
    said = findings[0].summary
    assert "up to 60 requests' pages held" in said, said
    assert findings[0].evidence["storm"]["held"] == 60.0
    assert "raise the release timeout" not in said


def test_the_node_named_is_the_one_whose_releases_went_wrong_by_the_rule_that_fired():
    # decode-0 times out now and then; decode-1's pages pile up, then its releases fail. The
    # finding names decode-1 each time, not the first node by name or by timeouts.
    quiet = [timeout(T + 600 * k + 5, 500 + k, "decode-0") for k in range(12)]
    piling = [held(T + 60 * k, 1.0, "decode-1") for k in range(120)]
    piling += [held(T + 7200 + 60 * k, 40.0, "decode-1") for k in range(5)]
    (by_held,) = run(DeferredReleaseTimeouts(), quiet + piling)
    assert (by_held.evidence["rule"], by_held.node) == ("held", "decode-1")
    failing = [
        ev(
            "deferred_release",
            "decode-1",
            T + 7200 + 20 * k,
            bootstrap_room=str(900 + k),
            outcome="error",
            seconds=1.0,
        )
        for k in range(12)
    ]
    (by_errors,) = run(
        DeferredReleaseTimeouts(), quiet + [timeout(T + 7210, 7, "decode-0")] + failing
    )
    assert (by_errors.evidence["rule"], by_errors.node) == ("errors", "decode-1")


# -- transfer failure storm ---------------------------------------------------------------------


def failed(t: float, room: int, side: str = "decode") -> Event:
    node = "decode-0" if side == "decode" else "prefill-0"
    return ev(
        "transfer_failed",
        node,
        t,
        rid=f"r{room}",
        bootstrap_room=str(room),
        side=side,
        stage="transfer",
        reason="Aborted by AbortReq.",
    )


def test_transfer_failure_storm_fires_once_and_scattered_failures_do_not():
    scattered = [failed(T + 700 * k, k) for k in range(30)]
    assert run(TransferFailureStorm(), scattered) == []
    storm = [failed(T + 30_000 + 2 * k, 1000 + k) for k in range(300)]  # 10 minutes
    (finding,) = run(TransferFailureStorm(), scattered + storm)
    assert finding.severity == "warning" and finding.evidence["failures"] == 150
    assert finding.runbook == "KVWatchTransferFailureStorm"


@pytest.mark.parametrize(
    ("version", "extra", "reason", "storm"),
    [
        ("0.5.23", {}, "aborted", False),  # deferred release on by default: held, drained
        ("0.5.22", {}, "aborted", False),
        ("0.5.22", {"transfer_backend": "mooncake"}, "aborted", False),
        # Failed Mooncake sends confirmed as drained until 0.5.22: the race stays open, stated
        # on or not (blind review 34 D5); NIXL and MORI until 0.5.23.
        ("0.5.21", {}, "aborted", True),
        ("0.5.21", {"transfer_backend": "mooncake"}, "aborted", True),
        ("0.5.21", {"deferred_release": True}, "aborted", True),
        ("0.5.22", {"transfer_backend": "nixl"}, "aborted", True),
        ("0.5.23", {"transfer_backend": "nixl"}, "aborted", False),
        ("0.5.23", {"deferred_release": False}, "aborted", True),  # turned off
        ("0.5.21", {"transfer_backend": "mori"}, "aborted", True),  # MORI from 0.5.22
        ("0.5.19", {}, "aborted", True),  # the abort race is open
        (None, {}, "aborted", True),  # not known to hold them
        ("0.5.23", {}, "transport", True),  # not a client's abort
    ],
)
def test_clients_aborts_on_an_engine_that_holds_their_pages_are_no_storm(
    version: str | None, extra: dict[str, object], reason: str, storm: bool
) -> None:
    """Audit H2: a load test cancelled on a healthy 0.5.23 fleet, 40 aborts mid-transfer in a
    minute, each hold drained, paged as a transfer-failure storm. Deferred release holds an
    aborted transfer's pages until prefill's drain ack; what goes wrong then is a timeout,
    which `deferred_release_timeouts` judges. Before the backend's failed-send fix the ack
    comes at once and no timeout is said: the aborts are the race's condition."""
    config = [
        ev(
            "server_info",
            "decode-0",
            T,
            **({"version": version} if version else {}),
            disaggregation_mode="decode",
            role="decode",
            **extra,
        )
    ]
    quiet = [failed(T + 600 + 1200 * k, k) for k in range(12)]
    burst = [failed(T + 20_000 + k, 1000 + k) for k in range(40)]
    for event in quiet + burst:
        event.fields["reason"] = reason
    findings = run(TransferFailureStorm(), config + quiet + burst)
    assert bool(findings) is storm


@pytest.mark.parametrize(
    ("version", "severities"), [("0.5.23", ["info"]), ("0.5.19", ["warning"]), (None, ["info"])]
)
def test_the_failure_counter_alone_of_an_engine_that_holds_their_pages_is_no_page(
    version: str | None, severities: list[str]
) -> None:
    """Audit H2: with `.prom` every five minutes the counter, which counts clients' aborts with
    the rest, paged a cancelled load test. Blind review 17: silenced, a storm seen in the
    snapshots alone went unreported. On an engine that holds failed transfers' pages the
    counter alone is told, as a question (`info`) naming what it counts; on one that does
    not, it pages. Of an engine whose release no input tells, it is a question too, and says
    what counted them: not "clients' aborts", which no line showed."""
    config = [ev("server_info", "decode-0", T, version=version, role="decode")] if version else []
    counters = [failures_counter(T + 300 * k, 1.0 * k) for k in range(12)]
    counters.append(failures_counter(T + 3_900, 60.0))
    findings = run(TransferFailureStorm(), config + counters)
    assert [f.severity for f in findings] == severities
    if version is None:
        assert "only the engines' counters show" in findings[0].summary
        assert "them clients' aborts" not in findings[0].summary
    if version == "0.5.23":
        assert "counters" in findings[0].summary and "shown by no log line" in findings[0].summary
        # 60 less the 11 of the quiet hour, over the 600 s since the last scrape: half of it
        # falls in the storm's 300-s window.
        assert findings[0].evidence["failures"] == pytest.approx(49.0 / 2)


def test_a_cancelled_load_test_whose_aborts_the_logs_show_is_not_told_by_its_counter() -> None:
    """Audit H2 with its lines: the aborts the decode log shows are what the counter's rise
    counted, on 0.5.23 (pages held until drained): nothing, not even the question."""
    config = [ev("server_info", "decode-0", T, version="0.5.23", role="decode")]
    counters = [failures_counter(T + 300 * k, 1.0 * k) for k in range(12)]
    aborts = [failed(T + 3_400 + k, 5000 + k) for k in range(49)]
    for event in aborts:
        event.fields["reason"] = "aborted"  # as the parser reads `Aborted by AbortReq.`
    counters.append(failures_counter(T + 3_600, 60.0))
    quiet = [failures_counter(T + 3_600 + 300 * k, 60.0) for k in range(1, 6)]
    assert run(TransferFailureStorm(), config + counters + aborts + quiet) == []


@pytest.mark.parametrize(("version", "storm"), [("0.5.22", False), ("0.5.19", True)])
def test_aborts_before_the_first_snapshot_tells_the_version_are_judged_by_it(
    version: str, storm: bool
) -> None:
    """Blind review: SGLang's start-up lines do not state its version; the fleet's first
    `/server_info` snapshot, five minutes in, did. Asked as each line arrived, the clients'
    aborts of those five minutes (and the counter's first sample, which counts them) were
    failures on an engine not known to hold their pages: a storm at the logs' first window of
    a healthy 0.5.22 fleet. The window is judged after the warm-up, by what is known then."""
    start = [ev("server_args", "decode-0", T - 120, disaggregation_mode="decode", tp_size=8)]
    snapshot = [
        failures_counter(T + 300, 24.0),
        ev("server_info", "decode-0", T + 300, version=version, disaggregation_mode="decode"),
    ]
    busy = [failed(T + 12 * k, k) for k in range(24)]  # the first window: 24 aborts
    steady = [failed(T + 300 + 100 * k, 1000 + k) for k in range(3 * 36)]  # 3 a window, 3 h
    for event in busy + steady:
        event.fields["reason"] = "aborted"
    findings = run(TransferFailureStorm(), start + snapshot + busy + steady)
    assert [f.evidence["window_start"] for f in findings] == ([iso_time(T)] if storm else [])


@pytest.mark.parametrize(("version", "reason", "severity"), [
    (None, "aborted", "info"), ("0.5.19", "aborted", "warning"), (None, "transport", "warning"),
])  # fmt: skip
def test_aborts_on_an_engine_whose_release_nothing_tells_are_a_question_not_a_page(
    version: str | None, reason: str, severity: str
) -> None:
    """Logs alone tell no release (SGLang logs none): a cancelled load test on a healthy
    0.5.23 fleet, read without snapshots, was a storm warning. Its clients' aborts are held
    until drained from 0.5.21, and are the race's condition before: said at info, with how
    many they were; transport failures, or aborts on a release known to predate the fix,
    still warn."""
    start = [ev("server_args", "decode-0", T - 120, disaggregation_mode="decode", tp_size=8)]
    told = [ev("server_info", "decode-0", T - 60, version=version)] if version else []
    steady = [failed(T + 100 * k, k) for k in range(3 * 36)]  # 3 a window, 3 h
    burst = [failed(T + 3 * 3600 + 5 * k, 1000 + k) for k in range(40)]  # 40 in one window
    for event in burst:
        event.fields["reason"] = reason
    (finding,) = run(TransferFailureStorm(), start + told + steady + burst)
    assert finding.severity == severity
    unsure = finding.evidence["aborts_on_unknown_release"]
    assert unsure == (40 if severity == "info" else 0)


def test_a_storm_of_aborts_on_an_unknown_release_turns_into_a_page_when_transport_fails() -> None:
    """The question (clients' aborts, release unknown) is asked once a storm; when transport
    failures then carry the same storm over the bar, it pages once, and not again."""
    start = [ev("server_args", "decode-0", T - 120, disaggregation_mode="decode", tp_size=8)]
    steady = [failed(T + 100 * k, k) for k in range(3 * 36)]  # 3 a window, 3 h
    storm_at = T + 3 * 3600
    aborts = [failed(storm_at + 5 * k, 1000 + k) for k in range(40)]
    for event in aborts:
        event.fields["reason"] = "aborted"
    transport = [failed(storm_at + 300 + 5 * k, 2000 + k) for k in range(40)]  # next window
    more = [failed(storm_at + 600 + 5 * k, 3000 + k) for k in range(40)]  # and the one after
    findings = run(TransferFailureStorm(), start + steady + aborts + transport + more)
    assert [(f.severity, f.evidence["window_start"]) for f in findings] == [
        ("info", iso_time(storm_at)),
        ("warning", iso_time(storm_at + 300)),
    ]


@pytest.mark.parametrize(("after", "storm"), [(None, False), ("0.5.23", False), ("0.5.19", True)])
def test_a_restarted_engine_of_unknown_release_holds_pages_as_its_release_before_did(
    after: str | None, storm: bool
) -> None:
    """Blind review (a rolling restart of a healthy 0.5.22 fleet, snapshots hourly): after the
    restart, the node's release was unknown until the next snapshot, and its clients' aborts,
    twenty a window, were failures against a baseline without them: a storm. The release it
    ran before answers until a snapshot says otherwise; a rollback below deferred release
    (0.5.19) does open the race, and its aborts then count."""
    first = ev("server_args", "decode-0", T - 120, disaggregation_mode="decode", tp_size=8)
    known = ev("server_info", "decode-0", T, version="0.5.22")
    restart = ev("server_args", "decode-0", T + 7_200, disaggregation_mode="decode", tp_size=8)
    told = [ev("server_info", "decode-0", T + 7_260, version=after)] if after else []
    aborts = [failed(T + 15 * k, k) for k in range(4 * 240)]  # 20 a window for 4 h
    for event in aborts:
        event.fields["reason"] = "aborted"
    findings = run(TransferFailureStorm(), [first, known, restart, *told, *aborts])
    assert bool(findings) is storm


def test_a_failed_request_logged_by_both_sides_counts_once():
    def both_sides(rooms: int) -> list[Event]:
        return [
            failed(T + 100 + k, 1000 + k, side)
            for k in range(rooms)
            for side in ("decode", "prefill")
        ]

    # 6 failed requests, 12 lines: below the volume floor of 10.
    assert run(TransferFailureStorm(), both_sides(6)) == []
    # 12 failed requests, 24 lines: 12 / (5 x prior 2) = 1.2 >= 1.
    (finding,) = run(TransferFailureStorm(), both_sides(12))
    assert finding.evidence["failures"] == 12


def test_counters_are_summed_within_a_role_not_across_roles():
    def count(node: str, role: str, t: float, value: float) -> Event:
        return failures_counter(t, value, node, role)

    events = []
    for node, role in (("decode-0", "decode"), ("decode-1", "decode"), ("prefill-0", "prefill")):
        events.append(count(node, role, T + 10, 0.0))
    # Each decode node failed 7 requests; prefill saw all 14 of them from its side.
    events += [
        count("decode-0", "decode", T + 200, 7.0),
        count("decode-1", "decode", T + 200, 7.0),
        count("prefill-0", "prefill", T + 200, 14.0),
    ]
    (finding,) = run(TransferFailureStorm(), events)
    assert finding.evidence["failures"] == 14


def test_an_increase_between_sparse_snapshots_is_spread_over_the_time_between_them():
    # 120 failures over two hours between two saved snapshots: 5 per 5-minute window.
    assert (
        run(TransferFailureStorm(), [failures_counter(T, 0.0), failures_counter(T + 7200, 120.0)])
        == []
    )
    # 120 failures between two scrapes 15 s apart: a storm.
    (finding,) = run(
        TransferFailureStorm(), [failures_counter(T, 0.0), failures_counter(T + 15, 120.0)]
    )
    assert finding.evidence["failures"] == 120


def test_a_snapshot_after_a_logged_storm_does_not_count_it_again_in_its_own_window():
    # Hourly snapshots; a 10-minute storm of 240 failures in the logs between two of them.
    storm = [failed(T + 1800 + 2.5 * k, 1000 + k) for k in range(240)]
    snapshots = [
        failures_counter(T, 0.0),
        failures_counter(T + 3600, 240.0),
        failures_counter(T + 7200, 240.0),
    ]
    (finding,) = run(TransferFailureStorm(), storm + snapshots)
    assert finding.time == T + 2100  # the storm's window, not the snapshot's an hour on
    # Without the lines, the snapshots are all there is: their hourly average, 20 a window,
    # in the window the later one lands in.
    (alone,) = run(TransferFailureStorm(), snapshots)
    assert alone.time == T + 3900 and alone.evidence["failures"] == 20
    # The logs missed some: what they missed is still spread.
    missed = [failures_counter(T, 0.0), failures_counter(T + 3600, 480.0)]
    (first, second) = run(TransferFailureStorm(), storm + missed)
    assert second.time == T + 3900 and second.evidence["failures"] == 20


def test_deferred_release_counters_are_not_counted_again_after_the_logged_timeouts():
    storm = [timeout(T + 1800 + 10 * k, 2000 + k) for k in range(120)]  # 20 minutes
    snapshots = [counter(T, 0.0, "timeout"), counter(T + 3600, 120.0, "timeout")]
    findings = run(DeferredReleaseTimeouts(), quiet_hours(1) + storm + snapshots)
    assert [f.time for f in findings] == [T + 2100]


def test_a_counter_series_created_by_its_first_increments_counts_them() -> None:
    """Audit X (0.5.23 `metrics_collector`): SGLang creates a labelled counter's series at its
    first increment, so the scrapes before a first-ever storm carry no `outcome="timeout"`
    series at all. Taken as a first sample, its 33 timeouts were a baseline, and the storm
    never found. The node's held gauge, in every scrape, says it was scraped before."""
    scrapes = [T + 60 * k for k in range(30)]
    quiet = [held(t, 0.0) for t in scrapes] + [
        counter(t, 5.0 * k, "drained") for k, t in enumerate(scrapes)
    ]
    storm_at = scrapes[-1] + 60
    storm = [held(storm_at, 0.0), counter(storm_at, 150.0, "drained")]
    storm.append(counter(storm_at, 33.0, "timeout"))
    (finding,) = run(DeferredReleaseTimeouts(), quiet + storm)
    assert finding.evidence["timeouts"] == 33
    # A node seen for the first time: its counters' values are what it counted before anyone
    # looked, however large, and no storm.
    assert run(DeferredReleaseTimeouts(), storm) == []
    # Transfer failures likewise, the node known from another of its series.
    later = [
        ev(
            "metric",
            "prefill-0",
            T,
            name="sglang:max_total_num_tokens",
            value=681_280.0,
            labels={"engine_type": "prefill"},
            signal="pool_tokens",
            role="prefill",
        ),
        failures_counter(T + 315, 120.0, node="prefill-0", role="prefill"),
    ]
    assert run(TransferFailureStorm(), later[1:]) == []  # a first sample of an unknown node
    (storm_finding,) = run(TransferFailureStorm(), later)
    assert storm_finding.evidence["failures"] > 0


def test_a_new_series_counts_no_timeout_its_logged_storm_already_counted() -> None:
    """Audit M (0.5.22, two storms an hour apart around a restart, hourly snapshots): the
    first scrape after the first storm holds the timeout series for the first time. Counted
    from 0 since the scrape before it, without the logs' own 120 lines taken off, it put a
    sixth of them in the scrape's window; the storm then seemed to go on past the restart and
    the second one, 15 minutes later, was never raised."""
    quiet = quiet_hours(1)
    first = [timeout(T + 1800 + 10 * k, 2000 + k) for k in range(120)]  # 20 minutes
    # Scrapes an hour apart: the first has no timeout series yet (the held gauge says it was
    # scraped); the next holds it. The second storm follows 15 minutes later.
    snapshots = [held(T, 0.0), held(T + 3600, 0.0), counter(T + 3600, 120.0, "timeout")]
    second = [timeout(T + 4500 + 10 * k, 4000 + k) for k in range(120)]
    findings = run(DeferredReleaseTimeouts(), quiet + first + snapshots + second)
    assert [f.time for f in findings] == [T + 2100, T + 4800]


def test_counter_reset_after_a_restart_is_not_a_negative_storm():
    deltas = CounterDeltas()
    assert deltas.delta("s", 100.0) == 0.0
    assert deltas.delta("s", 130.0) == 30.0
    assert deltas.delta("s", 4.0) == 4.0  # the process restarted and counted 4 since


def test_window_clock_skips_long_gaps():
    clock = WindowClock(300.0)
    clock.place(T + 10)
    assert clock.due(T + 10 * 86400, max_windows=3) == [T, T + 300, T + 600]
    assert clock.start == T + 10 * 86400


# -- telemetry anomaly --------------------------------------------------------------------------


def batch(t: float, usage: float, queue: int, throughput: float) -> Event:
    return ev(
        "decode_batch",
        "decode-0",
        t,
        running_req=40,
        token=200_000,
        token_usage=usage,
        prealloc_req=0,
        transfer_req=1,
        gen_throughput=throughput,
        queue_req=queue,
    )


def finished(t: float, finish: str = "stop", ttft: float = 0.5) -> Event:
    return ev(
        "request_finished",
        "decode-0",
        t,
        rid=f"d{t}",
        bootstrap_room=str(int(t)),
        prompt_tokens=1000,
        cached_tokens=0,
        completion_tokens=50,
        finish_type=finish,
        status_code=None if finish != "abort" else 500,
        e2e_latency=2.0,
        first_token_latency=ttft,
    )


def telemetry_stream(anomaly: bool) -> list[Event]:
    events = []
    for w in range(60):
        base = T + 300 * w
        for k in range(10):
            events.append(
                batch(
                    base + 30 * k,
                    0.5 + 0.02 * ((k + w) % 3),
                    (k + w) % 3,
                    2000 + 10 * ((k * w) % 7),
                )
            )
            for j in range(1 + (w + k) % 2):
                events.append(finished(base + 30 * k + 5 + j, ttft=0.5 + 0.05 * ((k + w) % 4)))
    if anomaly:
        base = T + 300 * 60
        for k in range(10):
            events.append(batch(base + 30 * k, 0.99, 60, 50.0))
            for j in range(5):
                events.append(finished(base + 30 * k + j, finish="abort", ttft=9.0))
    return events


def test_telemetry_anomaly_is_info_only_and_flags_the_odd_window():
    assert run(TelemetryAnomaly(), telemetry_stream(anomaly=False)) == []
    (finding,) = run(TelemetryAnomaly(), telemetry_stream(anomaly=True))
    assert finding.severity == "info" and finding.runbook == "KVWatchTelemetryAnomaly"
    assert finding.evidence["window_start"] == "2026-11-02T11:15:00.000Z"  # T + 300 min
    # The storm window: 50 finishes, all aborted, queue 60, usage 0.99, ttft 9 s.
    assert finding.evidence["score"] >= 3.0 and finding.evidence["aborted"] > 3.9


def test_telemetry_anomaly_is_deterministic_for_a_seed():
    a = run(TelemetryAnomaly(random_state=3), telemetry_stream(anomaly=True))
    b = run(TelemetryAnomaly(random_state=3), telemetry_stream(anomaly=True))
    assert [f.to_json_dict() for f in a] == [f.to_json_dict() for f in b]


def lof_models(jitter: float, duplicates: bool) -> TelemetryAnomaly:
    det = TelemetryAnomaly(min_windows=8, refit_every=8, n_neighbors=5, jitter=jitter)
    rng = random.Random(11)
    for k in range(60):
        if duplicates:
            row = [float(k % 3), 0, 0, 0, 0, 0.5, 1, 7.0, 0.3, 4]  # three distinct windows
        else:
            row = [rng.uniform(0, 9) for _ in range(10)]
        det.learn_one({"node": "decode-0", "features": row})
    return det


def sklearn_score(det: TelemetryAnomaly, features: list[float]) -> float:
    model = det.models_["decode-0"]
    assert model.lof is not None
    row = (np.asarray([features]) - model.center) / model.scale
    return float(-model.lof.score_samples(row)[0])


def test_window_scores_are_bit_identical_to_scikit_learns_local_outlier_factor() -> None:
    det = lof_models(jitter=0.01, duplicates=False)
    rng = random.Random(5)
    rows = [[rng.uniform(-2, 12) for _ in range(10)] for _ in range(200)]
    rows += [list(row) for row in det.models_["decode-0"].fit_rows[:20]]  # training windows
    for row in rows:
        assert det.score_one({"node": "decode-0", "features": row}) == sklearn_score(det, row)


def test_tied_neighbour_distances_are_scored_by_scikit_learn_itself() -> None:
    # No jitter and three distinct training windows: every distance ties with many others.
    det = lof_models(jitter=0.0, duplicates=True)
    for row in ([1.0, 0, 0, 0, 0, 0.5, 1, 7.0, 0.3, 4], [5.0, 1, 0, 2, 0, 0.9, 3, 1.0, 2.0, 0]):
        score = det.score_one({"node": "decode-0", "features": row})
        assert score == sklearn_score(det, row)


def test_without_scikit_learns_fitted_arrays_windows_are_scored_by_scikit_learn() -> None:
    from sklearn.neighbors import LocalOutlierFactor

    from detectors.telemetry_anomaly import _NoveltyScorer

    assert _NoveltyScorer.of(LocalOutlierFactor(novelty=True), np.zeros((4, 10))) is None
    det = lof_models(jitter=0.01, duplicates=False)
    row = [4.0, 1, 2, 3, 0, 0.5, 1, 7.0, 0.3, 4]
    fast = det.score_one({"node": "decode-0", "features": row})
    det.models_["decode-0"].scorer = None
    assert det.score_one({"node": "decode-0", "features": row}) == fast == sklearn_score(det, row)


# -- telemetry anomaly fed partial windows (collector.state.node_windows) ------------------------


def through_node_windows(events: list[Event], window_seconds: float = 300.0) -> list[Event]:
    """What a forensics worker ships: the node's partial windows instead of its batch lines."""
    ordered = sorted(events, key=lambda e: e.time)
    return [e for e in with_node_windows(ordered, window_seconds) if e.kind not in BATCH_KINDS]


def test_telemetry_anomaly_on_node_windows_flags_the_same_window():
    shipped = through_node_windows(telemetry_stream(anomaly=True))
    assert not any(e.kind in BATCH_KINDS for e in shipped)
    (finding,) = run(TelemetryAnomaly(input="node_windows"), shipped)
    (expected,) = run(TelemetryAnomaly(), telemetry_stream(anomaly=True))
    assert finding.evidence["window_start"] == "2026-11-02T11:15:00.000Z"  # T + 300 min
    assert finding.to_json_dict() == expected.to_json_dict()


def test_each_input_reads_only_its_own_kinds():
    raw = telemetry_stream(anomaly=True)
    both = raw + [e for e in through_node_windows(raw) if e.kind == "node_window"]
    # Handed both, each input counts every window once: the other input's events are ignored.
    for mode in ("events", "node_windows"):
        (finding,) = run(TelemetryAnomaly(input=mode), both)
        assert finding.evidence["window_start"] == "2026-11-02T11:15:00.000Z"  # T + 300 min
        # The window as it holds them (counts), not as the model scores them (log1p).
        assert finding.evidence["finished"] == pytest.approx(50)
        assert finding.evidence["batches"] == pytest.approx(10)
        assert "finished=50," in finding.summary


def test_node_windows_of_another_length_are_refused():
    shipped = through_node_windows(telemetry_stream(anomaly=False), window_seconds=60.0)
    with pytest.raises(ValueError, match="window_seconds"):
        run(TelemetryAnomaly(input="node_windows"), shipped)


def test_an_event_joins_the_window_of_the_watermark_not_of_its_own_time():
    det = TelemetryAnomaly(window_seconds=60.0, min_windows=1000, max_windows=1000)
    events = [
        ev("http_access", "decode-0", T + 100, status=200),  # the watermark: window T + 60
        finished(T + 10),  # behind: joins window T + 60 (window T never opens)
        finished(T + 119),
        finished(T + 120),
        # The input goes on into the last window (a sliver of one at the end is not judged).
        ev("http_access", "decode-0", T + 170, status=200),
    ]
    pipeline = DetectionPipeline(detectors=[det], raise_errors=True)
    assert list(pipeline.run(events)) == []  # in this order, unsorted
    first, second = det.models_["decode-0"].buffer
    assert first[0] == pytest.approx(math.log1p(2)) and second[0] == pytest.approx(math.log1p(1))


@pytest.mark.parametrize("rows, k", [(30, 6), (200, 21), (512, 21)])
def test_exact_neighbours_are_the_ball_trees_bit_for_bit(rows: int, k: int) -> None:
    from sklearn.neighbors import BallTree

    from detectors.telemetry_anomaly import _exact_neighbours

    data = np.random.default_rng(rows).normal(size=(rows, 10)) * [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    found = _exact_neighbours(data, k)
    assert found is not None
    distances, indices = BallTree(data, leaf_size=30).query(data, k)
    assert np.array_equal(found[0], distances) and np.array_equal(found[1], indices)


def test_exact_neighbours_leave_ties_to_the_ball_tree() -> None:
    from detectors.telemetry_anomaly import _exact_neighbours

    grid = np.array([[float(i % 4), float(i // 4)] + [0.0] * 8 for i in range(16)])
    assert _exact_neighbours(grid, 5) is None  # neighbours one step away tie everywhere


def test_windows_are_learnt_and_scored_without_importing_scikit_learn() -> None:
    """Scikit-learn takes about a second to import; untied windows never need it."""
    code = (
        "import random, sys\n"
        "from detectors.telemetry_anomaly import TelemetryAnomaly\n"
        "det = TelemetryAnomaly(min_windows=8, refit_every=8, n_neighbors=5)\n"
        "rng = random.Random(11)\n"
        "for _ in range(60):\n"
        "    det.learn_one({'node': 'n', 'features': [rng.uniform(0, 9) for _ in range(10)]})\n"
        "score = det.score_one({'node': 'n', 'features': [4.0] * 10})\n"
        "assert det.models_['n'].fit_x is not None and score > 0\n"
        "print(any(name.split('.')[0] == 'sklearn' for name in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_exact_neighbours_of_every_row_need_no_edge() -> None:
    from sklearn.neighbors import BallTree

    from detectors.telemetry_anomaly import _exact_neighbours

    data = np.random.default_rng(7).normal(size=(9, 10))
    found = _exact_neighbours(data, 9)
    assert found is not None
    distances, indices = BallTree(data, leaf_size=30).query(data, 9)
    assert np.array_equal(found[0], distances) and np.array_equal(found[1], indices)


@pytest.mark.parametrize(("burst", "fires"), [(8, True), (12, True), (4, False)])
def test_a_timeout_burst_split_by_a_window_boundary_is_judged_whole(
    burst: int, fires: bool
) -> None:
    # Windows are aligned to the clock: a burst of 8 timeouts in 80 s, half each side of
    # T + 3600, is under the volume floor (5) in both windows. Judged with the quiet window
    # before it, as one window twice as long against twice the bar, it is the storm it is.
    quiet = [timeout(T + 300 * w + 7, 9000 + w) for w in range(0, 12, 3)]
    edge = T + 3600
    spread = [timeout(edge - 40 + 80 * i / burst, i) for i in range(burst)]
    findings = list(
        DetectionPipeline(detectors=[DeferredReleaseTimeouts()]).run(
            sorted(quiet + spread + [timeout(T + 7200, 99_999)], key=lambda e: e.time or 0.0)
        )
    )
    assert [f.severity for f in findings] == (["warning"] if fires else [])


def test_a_steady_rate_from_the_first_line_of_the_logs_is_no_storm() -> None:
    # 4 timeouts every 5 minutes from the start (lost drain acks as routine): under the volume
    # floor each, and no window is judged with the one before until the bar rests on history.
    steady = [timeout(T + 300 * w + 60 * i, 100 * w + i) for w in range(24) for i in range(4)]
    assert list(DetectionPipeline(detectors=[DeferredReleaseTimeouts()]).run(steady)) == []


def test_deferred_releases_failing_in_a_burst_raise_a_storm_without_any_timeout() -> None:
    # sglang-telemetry.md §5: alert on a rising held gauge or on releases failing, not on
    # `timeout` alone. 12 failed releases in one window after quiet hours, no timeout.
    def failed(t: float, room: int) -> Event:
        return ev("deferred_release", "decode-0", t, bootstrap_room=str(room), outcome="error")

    quiet = [failed(T + 900 * w + 7, 9000 + w) for w in range(8)]
    burst = [failed(T + 7200 + 20 * i, i) for i in range(12)]
    (finding,) = DetectionPipeline(detectors=[DeferredReleaseTimeouts()]).run(
        quiet + burst + [failed(T + 9000, 99_999)]
    )
    assert finding.severity == "warning" and finding.evidence["rule"] == "errors"
    assert finding.summary.startswith("Deferred KV releases failing: 12 failed")
    # A release that failed ends in an exception: a longer timeout does nothing for it (blind
    # review 51 D8: told to raise it).
    assert "raise the release timeout" not in finding.summary
    assert "failed releases end in an exception" in finding.summary


@pytest.mark.parametrize("rate", [0.05, 0.8, 1.5, 4.0, 30.0, 200.0])
def test_the_chance_of_a_count_is_poisson_s_tail(rate: float) -> None:
    """`unlikely` sums the Poisson terms itself (scipy's import is a fifth of a second of every
    run); the regularised incomplete gamma function is the reference."""
    from scipy.special import gammainc

    from detectors.storm import unlikely

    for count in range(0, int(rate * 3 + 60)):
        for chance in (1e-5, 1e-3):
            expected = count > 0 and float(gammainc(count, rate)) <= chance
            assert unlikely(count, rate, chance) == expected, (count, rate, chance)


def test_a_sliver_of_a_window_at_the_end_of_the_input_is_not_judged():
    """Audit R: the logs ended 52 s into a window, and every node's last window was "unusual"
    (few lines), dated after the logs end. A window the input covered less than half of is
    not scored; one it covered mostly still is (the storm above ends 274 s into its own)."""
    sliver = [e for e in telemetry_stream(anomaly=True) if e.time < T + 300 * 60 + 60]
    assert run(TelemetryAnomaly(), sliver) == []
    (finding,) = run(TelemetryAnomaly(), telemetry_stream(anomaly=True))
    assert finding.evidence["window_start"] == "2026-11-02T11:15:00.000Z"  # T + 300 min


def test_a_transfer_failure_storm_from_the_first_line_lasting_over_an_hour_is_found_too():
    """The look back is the storm detectors' (`StormDetector._look_back`): 12 failures a window
    for 75 minutes from the first line, then scattered ones, is a storm at its first window."""
    storm = [failed(T + 5 + 25 * k, k) for k in range(15 * 12)]
    scattered = [failed(T + 75 * 60 + 700 * k, 10_000 + k) for k in range(20)]
    findings = run(TransferFailureStorm(), storm + scattered)
    assert [(f.severity, f.time) for f in findings] == [("warning", T + 300)]


def test_a_storm_seen_only_between_far_apart_samples_is_dated_in_their_span():
    """Blind review (D3): /metrics saved every 30 minutes, the logs at ERROR (no timeout
    line). 150 timeouts between the 06:00 and 06:30 samples were judged in the window after
    06:30, where nothing was observed, as a warning, though a checksum mismatch at 06:10 lay
    inside them. The storm lies somewhere in the span: dated from its start, and the
    mismatches in the span make it critical."""
    start = T - T % 1800  # samples on the half hour
    samples = [counter(start + 1800 * k, 1.0, "timeout") for k in range(13)]  # 6 h quiet
    storm_at = start + 1800 * 13
    samples.append(counter(storm_at, 151.0, "timeout"))
    mismatch = ev("checksum_mismatch", "decode-0", storm_at - 1200, bootstrap_room="7")
    after = [counter(storm_at + 1800 * k, 151.0, "timeout") for k in range(1, 3)]
    (finding,) = run(DeferredReleaseTimeouts(), samples + [mismatch] + after)
    assert finding.severity == "critical" and finding.evidence["mismatches"] == 1
    assert finding.evidence["window_start"] == iso_time(storm_at - 1800)
    assert finding.time == storm_at - 1800 + 300
    assert "somewhere between them" in finding.summary
    # Without the mismatch, a warning, still dated in the span.
    (finding,) = run(DeferredReleaseTimeouts(), samples + after)
    assert finding.severity == "warning" and finding.time == storm_at - 1800 + 300


def _quarter_hourly(lead: float) -> tuple[list[Event], float]:
    """Six quiet hours of 15-minute samples, `lead` timeouts in the next 15 minutes (beside a
    checksum mismatch), 21 more in the 15 after; with the time of the sample after the lead."""
    scrapes = [T + 100 + 900 * k for k in range(29)]
    lead_at = scrapes[24]
    values = [0.0] * 24 + [lead, lead + 21.0] + [lead + 21.0] * 3
    samples = [counter(t, v, "timeout") for t, v in zip(scrapes, values, strict=True)]
    return [*samples, ev("checksum_mismatch", "decode-0", lead_at - 400, bootstrap_room="7")], (
        lead_at
    )


def test_a_storm_s_span_begins_at_the_span_before_it_that_already_counted_it() -> None:
    """Blind review 44 D1: decode scraped every 15 minutes, its logs without a timeout line.
    13 timeouts between two samples are 4.3 a window spread over the span, under the volume
    floor alone; the storm was found in the next span only, dated from its earlier sample as a
    warning with `mismatches: 0`, and the 13 and the mismatch beside them in no finding."""
    events, lead_at = _quarter_hourly(13.0)
    (finding,) = run(DeferredReleaseTimeouts(), events)
    first = lead_at - 900
    assert finding.severity == "critical" and finding.evidence["mismatches"] == 1
    assert finding.evidence["window_start"] == iso_time(first - (first - T) % 300)
    assert iso_time(first) in finding.summary
    # A span before it at the normal (one timeout) is no part of the storm: it is dated from
    # the later span, and the mismatch long before it leaves it a warning.
    events, lead_at = _quarter_hourly(1.0)
    (finding,) = run(DeferredReleaseTimeouts(), events)
    assert finding.severity == "warning" and finding.evidence["mismatches"] == 0
    assert finding.evidence["window_start"] == iso_time(lead_at - (lead_at - T) % 300)


def test_a_storm_s_lead_survives_a_save_and_load() -> None:
    events, lead_at = _quarter_hourly(13.0)
    events = sorted(events, key=lambda e: e.time or 0.0)
    first = DeferredReleaseTimeouts()
    pipeline = DetectionPipeline(detectors=[first], raise_errors=True)
    # Cut after the next sample: the lead's window has closed, the storm's not yet.
    cut = next(i for i, e in enumerate(events) if (e.time or 0.0) > lead_at + 900)
    assert [f for e in events[:cut] for f in pipeline.process(e)] == []
    assert first.lead_ is not None
    second = DeferredReleaseTimeouts.from_state(json.loads(json.dumps(first.to_state())))
    assert second.lead_ == first.lead_
    resumed = DetectionPipeline(detectors=[second], raise_errors=True)
    resumed.context.now = pipeline.context.now
    (finding,) = [f for e in events[cut:] for f in resumed.process(e)] + resumed.finish()
    assert finding.severity == "critical"


def test_a_held_gauge_dates_a_storm_where_it_was_read_not_back_to_the_scrape_before() -> None:
    """Blind review 28b: logs kept at ERROR level, so the storm was in the 15-minute scrapes
    alone; the held gauge fired, and the finding was dated by the timeouts counter's increase
    spread back to the scrape before, inside the quiet hours. A gauge is one instant's reading:
    the pages it counts were held then."""
    scrapes = [T + 420 + 900 * k for k in range(14)]  # 7 minutes past a window, as in the review
    quiet = []
    for k, t in enumerate(scrapes[:-1]):
        quiet += [held(t, 1.0), counter(t, 30.0 * k, "drained"), counter(t, 0.0, "timeout")]
    storm_at = scrapes[-1]
    storm = [
        held(storm_at, 40.0),
        counter(storm_at, 30.0 * 13, "drained"),
        counter(storm_at, 39.0, "timeout"),
    ]
    findings = run(DeferredReleaseTimeouts(), quiet + storm)
    assert findings and findings[0].evidence["rule"] == "held"
    window_start = storm_at - (storm_at - T) % 300
    assert findings[0].time == window_start + 300
    assert findings[0].evidence["window_start"] == iso_time(window_start)
    assert "lies somewhere between" not in findings[0].summary


def _revised(events: list[Event]) -> list:
    pipeline = DetectionPipeline(detectors=[DeferredReleaseTimeouts()], raise_errors=True)
    findings = list(pipeline.run(sorted(events, key=lambda e: e.time)))
    return pipeline.revised(findings)


def _mismatch(t: float, room: int, node: str = "decode-0", **fields) -> Event:
    return ev("checksum_mismatch", node, t, bootstrap_room=str(room), **fields)


def test_a_storm_s_finding_says_the_whole_storm_once_the_input_is_read() -> None:
    """Blind review 28b: the findings said "39 timeouts in 300s" of a 25-minute storm of
    about 190 on two nodes with 8 corruptions, and nothing said when it ended or how much."""
    storm = [
        timeout(T + 6 * 3600 + 10 * k, 1000 + k, f"decode-{k % 2}") for k in range(150)
    ]  # 25 minutes, 75 on each of two nodes
    corrupt = [_mismatch(T + 6 * 3600 + 600 + 60 * k, 5000 + k) for k in range(3)]
    warning, first = _revised(quiet_hours() + storm + corrupt)
    assert (warning.severity, first.severity) == ("warning", "critical")
    said = first.evidence["storm"]
    assert said["start"] == iso_time(T + 6 * 3600) and said["end"] == iso_time(T + 6 * 3600 + 1500)
    assert said["timeouts"] == 150 and said["nodes"] == ["decode-0", "decode-1"]
    assert said["mismatches"] == 3 and "critical_from" not in said
    assert first.summary.endswith(
        f"; the whole storm: {iso_time(T + 6 * 3600)} to {iso_time(T + 6 * 3600 + 1500)} "
        "(25 min), 150 timeouts on decode-0 and decode-1, 3 signs of corrupt KV"
    )
    # A storm of one window, all said by its finding, is left as it was said.
    (short,) = _revised(quiet_hours() + storm[:30])
    assert "whole storm" not in short.summary and "storm" not in short.evidence


def test_a_storm_s_warning_says_the_storm_until_it_turned_critical_not_its_later_mismatches():
    """Blind review (abort-race datasets): a storm's first window, with no sign of corrupt KV
    yet, was raised as a warning with "mismatches: 0", and its storm block, the whole storm
    once the input was read, said 5: the warning contradicted itself. It says the storm until
    it turned critical, and when it did; the critical finding says the whole storm."""
    begin = T + 6 * 3600
    storm = [timeout(begin + 10 * k, 1000 + k) for k in range(150)]  # 25 minutes
    # Five mismatches in the storm's fourth window (15 to 20 minutes in), none before.
    corrupt = [_mismatch(begin + 930 + 30 * k, 5000 + k) for k in range(5)]
    warning, critical = _revised(quiet_hours() + storm + corrupt)
    assert (warning.severity, critical.severity) == ("warning", "critical")
    assert warning.evidence["mismatches"] == 0
    said = warning.evidence["storm"]
    assert said["mismatches"] == warning.evidence["mismatches"]
    assert said["start"] == iso_time(begin) and said["end"] == iso_time(begin + 900)
    assert said["windows"] == 3 and said["timeouts"] == 90
    # At its first mismatch, not the window's start (blind review 45 D1).
    assert said["critical_from"] == iso_time(begin + 930)
    assert "signs of corrupt KV" not in warning.summary
    assert warning.summary.endswith(
        f"; the storm until it turned critical at {iso_time(begin + 930)}: {iso_time(begin)} to "
        f"{iso_time(begin + 900)} (15 min), 90 timeouts on decode-0 (its critical finding says "
        "the whole storm)"
    )
    whole = critical.evidence["storm"]
    assert whole["mismatches"] == 5 and whole["timeouts"] == 150
    assert whole["end"] == iso_time(begin + 1500) and "critical_from" not in whole
    # Turned critical by signs in its gap of quiet windows (after its last window over the
    # bar): the warning still says the storm as it was while a warning.
    late = [_mismatch(begin + 1560, 6000)]
    warning, critical = _revised(quiet_hours() + storm + late)
    assert (warning.severity, critical.severity) == ("warning", "critical")
    said = warning.evidence["storm"]
    assert said["mismatches"] == 0 and said["timeouts"] == 150
    assert said["critical_from"] == iso_time(begin + 1560)
    assert critical.evidence["mismatches"] == 1
    # The page names the storm's node (blind review 45 D1: it had none).
    assert critical.node == "decode-0"


def test_a_corrupt_transfer_every_rank_logs_is_one_sign() -> None:
    storm = [timeout(T + 6 * 3600 + 5 * k, 1000 + k) for k in range(60)]
    same = [_mismatch(T + 6 * 3600 + 100, 7, tp_rank=str(rank)) for rank in range(8)]
    (finding,) = _revised(quiet_hours() + storm + same)
    assert finding.evidence["mismatches"] == 1
    assert "1 signs" not in finding.summary


def test_the_pages_held_are_summed_over_one_scrape_not_with_an_older_one() -> None:
    """Blind review 28b: decode-1's 16 held of the scrape before, summed with decode-0's zero
    of the next scrape before decode-1's own zero came in, fired a window none were held in."""
    events = []
    for k in range(12):  # six hours of half-hourly scrapes, one page held now and then
        t = T + 600 + 1800 * k
        events += [held(t, float(k % 2), "decode-0"), held(t + 1, 0.0, "decode-1")]
    t = T + 600 + 1800 * 12
    events += [held(t, 8.0, "decode-0"), held(t + 1, 16.0, "decode-1")]  # a storm's pages
    (storm,) = run(DeferredReleaseTimeouts(), events)
    assert storm.evidence["held"] == 24.0
    after = [held(t + 1800, 0.0, "decode-0"), held(t + 1801, 0.0, "decode-1")]
    assert [f.time for f in run(DeferredReleaseTimeouts(), events + after)] == [storm.time]


def test_a_slot_overwritten_twice_is_two_signs_of_corrupt_kv_its_re_report_one():
    """Blind review 34 D3: a re-let slot overwritten again is another violation (its summary
    stores another chain hash); only the same one reported again (another rank) is one."""
    start = T + 6 * 3600
    storm = [timeout(start + 5 * k, 1000 + k) for k in range(120)]
    violation = {"launch_tag": "TAIL_K_FULL", "fail_reason": "verify_chain_hash", "position": 40}
    canary = [
        ev("kv_canary_violation", "decode-0", start + 400, slot_idx=0, **violation, **hashed)
        for hashed in (
            {"stored_chain_hash": "0x00002fe9daf1beef"},
            {"stored_chain_hash": "0x00002fe9daf1beef"},  # another rank
            {"stored_chain_hash": "0x00003a11da02beef"},
        )
    ]
    findings = run(DeferredReleaseTimeouts(), quiet_hours() + storm + canary)
    assert [f.severity for f in findings] == ["warning", "critical"]
    assert findings[1].evidence["mismatches"] == 2


def test_a_storm_s_last_timeouts_seconds_past_its_last_window_are_the_storm_s() -> None:
    """Blind review 45 D4: "the whole storm ... to 12:40:00, 24 timeouts" of a storm whose 25th
    came at 12:40:06, at the same spacing as the rest; a timeout a window later, as seldom as
    the normal's (one in 20 minutes), is not the storm's."""
    begin = T + 6 * 3600
    storm = [timeout(begin + 10 * k, 1000 + k) for k in range(150)]  # to begin + 1490
    last, later = timeout(begin + 1506, 2000), timeout(begin + 2110, 2001)
    (finding,) = _revised(quiet_hours() + storm + [last, later])
    said = finding.evidence["storm"]
    assert said["timeouts"] == len(storm) + 1
    assert said["end"] == iso_time(begin + 1800)
    # Said against the floor it was scored against, and the deployment's own normal beside it
    # (blind review 45 D5: "a baseline of 1.0" after hours of one timeout in 20 minutes).
    assert "against a baseline of 1.0 (its floor; the deployment had 0.25 a window before)" in (
        finding.summary
    )


def test_a_storm_only_counters_saw_names_the_node_whose_releases_timed_out() -> None:
    """Blind review 45 D6: decode-1's 60 timeouts between two scrapes 15 minutes apart, decode-0
    counting only drained releases, read "across 2 nodes (most on decode-1)", and the storm
    "to 11:05" after the sample at 11:00 that bounds it."""

    def releases(t: float, node: str, outcome: str, value: float) -> Event:
        labels = {"engine_type": "decode", "outcome": outcome, "tp_rank": "0"}
        name = "sglang:decode_deferred_kv_release_total"
        return ev("metric", node, t, name=name, labels=labels, value=value, role="decode")

    scrapes = [T + 900 * k for k in range(27)]
    events = [releases(t, n, "drained", float(k)) for k, t in enumerate(scrapes) for n in NODES]
    events += [releases(t, "decode-1", "timeout", 60.0) for t in scrapes if t > T + 6 * 3600]
    (finding,) = _revised(events)
    assert finding.node == "decode-1" and finding.evidence["nodes"] == 1
    assert "across" not in finding.summary
    storm = finding.evidence["storm"]
    assert storm["timeouts"] == 60 and storm["nodes"] == ["decode-1"]
    before, after = (t for t in scrapes if T + 6 * 3600 - 900 < t <= T + 6 * 3600 + 900)
    assert (storm["start"], storm["end"]) == (iso_time(before), iso_time(after))


NODES = ("decode-0", "decode-1")
