"""Prefill faster than the hardware can read the prompt: the timing tell of the incident.

Feeds the alert `KVWatchImpossiblyFastPrefill`.

A leaked answer skips the prefill: one token was computed instead of hundreds of thousands, so
the first token arrives far sooner than reading such a prompt can take. Time is judged per
*uncached* prompt token (`prompt_tokens - cached_tokens`): a prefix-cache hit legitimately
skips work and is never an anomaly. Every timing a request carries is an upper bound on its
prefill compute (prefill `forward_duration`, the OTLP prefill time or TTFT, decode
`first_token_latency`, `e2e_latency`), so if *any* of them is below a floor, the prefill did
not happen as claimed. Where prefill's own forward time passes its floors, though, the prompt
was computed, and the later timings, which carry the queue, answer to the physical floor alone
(a floor learned from them over hours of backlog is no measure of a quiet hour: audit Z); a
redone optimistic prefill (`attempts` > 0) is not timed by its forward time, the last
attempt's alone. Two floors:

* physical: the FLOPs of reading the prompt at the GPUs' peak (`gpu_peak_flops`, per GPU, at the
  model's dtype; GPUs = `gpus_per_node` or the prefill node's `tp_size x pp_size`): `2 x active
  parameters` per uncached token
  (`model_active_params`), plus attention's `4 x layers x width` per pair of an uncached token
  and a token before it (QK^T and AV, causal; `attention_layers` attending the whole context,
  `attention_width` = query heads x head dim). The pairs grow with the square of the prompt,
  so for 700k tokens and more they are most of the floor: without them, a stub answering a
  900k-token prompt in 0.3 s passed a floor of 0.23 s (blind review 36). The defaults (1B
  active parameters, 4 full-attention layers of width 2048) are deliberately below any model
  served at long context; configure yours (sliding-window, chunked and linear-attention layers
  do not attend the whole context: leave them out of `attention_layers`).
* learned: a low quantile regression line of each node's own timings on uncached tokens
  (the optimum of the linear program scikit-learn's `QuantileRegressor` solves, found by an
  exact direct method: `detectors.quantile_line`), divided by `safety_factor`. It learns only
  from requests that cannot be the leak (prompt within the pool in force, not refused, not
  already too fast), and each fit leaves out what is `outlier_factor` times faster per token
  than the node's pace (leaks no pool ruled out before the floor knew them), so the leak
  does not teach it that leaks are normal; the pace is the window's median but answers
  `outlier_factor` times slower than the pace at the fit before, which waited in a queue (a
  backlog filling half a fresh node's window made its honest answers look like leaks). Time
  to first token moves with load (a storm inflates it, a quiet minute after a restart
  deflates it), so the learned floor is conservative (2% quantile, divided by 8, and by 4
  more for timings that carry the queue), judges only long prompts
  (`learned_min_uncached_tokens`), and is not learned from `e2e_latency`, which mostly
  measures the answer's length. For timings that carry the queue (time to first token), the
  line keeps its slope and drops a positive intercept: the queue is a cost per request, so
  hours of backlog must not raise the floor of the quiet hour after. Such a timing that passes
  only by the queue's margin (8 to 32 times under the line) is not learned: a stub's first token
  may be one, and a few at the top of a band rotate its 2% line down tenfold. A node learns one
  floor per model and tensor-parallel size it ran: after a restart onto a smaller model or more
  GPUs, the old speed is not its history. And it learns per *context band*: each uncached token
  attends to the cached prefix and the tokens before it, so a token costs more the longer the
  context it attends (`cached + uncached / 2`, in powers of two). A floor learned from agentic
  turns extending 900k-token conversations is ten times what a fresh 60k-token prompt needs (blind
  review: two such prompts were called exposures), so a request is judged by a floor learned only
  from contexts no longer than its band's: band `b`'s floor learns from every sample of band `b`
  or below.

The score is `floor / observed` (higher is more anomalous); at or above `threshold` the
request was faster than possible. Prompts with at least `critical_min_uncached_tokens` uncached
tokens are critical (and an exposure) where the incident's path can have served them
(`_leak_path_closed`: not behind a release that refuses for good, nor a prefill pool that took
the prompt); the others, and shorter ones down to `min_uncached_tokens`, are warnings; below
that fixed overheads dominate and nothing is judged.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import chain
from typing import Any, ClassVar, Final, Literal, NamedTuple

import numpy as np
from pydantic import Field

from collector.events import PREFILL_BATCH, Event
from collector.state.config_timeline import NodeConfig
from collector.state.prefill_hits import PREFILL_HIT, PrefillHits
from collector.state.request_record import RequestRecord, SideRecord
from detectors.base import Detector, DetectorConfig
from detectors.context import DetectionContext
from detectors.engine_version import refuses_for_good
from detectors.finding import Finding, Severity
from detectors.pool_in_force import (
    LENIENT_BASIS,
    PREFILL_HOST_UNREAD,
    hosts_ruled_out,
    pool_in_force,
    ran_by_then,
    serving_model,
    strictest_of,
    strictest_prefill_pool,
)
from detectors.quantile_line import quantile_line

SOURCES: Final = (
    "prefill_forward",
    "trace_prefill",
    "trace_ttft",
    "first_token_latency",
    "decode_wait",
    "e2e_latency",
)
_MIN_SECONDS: Final = 1e-6
# Where a node's first pace is read in its first window (`_pace`).
FIRST_PACE_QUANTILE: Final = 0.25
# How far before a request's first line and after its last a prefill's batch line may be tied
# to it: clocks within a minute of each other are not moved onto one (`clock_join.skews`).
PREFILL_LINE_SLACK_SECONDS: Final = 60.0
# Timings from the request's arrival on a node that did not compute its prompt: they carry the
# queue before the prefill (`FloorModel.judged_line`).
QUEUED_SOURCES: Final = frozenset(
    {"trace_ttft", "first_token_latency", "decode_wait", "e2e_latency"}
)
# Decode's stages until its KV arrived (time stats), one of each pair: an older build's
# `prealloc_queue_duration` is the bootstrap and allocation wait together. Not the queue after
# the transfer (`queue_duration`): a wait for a slot in decode's batch, no prefill work in it.
_DECODE_WAIT_STAGES: Final = (
    ("prealloc_queue_duration", ("bootstrap_duration", "alloc_wait_duration")),
    ("transfer_duration", ()),
)


class ImpossiblyFastPrefillConfig(DetectorConfig):
    # Physical floor. Active parameters per token (MoE: active, not total). Default is low on
    # purpose so an unconfigured deployment gets a floor no real prefill can beat.
    model_active_params: float = Field(default=1.0e9, gt=0)
    # Layers whose attention spans the whole context, and their query heads x head dim: the
    # quadratic part of the floor. 0 layers leaves it out (a model with no such layer).
    attention_layers: int = Field(default=4, ge=0)
    attention_width: int = Field(default=2048, gt=0)
    # Peak dense FLOP/s of one GPU (H100 SXM BF16: 989 TFLOP/s).
    gpu_peak_flops: float = Field(default=9.89e14, gt=0)
    # GPUs that prefill one request; None uses the prefill node's tp_size x pp_size, else
    # default_gpus.
    gpus_per_node: int | None = Field(default=None, gt=0)
    default_gpus: int = Field(default=8, gt=0)
    # Best achievable fraction of peak; 1.0 makes the floor a hard physical bound.
    max_mfu: float = Field(default=1.0, gt=0, le=1)
    # Learned floor: low quantile of the node's own timings, divided by safety_factor.
    learn: bool = True
    quantile: float = Field(default=0.02, gt=0, lt=0.5)
    safety_factor: float = Field(default=8.0, ge=1)
    # Timings that carry the queue (`QUEUED_SOURCES`) are judged by the learned floor divided
    # by this as well: a backlog that grows for hours puts its wait in every sample the floor
    # learns from, and an honest answer once it clears came 1.0 to 2.1x "too fast" for it
    # (blind review 16, a unified server under sustained load), where a stub's first token
    # beats the floor tenfold and more (9.9x in the same review's leaks, 138x to 390x where
    # prefill's own forward time is logged).
    queued_safety_factor: float = Field(default=4.0, ge=1)
    # The learned floor judges only prompts with at least this many uncached tokens.
    learned_min_uncached_tokens: int = Field(default=32768, ge=1)
    # Timing sources the floor is learned for (e2e mostly measures the answer's length).
    learn_sources: tuple[str, ...] = (
        "prefill_forward",
        "trace_prefill",
        "trace_ttft",
        "first_token_latency",
        "decode_wait",
    )
    min_history: int = Field(default=50, ge=5)
    # ... over at least this long (event time) before the first fit: a node's first minutes
    # may be a queue behind one long prompt, and a line of queued answers is no pace. Fitted
    # on them alone, it called the honest answers after it leaks, which were then never
    # learned (blind review 40: 13 and 15 false exposures minutes after a start).
    min_history_seconds: float = Field(default=900.0, ge=0)
    max_history: int = Field(default=512, ge=10)
    # A sample this many times faster per uncached token than the node's pace is left out of
    # the fit (`_without_the_leak`): where no pool or refusal tells an answer was the leak,
    # leaked answers the floor had not yet caught taught it that they were normal. The pace
    # is the window's median but what is this many times slower than the pace at the fit
    # before (`_pace`: queued answers, slow, not leaks).
    outlier_factor: float = Field(default=20.0, gt=1)
    refit_every: int = Field(default=64, ge=1)
    # "exact": the one-feature solver in detectors.quantile_line (same optimum, ~30x faster);
    # "sklearn": scikit-learn's QuantileRegressor (HiGHS), the reference the exact one is
    # tested against.
    solver: Literal["exact", "sklearn"] = "exact"
    # After the first few fits, refit at most this often (event time).
    refit_interval_seconds: float = Field(default=10800.0, ge=0)
    learn_min_uncached_tokens: int = Field(default=256, ge=1)
    # A long prompt answered before any floor of its node was learned is judged again by the
    # first one learned within this long after it (`_wait_for_floor`): a log's first quarter
    # hour has no history, and a leaked answer there met the physical floor alone.
    floor_wait_seconds: float = Field(default=21600.0, ge=0)
    # At most this many such requests wait at once (the later ones are judged once only).
    max_waiting: int = Field(default=2000, ge=0)
    # Decision: score = floor / observed seconds; at or above threshold it was too fast.
    threshold: float = Field(default=1.0, gt=0)
    min_uncached_tokens: int = Field(default=4096, ge=1)
    critical_min_uncached_tokens: int = Field(default=32768, ge=1)
    # Timing sources considered (any subset of SOURCES).
    sources: tuple[str, ...] = SOURCES

    def learned_scale(self, source: str) -> float:
        """What a learned line is divided by to judge timings of `source`."""
        if source in QUEUED_SOURCES:
            return self.safety_factor * self.queued_safety_factor
        return self.safety_factor


class Timing(NamedTuple):
    """One timing of one request: `seconds` spent on `uncached_tokens` (beyond a prefix of
    `cached_tokens`), reported by `node`."""

    source: str
    node: str
    seconds: float
    uncached_tokens: int
    gpus: int
    cached_tokens: int = 0

    @property
    def context_band(self) -> int:
        return context_band(self.uncached_tokens, self.cached_tokens)


def context_band(uncached_tokens: int, cached_tokens: int) -> int:
    """The power of two just above the context an uncached token attends on average (the
    cached prefix and half the uncached part): band `b` holds `[2**(b-1), 2**b)`."""
    return int(cached_tokens + uncached_tokens // 2).bit_length()


class _Judgment(NamedTuple):
    """A request's score against its floors (`ImpossiblyFastPrefill._judge`), and what it rests
    on: per timing its learned model's key and the model judging it (None: no floor learned)."""

    timings: list[Timing]
    keys: list[str]
    judging: list[FloorModel | None]
    band: int
    physical: float
    score: float
    learned: float | None
    worst: Timing
    worst_index: int
    # A timing that carries the queue passed its floor only by the queue's margin.
    queue_margin_only: bool


class _Waiting:
    """A request judged before any floor of its node was learned (`_wait_for_floor`)."""

    __slots__ = ("record", "uncached", "band", "at", "done")

    def __init__(self, record: RequestRecord, uncached: int, band: int, at: float) -> None:
        self.record = record
        self.uncached = uncached
        self.band = band
        self.at = at
        self.done = False


class FloorModel:
    """Low-quantile regression of seconds on uncached tokens over a sliding window of samples.

    A fit falls due by the samples' count and time (`add`) but is solved only when its line is
    read: every sample feeds its own context band and all above, and most bands are seldom or
    never asked for a floor, so most fits would be superseded unread (2,875 fits solved for 286
    read on the forensics bench). A due fit keeps the window as it was, so the line read is the
    one an eager fit would have made.
    """

    __slots__ = (
        "samples",
        "_coef",
        "_rate",
        "_due_window",
        "_quantile",
        "_solver",
        "_outlier_factor",
        "pace",
        "since_fit",
        "last_fit",
        "fits",
        "first_at",
    )

    def __init__(self, max_history: int) -> None:
        self.samples: deque[tuple[float, float]] = deque(maxlen=max_history)
        self._coef: tuple[float, float] | None = None
        # The same low quantile of seconds per token: no token is asked to cost more than the
        # cheap ones did (`floor`).
        self._rate = math.inf
        # The window of the last fit that fell due and is not solved yet (`_solve`).
        self._due_window: tuple[tuple[float, float], ...] | None = None
        self._quantile = 0.0
        self._solver = "exact"
        self._outlier_factor = math.inf
        # The median seconds per token of the last due window but its queued answers
        # (`_pace`): what a leak is measured against (`_without_the_leak`).
        self.pace: float | None = None
        self.since_fit = 0
        self.last_fit: float | None = None
        self.fits = 0
        # When its first sample came (event time): the history's span (`min_history_seconds`).
        self.first_at: float | None = None

    @property
    def fitted(self) -> bool:
        """Whether a fit has fallen due (solved or not): the model has a line."""
        return self._coef is not None or self._due_window is not None

    @property
    def coef(self) -> tuple[float, float] | None:
        """(intercept, slope) of the last fit."""
        if self._due_window is not None:
            self._solve()
        return self._coef

    @property
    def rate(self) -> float:
        if self._due_window is not None:
            self._solve()
        return self._rate

    def judged_line(self, queued: bool) -> tuple[float, float] | None:
        """(intercept, slope) of the line timings are judged by, before the safety factor.

        For a timing that carries the queue (`QUEUED_SOURCES`), the line keeps its slope and
        drops a positive intercept: a wait is a cost per request, not per token, and hours of
        backlog put minutes of it into every sample (audit Z: 60 s of queue in each answer
        made every honest answer of the quiet hour after an exposure). A stub answers in the
        same short time whatever the prompt, so the slope alone still finds it.
        """
        coef = self.coef
        if coef is None:
            return None
        intercept, slope = coef
        return (min(intercept, 0.0) if queued else intercept), slope

    def floor(self, tokens: float, safety_factor: float, queued: bool = False) -> float | None:
        """The line at `tokens`, capped by the low-quantile rate: a line fitted across regimes
        (hours of queue, then a quiet minute) can run steeper than any one token ever cost,
        and its slope carried to 400k tokens asked an honest answer for 70 s."""
        line = self.judged_line(queued)
        if line is None:
            return None
        intercept, slope = line
        rate_line = self.rate * tokens
        through = intercept + slope * tokens
        if queued and slope <= 0.0:
            # Waits that shrank as prompts grew (a backlog that cleared) bent the line flat;
            # without its intercept it would ask nothing of any prompt (blind review 16: a
            # stub went unfound). The low rate a token took is what the node showed it can do.
            through = rate_line
        return min(max(through, 0.0), rate_line) / safety_factor

    def add(self, tokens: float, seconds: float, now: float | None, cfg: Any) -> None:
        self.add_sample((float(tokens), float(seconds)), now, cfg)

    def add_sample(self, sample: tuple[float, float], now: float | None, cfg: Any) -> None:
        """`add` of a (tokens, seconds) pair already made: a timing feeds its band and every
        band above, one pair shared by all (a million adds on the forensics bench)."""
        samples = self.samples
        samples.append(sample)
        self.since_fit += 1
        if self.first_at is None:
            self.first_at = now
        if len(samples) < cfg.min_history:
            return
        if self._coef is None and self._due_window is None:  # the first line
            first_at = self.first_at
            if now is not None and first_at is not None:
                if now - first_at < cfg.min_history_seconds:
                    return
        else:  # a line: refit when due
            if self.since_fit < cfg.refit_every:
                return
            last_fit = self.last_fit
            if not (
                self.fits < 4
                or now is None
                or last_fit is None
                or now - last_fit >= cfg.refit_interval_seconds
            ):
                return
        self._due_window = window = tuple(samples)
        self._quantile, self._solver = cfg.quantile, cfg.solver
        self._outlier_factor = cfg.outlier_factor
        # At every due fit, read or not: each pace is told from the one before it.
        self.pace = _pace(_as_array(window), self.pace, cfg.outlier_factor)
        self.since_fit = 0
        self.last_fit = now
        self.fits += 1

    def _solve(self) -> None:
        pairs = self._due_window
        assert pairs is not None and self.pace is not None
        self._due_window = None
        data = _without_the_leak(_as_array(pairs), self._outlier_factor, self.pace)
        if self._solver == "sklearn":
            from sklearn.linear_model import QuantileRegressor  # a second to import: when chosen

            model = QuantileRegressor(quantile=self._quantile, alpha=0.0, solver="highs")
            model.fit(data[:, :1], data[:, 1])
            self._coef = (float(model.intercept_), float(model.coef_[0]))
        else:
            self._coef = quantile_line(data[:, 0], data[:, 1], self._quantile)
        self._rate = _low_quantile(data[:, 1] / data[:, 0], self._quantile)

    def to_state(self) -> dict[str, Any]:
        return {
            "samples": [list(s) for s in self.samples],
            "coef": list(self.coef) if self.coef is not None else None,
            "rate": self.rate if math.isfinite(self.rate) else None,
            "pace": self.pace,
            "since_fit": self.since_fit,
            "last_fit": self.last_fit,
            "fits": self.fits,
            "first_at": self.first_at,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], max_history: int) -> FloorModel:
        model = cls(max_history)
        model.samples.extend((float(a), float(b)) for a, b in state["samples"])
        coef = state.get("coef")
        model._coef = (float(coef[0]), float(coef[1])) if coef is not None else None
        rate = state.get("rate")
        model._rate = float(rate) if rate is not None else math.inf
        pace = state.get("pace")
        model.pace = float(pace) if pace is not None else None
        model.since_fit = int(state.get("since_fit", 0))
        model.last_fit = state.get("last_fit")
        model.fits = int(state.get("fits", 0))
        first_at = state.get("first_at")
        model.first_at = float(first_at) if first_at is not None else None
        return model


class ImpossiblyFastPrefill(Detector[ImpossiblyFastPrefillConfig]):
    """Time per uncached prompt token below a physical or learned floor; feeds
    `KVWatchImpossiblyFastPrefill`.

    Parameters
    ----------
    config : ImpossiblyFastPrefillConfig or mapping
        Floors and thresholds (see the config's comments).

    Examples
    --------
    >>> det = ImpossiblyFastPrefill(model_active_params=3.2e10)
    >>> honest = {"node": "decode-0", "source": "first_token_latency",
    ...           "uncached_tokens": 700_000, "seconds": 42.0, "gpus": 8}
    >>> stub = dict(honest, seconds=0.3)
    >>> det.score_one(honest) < 1.0 <= det.score_one(stub)
    True
    >>> from detectors.examples import cached_long_prompt_events
    >>> from detectors.pipeline import DetectionPipeline
    >>> list(DetectionPipeline(detectors=[det]).run(cached_long_prompt_events()))
    []
    """

    name: ClassVar[str] = "impossibly_fast_prefill"
    alert: ClassVar[str] = "KVWatchImpossiblyFastPrefill"
    config_class: ClassVar[type[DetectorConfig]] = ImpossiblyFastPrefillConfig
    wants_requests: ClassVar[bool] = True
    # Single-sequence prefill batch lines: the prefix-cache hits of a request whose decode
    # states none (`collector.state.prefill_hits`).
    event_kinds: ClassVar[frozenset[str]] = frozenset({PREFILL_HIT, PREFILL_BATCH})

    @classmethod
    def _unit_test_params(cls) -> dict[str, Any]:
        return {
            "min_history": 5,
            "refit_every": 5,
            "model_active_params": 3.2e10,
            "learned_min_uncached_tokens": 4096,
        }

    def _init_learned(self) -> None:
        # `node|source[|model|tp]` -> context band -> the floor learned there.
        self.models_: dict[str, dict[int, FloorModel]] = {}
        # The last hour's single-sequence prefills over a cached prefix (not saved: a restarted
        # sidecar reads the lines after it).
        self.prefill_hits_ = PrefillHits()
        # Requests waiting for a floor of their node (`_wait_for_floor`), by learned model key,
        # and the findings their later judging made, said at the next flush. Not saved.
        self.waiting_: dict[str, list[_Waiting]] = {}
        self.waiting_count_ = 0
        self.late_: list[Finding] = []

    def _on_event(self, event: Event, ctx: DetectionContext) -> list[Finding]:
        self.prefill_hits_.note(event)
        return []

    def _on_flush(self, ctx: DetectionContext, now: float) -> list[Finding]:
        late, self.late_ = self.late_, []
        return late

    def _learned_state(self) -> dict[str, Any]:
        return {
            "models_": {
                key: {str(band): m.to_state() for band, m in sorted(bands.items())}
                for key, bands in sorted(self.models_.items())
            }
        }

    def _load_learned(self, state: dict[str, Any]) -> None:
        raw: dict[str, dict[str, Any]] = state.get("models_") or {}
        max_history = self.config.max_history
        # A state saved before context bands (`{key: model}`) holds floors learned across
        # all contexts, the ones that called fresh prompts too fast: dropped, learned anew.
        self.models_ = {
            key: {int(band): FloorModel.from_state(m, max_history) for band, m in bands.items()}
            for key, bands in raw.items()
            if "samples" not in bands
        }

    def judging_model(self, key: str, band: int, fitted: bool = True) -> FloorModel | None:
        """The floor a timing of context band `band` is judged by: its own band's, else the
        nearest band's below (learned from shorter contexts alone), never above."""
        best: FloorModel | None = None
        best_band = -1
        for model_band, model in self.models_.get(key, {}).items():
            if best_band < model_band <= band and (model.fitted or not fitted):
                best, best_band = model, model_band
        return best

    # -- floors and scores ---------------------------------------------------------------------

    def physical_floor(self, uncached_tokens: int, gpus: int, cached_tokens: int = 0) -> float:
        """Seconds the FLOPs of prefilling `uncached_tokens` after a cached prefix of
        `cached_tokens` take at peak: the weights' per token, and attention's per pair of an
        uncached token and one before it (`(u + 1) / 2` of the uncached ones on average)."""
        cfg = self.config
        u = float(uncached_tokens)
        weights = 2.0 * cfg.model_active_params * u
        pairs = u * (max(cached_tokens, 0) + (u + 1.0) / 2.0)
        attention = 4.0 * cfg.attention_layers * cfg.attention_width * pairs
        return (weights + attention) / (cfg.gpu_peak_flops * gpus * cfg.max_mfu)

    def learned_floor(self, timing: Timing) -> float | None:
        model = self.judging_model(f"{timing.node}|{timing.source}", timing.context_band)
        if model is None:
            return None
        queued = timing.source in QUEUED_SOURCES
        scale = self.config.learned_scale(timing.source)
        return model.floor(timing.uncached_tokens, scale, queued)

    def _score(self, timing: Timing) -> tuple[float, float, float | None]:
        seconds = max(timing.seconds, _MIN_SECONDS)
        physical = self.physical_floor(timing.uncached_tokens, timing.gpus, timing.cached_tokens)
        learned = None
        if timing.uncached_tokens >= self.config.learned_min_uncached_tokens:
            learned = self.learned_floor(timing)
        score = physical / seconds
        if learned is not None:
            score = max(score, learned / seconds)
        return score, physical, learned

    def score_one(self, x: dict[str, Any]) -> float:
        """Score one timing `{node, source, uncached_tokens, seconds[, gpus]}`."""
        self._ensure()
        return self._score(_timing_from(x, self.config.default_gpus))[0]

    def learn_one(self, x: dict[str, Any], now: float | None = None) -> None:
        """Add one healthy timing to its node's history."""
        self._ensure()
        self._learn(_timing_from(x, self.config.default_gpus), now)

    def _learn(self, timing: Timing, now: float | None, key: str | None = None) -> None:
        cfg = self.config
        if timing.source not in cfg.learn_sources or timing.uncached_tokens < 1:
            return
        if key is None:
            key = f"{timing.node}|{timing.source}"
        band = timing.context_band
        bands = self.models_.setdefault(key, {})
        if band not in bands:
            # A band's floor learns from every shorter context too: it starts from what the
            # nearest band below holds (all of that band's and below).
            model = FloorModel(cfg.max_history)
            below = self.judging_model(key, band, fitted=False)
            if below is not None:
                model.samples.extend(below.samples)
                model.pace = below.pace
                model.first_at = below.first_at
            bands[band] = model
        sample = (float(timing.uncached_tokens), float(max(timing.seconds, _MIN_SECONDS)))
        for model_band, model in bands.items():
            if model_band >= band:
                model.add_sample(sample, now, cfg)

    # -- the request hook ----------------------------------------------------------------------

    def _on_request(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        serving = record.serving
        uncached = record.uncached_tokens
        if serving is None or not serving.delivered or uncached is None or uncached < 1:
            return []
        if record.sampled:
            # A sample of a parallel-sampling request: the warm-up read the prompt, the sample
            # reuses its prefix, whatever cached count decode states (blind review 40 h22: a
            # 240k-token prompt's samples, decode stating nothing cached, "1.2x too fast").
            return []
        if serving.embedding:
            # Never decoded, so never the leak's answer; its finish states no prefix-cache
            # hits (audit H3: a reward model scoring sixteen answers to one long prompt, 69
            # honest scores called exposures), and models smaller than the floor's 1B default
            # serve it (blind review 40: 7k-token embeddings in 11 ms on one GPU, stated
            # uncached by their time stats, 26 warnings).
            return []
        if self.prefill_hits_:
            uncached = self._uncached_by_prefill_line(record, serving, uncached)
        cfg = self.config
        if uncached < cfg.min_uncached_tokens and (
            not cfg.learn or uncached < cfg.learn_min_uncached_tokens
        ):
            return []  # judged by no floor and teaching none: a tenth of the requests
        timings = self._timings(record, uncached, ctx)
        if not timings:
            return []
        judged = self._judge(record, uncached, timings, ctx)
        # Only what passed the floor without the queue's margin teaches it: answers 8 to 32
        # times under the line pass by that margin, a stub's first token may be among them,
        # and learned they pulled their band's line to a tenth of the node's honest speed
        # (blind review 22: stubs of 0.2 and 0.3 s for 61k and 62k tokens against an honest
        # 2.7 s put the floor of the next at 0.009 s).
        learns = judged.score < cfg.threshold and not judged.queue_margin_only
        if cfg.learn and uncached >= cfg.learn_min_uncached_tokens and learns:
            if self._may_learn(record, ctx):
                # Refits are timed by the requests' own times, so what is learned depends on the
                # requests seen, not on when the ledger happened to emit them.
                when = record.time if record.time is not None else ctx.now
                for key, timing in zip(judged.keys, timings, strict=True):
                    self._learn(timing, when, key)
                if self.waiting_:  # none, once each node's first floors are learned
                    self._judge_waiting(judged.keys, ctx)
        if judged.score < cfg.threshold:
            self._wait_for_floor(record, uncached, judged)
            return []
        if uncached < cfg.min_uncached_tokens:
            return []
        return [self._finding_for(record, serving, uncached, judged, ctx)]

    def _judge(
        self, record: RequestRecord, uncached: int, timings: list[Timing], ctx: DetectionContext
    ) -> _Judgment:
        """The request's score against its floors, and what it rests on (no state changes)."""
        cfg = self.config
        # As `_score` per timing, with what the timings share (tokens, GPUs, the learned
        # models' keys) worked out once.
        physical = self.physical_floor(uncached, timings[0].gpus, timings[0].cached_tokens)
        judge_learned = uncached >= cfg.learned_min_uncached_tokens
        regimes: dict[str, str] = {}
        for timing in timings:
            if timing.node not in regimes:
                regimes[timing.node] = self._regime(timing.node, record, ctx)
        keys = [f"{t.node}|{t.source}{regimes[t.node]}" for t in timings]
        band = timings[0].context_band
        judging = [self.judging_model(key, band) if judge_learned else None for key in keys]
        floors: list[float | None] = []
        for model, timing in zip(judging, timings, strict=True):
            floors.append(
                model.floor(
                    uncached, cfg.learned_scale(timing.source), timing.source in QUEUED_SOURCES
                )
                if model is not None
                else None
            )
        # Prefill's own forward time, where it passes its floors, says the prompt was computed:
        # the later timings (time to first token, end to end) then answer to physics alone. They
        # carry the queue, and a floor learned over hours of backlog put every honest answer of
        # the quiet hour after it below (audit Z, 0.5.23 decode `first_token_latency`).
        prefill_measured = any(
            t.source == "prefill_forward"
            and max(physical, f or 0.0) / max(t.seconds, _MIN_SECONDS) < cfg.threshold
            for t, f in zip(timings, floors, strict=True)
        )
        score, learned, worst, worst_index = 0.0, None, timings[0], 0
        # Whether a timing that carries the queue passed its floor only by the queue's margin.
        queue_margin_only = False
        for index, timing in enumerate(timings):
            seconds = max(timing.seconds, _MIN_SECONDS)
            floor = floors[index]
            if prefill_measured and timing.source != "prefill_forward":
                floor = None
            timing_score = physical / seconds
            if prefill_measured and timing.source == "decode_wait":
                # Decode's wait bounds prefill's compute only as decode's clock saw it; where
                # prefill's own forward time showed the prompt computed, that is the measure.
                timing_score = 0.0
            if floor is not None:
                timing_score = max(timing_score, floor / seconds)
                if timing.source in QUEUED_SOURCES:
                    margin = cfg.queued_safety_factor
                    queue_margin_only |= floor * margin >= cfg.threshold * seconds
            if index == 0 or timing_score > score:  # the first of equal scores, as `max`
                score, learned, worst, worst_index = timing_score, floor, timing, index
        return _Judgment(
            timings,
            keys,
            judging,
            band,
            physical,
            score,
            learned,
            worst,
            worst_index,
            queue_margin_only,
        )

    def _wait_for_floor(self, record: RequestRecord, uncached: int, judged: _Judgment) -> None:
        """Keep a long prompt that passed while a timing of it had no learned floor, to be
        judged again by the first floor its node learns (`_judge_waiting`).

        Why: blind review 59 D1, a 129,500-token prompt answered 110 times faster than the
        node's honest answers, a minute into the logs: no history yet, the physical floor of
        the default 1B model passed it, and the run was an all-clear."""
        cfg = self.config
        when = record.time
        if (
            not cfg.learn
            or when is None
            or uncached < max(cfg.learned_min_uncached_tokens, cfg.min_uncached_tokens)
            or self.waiting_count_ >= cfg.max_waiting
        ):
            return
        unfloored = [
            key
            for key, model, timing in zip(judged.keys, judged.judging, judged.timings, strict=True)
            if model is None and timing.source in cfg.learn_sources
        ]
        if not unfloored:
            return
        waiting = _Waiting(record, uncached, judged.band, when)
        for key in dict.fromkeys(unfloored):
            self.waiting_.setdefault(key, []).append(waiting)
        self.waiting_count_ += 1

    def _judge_waiting(self, keys: list[str], ctx: DetectionContext) -> None:
        """Judge the waiting requests of `keys` whose band now has a floor learned (its first),
        keeping for the next flush what that finds too fast; drop those waiting too long."""
        cfg = self.config
        now = ctx.now
        for key in dict.fromkeys(keys):
            entries = self.waiting_.get(key)
            if not entries:
                continue
            still: list[_Waiting] = []
            for waiting in entries:
                if waiting.done:
                    continue
                if now is not None and now - waiting.at > cfg.floor_wait_seconds:
                    self._done(waiting)
                    continue
                if self.judging_model(key, waiting.band) is None:
                    still.append(waiting)
                    continue
                self._done(waiting)
                record = waiting.record
                serving = record.serving
                timings = self._timings(record, waiting.uncached, ctx)
                if serving is None or not timings:
                    continue
                judged = self._judge(record, waiting.uncached, timings, ctx)
                if judged.score >= cfg.threshold:
                    self.late_.append(
                        self._finding_for(
                            record, serving, waiting.uncached, judged, ctx, floor_after=True
                        )
                    )
            if still:
                self.waiting_[key] = still
            else:
                del self.waiting_[key]

    def _done(self, waiting: _Waiting) -> None:
        waiting.done = True
        self.waiting_count_ -= 1

    def _finding_for(
        self,
        record: RequestRecord,
        serving: SideRecord,
        uncached: int,
        judged: _Judgment,
        ctx: DetectionContext,
        *,
        floor_after: bool = False,
    ) -> Finding:
        cfg = self.config
        score, learned, worst, physical = (
            judged.score,
            judged.learned,
            judged.worst,
            judged.physical,
        )
        critical = uncached >= cfg.critical_min_uncached_tokens
        closed = self._leak_path_closed(record, ctx) if critical else None
        critical = critical and closed is None
        # Prefilled on a node no log read: neither exposed nor cleared, and counted so (blind
        # review 65 D1: 16 leaks through a prefill whose logs were left out, a warning each, and
        # the run an all-clear with exit 0).
        unread = (
            {"pool_basis": PREFILL_HOST_UNREAD, "bootstrap_host": closed.unread_host}
            if closed is not None and closed.unread_host is not None
            else {}
        )
        severity: Severity = "critical" if critical else "warning"
        prompt = record.prompt_tokens or uncached
        floor = max(physical, learned or 0.0)
        kind = "learned" if learned is not None and learned > physical else "physical"
        consequence = (
            "the prompt was probably not prefilled; the answer likely came from other requests' KV"
            if critical
            else f"{closed.said}: check this node's timing and cache accounting"
            if closed is not None
            else "check this node's timing and cache accounting"
        )
        after = floor_after and kind == "learned"
        learned_after = ", learned from its node's answers after it," if after else ""
        summary = (
            f"{serving.node} answered a {prompt:,}-token prompt ({uncached:,} uncached) after "
            f"{worst.seconds:.3f}s of {worst.source} on {worst.node}, below the {kind} floor "
            f"of {floor:.3f}s{learned_after} ({score:.1f}x too fast): {consequence}"
        )
        model = judged.judging[judged.worst_index]
        return self._request_finding(
            severity,
            record,
            serving,
            summary=summary,
            evidence={
                "prompt_tokens": prompt,
                "cached_tokens": (
                    record.cached_tokens
                    if uncached == record.uncached_tokens
                    else prompt - uncached
                ),
                "uncached_tokens": uncached,
                "seconds": worst.seconds,
                "source": worst.source,
                "timing_node": worst.node,
                "seconds_per_uncached_token": worst.seconds / uncached,
                "physical_floor_seconds": physical,
                "learned_floor_seconds": learned,
                "history": len(model.samples) if model is not None else 0,
                "score": round(score, 6),
                "threshold": cfg.threshold,
                **({"floor_learned_after": True} if learned_after else {}),
                **unread,
            },
            exposure=critical,
        )

    def _leak_path_closed(self, record: RequestRecord, ctx: DetectionContext) -> _Closed | None:
        """Why the incident's path cannot have served this request (None when it may have): a
        leaked answer is a prefill's refusal for length handed to decode, so a release that
        refuses for good, or a prefill pool known to take the prompt, leaves a too-fast answer
        a timing or cache-accounting question, not an exposure. Why: blind
        review 47, a healthy 0.5.23 fleet with pools over the context whose agentic turns'
        prefix hits only multi-sequence batch lines stated: 61 honest answers named exposed."""
        when = record.began
        host, ruled_out = hosts_ruled_out(record, ctx)
        configs: list[NodeConfig | None]
        if record.prefill is not None:
            configs = [ctx.config_at(record.prefill.node, when)]
        else:  # the prefill nodes it may have met, else the node that answered
            model = serving_model(record, ctx)
            configs = [c for c in ctx.timeline.configs_at(when, model) if c.role == "prefill"]
            if ruled_out:
                # Decode names the host it met: not the nodes that announced others (blind
                # review 53 D2: a healthy prefill's cache hits, its logs missing and decode
                # saying `cached_tokens: 0`, named exposed against the leaking node's pool).
                configs = [c for c in configs if c is not None and c.node not in ruled_out]
                if not configs:
                    return _Closed(
                        f"it was prefilled on {host}, which no log read announced: its pool "
                        "is not known",
                        host,
                    )
            if not configs and record.serving is not None:
                configs = [ctx.config_at(record.serving.node, when)]
        # A process that started after the request did not serve it: its release and pool are
        # not what the request met (blind review 59 D1: a restart onto a pool over the context
        # a minute after a leaked answer was said to have taken its prompt).
        configs = [
            c if c is None or ran_by_then(c.node, c.generation, when, ctx) else None
            for c in configs
        ]
        fixed = [c for c in configs if c is not None and refuses_for_good(c.version)]
        if fixed and len(fixed) == len(configs):
            if len(fixed) == 1:
                node, version = fixed[0].node, fixed[0].version
                return _Closed(
                    f"{node} ran {version}, which refuses an over-length prompt for good"
                )
            return _Closed(
                "every prefill node ran a release that refuses an over-length prompt for good"
            )
        prompt = record.prompt_tokens
        if ruled_out:
            pool = strictest_of(configs, "strictest prefill pool it may have met")
        else:
            pool = pool_in_force(record, ctx)
            if pool is not None and pool.basis == LENIENT_BASIS:
                pool = strictest_prefill_pool(record, ctx)
        if (
            pool is None
            or prompt is None
            or prompt > pool.longest_accepted
            or not ran_by_then(pool.node, pool.generation, when, ctx)
        ):
            return None
        return _Closed(
            f"{pool.node}'s pool took prompts of up to {pool.longest_accepted:,} tokens, so no "
            "refusal for length can have sent it to decode"
        )

    def _uncached_by_prefill_line(
        self, record: RequestRecord, serving: SideRecord, uncached: int
    ) -> int:
        """Fewer uncached tokens than the request's sides state when a prefill's single-sequence
        batch line of exactly its prompt's length, while it was in flight, says more cached
        (`collector.state.prefill_hits`: blind review 40 D2, decode stating `cached_tokens: 0`
        for a 794k-token prompt prefill read with 793,600 cached, 7 false criticals). Only on
        a prefill the request could have used: its own prefill side's node when it has one."""
        prompt = record.prompt_tokens
        start = record.start_time
        end = serving.end_time
        if prompt is None or start is None or end is None:
            return uncached
        prefill = record.prefill
        cached = self.prefill_hits_.cached(
            prompt,
            start - PREFILL_LINE_SLACK_SECONDS,
            end + PREFILL_LINE_SLACK_SECONDS,
            frozenset({prefill.node}) if prefill is not None else None,
        )
        if cached is None:
            return uncached
        return max(min(uncached, prompt - cached), 1)

    def _timings(self, record: RequestRecord, uncached: int, ctx: DetectionContext) -> list[Timing]:
        serving = record.serving
        prefill = record.prefill
        compute_node = prefill.node if prefill is not None else (serving.node if serving else "")
        gpus = self._gpus(compute_node, record, ctx)
        wanted = self.config.sources
        found: list[tuple[str, str, float | None]] = []
        for side in record.sides:
            role = side.role
            if role == "prefill" or (role == "unified" and side is serving):
                if role == "prefill" and not side.attempts:
                    # A redone optimistic prefill (`attempts` > 0) times only its last attempt,
                    # over a prefix its first one cached and `cached_tokens` never counted
                    # (audit Z, 0.5.19 `optimistic_release_and_requeue`): not a measure of it.
                    found.append(
                        ("prefill_forward", side.node, side.durations.get("forward_duration"))
                    )
                found.append(("trace_prefill", side.node, side.trace_prefill_seconds))
        if serving is not None:
            node = serving.node
            found.append(("trace_ttft", node, serving.trace_ttft))
            found.append(("first_token_latency", node, serving.first_token_latency))
            if serving.role == "decode":
                found.append(("decode_wait", node, decode_wait(serving.durations)))
            found.append(("e2e_latency", node, serving.e2e_latency))
        cached = max((record.prompt_tokens or uncached) - uncached, 0)
        return [
            Timing(source, node, seconds, uncached, gpus, cached)
            for source, node, seconds in found
            # A negative duration is a clock that stepped back, no measure (blind review 38
            # D2: an honest 506k-token prefill's "-0.041 s" named it exposed).
            if seconds is not None and source in wanted and math.isfinite(seconds) and seconds >= 0
        ]

    def _regime(self, node: str, record: RequestRecord, ctx: DetectionContext) -> str:
        """What a node's speed belongs to: the model and tensor-parallel size in force at the
        request's time (`|model|tp`), empty when neither is known."""
        config = ctx.config_at(node, record.start_time)
        if config is None or (config.model is None and config.tp_size is None):
            return ""
        return f"|{config.model or ''}|{config.tp_size or ''}"

    def _gpus(self, node: str, record: RequestRecord, ctx: DetectionContext) -> int:
        if self.config.gpus_per_node is not None:
            return self.config.gpus_per_node
        config = ctx.config_at(node, record.start_time)
        if config is not None and config.tp_size:
            # Pipeline stages run a chunked prompt's chunks at once, each on its own GPUs: the
            # floor counts them all, or it would be above what the hardware does (blind review
            # 61 D4: a TP4 x PP2 prefill's honest answers read 1.1x under a 4-GPU floor).
            return config.tp_size * max(config.pp_size or 1, 1)
        return self.config.default_gpus

    def _may_learn(self, record: RequestRecord, ctx: DetectionContext) -> bool:
        """Only requests that cannot be the leak teach the floor."""
        if record.prefill_refused:
            return False
        if any(s.transfer_failures or s.checksum_mismatch for s in record.sides):
            return False
        prompt = record.prompt_tokens
        pool = pool_in_force(record, ctx)
        return pool is None or prompt is None or prompt <= pool.longest_accepted


def decode_wait(durations: dict[str, float]) -> float | None:
    """Seconds decode's time stats spent until the request's KV arrived (bootstrap, allocation,
    the KV transfer); None without the transfer's.

    The router hands a request to prefill and decode at once, and decode's KV arrives only once
    prefill computed it: the wait bounds the prefill from above, as a first token does, and
    carries prefill's queue as it does. Why: blind review 37 D2, decode logs alone with no
    `first_token_latency` (a 0.5.22 finish states only `e2e_latency`, 1 to 14 s of decoding in
    it): a 784k-token prompt's KV came in 110 ms, and 3 of 61 leaks were named. Decode's queue
    after the transfer is left out: a leak's one page of KV in 39 ms, then 35 s waiting for a
    slot in a full batch (or retracted and requeued), passed as a 118k-token prompt's honest
    prefill (blind review 61 D2: 9 leaks of 13 unnamed in decode-only logs)."""
    if "transfer_duration" not in durations:
        return None
    total = 0.0
    for stage, parts in _DECODE_WAIT_STAGES:
        said = [durations[stage]] if stage in durations else [durations.get(p, 0.0) for p in parts]
        if any(value < 0 for value in said):
            return None  # a clock that stepped back: no measure
        total += sum(said)
    return total


class _Closed(NamedTuple):
    """Why the leak's path cannot have served a request (`_leak_path_closed`), as a clause; and
    the prefill host decode named, when it is that no log read announced it."""

    said: str
    unread_host: str | None = None


def _as_array(pairs: tuple[tuple[float, float], ...]) -> np.ndarray:
    """`np.asarray(pairs)`, without numpy inspecting each pair as a sequence."""
    return np.fromiter(chain.from_iterable(pairs), float, 2 * len(pairs)).reshape(-1, 2)


def _pace(data: np.ndarray, before: float | None, factor: float) -> float:
    """The median seconds per token of a window's (tokens, seconds) rows but those `factor`
    times slower than the pace `before` it (all of them when every row is).

    Why: an answer that far over the node's pace waited in a queue; it is slow, not a
    measure of the node. Minutes after a decode node started, a backlog gave half the window
    of its fourth fit 160 to 290 s to a first token; the median of that window made the node's
    honest answers look 20 times too fast, `_without_the_leak` left them out, and the line of
    the queue that remained (kept 3 h, to the next refit) called honest answers exposures (blind
    review 33 D4: 9 on the fresh node). Leaving out only the slowest rows, the pace is never
    above the window's median, so nothing is taken for a leak that was not before. The pace
    follows a node that slows by up to `factor` a fit, and a window slower throughout starts it
    anew. With no pace before (the first fit), it is the window's lower quartile: a node's
    first quarter hour may be half queue (blind review 40: the median of a window of 50 queued
    answers and 30 after them took the 30 for leaks), and a quarter of the window holds more
    than its leaks (5% in blind review 12f)."""
    rates = data[:, 1] / data[:, 0]
    if before is None:
        return float(np.quantile(rates, FIRST_PACE_QUANTILE))
    waited = rates > factor * before
    if not waited.all():
        rates = rates[~waited]
    return float(np.median(rates))


def _without_the_leak(data: np.ndarray, factor: float, pace: float) -> np.ndarray:
    """The (tokens, seconds) rows of a fit window but those `factor` times faster per token
    than the node's `pace` (`_pace`, at most the window's median): at most half of them, so
    the honest majority always stays.

    Why: learning skips only answers the floor caught or the pool ruled out. With decode's logs
    alone (no pool, no refusal), the leaked answers of the first hours entered the window, a 2%
    quantile of a window 5% leaked is a leaked answer's speed, and the floor then passed every
    leak after (blind review 12f: 91 of 150 named, 10x below the leaks' own speed). A leaked
    answer skips hundreds of times the work; honest speeds within a context band stay within a
    few times of each other."""
    keep = data[:, 1] / data[:, 0] * factor >= pace
    return data if bool(keep.all()) else data[keep]


def _low_quantile(values: np.ndarray, quantile: float) -> float:
    """The `quantile` of `values` as a lower order statistic (one of the values)."""
    rank = max(math.ceil(quantile * len(values)) - 1, 0)
    return float(np.partition(values, rank)[rank])


def _timing_from(x: dict[str, Any], default_gpus: int) -> Timing:
    return Timing(
        source=str(x["source"]),
        node=str(x["node"]),
        seconds=float(x["seconds"]),
        uncached_tokens=int(x["uncached_tokens"]),
        gpus=int(x.get("gpus") or default_gpus),
        cached_tokens=int(x.get("cached_tokens") or 0),
    )
