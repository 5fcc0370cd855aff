"""Simulated time: the event queue both modes run on, and the clocks that drive it.

Offline, the queue is drained as fast as possible and time jumps from event to event. Live,
a runner sleeps until the wall clock (optionally sped up) reaches the next event. Ties are
broken by insertion order, which keeps offline runs deterministic.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from typing import Any

Handler = Callable[..., None]


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Handler, tuple[Any, ...]]] = []
        self._seq = 0
        self.now = 0.0

    def at(self, t: float, handler: Handler, *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, handler, args))

    def next_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def run_until(self, t_end: float) -> int:
        """Run every event due at or before `t_end`, in time order; returns how many ran."""
        heap = self._heap
        ran = 0
        while heap and heap[0][0] <= t_end:
            t, _, handler, args = heapq.heappop(heap)
            if t > self.now:
                self.now = t
            handler(self.now, *args)
            ran += 1
        return ran

    def __len__(self) -> int:
        return len(self._heap)


class ScaledClock:
    """Simulated time that runs `speed` times faster than the wall clock from `sim_start`."""

    def __init__(self, sim_start: float, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.sim_start = sim_start
        self.speed = speed
        self._mono0 = time.monotonic()

    def now(self) -> float:
        return self.sim_start + (time.monotonic() - self._mono0) * self.speed

    def wall_delay(self, sim_t: float) -> float:
        return max(0.0, (sim_t - self.now()) / self.speed)
