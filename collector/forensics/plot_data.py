"""What the report's plots are drawn from, reduced by the forensics driver to bounded size.

Apart from `collector.forensics.plots` so that the driver can gather it without importing
matplotlib: the parsing workers are forked sooner, and smaller, with no plotting library in them.
"""

from __future__ import annotations

# Imported for its at-fork hook, before any library registers its own: a child forked to draw
# (`plots._drawn_aside`) runs the hooks in the order they were registered, and OpenTelemetry's
# TracerProvider submits to a thread pool in its hook; registered first, it finds the pool's
# lock still held from the fork and the child hangs until `plots.CHILD_SECONDS`.
import concurrent.futures.thread  # noqa: F401
import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class TimingPoint:
    prompt_tokens: int
    uncached_tokens: int
    seconds_per_uncached_token: float
    exposed: bool


@dataclass(frozen=True)
class LearnedFloor:
    """One node's learned floor at the end of the run, for prompts with nothing cached: a
    prefill of `u` uncached tokens takes at least `max(intercept + slope * u, 0)` seconds (the
    safety factor already applied) and at most `rate * u`, from `from_tokens` on, judged only
    from `min_uncached_tokens` on. A node learns a floor per context band, so longer prompts may
    be judged by other lines: `longer` holds each as `(from_tokens, intercept, slope, rate)`."""

    node: str
    source: str
    intercept: float
    slope: float
    min_uncached_tokens: int
    from_tokens: float = 0.0
    rate: float = math.inf
    longer: tuple[tuple[float, float, float, float], ...] = ()

    def seconds(self, tokens: np.ndarray) -> np.ndarray:
        """The floor at each prompt length (NaN below the first line's `from_tokens`)."""
        lines = ((self.from_tokens, self.intercept, self.slope, self.rate), *self.longer)
        out = np.full(tokens.shape, np.nan)
        for start, intercept, slope, rate in lines:
            line = np.minimum(np.maximum(intercept + slope * tokens, 0.0), rate * tokens)
            out = np.where(tokens >= start, line, out)
        return out

    def seconds_per_token(self, uncached: float) -> float:
        return float(self.seconds(np.array([float(uncached)]))[0]) / uncached


@dataclass
class PlotData:
    """Everything the plots need, already reduced to bounded size by the forensics driver."""

    timing: list[TimingPoint] = field(default_factory=list)
    # Seconds per uncached token below which a prefill is physically impossible (None: unknown):
    # the weights' part, the same for every token.
    floor_seconds_per_token: float | None = None
    # Attention's part, seconds per pair of a token and one before it: a prompt of `u` tokens
    # with nothing cached adds `(u + 1) / 2` of them per token, so the floor rises with length.
    floor_seconds_per_pair: float = 0.0
    # What the physical floor assumes, in its legend: a default model of 1B active parameters
    # drawn unlabelled read as the physics of the logs' own model (review).
    floor_assumes: str = ""
    # The floors learned from the nodes' own timings, one a node (empty: none learned).
    learned_floors: list[LearnedFloor] = field(default_factory=list)
    # (time, severity, detector) per finding.
    findings: list[tuple[float, str, str]] = field(default_factory=list)
    # bin start (epoch) -> outcome -> count, bins `deferred_bin_seconds` wide
    deferred_outcomes: dict[float, dict[str, int]] = field(default_factory=dict)
    deferred_bin_seconds: float = 300.0
    # Transfer-failure lines logged: beside no deferred release, what the empty plot must say.
    transfer_failures: int = 0
    # node -> [(time, pool, context)]
    pools: dict[str, list[tuple[float, int | None, int | None]]] = field(default_factory=dict)
    # The contexts above that are only floors: no context read, a refused prompt that long.
    context_floors: list[int] = field(default_factory=list)
    # (first, last) of each run of exposed responses, to shade on time plots
    exposure_spans: list[tuple[float, float]] = field(default_factory=list)
    # Time of the last event read: each node's last configuration holds until then.
    end_time: float | None = None
