"""A node's `/metrics`: SGLang's `sglang:` families, in the node's own registry.

Values live in plain dicts (updating them is on the offline hot path) and a custom collector
renders them through `prometheus_client` when `/metrics` is scraped or a snapshot is written.
Each node gets its own `CollectorRegistry`; the global registry is never touched.

Only what the release had is exported: deferred-release families from 0.5.22 (engine.py), TTFT
and inter-token latency only on decode (PD prefill servers never observe them, §1.5). Label
names are emitted in sorted order, as the engine's multiprocess collector does (§1.7).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Literal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from simulator.engine import EngineProfile

Kind = Literal["gauge", "counter", "histogram"]
Group = Literal["sched", "tok", "http"]

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1,
    2,
    4,
    6,
    8,
)
E2E_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1,
    2,
    4,
    6,
    8,
    10,
    20,
    40,
    60,
    80,
    100,
    200,
    400,
    600,
    1200,
    1800,
    2400,
)
DEFERRED_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60)
SPEED_BUCKETS = (0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400)
LATENCY_MS_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
TOTAL_MB_BUCKETS = (1, 5, 10, 50, 100, 500, 1000, 5000, 10000)
BOOTSTRAP_MS_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)

# name -> (kind, help, group, extra label names, buckets, roles)
_SPEC: dict[str, tuple[Kind, str, Group, tuple[str, ...], tuple[float, ...], str]] = {
    "sglang:num_running_reqs": ("gauge", "The number of running requests.", "sched", (), (), "pd"),
    "sglang:num_queue_reqs": (
        "gauge",
        "The number of requests in the waiting queue.",
        "sched",
        (),
        (),
        "pd",
    ),
    "sglang:num_used_tokens": ("gauge", "The number of used tokens.", "sched", (), (), "pd"),
    "sglang:token_usage": ("gauge", "The token usage.", "sched", (), (), "pd"),
    "sglang:full_token_usage": (
        "gauge",
        "The token usage of the full pool.",
        "sched",
        (),
        (),
        "pd",
    ),
    "sglang:kv_used_tokens": ("gauge", "KV tokens held by requests.", "sched", (), (), "pd"),
    "sglang:kv_available_tokens": ("gauge", "Free KV tokens.", "sched", (), (), "pd"),
    "sglang:kv_evictable_tokens": ("gauge", "Evictable KV tokens.", "sched", (), (), "pd"),
    "sglang:cache_hit_rate": ("gauge", "The prefix cache hit rate.", "sched", (), (), "p"),
    "sglang:gen_throughput": (
        "gauge",
        "The generation throughput (token/s).",
        "sched",
        (),
        (),
        "d",
    ),
    "sglang:max_total_num_tokens": (
        "gauge",
        "Maximum total number of tokens in the KV cache pool.",
        "sched",
        (),
        (),
        "pd",
    ),
    "sglang:context_len": ("gauge", "The context length of the model.", "sched", (), (), "pd"),
    "sglang:page_size": ("gauge", "The page size of the KV cache.", "sched", (), (), "pd"),
    "sglang:num_pages": ("gauge", "The number of pages in the KV cache.", "sched", (), (), "pd"),
    "sglang:kv_cache_memory_usage_gb": ("gauge", "KV cache memory (GB).", "sched", (), (), "pd"),
    "sglang:weight_memory_usage_gb": ("gauge", "Weight memory (GB).", "sched", (), (), "pd"),
    "sglang:realtime_tokens_total": (
        "counter",
        "Tokens processed, by mode.",
        "sched",
        ("mode",),
        (),
        "pd",
    ),
    "sglang:num_prefill_bootstrap_queue_reqs": (
        "gauge",
        "Requests in the prefill bootstrap queue.",
        "sched",
        (),
        (),
        "p",
    ),
    "sglang:num_prefill_inflight_queue_reqs": (
        "gauge",
        "Requests in the prefill inflight (transfer) queue.",
        "sched",
        (),
        (),
        "p",
    ),
    "sglang:num_decode_prealloc_queue_reqs": (
        "gauge",
        "Requests in the decode prealloc queue.",
        "sched",
        (),
        (),
        "d",
    ),
    "sglang:num_decode_transfer_queue_reqs": (
        "gauge",
        "Requests in the decode transfer queue.",
        "sched",
        (),
        (),
        "d",
    ),
    "sglang:pending_prealloc_token_usage": (
        "gauge",
        "Token usage of preallocated, not yet running requests.",
        "sched",
        (),
        (),
        "d",
    ),
    "sglang:num_decode_deferred_kv_release_reqs": (
        "gauge",
        "Failed decode requests whose KV allocations are held pending transfer drain "
        "acknowledgement or timeout.",
        "sched",
        (),
        (),
        "d+",
    ),
    "sglang:decode_deferred_kv_release_seconds": (
        "histogram",
        "Time from deferring a decode KV release to resolving it.",
        "sched",
        (),
        DEFERRED_BUCKETS,
        "d+",
    ),
    "sglang:decode_deferred_kv_release_total": (
        "counter",
        "Total deferred decode KV release resolution attempts.",
        "sched",
        ("outcome",),
        (),
        "d+",
    ),
    "sglang:num_bootstrap_failed_reqs_total": (
        "counter",
        "Number of bootstrap failed requests.",
        "sched",
        (),
        (),
        "pd",
    ),
    "sglang:num_transfer_failed_reqs_total": (
        "counter",
        "Number of transfer failed requests.",
        "sched",
        (),
        (),
        "pd",
    ),
    "sglang:kv_transfer_speed_gb_s": (
        "histogram",
        "KV transfer speed (GB/s).",
        "sched",
        (),
        SPEED_BUCKETS,
        "p",
    ),
    "sglang:kv_transfer_latency_ms": (
        "histogram",
        "KV transfer latency (ms).",
        "sched",
        (),
        LATENCY_MS_BUCKETS,
        "p",
    ),
    "sglang:kv_transfer_total_mb": (
        "histogram",
        "KV transfer size (MB).",
        "sched",
        (),
        TOTAL_MB_BUCKETS,
        "p",
    ),
    "sglang:kv_transfer_bootstrap_ms": (
        "histogram",
        "KV transfer bootstrap time (ms).",
        "sched",
        (),
        BOOTSTRAP_MS_BUCKETS,
        "pd",
    ),
    "sglang:prompt_tokens_total": (
        "counter",
        "Number of prefill tokens processed.",
        "tok",
        ("is_streaming",),
        (),
        "pd",
    ),
    "sglang:generation_tokens_total": (
        "counter",
        "Number of generation tokens processed.",
        "tok",
        ("is_streaming",),
        (),
        "pd",
    ),
    "sglang:cached_tokens_total": (
        "counter",
        "Number of cached prompt tokens.",
        "tok",
        ("cache_source",),
        (),
        "pd",
    ),
    "sglang:num_requests_total": (
        "counter",
        "Number of requests processed.",
        "tok",
        ("is_streaming",),
        (),
        "pd",
    ),
    "sglang:num_aborted_requests_total": (
        "counter",
        "Number of requests aborted.",
        "tok",
        (),
        (),
        "pd",
    ),
    "sglang:time_to_first_token_seconds": (
        "histogram",
        "Histogram of time to first token in seconds.",
        "tok",
        ("is_streaming",),
        TTFT_BUCKETS,
        "d",
    ),
    "sglang:inter_token_latency_seconds": (
        "histogram",
        "Histogram of inter-token latency in seconds.",
        "tok",
        (),
        ITL_BUCKETS,
        "d",
    ),
    "sglang:e2e_request_latency_seconds": (
        "histogram",
        "Histogram of End-to-end request latency in seconds",
        "tok",
        ("is_streaming",),
        E2E_BUCKETS,
        "pd",
    ),
    "sglang:http_requests_total": (
        "counter",
        "Total number of HTTP requests.",
        "http",
        ("endpoint", "method"),
        (),
        "pd",
    ),
    "sglang:http_responses_total": (
        "counter",
        "Total number of HTTP responses.",
        "http",
        ("endpoint", "method", "status_code"),
        (),
        "pd",
    ),
}


def _label_values(
    order: list[tuple[str, str | None]], extra: tuple[str, ...]
) -> Callable[[tuple[str, ...]], list[str]]:
    """Label values in `order`: base labels fixed, extra ones taken from a series key."""

    def values_for(extra_values: tuple[str, ...]) -> list[str]:
        lookup = dict(zip(extra, extra_values, strict=True))
        return [v if v is not None else lookup[k] for k, v in order]

    return values_for


class _Hist:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value


class NodeMetrics(Collector):
    """The metric values of one engine node and their Prometheus rendering."""

    def __init__(
        self,
        *,
        role: Literal["prefill", "decode"],
        profile: EngineProfile,
        model_name: str,
        dp_size: int = 1,
        enabled: bool = True,
    ) -> None:
        self.role = role
        self.enabled = enabled
        sched = {
            "engine_type": role,
            "model_name": model_name,
            "moe_ep_rank": "0",
            "pp_rank": "0",
            "tp_rank": "0",
        }
        if dp_size > 1:
            sched["dp_rank"] = "0"
        self._base: dict[Group, dict[str, str]] = {
            "sched": sched,
            "tok": {"engine_type": role, "model_name": model_name},
            "http": {},
        }
        code = "p" if role == "prefill" else "d"
        self._names: list[str] = []
        for name, (_, _, _, _, _, roles) in _SPEC.items():
            if roles.endswith("+") and not profile.has_deferred_release_metrics:
                continue
            if code in roles:
                self._names.append(name)
        self._enabled = set(self._names)
        self._values: dict[str, dict[tuple[str, ...], float]] = {n: {} for n in self._names}
        self._hists: dict[str, dict[tuple[str, ...], _Hist]] = {n: {} for n in self._names}
        for name in self._names:
            kind, _, _, extra, buckets, _ = _SPEC[name]
            if extra:
                continue
            if kind == "histogram":
                self._hists[name][()] = _Hist(buckets)
            else:
                self._values[name][()] = 0.0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def has(self, name: str) -> bool:
        return name in self._enabled

    def set(self, name: str, value: float, *labels: str) -> None:
        if name in self._enabled:
            self._values[name][labels] = value

    def inc(self, name: str, amount: float = 1.0, *labels: str) -> None:
        if name in self._enabled:
            series = self._values[name]
            series[labels] = series.get(labels, 0.0) + amount

    def observe(self, name: str, value: float, *labels: str) -> None:
        if name in self._enabled:
            series = self._hists[name]
            hist = series.get(labels)
            if hist is None:
                hist = series[labels] = _Hist(_SPEC[name][4])
            hist.observe(value)

    def value(self, name: str, *labels: str) -> float:
        return self._values.get(name, {}).get(labels, 0.0)

    def collect(self) -> Iterator[Metric]:
        if not self.enabled:
            return
        for name in self._names:
            kind, doc, group, extra, _, _ = _SPEC[name]
            base = self._base[group]
            label_names = sorted([*base, *extra])
            order = [(k, base.get(k)) for k in label_names]
            values_for = _label_values(order, extra)
            if kind == "histogram":
                hfam = HistogramMetricFamily(name, doc, labels=label_names)
                for key, hist in self._hists[name].items():
                    buckets: list[tuple[str, float]] = []
                    acc = 0
                    for bound, count in zip(hist.bounds, hist.counts, strict=False):
                        acc += count
                        buckets.append((repr(float(bound)), float(acc)))
                    buckets.append(("+Inf", float(acc + hist.counts[-1])))
                    hfam.add_metric(values_for(key), buckets, hist.total)
                yield hfam
            elif kind == "counter":
                cfam = CounterMetricFamily(name, doc, labels=label_names)
                for key, value in self._values[name].items():
                    cfam.add_metric(values_for(key), value)
                yield cfam
            else:
                gfam = GaugeMetricFamily(name, doc, labels=label_names)
                for key, value in self._values[name].items():
                    gfam.add_metric(values_for(key), value)
                yield gfam

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
