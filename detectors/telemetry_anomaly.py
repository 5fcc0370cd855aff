"""Multivariate window anomalies in a node's rates and latencies, for dashboards only.

Feeds the alert `KVWatchTelemetryAnomaly` (severity `info`: never routed, never paged).

The specific detectors know the mechanisms; this one knows only the node's normal. Per node
and window (event time) it builds a small feature vector (finished, aborted, rejected and
failed-transfer counts, deferred-release timeouts, mean token usage, peak queue, mean
generation throughput, mean TTFT, batch-line count; counts as log1p), standardises it with
the training windows' mean and spread (never below `min_scale`), and scores it with a
scikit-learn `LocalOutlierFactor` (novelty mode) fitted on that node's earlier windows.

Why LOF and not an IsolationForest: a window far *outside* everything seen (the storm) lands in
the same leaf as the most extreme training windows of each random split, so a forest scores it
only a little above normal; the local density ratio of LOF grows with the distance. Sign:
scikit-learn's `score_samples` is higher for normal points; the score here is its negation, the
LOF itself (about 1 for ordinary windows, higher is more anomalous). Windows scoring at or above
`threshold` are kept out of the training buffer; the first of an unusual stretch raises an
`info` finding.

Windows are aligned to the epoch, and an event joins the window holding the event-time
watermark when it arrives. The per-window sums (`collector.state.node_windows.NodeWindow`) can
be folded from the raw events here (`input: events`, live) or shipped ready-made per node and
window by forensics workers as `node_window` events (`input: node_windows`), which spares
shipping the batch lines; both inputs give the same windows, features and scores.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

import numpy as np
from pydantic import Field

if TYPE_CHECKING:
    from sklearn.neighbors import LocalOutlierFactor

from collector.events import Event, iso_time
from collector.state.node_windows import NODE_WINDOW, SOURCE_KINDS, NodeWindow
from detectors.base import Detector, DetectorConfig
from detectors.context import DetectionContext
from detectors.finding import Finding
from detectors.windows import WindowClock

FEATURES: Final = (
    "finished",
    "aborted",
    "rejected",
    "transfer_failed",
    "deferred_timeouts",
    "token_usage",
    "queue_max",
    "gen_throughput",
    "ttft",
    "batches",
)
_LOG_FEATURES: Final = frozenset(
    {
        "finished",
        "aborted",
        "rejected",
        "transfer_failed",
        "deferred_timeouts",
        "queue_max",
        "gen_throughput",
        "ttft",
        "batches",
    }
)
# scikit-learn's LocalOutlierFactor default, so the neighbour search is its own.
_LEAF_SIZE: Final = 30
# What `input: node_windows` reads.
_PARTIAL_KINDS: Final = frozenset({NODE_WINDOW})


class TelemetryAnomalyConfig(DetectorConfig):
    # Window length (seconds of event time); windows are aligned to the epoch.
    window_seconds: float = Field(default=300.0, gt=0)
    # What to read: the raw events (live), or the `node_window` partials that forensics
    # workers fold them into (`collector.state.node_windows`, same `window_seconds`). Both give
    # the same windows and scores.
    input: Literal["events", "node_windows"] = "events"
    # Normal windows a node needs before it is scored.
    min_windows: int = Field(default=24, ge=4)
    # Training buffer per node (most recent normal windows).
    max_windows: int = Field(default=512, ge=8)
    # Retrain after this many new windows.
    refit_every: int = Field(default=48, ge=1)
    # Neighbours of the local outlier factor (capped by the training windows available).
    n_neighbors: int = Field(default=20, ge=2)
    # Smallest per-feature spread used to standardise (log1p units): a perfectly steady
    # feature must not turn a tiny wobble into a huge distance.
    min_scale: float = Field(default=0.1, gt=0)
    # Noise (in standardised units) added to training rows, seeded: identical windows would
    # otherwise have zero neighbour distances.
    jitter: float = Field(default=0.01, ge=0)
    random_state: int = 0
    # Local outlier factor at or above which a window is reported (info).
    threshold: float = Field(default=3.0, gt=1)


def _shown(value: float) -> str:
    """A window's value for a person: whole counts as integers, means with two decimals."""
    return f"{value:.0f}" if abs(value - round(value)) < 1e-6 else f"{value:.2f}"


def window_features(window: NodeWindow) -> list[float]:
    """The feature vector of one node's window, in `FEATURES` order (counts as log1p)."""
    raw = {
        "finished": float(window.counts.get("finished", 0)),
        "aborted": float(window.counts.get("aborted", 0)),
        "rejected": float(window.counts.get("rejected", 0)),
        "transfer_failed": float(window.counts.get("transfer_failed", 0)),
        "deferred_timeouts": float(window.counts.get("deferred_timeouts", 0)),
        "token_usage": window.mean("token_usage"),
        "queue_max": window.queue_max,
        "gen_throughput": window.mean("gen_throughput"),
        "ttft": window.mean("ttft"),
        "batches": float(window.counts.get("batches", 0)),
    }
    return [math.log1p(max(raw[k], 0.0)) if k in _LOG_FEATURES else raw[k] for k in FEATURES]


class _NodeModel:
    __slots__ = (
        "buffer",
        "fit_rows",
        "fit_x",
        "n_neighbors",
        "fitted_lof",
        "scorer",
        "center",
        "scale",
        "since_fit",
    )

    def __init__(self, size: int) -> None:
        self.buffer: deque[list[float]] = deque(maxlen=size)
        self.fit_rows: list[list[float]] = []
        # The standardised (and jittered) training rows of the last fit, and its neighbours.
        self.fit_x: np.ndarray | None = None
        self.n_neighbors = 0
        self.fitted_lof: LocalOutlierFactor | None = None
        self.scorer: _NoveltyScorer | None = None
        self.center = np.zeros(len(FEATURES))
        self.scale = np.ones(len(FEATURES))
        self.since_fit = 0

    @property
    def lof(self) -> LocalOutlierFactor | None:
        """scikit-learn's model of the last fit, built on first use: the scorer repeats its
        arithmetic, so it is needed only where distances tie (and by tests comparing)."""
        if self.fitted_lof is None and self.fit_x is not None:
            from sklearn.neighbors import LocalOutlierFactor

            lof = LocalOutlierFactor(
                n_neighbors=self.n_neighbors, novelty=True, algorithm="ball_tree"
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lof.fit(self.fit_x)
            self.fitted_lof = lof
        return self.fitted_lof

    def score(self, row: np.ndarray) -> float:
        """The local outlier factor of one standardised row (the model must be fitted)."""
        if self.scorer is not None:
            return self.scorer.score(row)
        return _lof_score(self.lof, row)


def _training_neighbours(fit_x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each training row's `k` nearest other rows, `(distances, indices)`, as the fit of a
    `LocalOutlierFactor(n_neighbors=k, algorithm="ball_tree")` finds them.

    Why: that fit validates its input and dispatches through joblib, about a quarter of its
    time on a few hundred windows. This is its tree query itself: the same neighbours of the
    same rows, `k + 1` of them, each row's own entry dropped as scikit-learn drops it (with
    duplicates, the first entry when the row is not among them), so the same bits. Found by
    `_exact_neighbours` when no distances tie (no scikit-learn import: a second of every run),
    else by scikit-learn's ball tree, whose order among equal distances is its own.
    """
    found = _exact_neighbours(fit_x, k + 1)
    if found is not None:
        distances, indices = found
    else:
        # Imported where first needed: scikit-learn takes a second to import.
        from sklearn.neighbors import BallTree

        distances, indices = BallTree(fit_x, leaf_size=_LEAF_SIZE, metric="euclidean").query(
            fit_x, k + 1
        )
    keep = indices != np.arange(len(fit_x))[:, np.newaxis]
    keep[:, 0][np.all(keep, axis=1)] = False
    shape = (len(fit_x), k)
    return np.reshape(distances[keep], shape), np.reshape(indices[keep], shape)


# Rows up to which every pairwise distance is worked out (a matrix of this many squared).
_EXACT_MAX_ROWS: Final = 2048
_BLOCK_ROWS: Final = 64


def _exact_neighbours(rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Each row's `k` nearest rows (itself included), nearest first, with the distances a
    ball tree's query returns bit for bit (squared differences summed feature by feature,
    then the square root); None when a distance ties inside the `k` or at their edge, or
    there are too many rows to compare all pairs."""
    n = len(rows)
    if n > _EXACT_MAX_ROWS or k > n:
        return None
    columns = np.ascontiguousarray(rows.T)
    squared = np.empty((n, n))
    differences, sums = np.empty(_BLOCK_ROWS * n), np.empty(_BLOCK_ROWS * n)
    # A block of rows at a time, summed in a contiguous buffer small enough for the CPU cache
    # (1.7x faster), and only from the block's own first column on: the rest mirrors blocks
    # already summed, as (a - b)² and (b - a)² are the same float (1.3x faster again).
    for first in range(0, n, _BLOCK_ROWS):
        last = min(first + _BLOCK_ROWS, n)
        shape = (last - first, n - first)
        scratch = differences[: shape[0] * shape[1]].reshape(shape)
        block = sums[: shape[0] * shape[1]].reshape(shape)
        block.fill(0.0)
        for column in columns:
            np.subtract(column[first:last, np.newaxis], column[np.newaxis, first:], out=scratch)
            np.multiply(scratch, scratch, out=scratch)
            block += scratch
        squared[first:last, first:] = block
        squared[first:last, :first] = squared[:first, first:last].T
    # The k nearest and the next one, to see a tie at the edge.
    reach = min(k + 1, n)
    nearest = np.argpartition(squared, reach - 1, axis=1)[:, :reach]
    at = np.arange(n)[:, np.newaxis]
    near = squared[at, nearest]
    order = np.argsort(near, axis=1, kind="stable")
    nearest, near = nearest[at, order], near[at, order]
    if (near[:, 1:] == near[:, :-1]).any():
        return None
    return np.sqrt(near[:, :k]), nearest[:, :k]


class _NoveltyScorer:
    """`-LocalOutlierFactor.score_samples` for one row, from the fitted model's arrays.

    Why: scikit-learn's per-call overhead (validation, joblib) is about 1 ms, and every closed
    window is scored alone, so over weeks of logs the overhead dominated forensics. This repeats
    scikit-learn's arithmetic in the same order (ball-tree distances sum squared differences
    feature by feature; means over the same (1, k) arrays), so the score is bit-identical; the
    tests check that against `score_samples`. When distances tie, the neighbour order is the
    tree's own choice, so such rows go to scikit-learn itself (`lof`, built when first asked).
    """

    __slots__ = ("columns", "lrd", "k_distance", "k", "lof", "_squares")

    def __init__(
        self,
        fit_x: np.ndarray,
        lrd: np.ndarray,
        k_distance: np.ndarray,
        k: int,
        lof: Callable[[], LocalOutlierFactor | None],
    ) -> None:
        # One contiguous row per feature, so each feature's differences are one fast pass.
        self.columns = np.ascontiguousarray(fit_x.T)
        self.k = k
        self.lrd = lrd
        self.k_distance = k_distance
        self.lof = lof  # scikit-learn's model of the same fit, for tied distances
        self._squares = np.empty_like(self.columns)

    @classmethod
    def of(cls, lof: LocalOutlierFactor, fit_x: np.ndarray) -> _NoveltyScorer | None:
        """The scorer of a fitted model; None (score with scikit-learn) if its arrays are gone."""
        # Each training row's local reachability density and distances to its neighbours:
        # private in scikit-learn, so a release that renames them only costs speed.
        lrd = getattr(lof, "_lrd", None)
        distances = getattr(lof, "_distances_fit_X_", None)
        if not isinstance(lrd, np.ndarray) or not isinstance(distances, np.ndarray):
            return None
        k = int(lof.n_neighbors_)
        return cls(fit_x, lrd, distances[:, k - 1], k, lambda: lof)

    @classmethod
    def fit(
        cls, fit_x: np.ndarray, k: int, lof: Callable[[], LocalOutlierFactor | None]
    ) -> _NoveltyScorer:
        """Fit on standardised rows as `LocalOutlierFactor(n_neighbors=k).fit` does."""
        distances, indices = _training_neighbours(fit_x, k)
        # scikit-learn's `_local_reachability_density` of the training rows, step by step.
        reach = np.maximum(distances, distances[indices, k - 1])
        lrd = 1.0 / (np.mean(reach, axis=1) + 1e-10)
        return cls(fit_x, lrd, distances[:, k - 1], k, lof)

    def score(self, row: np.ndarray) -> float:
        """The local outlier factor of `row` (shape (n_features,), standardised)."""
        squares = np.subtract(self.columns, row[:, np.newaxis], out=self._squares)
        squares *= squares
        # Summing over the outer axis adds feature rows one after another: the tree's order of
        # addition, so the same bits (numpy sums pairwise only along the contiguous axis).
        squared = np.add.reduce(squares, axis=0)
        k = self.k
        # The square root keeps the order (ties aside, which go to scikit-learn below), so it
        # is taken of the k + 1 nearest only.
        nearest = squared.argpartition(k)[: k + 1]
        near = squared[nearest]
        order = near.argsort(kind="stable")
        nearest = nearest[order]
        ordered = np.sqrt(near[order])
        if (ordered[1:] == ordered[:-1]).any():
            return _lof_score(self.lof(), row)
        neighbours = nearest[np.newaxis, :k]
        reach = np.maximum(ordered[np.newaxis, :k], self.k_distance[neighbours])
        # `np.mean(a, axis=1)` is `np.add.reduce(a, axis=1) / k`; the one row's scalars are
        # worked in Python floats (the same IEEE operations, without array overhead).
        row_lrd = 1.0 / (float(np.add.reduce(reach, axis=1)[0]) / k + 1e-10)
        ratios = self.lrd[neighbours] / row_lrd
        return float(np.add.reduce(ratios, axis=1)[0]) / k


@functools.lru_cache(maxsize=8)
def _jitter(seed: int, scale: float, shape: tuple[int, ...]) -> np.ndarray:
    """The seeded noise added to training rows: the same for every fit of one shape (the
    buffer grows to its size and stays there), so drawn once. Read-only: it is shared."""
    noise = np.random.default_rng(seed).normal(0.0, scale, size=shape)
    noise.flags.writeable = False
    return noise


def _lof_score(lof: LocalOutlierFactor | None, row: np.ndarray) -> float:
    """scikit-learn's own score of one standardised row, sign flipped (higher: more unusual)."""
    assert lof is not None  # only fitted models are scored
    return float(-lof.score_samples(row[np.newaxis, :])[0])


class TelemetryAnomaly(Detector[TelemetryAnomalyConfig]):
    """Local outlier factor over per-node window features, `info` only; feeds
    `KVWatchTelemetryAnomaly`.

    Examples
    --------
    >>> det = TelemetryAnomaly(min_windows=8, refit_every=8, n_neighbors=5)
    >>> normal = [[float(i % 3), 0, 0, 0, 0, 0.5, 1, 7.0, 0.3, 4] for i in range(16)]
    >>> for x in normal:
    ...     det.learn_one({"node": "decode-0", "features": x})
    >>> odd = [9.0, 6, 5, 7, 6, 0.99, 9, 0.1, 6.0, 0]
    >>> det.score_one({"node": "decode-0", "features": odd}) > det.score_one(
    ...     {"node": "decode-0", "features": normal[0]})
    True
    """

    name: ClassVar[str] = "telemetry_anomaly"
    alert: ClassVar[str] = "KVWatchTelemetryAnomaly"
    config_class: ClassVar[type[DetectorConfig]] = TelemetryAnomalyConfig
    # Every kind it can read; `consumed_kinds` is what the configured `input` reads.
    event_kinds: ClassVar[frozenset[str]] = SOURCE_KINDS | {NODE_WINDOW}
    windowed: ClassVar[bool] = True

    @property
    def consumed_kinds(self) -> frozenset[str]:
        """The kinds this instance reads (`input`); other kinds it is handed are ignored."""
        return SOURCE_KINDS if self.config.input == "events" else _PARTIAL_KINDS

    @classmethod
    def _unit_test_params(cls) -> dict[str, Any]:
        return {"window_seconds": 60.0, "min_windows": 4, "refit_every": 4, "n_neighbors": 3}

    def _init_learned(self) -> None:
        self.clock_ = WindowClock(self.config.window_seconds)
        self.windows_: dict[str, NodeWindow] = {}
        self.models_: dict[str, _NodeModel] = {}
        # node -> start of the unusual stretch it is in (one finding per stretch)
        self.unusual_: dict[str, float] = {}

    def _learned_state(self) -> dict[str, Any]:
        return {
            "clock_start": self.clock_.start,
            "unusual": dict(self.unusual_),
            "windows": {node: w.to_state() for node, w in sorted(self.windows_.items())},
            "models": {
                node: {
                    "buffer": [list(r) for r in m.buffer],
                    "fit_rows": [list(r) for r in m.fit_rows],
                    "since_fit": m.since_fit,
                }
                for node, m in sorted(self.models_.items())
            },
        }

    def _load_learned(self, state: dict[str, Any]) -> None:
        self.clock_ = WindowClock(self.config.window_seconds, state.get("clock_start"))
        self.unusual_ = {str(k): float(v) for k, v in (state.get("unusual") or {}).items()}
        self.windows_ = {
            node: NodeWindow.from_state(raw) for node, raw in (state.get("windows") or {}).items()
        }
        self.models_ = {}
        for node, raw in (state.get("models") or {}).items():
            model = _NodeModel(self.config.max_windows)
            model.buffer.extend([float(v) for v in row] for row in raw["buffer"])
            model.since_fit = int(raw["since_fit"])
            if raw["fit_rows"]:
                self._fit(model, [[float(v) for v in row] for row in raw["fit_rows"]])
                model.since_fit = int(raw["since_fit"])
            self.models_[node] = model

    # -- streaming API -------------------------------------------------------------------------

    def learn_one(self, x: dict[str, Any]) -> None:
        """Add one normal window `{node, features}` to the node's training buffer."""
        self._ensure()
        self._learn(str(x["node"]), [float(v) for v in x["features"]])

    def score_one(self, x: dict[str, Any]) -> float:
        """Score one window `{node, features}`; 0.0 while the node has no model yet."""
        self._ensure()
        return self._score(str(x["node"]), [float(v) for v in x["features"]])

    def _score(self, node: str, row: list[float]) -> float:
        model = self.models_.get(node)
        if model is None or model.fit_x is None:
            return 0.0
        return model.score((np.asarray(row, dtype=float) - model.center) / model.scale)

    def _learn(self, node: str, row: list[float]) -> None:
        model = self.models_.get(node)
        if model is None:
            model = self.models_[node] = _NodeModel(self.config.max_windows)
        model.buffer.append(row)
        model.since_fit += 1
        if len(model.buffer) >= self.config.min_windows and (
            model.fit_x is None or model.since_fit >= self.config.refit_every
        ):
            self._fit(model, list(model.buffer))  # rows are never changed in place

    def _fit(self, model: _NodeModel, rows: list[list[float]]) -> None:
        cfg = self.config
        data = np.asarray(rows, dtype=float)
        model.center = data.mean(axis=0)
        model.scale = np.maximum(data.std(axis=0), cfg.min_scale)
        scaled = (data - model.center) / model.scale
        if cfg.jitter:
            scaled = scaled + _jitter(cfg.random_state, cfg.jitter, scaled.shape)
        # The neighbours scikit-learn's LocalOutlierFactor would use (never more than the
        # other rows); its model itself is built only if a score needs it (`_NodeModel.lof`).
        model.n_neighbors = max(1, min(cfg.n_neighbors, len(rows) - 1))
        model.fit_x = scaled
        model.fitted_lof = None
        model.scorer = _NoveltyScorer.fit(scaled, model.n_neighbors, lambda: model.lof)
        model.fit_rows = rows
        model.since_fit = 0

    # -- feeding -------------------------------------------------------------------------------

    def _on_event(self, event: Event, ctx: DetectionContext) -> list[Finding]:
        kind = event.kind
        if kind not in self.consumed_kinds:
            return []
        findings: list[Finding] = []
        # The event joins the window holding the watermark (`ctx.now`, or the event's time when
        # later): where its node's `NodeWindowAggregator` puts it too.
        now = ctx.now
        if event.time is not None and (now is None or event.time > now):
            now = event.time
        if now is not None:
            clock = self.clock_
            if clock.start is None:
                clock.place(now)
            elif now >= clock.start + clock.width:
                findings = self._on_flush(ctx, now)
        if kind != NODE_WINDOW:
            self._window_of(event.node).add_event(event)
            return findings
        fields = event.fields
        if fields.get("window_seconds") != self.config.window_seconds:
            raise ValueError(
                f"node_window of {fields.get('window_seconds')} s, detector windows are "
                f"{self.config.window_seconds} s: aggregate with the detector's window_seconds"
            )
        if fields.get("events"):  # none: a role hint only, nothing for the window
            self._window_of(event.node).merge(NodeWindow.from_state(fields))
        return findings

    def _window_of(self, node: str) -> NodeWindow:
        window = self.windows_.get(node)
        if window is None:
            window = self.windows_[node] = NodeWindow()
        return window

    def _on_flush(self, ctx: DetectionContext, now: float) -> list[Finding]:
        if math.isinf(now) and self.clock_.start is None and self.windows_:
            self.clock_.place(ctx.now if ctx.now is not None else 0.0)
        findings: list[Finding] = []
        ended = math.isinf(now)
        for start in self.clock_.due(now, max_windows=4):
            windows, self.windows_ = self.windows_, {}
            if ended and ctx.now is not None and ctx.now - start < self.config.window_seconds / 2:
                # The input ended in the first half of this window: a sliver of one is no
                # window. Scored, the last minute of every node was "unusual", dated after the
                # logs end (audit R).
                continue
            for node in sorted(windows):
                finding = self._close(node, window_features(windows[node]), start)
                if finding is not None:
                    findings.append(finding)
        return findings

    def _close(self, node: str, row: list[float], start: float) -> Finding | None:
        score = self._score(node, row)
        if score < self.config.threshold:
            self._learn(node, row)
            self.unusual_.pop(node, None)
            return None
        if node in self.unusual_:
            return None  # the same unusual stretch: reported at its first window
        self.unusual_[node] = start
        # As the window holds them (counts, means), not as the model sees them (log1p of
        # counts): "finished=0.69" meant one finished request.
        named = {
            k: math.expm1(v) if k in _LOG_FEATURES else v
            for k, v in zip(FEATURES, row, strict=True)
        }
        top = ", ".join(f"{k}={_shown(v)}" for k, v in named.items() if v)
        return self._finding(
            "info",
            time=start + self.config.window_seconds,
            node=node,
            summary=(
                f"{node}: unusual {self.config.window_seconds:.0f}s window of telemetry "
                f"(score {score:.2f}; {top})"
            ),
            subject=f"{node}:{start}",
            evidence={
                "window_start": iso_time(start),
                **{k: round(v, 6) for k, v in named.items()},
                "score": round(score, 6),
                "threshold": self.config.threshold,
            },
        )
