"""A progress bar on a terminal (bytes read of bytes to read), silent otherwise."""

from __future__ import annotations

import time
from typing import TextIO


class Progress:
    """Redrawn at most a few times a second; `stream=None` (not a terminal) draws nothing.

    Sizes of gzip files count as their compressed size, so the bar can pass 100% on gzip-heavy
    input; it then shows bytes only.
    """

    def __init__(self, total_bytes: int, stream: TextIO | None, interval: float = 0.25) -> None:
        self.total = max(total_bytes, 1)
        self.stream = stream
        self.interval = interval
        self.done = 0
        self._started = time.perf_counter()
        self._drawn = 0.0

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        if self.stream is None:
            return
        now = time.perf_counter()
        if now - self._drawn >= self.interval:
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        assert self.stream is not None
        elapsed = max(now - self._started, 1e-9)
        rate = self.done / elapsed / 1e6
        fraction = self.done / self.total
        if fraction <= 1.0:
            width = 30
            filled = int(width * fraction)
            bar = "#" * filled + "-" * (width - filled)
            text = f"\rreading [{bar}] {fraction:6.1%}  {self.done / 1e6:,.0f} MB  {rate:,.0f} MB/s"
        else:
            text = f"\rreading {self.done / 1e6:,.0f} MB  {rate:,.0f} MB/s"
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None and self.done:
            self._draw(time.perf_counter())
            self.stream.write("\n")
            self.stream.flush()
