"""The four pictures a responder looks at first, rendered to PNG with matplotlib (Agg, no display).

1. Time per uncached prompt token against prompt length, the floors drawn (the physical one from
   the configured model and GPUs, and the one learned from the nodes' own history): exposed
   replies sit far below them, honest ones above, prefix-cache hits are judged on their uncached
   part.
2. The findings timeline by severity.
3. Deferred-release outcomes over time, in bins fine enough for a storm to show its shape.
4. Each node's pool against context over time, up to the end of the logs: the configuration
   gap, and when it closed (or that it never did).
"""

from __future__ import annotations

import io
import logging
import os
import select
import signal
import textwrap
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import matplotlib
import numpy as np

matplotlib.use("Agg")
# Log-scale tick labels are mathtext, whose font sets look for STIX and DejaVu Display fonts a
# slim Debian lacks and fall back to DejaVu Sans, which draws them: a "findfont ... not found"
# per label on stderr read as an error to responders (blind review 36).
logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from collector.forensics.plot_data import LearnedFloor, PlotData, TimingPoint  # noqa: E402

_SEVERITY_COLOURS = {"critical": "#c0392b", "warning": "#e67e22", "info": "#7f8c8d"}
_OUTCOME_COLOURS = {"drained": "#27ae60", "timeout": "#e67e22", "error": "#c0392b"}


def _dt(epoch: float) -> float:
    """Epoch seconds to matplotlib's date number (days), the x unit of the time plots."""
    return float(mdates.date2num(datetime.fromtimestamp(epoch, tz=UTC)))  # type: ignore[no-untyped-call]


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _empty(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#555")
    ax.set_xticks([])
    ax.set_yticks([])


def timing_plot(data: PlotData) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 4.6))
    honest = [p for p in data.timing if not p.exposed and p.seconds_per_uncached_token > 0]
    exposed = [p for p in data.timing if p.exposed and p.seconds_per_uncached_token > 0]
    if not honest and not exposed:
        _empty(ax, "no request timings in the input")
        return _png(fig)
    # Markers of one line rather than a scatter: tens of thousands of equal dots are drawn as
    # one stamped marker by Agg, 1.6 times faster than a collection of paths.
    if honest:
        ax.plot(
            [p.prompt_tokens for p in honest],
            [p.seconds_per_uncached_token for p in honest],
            linestyle="none",
            marker="o",
            markersize=2.4,
            markeredgewidth=0,
            alpha=0.35,
            color="#2c7fb8",
            label=f"not flagged ({len(honest):,} shown)",
        )
    if exposed:
        ax.plot(
            [p.prompt_tokens for p in exposed],
            [p.seconds_per_uncached_token for p in exposed],
            linestyle="none",
            marker="x",
            markersize=4.7,
            color=_SEVERITY_COLOURS["critical"],
            label=f"exposed ({len(exposed):,})",
        )
    prompts = [p.prompt_tokens for p in honest] + [p.prompt_tokens for p in exposed]
    if data.floor_seconds_per_token:
        # Drawn for prompts with nothing cached: attention's pairs raise it with the length.
        lengths = np.geomspace(max(min(prompts), 1), max(max(prompts), 2), 64)
        ax.plot(
            lengths,
            data.floor_seconds_per_token + data.floor_seconds_per_pair * (lengths + 1.0) / 2.0,
            color="#111",
            linestyle="--",
            linewidth=1.2,
            label=textwrap.fill(
                f"physical floor, {data.floor_assumes} (per uncached token)"
                if data.floor_assumes
                else "physical floor (per uncached token)",
                width=100,
            ),
        )
    _learned_floor_lines(ax, data.learned_floors, min(prompts), max(prompts))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("fastest timing per uncached prompt token (s)")
    ax.set_title("Prefill speed: replies below the floor could not have read their prompt")
    ax.grid(True, which="both", alpha=0.2)
    # Below the axes: the floor's assumptions make a long label, and inside them the legend
    # spread over the y axis's label and ticks and over the slow answers of long prompts.
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.13), fontsize=8, frameon=False)
    return _png(fig)


# More nodes than this are drawn as one band (lowest to highest floor), not a line each.
MAX_LEARNED_FLOOR_LINES = 3
_LEARNED_COLOUR = "#8e44ad"
_LEARNED_STYLES = ("-.", (0, (1, 1.5)), (0, (6, 2)))


def _learned_floor_lines(ax: Axes, floors: Sequence[LearnedFloor], low: float, high: float) -> None:
    """Each node's learned floor over the prompt lengths it judges and the plot shows, a line
    per node while they are few, else the band they span."""
    judged = [f for f in floors if f.min_uncached_tokens < high]
    if not judged:
        return
    start = max(low, min(f.min_uncached_tokens for f in judged))
    tokens = np.geomspace(start, high, 96)
    curves = []
    for floor in judged:
        per_token = floor.seconds(tokens) / tokens
        # Not drawn where the floor does not judge (short prompts) or says nothing (zero).
        per_token[(tokens < floor.min_uncached_tokens) | (per_token <= 0)] = np.nan
        if np.isfinite(per_token).any():
            curves.append((floor.node, per_token))
    if not curves:
        return
    if len(curves) <= MAX_LEARNED_FLOOR_LINES:
        for index, (node, per_token) in enumerate(sorted(curves, key=lambda c: c[0])):
            ax.plot(
                tokens,
                per_token,
                color=_LEARNED_COLOUR,
                linestyle=_LEARNED_STYLES[index],
                linewidth=1.4,
                label=f"learned floor (node history, {node})",
            )
        return
    stacked = np.vstack([c for _, c in curves])
    ax.fill_between(
        tokens,
        np.fmin.reduce(stacked, axis=0),
        np.fmax.reduce(stacked, axis=0),
        where=np.isfinite(stacked).any(axis=0),
        color=_LEARNED_COLOUR,
        alpha=0.25,
        linewidth=0,
        label=f"learned floor (node history), lowest to highest of {len(curves)} nodes",
    )


def findings_timeline(data: PlotData) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    timed = [f for f in data.findings if f[0] is not None]
    if not timed:
        _empty(ax, "no findings")
        return _png(fig)
    detectors = sorted({f[2] for f in timed})
    rows = {name: i for i, name in enumerate(detectors)}
    # Each severity on its own lane of a detector's row (critical above, info below): drawn on
    # one line, 121 warnings of the canary detector hid under its criticals at the same times.
    lanes = {"critical": 0.22, "warning": 0.0, "info": -0.22}
    for severity, colour in reversed(_SEVERITY_COLOURS.items()):
        points = [f for f in timed if f[1] == severity]
        if points:
            ax.scatter(
                [_dt(f[0]) for f in points],
                [rows[f[2]] + lanes.get(severity, 0.0) for f in points],
                color=colour,
                s=14,
                label=f"{severity} ({len(points):,})",
            )
    ax.set_yticks(range(len(detectors)))
    ax.set_yticklabels(detectors, fontsize=8)
    ax.set_title("Findings over time")
    _time_axis(ax, data)
    # Outside the axes: inside, it covered the first hours, where start-up findings sit.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8)
    return _png(fig)


def deferred_plot(data: PlotData) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    if not data.deferred_outcomes:
        # No release line is no proof that nothing failed: an engine without deferred release
        # (off by default to 0.5.20) logs none, and re-lets an aborted request's pages at once
        # (review: said "no decode request failed" beside 12 transfer failures).
        failures = data.transfer_failures
        _empty(
            ax,
            f"no deferred KV releases logged, though {failures:,} transfer-failure "
            f"{'line was' if failures == 1 else 'lines were'}:\nwithout deferred release, "
            "an aborted transfer's pages are re-let at once"
            if failures
            else "no deferred KV releases logged",
        )
        return _png(fig)
    width = data.deferred_bin_seconds
    edges, counts = _bin_runs(data.deferred_outcomes, width)
    # Stacked steps, one filled outline per outcome rather than a bar per bin: hundreds of
    # narrow bars draw slower and leave hairline seams between neighbours.
    x = [_dt(t) for t in edges]
    bottom = np.zeros(len(edges) - 1)
    for outcome, colour in _OUTCOME_COLOURS.items():
        values = counts.get(outcome)
        if values is not None and values.any():
            ax.stairs(bottom + values, x, baseline=bottom, fill=True, color=colour, label=outcome)
            bottom = bottom + values
    label = bin_width_label(width)
    ax.set_ylabel(f"releases per {label}")
    ax.set_title(f"Deferred KV releases by outcome ({label} bins)")
    ax.set_ylim(bottom=0)
    _time_axis(ax, data)
    ax.legend(loc="upper left", fontsize=8)
    return _png(fig)


def _bin_runs(
    bins: dict[float, dict[str, int]], width: float
) -> tuple[list[float], dict[str, np.ndarray]]:
    """Sparse bins (start -> outcome -> count) as step edges and counts per outcome, an empty
    step closing each gap between bins (so the arrays grow with the bins, not the span)."""
    edges: list[float] = []
    rows: list[dict[str, int]] = []
    for start in sorted(bins):
        if edges and start > edges[-1]:
            rows.append({})  # the gap since the previous bin
            edges.append(start)
        elif not edges:
            edges.append(start)
        rows.append(bins[start])
        edges.append(start + width)
    outcomes = {o for row in rows for o in row}
    counts = {o: np.array([row.get(o, 0) for row in rows], dtype=float) for o in outcomes}
    return edges, counts


def bin_width_label(seconds: float) -> str:
    """A bin width for an axis label: "5 min", "1 h", "7 days"."""
    if seconds >= 86400 and seconds % 86400 == 0:
        days = int(seconds // 86400)
        return "1 day" if days == 1 else f"{days} days"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"


# Nodes drawn one by one, each in the legend; past this, the rest are one grey bundle (a fleet of
# thousands drew thousands of legend entries, a minute of layout).
MAX_POOL_LINES = 12


def _shown_in_legend(label: str) -> str:
    """matplotlib leaves out of the legend a label that starts with `_`, as a node's name may
    (`_decode.log`): a space before it keeps the line named."""
    return f" {label}" if label.startswith("_") else label


def pool_plot(data: PlotData) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 3.6))
    series: dict[str, tuple[list[tuple[float, int]], int]] = {}
    for node, points in sorted(data.pools.items()):
        drawn = _pool_steps(points, data.end_time)
        if drawn is not None:
            series[node] = drawn
    below = [node for node in series if _ever_below(data.pools[node])]
    named = (below + [n for n in series if n not in below])[:MAX_POOL_LINES]
    named.sort()
    for index, node in enumerate(named):
        steps, changes = series[node]
        ax.step(
            [_dt(t) for t, _ in steps],
            [p for _, p in steps],
            where="post",
            label=_shown_in_legend(f"{node} pool"),
            marker="o",
            markersize=3,
            markevery=list(range(changes)),
            # Each node's line thinner than the one before: nodes with the same pool (a prefill
            # and its decode, often) stay visible one on top of the other.
            linewidth=1.2 + 1.8 * (len(named) - 1 - index) / max(len(named) - 1, 1),
        )
    rest = [node for node in series if node not in named]
    if rest:
        lines = []
        for node in rest:
            path, _ = series[node]
            xs = [_dt(t) for t, _ in path]
            ys = [p for _, p in path]
            # A step drawn "post": each pool holds until the next change.
            lines.append(
                [
                    (x, y)
                    for i in range(len(xs))
                    for x, y in ((xs[i], ys[max(i - 1, 0)]), (xs[i], ys[i]))
                ]
            )
        more_below = sum(1 for node in rest if node in below)
        label = f"{len(rest):,} more nodes" + (
            f" ({more_below:,} below context)" if more_below else ""
        )
        ax.add_collection(LineCollection(lines, colors="#999999", linewidths=0.6, label=label))
        ax.autoscale_view()
    contexts = sorted({c for pts in data.pools.values() for _, _, c in pts if c is not None})
    for context in contexts[:MAX_POOL_LINES]:
        ax.axhline(context, color="#c0392b", linestyle=":", linewidth=1.2)
        said = "context at least" if context in data.context_floors else "context"
        ax.annotate(
            f"{said} {context:,}", (0.01, context), xycoords=("axes fraction", "data"), fontsize=8
        )
    if not series:
        _empty(ax, "no pool sizes in the input")
        return _png(fig)
    ax.set_ylabel("tokens")
    ax.set_title("KV pool against context length, per node")
    _time_axis(ax, data)
    # Outside the axes, as on the findings timeline: inside, it hid where the lines end.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=7)
    return _png(fig)


def _pool_steps(
    points: list[tuple[float, int | None, int | None]], end_time: float | None
) -> tuple[list[tuple[float, int]], int] | None:
    """A node's pool over time, and how many of the points are changes: the last configuration
    holds until the logs end, so a gap still open there is drawn open."""
    pools = [(t, p) for t, p, _ in points if p is not None]
    if not pools:
        return None
    changes = len(pools)
    if end_time is not None and end_time > pools[-1][0]:
        pools.append((end_time, pools[-1][1]))
    return pools, changes


def _ever_below(points: list[tuple[float, int | None, int | None]]) -> bool:
    return any(p is not None and c is not None and p < c for _, p, c in points)


def _time_axis(ax: Axes, data: PlotData) -> None:
    """Dates on x, and the runs of exposed responses shaded, on every plot over time."""
    for first, last in data.exposure_spans:
        ax.axvspan(_dt(first), _dt(max(last, first + 60)), color="#c0392b", alpha=0.08)
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    ax.xaxis_date(tz=UTC)
    ax.set_xlabel("time (UTC)")
    ax.grid(True, alpha=0.2)


def render_all(data: PlotData) -> dict[str, bytes]:
    """Every plot as PNG, in report order. The report is forensics' last step on one core, so
    the slowest plot (the prefill-speed scatter, two fifths of the drawing) is drawn in a
    forked child meanwhile, where a second core and fork exist."""
    timing = _drawn_aside(_safely(timing_plot), data)
    findings = _safely(findings_timeline)(data)
    deferred, pools = _safely(deferred_plot)(data), _safely(pool_plot)(data)
    return {"timing": timing(), "findings": findings, "deferred": deferred, "pools": pools}


def _safely(render: Callable[[PlotData], bytes]) -> Callable[[PlotData], bytes]:
    """`render`, or a plot saying it could not be drawn: input the plotting library refuses
    (a date in year 9999, a node name that is not text) must not cost the report the rest."""

    def drawn(data: PlotData) -> bytes:
        try:
            return render(data)
        except Exception as exc:  # noqa: BLE001 -- any failure of one plot, reported on it
            plt.close("all")
            fig, ax = plt.subplots(figsize=(9, 1.6))
            _empty(ax, f"this plot could not be drawn from the input ({type(exc).__name__})")
            return _png(fig)

    return drawn


# A child that has not delivered by then is stopped and its plot is drawn here: one plot takes
# under a second, and a report must never wait on a child that hangs.
CHILD_SECONDS = 60.0


def _drawn_aside(
    render: Callable[[PlotData], bytes], data: PlotData, timeout: float = CHILD_SECONDS
) -> Callable[[], bytes]:
    """Start `render(data)` in a forked child; the returned call waits for its PNG. Drawn here
    instead when there is no second core or no fork, and again here if the child fails, is
    reaped elsewhere or takes longer than `timeout` seconds."""
    if not hasattr(os, "fork") or (os.cpu_count() or 1) < 2:
        png = render(data)
        return lambda: png
    read_end, write_end = os.pipe()
    deadline = time.monotonic() + timeout
    child = os.fork()
    if child == 0:  # pragma: no cover -- the child's coverage is not collected
        status = 1
        try:
            os.close(read_end)
            with os.fdopen(write_end, "wb") as out:
                out.write(render(data))
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)

    def result() -> bytes:
        png = _read_until(read_end, deadline)
        try:
            if png is None:  # too late: the child is stopped
                os.kill(child, signal.SIGKILL)
            _, status = os.waitpid(child, 0)
        except (ProcessLookupError, ChildProcessError):  # already gone, reaped elsewhere
            status = 1
        return png if png is not None and status == 0 else render(data)

    return result


def _read_until(fd: int, deadline: float) -> bytes | None:
    """Everything written to the pipe `fd` until its writer closes it, or None at `deadline`.
    The descriptor is closed either way."""
    chunks: list[bytes] = []
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def sample_evenly(points: Sequence[TimingPoint], limit: int) -> list[TimingPoint]:
    if len(points) <= limit:
        return list(points)
    step = len(points) / limit
    return [points[int(i * step)] for i in range(limit)]
