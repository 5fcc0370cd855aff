"""The report's plots: drawn aside in a forked child, and drawn here when that cannot be."""

from __future__ import annotations

import os
import time

import pytest

from collector.forensics import plots
from collector.forensics.plots import PlotData, TimingPoint

PNG = b"\x89PNG\r\n\x1a\n"


def _data() -> PlotData:
    timing = [
        TimingPoint(100 * (i + 1), 50 * (i + 1), 1e-4 * (i + 1), i % 7 == 0) for i in range(50)
    ]
    return PlotData(timing=timing, floor_seconds_per_token=2e-4)


def test_every_plot_is_a_png_in_report_order() -> None:
    images = plots.render_all(_data())
    assert list(images) == ["timing", "findings", "deferred", "pools"]
    assert all(png.startswith(PNG) and len(png) > 1000 for png in images.values())


def test_the_child_draws_what_this_process_would() -> None:
    """The same PNG bytes as drawn here (Agg is deterministic for the same figure)."""
    data = _data()
    assert plots._drawn_aside(plots.timing_plot, data)() == plots.timing_plot(data)


def test_a_failing_child_is_redrawn_here() -> None:
    parent = os.getpid()

    def fails_in_child(data: PlotData) -> bytes:
        if os.getpid() != parent:
            raise RuntimeError("the child cannot draw")
        return b"drawn here"

    assert plots._drawn_aside(fails_in_child, _data())() == b"drawn here"


def test_a_child_that_hangs_is_stopped_and_its_plot_drawn_here() -> None:
    parent = os.getpid()

    def hangs_in_child(data: PlotData) -> bytes:
        if os.getpid() != parent:
            time.sleep(3600)
        return b"drawn here"

    started = time.monotonic()
    assert plots._drawn_aside(hangs_in_child, _data(), timeout=0.5)() == b"drawn here"
    assert time.monotonic() - started < 30


def test_a_child_reaped_elsewhere_is_redrawn_here() -> None:
    parent = os.getpid()

    def where(data: PlotData) -> bytes:
        return b"here" if os.getpid() == parent else b"child"

    result = plots._drawn_aside(where, _data())
    os.waitpid(-1, 0)  # something else in the process reaps the child first
    assert result() == b"here"


def test_one_core_draws_here_without_forking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    parent = os.getpid()
    pids: list[int] = []

    def note_pid(data: PlotData) -> bytes:
        pids.append(os.getpid())
        return b"png"

    assert plots._drawn_aside(note_pid, _data())() == b"png"
    assert pids == [parent]
