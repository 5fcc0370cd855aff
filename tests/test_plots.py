"""The report's plots: drawn aside in a forked child, and drawn here when that cannot be; and
what they show (a storm's shape, a gap still open at the end, the floors fast replies broke)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot
import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from collector.events import Event, parse_iso_time
from collector.forensics import driver, plots
from collector.forensics.driver import DEFERRED_BIN_WIDTHS, MAX_DEFERRED_BINS, _Evidence
from collector.forensics.plots import LearnedFloor, PlotData, TimingPoint
from collector.state.lost_transfers import LostTransfers
from collector.state.request_record import RequestRecord, SideRecord
from detectors.impossibly_fast_prefill import ImpossiblyFastPrefill, Timing

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


_CHILD_UNDER_A_TRACER = """
import os, sys
from collector.forensics import plots
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

provider = TracerProvider(resource=Resource({"service.name": "host"}))
from concurrent.futures import ThreadPoolExecutor  # a thread pool used after the tracer's start

ThreadPoolExecutor(max_workers=1).submit(int).result()
parent = os.getpid()
drawn = plots._drawn_aside(
    lambda data: b"here" if os.getpid() == parent else b"child", None, timeout=20
)
sys.stdout.write(drawn().decode())
"""


def test_a_child_forked_under_an_opentelemetry_tracer_draws() -> None:
    """A TracerProvider in the process (a test's, a host program's) has its own at-fork hook,
    which uses a thread pool in the child: the pool's hook must have been registered first, or
    the child hangs and every plot waits the timeout to be drawn here."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD_UNDER_A_TRACER], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (0, "child"), done.stderr


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


# -- what the plots show ---------------------------------------------------------------------

NO_LOSSES = LostTransfers()  # no transfer lost to a prefill restart
T0 = 1_789_000_200.0  # a multiple of 300 s (and of 3600 s less 600 s: not on an hour)
LOGS = Path(__file__).parent / "testdata" / "reference_incident"


def _axes_of(plot: Callable[[PlotData], bytes], data: PlotData, monkeypatch) -> Axes:
    """The axes `plot` drew, instead of its PNG."""
    figures: list[Figure] = []
    monkeypatch.setattr(plots, "_png", lambda fig: figures.append(fig) or b"")
    plot(data)
    (figure,) = figures
    axes = figure.axes[0]
    matplotlib.pyplot.close(figure)
    return axes


def _release(t: float, outcome: str = "timeout") -> Event:
    return Event("deferred_release", "decode-0", t, "decode-0.log", {"outcome": outcome})


def test_a_storm_of_forty_minutes_shows_its_shape_in_five_minute_bins(monkeypatch) -> None:
    evidence = _Evidence(None)
    evidence.deferred_release(_release(T0 - 7200, "drained"), NO_LOSSES)  # a quiet morning before
    storm = T0 + 1200  # 20 minutes past the hour: hourly bins split it in two
    for i in range(400):
        evidence.deferred_release(_release(storm + i * 6), NO_LOSSES)  # 40 minutes
    assert evidence.deferred_bin_seconds == 300
    counts = {t: c["timeout"] for t, c in evidence.deferred.items() if c["timeout"]}
    assert len(counts) == 8 and set(counts.values()) == {50}
    assert min(counts) == storm and max(counts) == storm + 35 * 60

    data = PlotData(
        deferred_outcomes={t: dict(c) for t, c in evidence.deferred.items()},
        deferred_bin_seconds=evidence.deferred_bin_seconds,
    )
    assert plots.deferred_plot(data).startswith(PNG)
    axes = _axes_of(plots.deferred_plot, data, monkeypatch)
    assert axes.get_ylabel() == "releases per 5 min"
    assert "5 min bins" in axes.get_title()


def test_no_release_logged_is_not_said_to_mean_no_failed_transfer(monkeypatch) -> None:
    """Review: the empty plot said "no decode request failed mid-transfer" beside 12 transfer
    failures, on 0.5.19 where deferred release is off and an aborted transfer's pages are
    re-let at once: the riskiest case read as the safest."""
    said = [t.get_text() for t in _axes_of(plots.deferred_plot, PlotData(), monkeypatch).texts]
    assert said == ["no deferred KV releases logged"]
    failed = PlotData(transfer_failures=12)
    (text,) = [t.get_text() for t in _axes_of(plots.deferred_plot, failed, monkeypatch).texts]
    assert text.startswith("no deferred KV releases logged, though 12 transfer-failure lines")
    assert "re-let at once" in text and "no decode request failed" not in text


def test_a_release_logged_by_every_tp_rank_is_counted_once() -> None:
    evidence = _Evidence(None)
    for room in range(3):
        for _rank in range(8):
            evidence.deferred_release(
                Event(
                    "deferred_release",
                    "decode-0",
                    T0 + room,
                    "decode-0.log",
                    {"outcome": "timeout", "bootstrap_room": str(100 + room)},
                ),
                NO_LOSSES,
            )
    assert sum(c["timeout"] for c in evidence.deferred.values()) == 3


def test_deferred_bins_stay_bounded_and_exact_over_weeks_of_logs() -> None:
    evidence = _Evidence(None)
    total = 0
    for day in range(60):
        for minute in range(0, 24 * 60, 7):
            evidence.deferred_release(_release(T0 + day * 86400 + minute * 60), NO_LOSSES)
            total += 1
        assert len(evidence.deferred) <= MAX_DEFERRED_BINS
    width = evidence.deferred_bin_seconds
    assert width in DEFERRED_BIN_WIDTHS and width > 3600  # coarser, still a ladder step
    span = max(evidence.deferred) - min(evidence.deferred)
    assert span / width < MAX_DEFERRED_BINS
    assert all(t % width == 0 for t in evidence.deferred)  # merged exactly into the width
    assert sum(c["timeout"] for c in evidence.deferred.values()) == total
    # A release earlier than all before it widens the span backwards just as well.
    evidence.deferred_release(_release(T0 - 400 * 86400), NO_LOSSES)
    assert len(evidence.deferred) <= MAX_DEFERRED_BINS
    assert sum(c["timeout"] for c in evidence.deferred.values()) == total + 1


@pytest.mark.parametrize(
    ("seconds", "label"),
    [
        (300, "5 min"),
        (900, "15 min"),
        (3600, "1 h"),
        (10800, "3 h"),
        (86400, "1 day"),
        (604800, "7 days"),
        (45, "45 s"),
    ],
)
def test_bin_widths_read_as_people_say_them(seconds: float, label: str) -> None:
    assert plots.bin_width_label(seconds) == label


def test_each_pool_line_reaches_the_end_of_the_logs(monkeypatch) -> None:
    end = T0 + 6 * 3600
    data = PlotData(
        pools={
            "prefill-0": [(T0, 681_280, 1_048_576)],
            "decode-0": [(T0, 1_310_720, 1_048_576), (T0 + 3600, 2_040_000, 1_048_576)],
        },
        end_time=end,
    )
    axes = _axes_of(plots.pool_plot, data, monkeypatch)
    lines = {line.get_label(): line for line in axes.get_lines()}
    for node, pool in (("prefill-0", 681_280), ("decode-0", 2_040_000)):
        x, y = lines[f"{node} pool"].get_data()
        assert x[-1] == pytest.approx(plots._dt(end)) and y[-1] == pool
    # Marked where the configuration changed, not where the logs end.
    assert lines["decode-0 pool"].get_markevery() == [0, 1]


def test_a_node_named_with_a_leading_underscore_keeps_its_legend_entry(monkeypatch) -> None:
    # matplotlib leaves a label starting with `_` out of the legend.
    data = PlotData(
        pools={"_prefill": [(T0, 681_280, 1_048_576)], "decode": [(T0, 2_040_000, 1_048_576)]},
        end_time=T0 + 3600,
    )
    legend = _axes_of(plots.pool_plot, data, monkeypatch).get_legend()
    assert sorted(t.get_text().strip() for t in legend.get_texts()) == [
        "_prefill pool",
        "decode pool",
    ]


def test_the_driver_ends_the_pool_lines_at_the_last_event_read(monkeypatch, tmp_path) -> None:
    """The reference incident: the prefill pool, below the context from 09:01, is still below
    it when the logs end at 10:14:52 (the last line, decode's access log)."""
    seen: list[PlotData] = []
    monkeypatch.setattr(driver, "write_html", lambda path, summary, data: seen.append(data))
    driver.run_forensics([str(LOGS)], tmp_path, write_parquet=False)
    (data,) = seen
    assert data.end_time == parse_iso_time("2026-08-27T10:14:52Z")
    last_change = max(t for t, _, _ in data.pools["prefill-0"])
    assert last_change < data.end_time
    axes = _axes_of(plots.pool_plot, data, monkeypatch)
    prefill = next(line for line in axes.get_lines() if line.get_label() == "prefill-0 pool")
    assert prefill.get_xdata()[-1] == pytest.approx(plots._dt(data.end_time))
    assert prefill.get_ydata()[-1] == 681_280
    # The physical floor says what it assumes: unlabelled, the default 1B-parameter model read
    # as the physics of the logs' own (a 912,384-token answer drawn "plausible", review).
    floor = next(
        line
        for line in _axes_of(plots.timing_plot, data, monkeypatch).get_lines()
        if line.get_label().startswith("physical floor")
    )
    assert floor.get_label().replace("\n", " ") == (
        "physical floor, 1B active parameters, 4 full-attention layers of width 2048 on 8 GPUs "
        "of 989 TFLOP/s (model_active_params, attention_layers, attention_width, "
        "gpu_peak_flops) (per uncached token)"
    )
    # Per token: 2e9 FLOPs of weights, and 4 x 4 x 2048 per pair with the (u + 1) / 2 tokens
    # before it, on 8 x 9.89e14 FLOP/s: it rises with the prompt's length.
    x, y = (np.asarray(v, dtype=float) for v in floor.get_data())
    assert y == pytest.approx((2e9 + 4 * 4 * 2048 * (x + 1) / 2) / (8 * 9.89e14))
    assert x.max() >= 900_000 and y[-1] > 5 * y[0]


def test_the_timing_legend_covers_neither_the_points_nor_the_axis_labels(monkeypatch) -> None:
    """Inside the axes, the legend with the floor's long label spread over the y axis's label
    and ticks and over the slow answers of long prompts (seen in a report of the bench)."""
    figures: list[Figure] = []
    monkeypatch.setattr(plots, "_png", lambda fig: figures.append(fig) or b"")
    data = _timing_with([])
    data.floor_assumes = (
        "1B active parameters, 4 full-attention layers of width 2048 on 8 GPUs of 989 TFLOP/s "
        "(model_active_params, attention_layers, attention_width, gpu_peak_flops)"
    )
    plots.timing_plot(data)
    (figure,) = figures
    renderer = figure.canvas.get_renderer()
    axes = figure.axes[0]
    legend = axes.get_legend().get_window_extent(renderer)
    for covered in (
        axes.get_window_extent(renderer),
        axes.yaxis.label.get_window_extent(renderer),
        *(tick.get_window_extent(renderer) for tick in axes.get_yticklabels()),
    ):
        assert not legend.overlaps(covered)
    matplotlib.pyplot.close(figure)


def _fitted_detector() -> ImpossiblyFastPrefill:
    det = ImpossiblyFastPrefill(min_history=5, refit_every=5, safety_factor=8.0)
    for i in range(40):  # each length twice, 20 minutes apart: a quarter hour in every band
        tokens = 40_000 + 10_000 * (i % 20)
        for node, source, per_token in (
            ("decode-0", "first_token_latency", 4e-5),
            ("decode-1", "first_token_latency", 6e-5),
            ("prefill-0", "prefill_forward", 3e-5),
        ):
            det.learn_one(
                {
                    "node": node,
                    "source": source,
                    "uncached_tokens": tokens,
                    "seconds": 0.5 + per_token * tokens,
                },
                now=T0 + 60.0 * i,  # a sample a minute: a quarter hour before the first fit
            )
    return det


def test_the_driver_takes_each_node_s_learned_floor() -> None:
    det = _fitted_detector()
    floors = driver._learned_floors(det)
    # A prefill node's own forward time, a serving node's time to first token: the timings the
    # plot's points are (each request's fastest).
    assert [(f.node, f.source) for f in floors] == [
        ("decode-0", "first_token_latency"),
        ("decode-1", "first_token_latency"),
        ("prefill-0", "prefill_forward"),
    ]
    for floor in floors:
        # The line the detector judges by: the fit divided by the safety factor, without the
        # half second every sample waited where the timing carries the queue.
        judged = det.learned_floor(Timing(floor.source, floor.node, 1.0, 100_000, 8))
        assert floor.seconds_per_token(100_000) * 100_000 == pytest.approx(judged)
        assert (floor.intercept == 0.0) == (floor.source == "first_token_latency")
        assert floor.min_uncached_tokens == det.config.learned_min_uncached_tokens
    assert driver._learned_floors(ImpossiblyFastPrefill()) == []  # nothing learned yet
    assert driver._learned_floors(ImpossiblyFastPrefill(learn=False)) == []


def _timing_with(floors: list[LearnedFloor]) -> PlotData:
    timing = [TimingPoint(1000 * 2**i, 1000 * 2**i, 3e-5, False) for i in range(12)]
    timing.append(TimingPoint(800_000, 800_000, 4e-8, True))
    return PlotData(timing=timing, floor_seconds_per_token=2.6e-7, learned_floors=floors)


def test_the_learned_floor_is_drawn_where_it_judges(monkeypatch) -> None:
    floor = LearnedFloor("decode-0", "first_token_latency", 0.002, 4e-6, 32768)
    axes = _axes_of(plots.timing_plot, _timing_with([floor]), monkeypatch)
    lines = {line.get_label(): line for line in axes.get_lines()}
    learned = lines["learned floor (node history, decode-0)"]
    x, y = (np.asarray(v, dtype=float) for v in learned.get_data())
    shown = np.isfinite(y)
    assert x[shown].min() == pytest.approx(32768) and x[shown].max() == pytest.approx(2_048_000)
    assert y[shown] == pytest.approx((0.002 + 4e-6 * x[shown]) / x[shown])
    assert "physical floor (per uncached token)" in lines  # still there
    legend = [t.get_text() for t in axes.get_legend().get_texts()]
    assert "learned floor (node history, decode-0)" in legend


def test_a_floor_learned_per_context_band_is_drawn_band_after_band(monkeypatch) -> None:
    """Longer prompts are judged by their own band's line: drawn so, not the first line
    carried on to a million tokens."""
    floor = LearnedFloor(
        "prefill-0",
        "prefill_forward",
        0.0,
        4e-6,
        32768,
        from_tokens=65536.0,
        longer=((262144.0, 0.1, 2e-5, 1.0),),
    )
    axes = _axes_of(plots.timing_plot, _timing_with([floor]), monkeypatch)
    (learned,) = [line for line in axes.get_lines() if "learned" in str(line.get_label())]
    x, y = (np.asarray(v, dtype=float) for v in learned.get_data())
    shown = np.isfinite(y)
    assert x[shown].min() >= 65536 and not np.isfinite(y[x < 65536]).any()
    short = shown & (x < 262144)
    long = shown & (x >= 262144)
    assert short.any() and long.any()
    assert y[short] == pytest.approx(4e-6)
    assert y[long] == pytest.approx((0.1 + 2e-5 * x[long]) / x[long])
    assert floor.seconds_per_token(100_000) == pytest.approx(4e-6)
    assert math.isnan(floor.seconds_per_token(1000))


def test_many_learned_floors_are_one_band_not_a_line_each(monkeypatch) -> None:
    floors = [
        LearnedFloor(f"decode-{i}", "first_token_latency", 0.0, (i + 1) * 1e-6, 32768)
        for i in range(plots.MAX_LEARNED_FLOOR_LINES + 2)
    ]
    axes = _axes_of(plots.timing_plot, _timing_with(floors), monkeypatch)
    assert not [line for line in axes.get_lines() if "learned" in str(line.get_label())]
    (band,) = [c for c in axes.collections if "learned" in str(c.get_label())]
    assert f"of {len(floors)} nodes" in str(band.get_label())
    # Up to the cap, a line per node.
    few = floors[: plots.MAX_LEARNED_FLOOR_LINES]
    axes = _axes_of(plots.timing_plot, _timing_with(few), monkeypatch)
    assert len([line for line in axes.get_lines() if "learned" in str(line.get_label())]) == 3


def test_no_learned_floor_is_drawn_without_long_prompts(monkeypatch) -> None:
    floor = LearnedFloor("decode-0", "first_token_latency", 0.0, 4e-6, 32768)
    data = PlotData(timing=[TimingPoint(1000, 1000, 3e-5, False)], learned_floors=[floor])
    axes = _axes_of(plots.timing_plot, data, monkeypatch)
    assert not [line for line in axes.get_lines() if "learned" in str(line.get_label())]


def test_a_plot_the_library_refuses_costs_the_report_that_plot_only() -> None:
    """Year 9999 is past what matplotlib dates take: the pool plot says it could not be drawn,
    the other plots are drawn as usual."""
    far = 253_402_300_799.0  # 9999-12-31T23:59:59Z
    data = PlotData(
        findings=[(T0, "critical", "pool_below_context")],
        pools={"prefill-0": [(far, 100, 200)]},
        end_time=far,
    )
    images = plots.render_all(data)
    assert set(images) == {"timing", "findings", "deferred", "pools"}
    assert all(png.startswith(PNG) for png in images.values())


def test_a_fleet_of_thousands_draws_the_nodes_below_context_and_bundles_the_rest(
    monkeypatch,
) -> None:
    pools = {f"decode-{i:04d}": [(T0 + i, 2_000_000, 1_048_576)] for i in range(3000)}
    pools["prefill-0007"] = [(T0, 681_280, 1_048_576), (T0 + 7200, 2_040_000, 1_048_576)]
    data = PlotData(pools=pools, end_time=T0 + 9000)
    axes = _axes_of(plots.pool_plot, data, monkeypatch)
    labels = axes.get_legend_handles_labels()[1]
    # The node whose pool fell below the context is named; the rest are one entry.
    assert "prefill-0007 pool" in labels
    assert len(labels) == plots.MAX_POOL_LINES + 1
    assert labels[-1] == f"{3001 - plots.MAX_POOL_LINES:,} more nodes"


def test_floors_learned_per_model_and_tp_are_drawn_the_last_one_run() -> None:
    """Keys carry the node's regime once its model or TP size is known (`node|source|model|tp`):
    they were read as a source named after the TP size, and no learned floor was drawn."""
    det = _fitted_detector()
    models = det.models_
    old, new = models.pop("prefill-0|prefill_forward"), models.pop("decode-0|first_token_latency")
    for bands, fitted_at in ((old, T0), (new, T0 + 60)):
        for model in bands.values():
            model.last_fit = fitted_at
    models["prefill-0|prefill_forward|zai-org/GLM-5.3|8"] = old
    models["prefill-0|prefill_forward|Qwen/Qwen3-0.6B|8"] = new
    floors = {f.node: f for f in driver._learned_floors(det)}
    assert sorted(floors) == ["decode-1", "prefill-0"]
    # A fresh 100k-token prompt attends 50k tokens on average: context band 16.
    judged = new[16].floor(100_000, 8.0)
    assert floors["prefill-0"].seconds_per_token(100_000) * 100_000 == pytest.approx(judged)


def test_the_plot_draws_each_request_s_fastest_timing() -> None:
    """A leak found by prefill's 21 ms forward time stood far above the floor that found it
    when the plot drew decode's time to first token alone (audit R)."""
    prefill = SideRecord(
        node="prefill-1", rid="p", role="prefill", durations={"forward_duration": 0.021}
    )
    decode = SideRecord(
        node="decode-0", rid="d", role="decode", first_token_latency=2.4, e2e_latency=9.0
    )
    record = RequestRecord("r", "r", [prefill, decode], True)
    assert driver._fastest_timing(record, decode) == 0.021
    prefill.attempts = 1  # a redone prefill's forward time is its last attempt's alone
    assert driver._fastest_timing(record, decode) == 2.4
    decode.first_token_latency = None  # nothing but the whole answer's time
    assert driver._fastest_timing(record, decode) == 9.0
