"""An exact low-quantile regression line, fast enough to refit per node every few hours of logs.

The learned prefill floor is the `q`-quantile line of seconds on uncached tokens: the
`(intercept, slope)` minimising the pinball loss `sum(max(q * r, (q - 1) * r))` of the residuals
`r = y - intercept - slope * x`. That is the linear program scikit-learn's `QuantileRegressor`
(`alpha=0`) hands to HiGHS, but the general LP costs about 10 ms per fit, which over weeks of
logs (a refit per node and timing source every few hours) outweighed everything else forensics
does. With one feature the problem is small enough to solve directly.

Some optimal line passes through two samples. For lines through a fixed sample `k` the loss is
a convex piecewise-linear function of the slope whose breakpoints are the slopes to the other
samples, minimised at a weighted quantile of those slopes. Descent therefore rotates the line
around one of its samples to the best slope, moves to the sample it now passes through, and
repeats while the loss falls (Wesolowsky's direct method for least absolute deviations,
generalised to any quantile). It stops at a line that no rotation around any sample on it
improves, which for a convex piecewise-linear loss is a global minimum. When several lines
are optimal (as with a quantile of an exact count of samples) it returns one of them, possibly
not the one HiGHS would.
"""

from __future__ import annotations

from typing import Final

import numpy as np

# Loss decreases smaller than this (relative) are rounding, not progress.
_RELATIVE_TOLERANCE: Final = 1e-12
_MAX_STEPS: Final = 1000


def pinball_loss(x: np.ndarray, y: np.ndarray, quantile: float, line: tuple[float, float]) -> float:
    """The quantile (pinball) loss of `line = (intercept, slope)` on the samples."""
    residuals = y - line[0] - line[1] * x
    return float(np.add.reduce(np.maximum(quantile * residuals, (quantile - 1.0) * residuals)))


def quantile_line(x: np.ndarray, y: np.ndarray, quantile: float) -> tuple[float, float]:
    """`(intercept, slope)` of a line minimising the pinball loss of `y` on `x`.

    Examples
    --------
    >>> xs = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    >>> ys = np.array([1.0, 3.5, 5.0, 7.2, 9.0])  # on or above y = 1 + 2x
    >>> quantile_line(xs, ys, 0.1)
    (1.0, 2.0)
    """
    # Contiguous copies: callers pass columns of a samples array, and every step below reads
    # them whole (the same values, so the same arithmetic).
    x = np.ascontiguousarray(x, dtype=float)
    y = np.ascontiguousarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) == 0:
        raise ValueError("x and y must be non-empty 1-D arrays of the same length")
    if len(x) == 1 or np.ptp(x) == 0:
        # No slope to learn: the intercept is the quantile of y (lower order statistic).
        rank = max(int(np.ceil(quantile * len(y))) - 1, 0)
        return float(np.sort(y)[rank]), 0.0
    # Start from the sample at the quantile of y: a line through it is already near the bottom.
    pivot = int(np.argsort(y, kind="stable")[min(int(quantile * len(y)), len(y) - 1)])
    slope, other = _best_rotation(x, y, quantile, pivot)
    line = (float(y[pivot] - slope * x[pivot]), slope)
    loss = pinball_loss(x, y, quantile, line)
    settled = {pivot}  # samples on the current line that no rotation around improves
    pivot = other
    for _ in range(_MAX_STEPS):
        slope, other = _best_rotation(x, y, quantile, pivot)
        candidate = (float(y[pivot] - slope * x[pivot]), slope)
        candidate_loss = pinball_loss(x, y, quantile, candidate)
        if candidate_loss < loss - _RELATIVE_TOLERANCE * max(abs(loss), 1.0):
            line, loss = candidate, candidate_loss
            settled = {pivot}
            pivot = other
            continue
        settled.add(pivot)
        # More than two samples may lie on the line; each is a rotation point to try.
        residuals = np.abs(y - line[0] - line[1] * x)
        on_line = np.flatnonzero(residuals <= 1e-9 * max(float(np.max(np.abs(y))), 1e-300))
        untried = [int(i) for i in on_line if int(i) not in settled]
        if not untried:
            break
        pivot = untried[0]
    return line


def _best_rotation(x: np.ndarray, y: np.ndarray, quantile: float, pivot: int) -> tuple[float, int]:
    """The best slope for lines through sample `pivot`, and a sample the best line meets.

    Through the pivot, sample `i` at horizontal offset `d` contributes `|d| * rho(s - slope)`
    with `s` its slope from the pivot (`rho` with weights q, 1-q when `d > 0`, swapped when
    `d < 0`). The derivative starts at `-(q * sum(d > 0) + (1 - q) * sum(d < 0))` and rises by
    `|d|` at each breakpoint `s`; the minimum is the first breakpoint where it reaches zero.
    """
    # Array methods and `np.add.reduce` rather than the `np.*` wrappers (the same arithmetic):
    # this runs a few times per refit, on a few hundred samples.
    offsets = x - x[pivot]
    moving = (offsets != 0.0).nonzero()[0]
    d = offsets[moving]
    slopes = (y[moving] - y[pivot]) / d
    weights = np.abs(d)
    order = slopes.argsort(kind="stable")
    ahead = float(np.add.reduce(weights[d > 0]))
    behind = float(np.add.reduce(weights[d < 0]))
    start = -(quantile * ahead + (1.0 - quantile) * behind)
    rising = start + weights[order].cumsum()
    at = min(int(rising.searchsorted(0.0, side="left")), len(order) - 1)
    best = int(order[at])
    return float(slopes[best]), int(moving[best])
