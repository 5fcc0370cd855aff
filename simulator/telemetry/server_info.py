"""The configuration a node reports: `server_args`, `/server_info`, `/v1/models`, `/v1/loads`.

One source for the resolved server arguments, so the startup `server_args=` line and the
`/server_info` JSON can never disagree. Flags a release did not have (the KV checksum and
kv-canary before 0.5.21) are absent, not false.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.scenario import ModelSpec, RoleSpec


@dataclass(slots=True)
class LoadView:
    """The live numbers `/v1/loads` and `/server_info` report."""

    running: int
    waiting: int
    waiting_uncached_tokens: int
    used_tokens: int
    token_usage: float
    gen_throughput: float
    cache_hit_rate: float
    bootstrap_queue: int = 0
    inflight_queue: int = 0
    prealloc_queue: int = 0
    transfer_queue: int = 0
    transfer_speed_gb_s: float = 0.0
    transfer_latency_ms: float = 0.0


def server_args(
    spec: RoleSpec, role: str, model: ModelSpec, *, host: str, port: int, seed: int
) -> dict[str, Any]:
    p = spec.profile
    args: dict[str, Any] = {
        "model_path": model.path,
        "tokenizer_path": model.path,
        "tokenizer_mode": "auto",
        "load_format": "auto",
        "trust_remote_code": True,
        "context_length": spec.context_len,
        "is_embedding": False,
        "dtype": "auto",
        "kv_cache_dtype": "auto",
        "quantization": None,
        "served_model_name": model.name,
        "host": host,
        "port": port,
        "mem_fraction_static": spec.mem_fraction_static,
        "max_running_requests": spec.max_running_requests,
        "max_total_tokens": None,
        "chunked_prefill_size": spec.chunked_prefill_size,
        "max_prefill_tokens": spec.max_prefill_tokens,
        "schedule_policy": "fcfs",
        "page_size": spec.page_size,
        "tp_size": spec.tp_size,
        "pp_size": 1,
        "dp_size": spec.dp_size,
        "ep_size": spec.ep_size,
        "random_seed": seed,
        "log_level": "info",
        "log_requests": spec.log_requests,
        "log_requests_level": spec.log_requests_level,
        "log_requests_format": spec.log_requests_format,
        "enable_metrics": spec.enable_metrics,
        "enable_request_time_stats_logging": spec.request_time_stats,
        "decode_log_interval": spec.decode_log_interval,
        "enable_trace": False,
        "otlp_traces_endpoint": "localhost:4317",
        "allow_auto_truncate": False,
        "disaggregation_mode": role,
        "disaggregation_transfer_backend": spec.transfer_backend,
        "disaggregation_bootstrap_port": spec.bootstrap_port,
        "disaggregation_decode_tp": None,
        "disaggregation_prefill_pp": 1,
        "disaggregation_ib_device": None,
        "num_reserved_decode_tokens": spec.num_reserved_decode_tokens,
    }
    if p.has_kv_checksum:
        args["disaggregation_enable_kv_checksum"] = spec.kv_checksum
    if p.has_kv_canary:
        args["kv_canary"] = spec.kv_canary
    return args


def server_info(
    args: dict[str, Any],
    spec: RoleSpec,
    *,
    max_total_num_tokens: int,
    startup_time: float,
    load: LoadView,
    weight_gb: float,
    kv_gb: float,
    avail_gb: float,
) -> dict[str, Any]:
    internal = dict(args)
    internal.update(
        {
            "world_size": spec.tp_size,
            "last_gen_throughput": load.gen_throughput,
            "effective_max_running_requests_per_dp": spec.max_running_requests,
            "memory_usage": {
                "weight": weight_gb,
                "kvcache": kv_gb,
                "startup_available": avail_gb,
                "token_capacity": max_total_num_tokens,
                "token_capacity_swa": None,
                "graph": 1.2,
            },
            "disaggregation_mode": args["disaggregation_mode"],
        }
    )
    info = dict(args)
    info.update(
        {
            "status": "ready",
            "max_total_num_tokens": max_total_num_tokens,
            "max_req_input_len": spec.max_req_input_len,
            "startup_time": startup_time,
            "version": spec.profile.version,
            "frontend": "python",
            "internal_states": [internal],
        }
    )
    return info


def models_card(model: ModelSpec, context_len: int, created: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": model.name,
                "object": "model",
                "created": created,
                "owned_by": "sglang",
                "root": model.name,
                "parent": None,
                "max_model_len": context_len,
            }
        ],
    }


def loads(
    spec: RoleSpec, role: str, *, now: float, max_total_num_tokens: int, load: LoadView
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "dp_rank": 0,
        "num_running_reqs": load.running,
        "num_waiting_reqs": load.waiting,
        "num_waiting_uncached_tokens": load.waiting_uncached_tokens,
        "num_used_tokens": load.used_tokens,
        "num_total_tokens": max_total_num_tokens,
        "num_active_tokens": load.used_tokens,
        "max_total_num_tokens": max_total_num_tokens,
        "max_running_requests": spec.max_running_requests,
        "token_usage": round(load.token_usage, 4),
        "gen_throughput": round(load.gen_throughput, 2),
        "cache_hit_rate": round(load.cache_hit_rate, 4),
        "utilization": round(load.token_usage, 4),
        "memory": {"token_capacity": max_total_num_tokens},
        "disaggregation": {
            "mode": role,
            "prefill_bootstrap_queue_reqs": load.bootstrap_queue,
            "prefill_inflight_queue_reqs": load.inflight_queue,
            "decode_prealloc_queue_reqs": load.prealloc_queue,
            "decode_transfer_queue_reqs": load.transfer_queue,
            "decode_retracted_queue_reqs": 0,
            "kv_transfer_speed_gb_s": round(load.transfer_speed_gb_s, 3),
            "kv_transfer_latency_ms": round(load.transfer_latency_ms, 3),
        },
        "queues": {
            "waiting": load.waiting,
            "grammar": 0,
            "paused": 0,
            "retracted": 0,
            "prealloc_ready": load.prealloc_queue,
        },
    }
    return {
        "timestamp": now,
        "version": spec.profile.version,
        "accelerator": "cuda",
        "num_accelerators": spec.tp_size,
        "loads": [entry],
    }
