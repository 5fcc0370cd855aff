"""Exposures in periods: two incidents days apart are two windows, not one.

Blind review 31c: a prefill pool below context for a day and a half, mended by a restart, then
a rollback three days later that broke it again; the report said one window of five days."""

from __future__ import annotations

from typing import Any

from collector.forensics.report import _headline, exposure_periods, periods_line

CONTEXT = 1_048_576


def _summary(times: list[str | None], pools: list[tuple[str, int]]) -> dict[str, Any]:
    config = [
        {"time": at, "max_total_num_tokens": pool, "prompt_capacity": pool, "context_len": CONTEXT}
        for at, pool in pools
    ]
    dated = sorted(t for t in times if t)
    return {
        "exposure": {
            "count": len(times),
            "requests": [{"time": t, "bootstrap_room": str(i)} for i, t in enumerate(times)],
            "first": dated[0] if dated else None,
            "last": dated[-1] if dated else None,
            "undated": len(times) - len(dated),
        },
        "findings": [],
        "nodes": {"prefill-0": {"role": "prefill", "config": config}},
        "requests": {"total": 400, "nodes_not_judged": [], "pd_role_missing": None},
        "input": {
            "first_time": "2026-08-24T00:00:00.000Z",
            "last_time": "2026-08-31T00:00:00.000Z",
            "dropped_by_reason": {},
        },
        "abort_signals": {},
    }


ROLLBACK = [
    ("2026-08-24T00:00:00.000Z", 681_280),  # below context
    ("2026-08-25T14:00:00.000Z", 1_200_000),  # mended by a restart
    ("2026-08-28T09:00:00.000Z", 681_280),  # rolled back
    ("2026-08-29T16:00:00.000Z", 1_200_000),  # mended again
]


def test_a_pool_mended_between_exposures_splits_them_into_two_periods() -> None:
    times = [
        "2026-08-25T12:20:33.351Z",
        "2026-08-24T00:35:40.954Z",
        "2026-08-24T09:00:00.000Z",
        "2026-08-28T09:11:46.032Z",
        "2026-08-29T15:49:06.403Z",
    ]
    summary = _summary(times, ROLLBACK)
    summary["exposure"]["periods"] = exposure_periods(summary)
    assert summary["exposure"]["periods"] == [
        {"first": "2026-08-24T00:35:40.954Z", "last": "2026-08-25T12:20:33.351Z", "count": 3},
        {"first": "2026-08-28T09:11:46.032Z", "last": "2026-08-29T15:49:06.403Z", "count": 2},
    ]
    said = periods_line(summary)
    assert said.startswith("2 periods")
    assert "2026-08-24T00:35:40.954Z .. 2026-08-25T12:20:33.351Z (3 responses)" in said
    assert "2026-08-28T09:11:46.032Z .. 2026-08-29T15:49:06.403Z (2 responses)" in said
    assert any(said in line for line in _headline(summary))


def test_exposures_within_one_gap_are_one_period_however_far_apart() -> None:
    """Days without an exposure are not a mended pool: the gap stayed open throughout."""
    times = ["2026-08-24T01:00:00.000Z", "2026-08-27T01:00:00.000Z", "2026-08-30T01:00:00.000Z"]
    summary = _summary(times, [("2026-08-24T00:00:00.000Z", 681_280)])
    summary["exposure"]["periods"] = exposure_periods(summary)
    assert summary["exposure"]["periods"] == [{"first": times[0], "last": times[-1], "count": 3}]
    assert periods_line(summary) == ""


def test_exposures_no_pool_gap_explains_never_split() -> None:
    """The abort race leaks with the pool above context: nothing read says the hole closed
    between two of its exposures, so a quiet day does not make two periods."""
    race = ["2026-08-24T01:00:00.000Z", "2026-08-26T01:00:00.000Z"]
    healthy_pool = _summary(race, [("2026-08-24T00:00:00.000Z", 1_200_000)])
    assert [p["count"] for p in exposure_periods(healthy_pool)] == [2]


def test_undated_exposures_are_in_no_period() -> None:
    summary = _summary(["2026-08-24T01:00:00.000Z", None], ROLLBACK)
    assert exposure_periods(summary) == [
        {"first": "2026-08-24T01:00:00.000Z", "last": "2026-08-24T01:00:00.000Z", "count": 1}
    ]
    assert exposure_periods(_summary([None], ROLLBACK)) == []


def test_exposures_after_the_gap_they_followed_had_closed_are_a_period_of_their_own() -> None:
    """Blind review 35 D4: the leak's exposures to 12:48, its gap mended at 13:00, then the abort
    race's from 13:27 to 13:56 read as one period from the leak's first to the race's last."""
    leak, race = (
        ["2026-08-24T12:16:47.000Z", "2026-08-24T12:48:00.000Z"],
        [
            "2026-08-24T13:27:00.000Z",
            "2026-08-24T13:56:16.000Z",
        ],
    )
    mended = [("2026-08-24T00:00:00.000Z", 681_280), ("2026-08-24T13:00:00.000Z", 1_200_000)]
    periods = exposure_periods(_summary(leak + race, mended))
    assert [(p["first"], p["last"], p["count"]) for p in periods] == [
        (leak[0], leak[1], 2),
        (race[0], race[1], 2),
    ]
    # Before the gap opened, the race's exposures run on into it: nothing closed in between.
    late_gap = [("2026-08-24T00:00:00.000Z", 1_200_000), ("2026-08-24T12:00:00.000Z", 681_280)]
    early = ["2026-08-24T11:00:00.000Z", *leak]
    assert [p["count"] for p in exposure_periods(_summary(early, late_gap))] == [3]


def test_a_response_answered_just_after_the_restart_that_closed_its_gap_is_in_its_period() -> None:
    """Blind review 53 D4: refused at 10:58:13, answered at 10:58:39, 5 s after the restart
    that mended the pool at 10:58:34: a period of one response of its own. A response dated
    at its end may be generated minutes after the restart; the abort race half an hour on is
    still a period of its own."""
    mended = [("2026-08-24T00:00:00.000Z", 681_280), ("2026-08-24T10:58:34.000Z", 1_200_000)]
    leak = ["2026-08-24T08:01:51.264Z", "2026-08-24T10:56:41.681Z", "2026-08-24T10:58:39.527Z"]
    race = ["2026-08-24T11:30:00.000Z"]
    periods = exposure_periods(_summary(leak + race, mended))
    assert [(p["first"], p["last"], p["count"]) for p in periods] == [
        (leak[0], leak[-1], 3),
        (race[0], race[0], 1),
    ]
