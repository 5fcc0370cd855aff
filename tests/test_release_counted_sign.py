"""Decode's release counters date a sign of the race at their sample only where they counted
more than the lines logged since the sample before (blind review 53 D3: a timeout logged
35 minutes before the logs end, counted again by the last scrape, read as the race going on
to the end, "Possibly not over")."""

from __future__ import annotations

import pytest

from collector.events import Event
from collector.forensics.driver import _Evidence
from collector.state.lost_transfers import LostTransfers

T = 1_788_260_400.0  # a scrape


def _sample(at: float, value: float) -> Event:
    fields = {
        "signal": "deferred_release_total",
        "labels": {"outcome": "timeout", "tp_rank": "0"},
        "value": value,
    }
    return Event("metric", "decode-0", at, "decode-0.prom", fields)


def _timeout(at: float, room: int) -> Event:
    fields = {"bootstrap_room": str(room), "outcome": "timeout", "seconds": 30.0}
    return Event("deferred_release", "decode-0", at, "decode-0.log", fields)


@pytest.mark.parametrize(("counted", "a_sign"), [(1.0, False), (3.0, True)])
def test_a_counter_counting_what_the_lines_logged_is_no_sign_of_its_own(
    counted: float, a_sign: bool
) -> None:
    evidence = _Evidence(None)
    evidence.release_counter(_sample(T, 0.0))
    evidence.deferred_release(_timeout(T + 1500, 7), LostTransfers())
    evidence.deferred_release(_timeout(T + 1500, 7), LostTransfers())  # another TP rank's line
    evidence.release_counter(_sample(T + 3600, counted))
    assert evidence.race_spans["timeout"]["decode-0"] == (T + 1500, T + 1500)
    assert ("decode-0" in evidence.race_spans.get("counted", {})) is a_sign


def test_a_timeout_logged_before_the_sample_before_does_not_cover_a_later_increase() -> None:
    evidence = _Evidence(None)
    evidence.deferred_release(_timeout(T - 60, 7), LostTransfers())
    evidence.release_counter(_sample(T, 1.0))
    evidence.release_counter(_sample(T + 3600, 2.0))
    assert evidence.race_spans["counted"]["decode-0"] == (T + 3600, T + 3600)
