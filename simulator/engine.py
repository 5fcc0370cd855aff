"""What an SGLang engine of a given version does, as flags the rest of the simulator reads.

One table, so that "which release had what" is decided in one place (reference: incident.md,
"Versions"; sglang-telemetry.md drift notes). Where the reference leaves a version boundary open,
the choice made here is stated next to the flag:

Behaviour (`versions`, source or choice):

* over-length prompt -> 1-token stub still transferred, the leak (<= 0.5.19; incident.md)
* over-length prompt retired on prefill after bootstrap, decode's transfer fails, HTTP 500
  (0.5.20; incident.md, PR 36988; the status is our choice)
* over-length prompt refused before bootstrap, decode retires it too, HTTP 400 (>= 0.5.21)
* deferred decode KV release on by default (>= 0.5.21; incident.md)
* KV checksum flag exists, opt-in (>= 0.5.21; incident.md)
* `--kv-canary` exists (>= 0.5.21; choice: the features landed Aug-Sep 2026)
* failed sends confirmed as drained, i.e. a premature drain ack (mooncake < 0.5.22,
  nixl/mori < 0.5.23; incident.md)

Telemetry:

* `KV pool holds %d tokens, fewer than --context-length` warning (>= 0.5.21; choice)
* deferred-release metrics (>= 0.5.22; incident.md)
* `server_args={...}` dict repr instead of `ServerArgs(...)` (>= 0.5.23; choice)
* ` TP0` prefix only when tp_size > 1 (>= 0.5.23; telemetry §2.1)
* meta_info `num_retractions`, else `total_retractions` (>= 0.5.23; telemetry §1.8)
* `KV Cache is allocated. dtype: ...` (>= 0.5.20; choice)
* Prefill batch `#prealloc-req` (<= 0.5.19) vs `#bootstrap-req` + `#pending-token`
  (>= 0.5.20); `#optimistic-req` and ReqTimeStats `attempts=` (>= 0.5.22) (choices, §2.11)
* ReqTimeStats decode in the older `prealloc_queue_duration(..) = ...` form (<= 0.5.19; §2.6)
* `sglang:num_running_reqs` reports the batch on PD prefill, else 0 (>= 0.5.20; PR #31495)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OverLength = Literal["stub_leak", "retire_after_bootstrap", "refuse_before_bootstrap"]


def parse_version(text: str) -> tuple[int, int, int]:
    """`0.5.19` (also `v0.5.19`, `0.5.19.post1`) -> (0, 5, 19)."""
    core = text.strip().lstrip("v")
    parts = core.split(".")
    if len(parts) < 3:
        raise ValueError(f"engine version {text!r} is not MAJOR.MINOR.PATCH")
    try:
        return int(parts[0]), int(parts[1]), int(parts[2])
    except ValueError as exc:
        raise ValueError(f"engine version {text!r} is not MAJOR.MINOR.PATCH") from exc


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """Behaviour and telemetry switches of one engine release."""

    version: str
    over_length: OverLength
    deferred_release_default: bool
    has_kv_checksum: bool
    has_kv_canary: bool
    has_pool_below_context_warning: bool
    has_deferred_release_metrics: bool
    server_args_dict: bool
    tp_prefix_always: bool
    meta_num_retractions: bool
    kv_alloc_has_dtype: bool
    prefill_queue_field: str
    prefill_has_pending_token: bool
    prefill_has_optimistic: bool
    req_stats_attempts: bool
    req_stats_old_decode: bool
    prefill_reports_running: bool
    _v: tuple[int, int, int]

    def premature_drain_ack(self, backend: str) -> bool:
        """Does prefill confirm a failed send as drained (so decode releases too early)?"""
        if backend == "mooncake":
            return self._v < (0, 5, 22)
        if backend in ("nixl", "mori"):
            return self._v < (0, 5, 23)
        return False

    @classmethod
    def for_version(cls, version: str) -> EngineProfile:
        v = parse_version(version)
        over: OverLength
        if v <= (0, 5, 19):
            over = "stub_leak"
        elif v == (0, 5, 20):
            over = "retire_after_bootstrap"
        else:
            over = "refuse_before_bootstrap"
        return cls(
            version=".".join(str(p) for p in v),
            over_length=over,
            deferred_release_default=v >= (0, 5, 21),
            has_kv_checksum=v >= (0, 5, 21),
            has_kv_canary=v >= (0, 5, 21),
            has_pool_below_context_warning=v >= (0, 5, 21),
            has_deferred_release_metrics=v >= (0, 5, 22),
            server_args_dict=v >= (0, 5, 23),
            tp_prefix_always=v < (0, 5, 23),
            meta_num_retractions=v >= (0, 5, 23),
            kv_alloc_has_dtype=v >= (0, 5, 20),
            prefill_queue_field="#prealloc-req" if v <= (0, 5, 19) else "#bootstrap-req",
            prefill_has_pending_token=v >= (0, 5, 20),
            prefill_has_optimistic=v >= (0, 5, 22),
            req_stats_attempts=v >= (0, 5, 22),
            req_stats_old_decode=v <= (0, 5, 19),
            prefill_reports_running=v >= (0, 5, 20),
            _v=v,
        )
