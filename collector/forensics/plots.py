"""The four pictures a responder looks at first, rendered to PNG with matplotlib (Agg, no display).

1. Time per uncached prompt token against prompt length, the floor drawn: exposed replies sit
   far below it, honest ones above, prefix-cache hits are judged on their uncached part.
2. The findings timeline by severity.
3. Deferred-release outcomes over time.
4. Each node's pool against context over time: the configuration gap, and when it closed.
"""

from __future__ import annotations

import io
import os
import select
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

_SEVERITY_COLOURS = {"critical": "#c0392b", "warning": "#e67e22", "info": "#7f8c8d"}
_OUTCOME_COLOURS = {"drained": "#27ae60", "timeout": "#e67e22", "error": "#c0392b"}


@dataclass
class TimingPoint:
    prompt_tokens: int
    uncached_tokens: int
    seconds_per_uncached_token: float
    exposed: bool


@dataclass
class PlotData:
    """Everything the plots need, already reduced to bounded size by the forensics driver."""

    timing: list[TimingPoint] = field(default_factory=list)
    # Seconds per uncached token below which a prefill is physically impossible (None: unknown).
    floor_seconds_per_token: float | None = None
    # (time, severity, detector) per finding.
    findings: list[tuple[float, str, str]] = field(default_factory=list)
    # hour start (epoch) -> outcome -> count
    deferred_outcomes: dict[float, dict[str, int]] = field(default_factory=dict)
    # node -> [(time, pool, context)]
    pools: dict[str, list[tuple[float, int | None, int | None]]] = field(default_factory=dict)
    # (first, last) exposure window, to shade on time plots
    exposure_window: tuple[float, float] | None = None


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
            label=f"served honestly ({len(honest):,} sampled)",
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
    if data.floor_seconds_per_token:
        ax.axhline(
            data.floor_seconds_per_token,
            color="#111",
            linestyle="--",
            linewidth=1.2,
            label="physical floor (per uncached token)",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("time to first token per uncached prompt token (s)")
    ax.set_title("Prefill speed: replies below the floor could not have read their prompt")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(loc="upper right", fontsize=8)
    return _png(fig)


def findings_timeline(data: PlotData) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    timed = [f for f in data.findings if f[0] is not None]
    if not timed:
        _empty(ax, "no findings")
        return _png(fig)
    detectors = sorted({f[2] for f in timed})
    rows = {name: i for i, name in enumerate(detectors)}
    # Least severe first, so a critical drawn at the same moment as a warning stays visible.
    for severity, colour in reversed(_SEVERITY_COLOURS.items()):
        points = [f for f in timed if f[1] == severity]
        if points:
            ax.scatter(
                [_dt(f[0]) for f in points],
                [rows[f[2]] for f in points],
                color=colour,
                s=18,
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
        _empty(ax, "no deferred KV releases logged")
        return _png(fig)
    hours = sorted(data.deferred_outcomes)
    bottom = [0] * len(hours)
    for outcome, colour in _OUTCOME_COLOURS.items():
        counts = [data.deferred_outcomes[h].get(outcome, 0) for h in hours]
        if any(counts):
            ax.bar(
                [_dt(h) for h in hours],
                counts,
                width=1 / 24,
                bottom=bottom,
                color=colour,
                label=outcome,
                align="edge",
            )
            bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    ax.set_ylabel("releases per hour")
    ax.set_title("Deferred KV releases by outcome")
    _time_axis(ax, data)
    ax.legend(loc="upper left", fontsize=8)
    return _png(fig)


def pool_plot(data: PlotData) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 3.6))
    drawn = False
    for node, points in sorted(data.pools.items()):
        pools = [(t, p) for t, p, _ in points if p is not None]
        if pools:
            ax.step(
                [_dt(t) for t, _ in pools],
                [p for _, p in pools],
                where="post",
                label=f"{node} pool",
                marker="o",
                markersize=3,
            )
            drawn = True
    contexts = sorted({c for pts in data.pools.values() for _, _, c in pts if c is not None})
    for context in contexts:
        ax.axhline(context, color="#c0392b", linestyle=":", linewidth=1.2)
        ax.annotate(
            f"context {context:,}", (0.01, context), xycoords=("axes fraction", "data"), fontsize=8
        )
    if not drawn:
        _empty(ax, "no pool sizes in the input")
        return _png(fig)
    ax.set_ylabel("tokens")
    ax.set_title("KV pool against context length, per node")
    _time_axis(ax, data)
    ax.legend(loc="lower right", fontsize=7, ncol=2)
    return _png(fig)


def _time_axis(ax: Axes, data: PlotData) -> None:
    """Dates on x, and the exposure window shaded, on every plot over time."""
    if data.exposure_window is not None:
        first, last = data.exposure_window
        ax.axvspan(_dt(first), _dt(max(last, first + 60)), color="#c0392b", alpha=0.08)
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    ax.xaxis_date(tz=UTC)
    ax.grid(True, alpha=0.2)


def render_all(data: PlotData) -> dict[str, bytes]:
    """Every plot as PNG, in report order. The report is forensics' last step on one core, so
    the slowest plot (the prefill-speed scatter, two fifths of the drawing) is drawn in a
    forked child meanwhile, where a second core and fork exist."""
    timing = _drawn_aside(timing_plot, data)
    findings, deferred, pools = findings_timeline(data), deferred_plot(data), pool_plot(data)
    return {"timing": timing(), "findings": findings, "deferred": deferred, "pools": pools}


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
