"""Canonical signals: one name per meaning, whatever the metric was called in that release.

SGLang and its routers renamed metrics several times (`name=` → `model_name`, `sglang:` →
`sglang_` in re-exporters, `sgl_router_*` → `smg_*`, queue gauges renamed). Detectors ask for a
*signal* (`pool_tokens`, `deferred_release_total`, ...) and this table resolves every era's
metric name to it, so no detector ever hard-codes a metric name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final, Literal

from collector.events import METRIC, Event

SignalKind = Literal["gauge", "counter", "histogram", "summary"]

# Parts of a metric family a sample can be (`part` field of `metric` events).
VALUE: Final = "value"
BUCKET: Final = "bucket"
SUM: Final = "sum"
COUNT: Final = "count"
CREATED: Final = "created"
QUANTILE: Final = "quantile"


@dataclass(frozen=True, slots=True)
class SignalSpec:
    """One canonical signal and the metric families (of every era) that carry it.

    Metric names are written in the `sglang:` form; the `sglang_` re-exported and
    `/v1/loads?format=prometheus` forms are folded onto it by `normalise_name`. Counter names
    are given with `_total`; histograms by family name (without `_bucket`/`_sum`/`_count`).
    `labels` names the labels that split the signal into meaningful series (kept as labels
    on the events; listed here so detectors know to group by them).
    """

    name: str
    kind: SignalKind
    metrics: tuple[str, ...]
    doc: str
    labels: tuple[str, ...] = ()


def _spec(
    name: str, kind: SignalKind, metrics: tuple[str, ...], doc: str, labels: tuple[str, ...] = ()
) -> tuple[str, SignalSpec]:
    return name, SignalSpec(name, kind, metrics, doc, labels)


SIGNALS: Final[dict[str, SignalSpec]] = dict(
    [
        # Configuration constants (written once at startup).
        _spec("pool_tokens", "gauge", ("sglang:max_total_num_tokens",), "KV pool capacity, tokens"),
        _spec("pool_tokens_swa", "gauge", ("sglang:max_total_num_tokens_swa",), "SWA pool, tokens"),
        _spec("context_len", "gauge", ("sglang:context_len",), "model context length, tokens"),
        _spec("page_size", "gauge", ("sglang:page_size",), "KV page size, tokens"),
        _spec("num_pages", "gauge", ("sglang:num_pages",), "KV pool pages"),
        _spec(
            "max_prefill_tokens", "gauge", ("sglang:max_prefill_tokens",), "2024-11 constant gauge"
        ),
        _spec(
            "max_running_requests",
            "gauge",
            ("sglang:max_running_requests",),
            "2024-11 constant gauge; also a /v1/loads field",
        ),
        _spec("kv_cache_memory_gb", "gauge", ("sglang:kv_cache_memory_usage_gb",), "KV cache, GB"),
        # Pool occupancy.
        _spec("kv_used_tokens", "gauge", ("sglang:kv_used_tokens",), "full pool, used slots"),
        _spec("kv_available_tokens", "gauge", ("sglang:kv_available_tokens",), "free slots"),
        _spec("kv_evictable_tokens", "gauge", ("sglang:kv_evictable_tokens",), "evictable"),
        _spec(
            "num_used_tokens",
            "gauge",
            ("sglang:num_used_tokens",),
            "max(full, swa) used slots; also a /v1/loads field",
        ),
        _spec("token_usage", "gauge", ("sglang:token_usage",), "pool usage ratio 0-1"),
        _spec(
            "pending_prealloc_token_usage",
            "gauge",
            ("sglang:pending_prealloc_token_usage",),
            "decode: pool share held by preallocated requests",
        ),
        # Load.
        _spec("num_running_reqs", "gauge", ("sglang:num_running_reqs",), "running batch size"),
        _spec(
            "num_queue_reqs",
            "gauge",
            ("sglang:num_queue_reqs", "sglang:num_waiting_reqs"),
            "waiting queue (`num_waiting_reqs` is the /v1/loads name)",
        ),
        _spec("gen_throughput", "gauge", ("sglang:gen_throughput",), "decode tokens/s"),
        _spec("cache_hit_rate", "gauge", ("sglang:cache_hit_rate",), "prefix-cache hit rate"),
        _spec("num_retracted_reqs", "gauge", ("sglang:num_retracted_reqs",), "per-process (pid)"),
        # PD queues.
        _spec(
            "prefill_bootstrap_queue_reqs",
            "gauge",
            (
                "sglang:num_prefill_bootstrap_queue_reqs",
                "sglang:num_prefill_prealloc_queue_reqs",
                "sglang:prefill_bootstrap_queue_reqs",
            ),
            "prefill requests waiting for bootstrap (2025 name: prealloc)",
        ),
        _spec(
            "prefill_inflight_queue_reqs",
            "gauge",
            ("sglang:num_prefill_inflight_queue_reqs", "sglang:prefill_inflight_queue_reqs"),
            "prefill requests whose KV is in flight",
        ),
        _spec(
            "decode_prealloc_queue_reqs",
            "gauge",
            ("sglang:num_decode_prealloc_queue_reqs", "sglang:decode_prealloc_queue_reqs"),
            "decode requests waiting for preallocation",
        ),
        _spec(
            "decode_transfer_queue_reqs",
            "gauge",
            ("sglang:num_decode_transfer_queue_reqs", "sglang:decode_transfer_queue_reqs"),
            "decode requests waiting for KV",
        ),
        # Deferred decode KV release (the abort race).
        _spec(
            "deferred_release_total",
            "counter",
            ("sglang:decode_deferred_kv_release_total",),
            "deferred releases resolved, by outcome (drained/timeout/error)",
            ("outcome",),
        ),
        _spec(
            "deferred_release_held",
            "gauge",
            ("sglang:num_decode_deferred_kv_release_reqs",),
            "decode requests whose KV pages are held awaiting drain or timeout",
        ),
        _spec(
            "deferred_release_seconds",
            "histogram",
            ("sglang:decode_deferred_kv_release_seconds",),
            "time from hold to release",
        ),
        # PD failures.
        _spec(
            "transfer_failed_total",
            "counter",
            ("sglang:num_transfer_failed_reqs_total",),
            "KV transfer failures, including KV checksum mismatches",
        ),
        _spec(
            "bootstrap_failed_total",
            "counter",
            ("sglang:num_bootstrap_failed_reqs_total",),
            "PD bootstrap failures",
        ),
        _spec("prefill_retries_total", "counter", ("sglang:num_prefill_retries_total",), "retries"),
        _spec(
            "failed_session_recoveries_total",
            "counter",
            ("sglang:failed_session_recoveries_total",),
            "mooncake sessions un-blacklisted by probe",
        ),
        _spec(
            "kv_transfer_latency_ms",
            "histogram",
            ("sglang:kv_transfer_latency_ms",),
            "prefill KV transfer latency, milliseconds",
        ),
        _spec(
            "kv_transfer_speed_gb_s",
            "histogram",
            ("sglang:kv_transfer_speed_gb_s",),
            "prefill KV transfer speed",
        ),
        # Request accounting (tokenizer manager).
        _spec("prompt_tokens_total", "counter", ("sglang:prompt_tokens_total",), "prompt tokens"),
        _spec(
            "cached_tokens_total",
            "counter",
            ("sglang:cached_tokens_total",),
            "prefix-cache hits in tokens, by cache_source since 2026",
            ("cache_source",),
        ),
        _spec(
            "generation_tokens_total",
            "counter",
            ("sglang:generation_tokens_total",),
            "generated tokens",
        ),
        _spec("num_requests_total", "counter", ("sglang:num_requests_total",), "finished requests"),
        _spec(
            "aborted_requests_total",
            "counter",
            ("sglang:num_aborted_requests_total",),
            "client/tokenizer aborts only; server-side rejections are not counted here",
        ),
        _spec(
            "retracted_requests_total",
            "counter",
            ("sglang:num_retracted_requests_total",),
            "requests retracted because the pool was full",
        ),
        _spec(
            "http_requests_total",
            "counter",
            ("sglang:http_requests_total",),
            "HTTP requests",
            ("endpoint", "method"),
        ),
        _spec(
            "http_responses_total",
            "counter",
            ("sglang:http_responses_total",),
            "HTTP responses by status code",
            ("endpoint", "status_code", "method"),
        ),
        # Latency and size histograms.
        _spec(
            "ttft_seconds",
            "histogram",
            ("sglang:time_to_first_token_seconds",),
            "time to first token (not observed on PD prefill nor for aborts)",
        ),
        _spec(
            "e2e_latency_seconds",
            "histogram",
            ("sglang:e2e_request_latency_seconds",),
            "end-to-end request latency",
        ),
        _spec(
            "inter_token_latency_seconds",
            "histogram",
            ("sglang:inter_token_latency_seconds",),
            "inter-token latency",
        ),
        _spec(
            "tpot_seconds",
            "histogram",
            (
                "sglang:request_time_per_output_token_seconds",
                "sglang:time_per_output_token_seconds",
            ),
            "time per output token (the 2024/25 name is folded here)",
        ),
        _spec("queue_time_seconds", "histogram", ("sglang:queue_time_seconds",), "queueing time"),
        _spec(
            "stage_latency_seconds",
            "histogram",
            ("sglang:per_stage_req_latency_seconds",),
            "per-stage request latency",
            ("stage",),
        ),
        _spec(
            "prompt_tokens",
            "histogram",
            ("sglang:prompt_tokens_histogram",),
            "prompt length per request",
        ),
        _spec(
            "uncached_prompt_tokens",
            "histogram",
            ("sglang:uncached_prompt_tokens_histogram",),
            "prompt minus cached tokens per request",
        ),
        _spec(
            "generation_tokens",
            "histogram",
            ("sglang:generation_tokens_histogram",),
            "completion length per request",
        ),
        # Router / gateway (SMG and the legacy sgl-router).
        _spec(
            "router_bootstrap_failures_total",
            "counter",
            ("smg_pd_bootstrap_failures_total",),
            "router-seen PD bootstrap failures",
        ),
        _spec(
            "router_kv_transfer_failures_total",
            "counter",
            ("smg_pd_kv_transfer_failures_total",),
            "router-seen PD KV transfer failures",
        ),
        _spec(
            "router_pd_ttft_seconds",
            "histogram",
            ("smg_pd_ttft_seconds",),
            "router-measured PD time to first token",
        ),
        _spec(
            "router_ttft_seconds",
            "histogram",
            ("smg_router_ttft_seconds", "sgl_router_ttft_seconds"),
            "router-measured time to first token",
        ),
        _spec(
            "router_kv_transfer_seconds",
            "histogram",
            ("smg_pd_kv_transfer_duration_seconds",),
            "router-measured KV transfer duration",
        ),
        _spec(
            "router_request_duration_seconds",
            "histogram",
            ("smg_router_request_duration_seconds", "sgl_router_request_duration_seconds"),
            "router request duration",
        ),
        _spec(
            "router_requests_total",
            "counter",
            ("smg_router_requests_total", "sgl_router_requests_total"),
            "requests seen by the router",
        ),
        _spec(
            "router_request_errors_total",
            "counter",
            ("smg_router_request_errors_total", "sgl_router_request_errors_total"),
            "router request errors",
            ("error_type",),
        ),
        _spec(
            "router_http_responses_total",
            "counter",
            ("smg_http_responses_total", "sgl_router_responses_total"),
            "router HTTP responses by status code",
            ("status_code",),
        ),
        _spec(
            "router_pd_errors_total",
            "counter",
            ("sgl_router_pd_errors_total",),
            "legacy router PD errors",
            ("error_type",),
        ),
        _spec(
            "router_pd_prefill_errors_total",
            "counter",
            ("sgl_router_pd_prefill_errors_total",),
            "legacy router prefill errors",
        ),
        _spec(
            "router_pd_decode_errors_total",
            "counter",
            ("sgl_router_pd_decode_errors_total",),
            "legacy router decode errors",
        ),
        _spec(
            "router_worker_health",
            "gauge",
            ("smg_worker_health", "sgl_router_worker_health"),
            "1 healthy, 0 unhealthy, per worker",
            ("worker",),
        ),
    ]
)

ROUTER_PREFIXES: Final = ("smg_", "sgl_router_")


def _index(signals: dict[str, SignalSpec]) -> dict[str, SignalSpec]:
    """Family name (counters without `_total`) -> spec."""
    index: dict[str, SignalSpec] = {}
    for spec in signals.values():
        for metric in spec.metrics:
            key = metric[: -len("_total")] if spec.kind == "counter" else metric
            if key in index:
                raise ValueError(f"metric {metric} mapped to two signals")
            index[key] = spec
    return index


_BY_FAMILY: Final = _index(SIGNALS)

# suffix, part, kinds that may carry it. `_total` is the counter's value.
_SUFFIXES: Final[tuple[tuple[str, str, tuple[SignalKind, ...]], ...]] = (
    ("_total", VALUE, ("counter",)),
    ("_bucket", BUCKET, ("histogram",)),
    ("_sum", SUM, ("histogram", "summary")),
    ("_count", COUNT, ("histogram", "summary")),
    ("_gsum", SUM, ("histogram",)),
    ("_gcount", COUNT, ("histogram",)),
    ("_created", CREATED, ("counter", "histogram", "summary")),
)


def normalise_name(name: str) -> str:
    """Fold re-exported `sglang_x` onto `sglang:x` (the table's form)."""
    if name.startswith("sglang_"):
        return "sglang:" + name[7:]
    return name


@lru_cache(maxsize=8192)
def classify_metric(name: str) -> tuple[str | None, str]:
    """(signal or None, part) for a sample name as exposed, e.g. `..._bucket` -> bucket.

    `_created` samples get no signal: they are series metadata, and a detector summing a
    counter signal must not add timestamps to it.
    """
    norm = normalise_name(name)
    spec = _BY_FAMILY.get(norm)
    if spec is not None:
        return spec.name, QUANTILE if spec.kind == "summary" else VALUE
    for suffix, part, kinds in _SUFFIXES:
        if norm.endswith(suffix):
            spec = _BY_FAMILY.get(norm[: -len(suffix)])
            if spec is not None and spec.kind in kinds:
                return (None if part == CREATED else spec.name), part
    return None, VALUE


def is_router_metric(name: str) -> bool:
    return name.startswith(ROUTER_PREFIXES)


# ---------------------------------------------------------------------------------------------
# Configuration snapshot from metric samples (for `.prom` snapshots and live scrapes).

_CONFIG_SIGNALS: Final = frozenset(
    {"pool_tokens", "context_len", "max_prefill_tokens", "max_running_requests", "page_size"}
)
_ENGINE_ROLES: Final = frozenset({"prefill", "decode", "unified", "dynamic"})


@dataclass(slots=True)
class ConfigSnapshot:
    """A node's configuration as its metrics state it.

    The pool is per scheduler (DP rank), so the snapshot keeps each rank's value and reports
    the smallest as `pool_tokens`: one rank too small is enough to lose a long prompt. The
    context is reported as the largest seen, the worst case on the other side of the check.
    """

    node: str
    time: float | None = None
    role: str | None = None
    model: str | None = None
    pool_tokens: int | None = None
    context_len: int | None = None
    max_prefill_tokens: int | None = None
    max_running_requests: int | None = None
    page_size: int | None = None
    pool_tokens_by_rank: dict[str, int] = field(default_factory=dict)

    @property
    def pool_below_context(self) -> bool | None:
        if self.pool_tokens is None or self.context_len is None:
            return None
        return self.pool_tokens < self.context_len

    def as_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "time": self.time,
            "role": self.role,
            "model": self.model,
            "pool_tokens": self.pool_tokens,
            "context_len": self.context_len,
            "max_prefill_tokens": self.max_prefill_tokens,
            "max_running_requests": self.max_running_requests,
            "page_size": self.page_size,
            "pool_tokens_by_rank": dict(self.pool_tokens_by_rank),
            "pool_below_context": self.pool_below_context,
        }


def rank_key(ranks: dict[str, int]) -> str:
    """Stable text key for a rank set, e.g. `dp=0,tp=0`; `""` for a single-process node."""
    return ",".join(f"{key}={ranks[key]}" for key in sorted(ranks))


def config_snapshots(events: Iterable[Event]) -> dict[str, ConfigSnapshot]:
    """Per node, the configuration its `metric` events state (non-metric events are ignored)."""
    snaps: dict[str, ConfigSnapshot] = {}
    roles: dict[str, set[str]] = {}
    for event in events:
        if event.kind != METRIC:
            continue
        fields = event.fields
        signal = fields.get("signal")
        role = fields.get("role")
        if signal not in _CONFIG_SIGNALS and role is None:
            continue
        snap = snaps.get(event.node)
        if snap is None:
            snap = snaps[event.node] = ConfigSnapshot(node=event.node)
            roles[event.node] = set()
        if isinstance(role, str):
            roles[event.node].add(role)
        if signal not in _CONFIG_SIGNALS:
            continue
        number = _as_count(fields.get("value"))
        if number is None:
            continue
        if event.time is not None and (snap.time is None or event.time > snap.time):
            snap.time = event.time
        model = fields.get("model")
        if snap.model is None and isinstance(model, str) and model:
            snap.model = model
        if signal == "pool_tokens":
            key = rank_key(event.ranks)
            previous = snap.pool_tokens_by_rank.get(key)
            snap.pool_tokens_by_rank[key] = number if previous is None else min(previous, number)
            snap.pool_tokens = _min(snap.pool_tokens, number)
        elif signal == "context_len":
            snap.context_len = _max(snap.context_len, number)
        elif signal == "max_prefill_tokens":
            snap.max_prefill_tokens = _min(snap.max_prefill_tokens, number)
        elif signal == "max_running_requests":
            snap.max_running_requests = _min(snap.max_running_requests, number)
        elif signal == "page_size":
            snap.page_size = _max(snap.page_size, number)
    for node, snap in snaps.items():
        snap.role = _pick_role(roles[node])
    return snaps


def config_snapshot(events: Iterable[Event], node: str | None = None) -> ConfigSnapshot | None:
    """The snapshot of one node (the only one present when `node` is None)."""
    snaps = config_snapshots(events)
    if node is not None:
        return snaps.get(node)
    if len(snaps) == 1:
        return next(iter(snaps.values()))
    return None


def _pick_role(seen: set[str]) -> str | None:
    engine = seen & _ENGINE_ROLES
    if len(engine) == 1:
        return next(iter(engine))
    if len(engine) > 1:
        return "mixed"
    if seen:
        return "router" if "router" in seen else sorted(seen)[0]
    return None


def _as_count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return int(value)


def _min(current: int | None, new: int) -> int:
    return new if current is None else min(current, new)


def _max(current: int | None, new: int) -> int:
    return new if current is None else max(current, new)
