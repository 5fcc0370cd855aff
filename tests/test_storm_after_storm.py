"""A storm hours after another is a second storm (blind review 27): the first one's windows,
still inside the six hours the steady-rise rule looks at, fired again as "timing out steadily"
long after it ended, which held its episode open and hid the next storm inside it."""

from __future__ import annotations

import pytest

from detectors.deferred_release_timeouts import DeferredReleaseTimeouts
from detectors.transfer_failure_storm import TransferFailureStorm
from tests.test_storm_reporting import HOUR, T, node_up, run, steady


def deployment(hours: float) -> list:
    """Two decodes with a timeout every twenty minutes (their normal)."""
    events = []
    for index, node in enumerate(("decode-0", "decode-1")):
        up = node_up(node, T, T + hours * HOUR, 1, index * 1_000_000)
        events += [e for e in up if e.kind not in ("deferred_release", "transfer_failed")]
        events += [
            e
            for e in up
            if e.kind in ("deferred_release", "transfer_failed") and (e.time or 0.0) % 1200 < 300
        ]
    return events


def storm(start: float, room: int) -> list:
    return steady("decode-0", start, start + 900, 30, room) + steady(
        "decode-1", start, start + 900, 30, room + 100_000
    )


def test_one_storm_is_one_finding_however_long_the_logs_go_on() -> None:
    events = deployment(14) + storm(T + 4 * HOUR, 5_000_000)
    findings = run(DeferredReleaseTimeouts(), events)
    assert [f.time for f in findings] == [T + 4 * HOUR + 300]


@pytest.mark.parametrize("gap_hours", [2, 4, 6])
def test_a_second_storm_hours_after_the_first_is_raised(gap_hours: float) -> None:
    first, second = T + 4 * HOUR, T + (4 + gap_hours) * HOUR
    events = deployment(14) + storm(first, 5_000_000) + storm(second, 6_000_000)
    findings = run(DeferredReleaseTimeouts(), events)
    assert [f.time for f in findings] == [first + 300, second + 300]
    failures = run(TransferFailureStorm(), events)
    assert [f.time for f in failures] == [first + 300, second + 300]
