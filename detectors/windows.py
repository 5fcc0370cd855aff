"""Event-time windows, counter deltas and baselines shared by the rate detectors.

Storm detectors judge a window against the deployment's own past windows, not against a fixed
number: a healthy deployment with lossy drain acks times out deferred releases routinely, and
that is its normal. Windows are tumbling and driven by event time, so a replay of last month's
logs and the live stream close the same windows.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any


class WindowClock:
    """Tumbling windows of `width` seconds aligned to the epoch.

    Examples
    --------
    >>> clock = WindowClock(60.0)
    >>> clock.place(130.0)
    >>> clock.start
    120.0
    >>> clock.due(250.0, max_windows=100)
    [120.0, 180.0]
    >>> clock.start
    240.0
    """

    __slots__ = ("width", "start")

    def __init__(self, width: float, start: float | None = None) -> None:
        self.width = float(width)
        self.start = start

    def align(self, time: float) -> float:
        return math.floor(time / self.width) * self.width

    def place(self, time: float) -> None:
        """Open the first window: the one holding `time` (aligned to the epoch, not to `time`,
        so every process that sees the same events agrees on the windows)."""
        if self.start is None:
            self.start = self.align(time)

    def due(self, now: float, *, max_windows: int) -> list[float]:
        """Starts of the windows that have ended by `now`; the clock moves past them.

        `now=inf` ends the open window (end of input). A gap longer than `max_windows` windows
        yields only that many (they are empty anyway) and jumps to the window holding `now`.
        """
        if self.start is None:
            return []
        if math.isinf(now):
            start, self.start = self.start, None
            return [start]
        out: list[float] = []
        while now >= self.start + self.width:
            out.append(self.start)
            self.start += self.width
            if len(out) >= max_windows and now >= self.start + self.width:
                self.start = self.align(now)
                break
        return out


class CounterDeltas:
    """Increments of Prometheus counters between scrapes, tolerant of resets (restarts).

    A saved `.prom` snapshot may come hours after the previous one; its whole increase does
    not belong to the window it lands in. `in_window` spreads an increase evenly over the time
    since the previous sample and returns the share of one window.

    Examples
    --------
    >>> deltas = CounterDeltas()
    >>> deltas.in_window("s", 10.0, 0.0, 300.0)
    0.0
    >>> deltas.in_window("s", 70.0, 3600.0, 300.0)  # 60 over an hour: 5 per 5 minutes
    5.0
    >>> deltas.in_window("s", 4.0, 3660.0, 300.0)  # restarted and counted 4 since
    4.0
    """

    __slots__ = ("last",)

    def __init__(self, last: Mapping[str, Any] | None = None) -> None:
        self.last: dict[str, tuple[float, float | None]] = {}
        for series, raw in (last or {}).items():
            if isinstance(raw, list | tuple):
                self.last[series] = (float(raw[0]), None if raw[1] is None else float(raw[1]))
            else:
                self.last[series] = (float(raw), None)

    def delta(
        self,
        series: str,
        value: float,
        time: float | None = None,
        *,
        absent_since: float | None = None,
        started_at: float | None = None,
    ) -> float:
        """The increase since this series' previous sample; 0 for the first sample, unless
        `absent_since`: a scrape of the node before `time` that had no sample of the series.
        `started_at`: the node's latest start-up before `time`; one after the previous sample
        began the counter again from 0, though it may have passed its old value since (blind
        review 51 D2: 30 then 38 across a restart, 38 timeouts counted as 8, a storm missed).
        SGLang creates a labelled series at its first increment, so it counted from 0 since
        that scrape; the one rule for every reader of the counters, the detectors and
        forensics' count alike (blind review 44 D1: forensics took a first value as a baseline
        where the detectors counted it).

        >>> deltas = CounterDeltas()
        >>> deltas.delta("s", 13.0, 900.0, absent_since=0.0)  # new in a node scraped at 0
        13.0
        >>> deltas.delta("t", 13.0, 900.0)  # the node's first scrape: counted before it
        0.0
        >>> deltas.delta("t", 38.0, 1800.0, started_at=1000.0)  # restarted at 1000: all new
        38.0
        """
        previous = self._previous(series, time, absent_since, started_at)
        self.last[series] = (value, time)
        if previous is None:
            return 0.0
        if value < previous[0]:
            return value
        return value - previous[0]

    def in_window(
        self,
        series: str,
        value: float,
        time: float | None,
        window: float,
        logged: float = 0.0,
        *,
        absent_since: float | None = None,
        started_at: float | None = None,
    ) -> float:
        """The increase attributable to one window ending at `time`. `logged`: how many of the
        counted things the logs showed since the series' previous sample. Over a gap longer
        than the window those were counted in the windows they happened in, so only the rest,
        what the logs missed, is spread (a window's own lines and a scrape within it meet as
        the larger of the two, in the detector). `absent_since`: a scrape that had no sample of
        a series first seen now, which then counts from 0 since it; `started_at`: the node's
        latest start-up, from which a series counts again (`delta`).

        >>> deltas = CounterDeltas()
        >>> deltas.in_window("s", 0.0, 0.0, 300.0)
        0.0
        >>> deltas.in_window("s", 240.0, 3600.0, 300.0, logged=240)  # the logs saw them all
        0.0
        >>> deltas.in_window("s", 300.0, 3900.0, 300.0, logged=10)  # one window: the larger
        60.0
        >>> deltas.in_window("t", 24.0, 3900.0, 300.0, absent_since=3300.0)  # new: 24 in 600 s
        12.0
        """
        previous = self._previous(series, time, absent_since, started_at)
        increase = self.delta(series, value, time, absent_since=absent_since, started_at=started_at)
        if previous is None or previous[1] is None or time is None:
            return increase
        elapsed = time - previous[1]
        if elapsed <= window:
            return increase
        return max(increase - logged, 0.0) * window / elapsed

    def _previous(
        self,
        series: str,
        time: float | None,
        absent_since: float | None,
        started_at: float | None = None,
    ) -> tuple[float, float | None] | None:
        """The series' previous sample, or 0 at `absent_since` for a series first seen now,
        or 0 at `started_at` for one whose node started again since its previous sample."""
        previous = self.last.get(series)
        if previous is None and absent_since is not None and time is not None:
            return (0.0, absent_since)
        if (
            previous is not None
            and started_at is not None
            and previous[1] is not None
            and time is not None
            and previous[1] < started_at <= time
        ):
            return (0.0, started_at)
        return previous

    def to_state(self) -> dict[str, list[float | None]]:
        return {series: [value, time] for series, (value, time) in self.last.items()}


class Baseline:
    """The mean of the last `size` normal windows, never below a prior floor.

    Windows that raised a finding are not added, so a long storm does not become normal.
    """

    __slots__ = ("values", "frozen")

    def __init__(self, size: int, values: Iterable[float] = ()) -> None:
        self.values: deque[float] = deque(values, maxlen=size)
        # A frozen baseline keeps the level it was set to (`freeze`).
        self.frozen = False

    def add(self, value: float) -> None:
        if not self.frozen:
            self.values.append(float(value))

    def freeze(self) -> None:
        """Keep the level as it is: windows judged against it again do not enter it."""
        self.frozen = True

    def level(self, floor: float) -> float:
        if not self.values:
            return floor
        return max(floor, sum(self.values) / len(self.values))

    def __len__(self) -> int:
        return len(self.values)

    def to_list(self) -> list[float]:
        return list(self.values)


def series_key(node: str, event_fields: Mapping[str, Any], *extra: str) -> str:
    """One key per counter series: node, the canonical signal or name, and all labels."""
    labels = event_fields.get("labels") or {}
    parts = [node, str(event_fields.get("signal") or event_fields.get("name")), *extra]
    parts.extend(f"{k}={labels[k]}" for k in sorted(labels))
    return "|".join(parts)
