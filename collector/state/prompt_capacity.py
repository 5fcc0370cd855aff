"""How many tokens of one prompt a node's KV can hold: what the pool figures mean, by release.

SGLang refuses a prompt of `max_req_input_len` tokens or more, where `max_req_input_len` is
min(context - 1, capacity - 1) - 5 (`tp_worker.get_worker_info`). What *capacity* is, next to
the pool the engine reports (capacity line, `sglang:max_total_num_tokens`, `/server_info`),
changed between releases (audit T, against each release's source):

* Decode context parallelism (`--dcp-size N`) spreads one request's KV over N ranks. 0.5.19 and
  0.5.20 report the pool of one rank and multiply by N only inside the limit; from 0.5.21 the
  reported pool already counts the N ranks ("The runner already reports logical DCP capacity").
* KV cache sharding (`--enable-kv-cache-sharding`, 0.5.22 on, PD prefill only) widens the
  capacity by a factor the reported pool does not carry.

A plain pool (one rank, no sharding) is its own capacity. Otherwise the limit the engine states
itself (`/server_info` `max_req_input_len`, a truncation warning) settles it: capacity is that
limit + 6 (or the context binds, and no pool is short). The pool-gap detector, the over-length
limit and the rollout gate all read capacity here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from detectors.engine_version import is_below, parse_version

# Prompts of `max_req_input_len` tokens or more are refused: capacity - 6 with the pool binding.
REFUSAL_MARGIN: Final = 6
# The limit of a 1,024-token context, shorter than any served model's: a stated limit below it
# is a garbled figure, not the engine's.
SHORTEST_LIMIT: Final = 1024 - REFUSAL_MARGIN
# The first release whose reported pool counts its decode-context-parallel ranks.
POOL_COUNTS_DCP_SINCE: Final = "0.5.21"


@dataclass(frozen=True, slots=True)
class PromptCapacity:
    """The tokens one prompt's KV can take (None: no figure says), and how that was found, in
    words a person reads after the number ("pool 681,280 x dcp 2")."""

    tokens: int | None
    said: str
    # The figure rests on a guess: a pool reported with `dcp_size` > 1 by an engine of unknown
    # release, taken as one rank's (the lenient reading: the larger capacity). A gate does not
    # pass on it.
    guessed: bool = False


def stated_limit(max_req_input_len: int | None) -> int | None:
    """The engine's own prompt limit, unless garbled (it would make every answer over-length)."""
    if max_req_input_len is None or max_req_input_len < SHORTEST_LIMIT:
        return None
    return max_req_input_len


def prompt_capacity(
    pool: int | None,
    *,
    dcp_size: int | None,
    version: str | None,
    max_req_input_len: int | None = None,
    kv_cache_sharding: bool | None = None,
    context_len: int | None = None,
) -> PromptCapacity:
    """The capacity of a node with these figures; see the module docstring. A plain pool (no
    dcp ranks, no sharding) is its own capacity, said as such, unless the engine states a limit
    below both it and its `context_len`: something else binds (a DP rank, another pool), and
    the engine refuses from there all the same (blind review 46 D2: 681,274 stated beside a
    2,040,000 pool and a 1M context passed). The stated limit settles the rest."""
    limit = stated_limit(max_req_input_len)
    shards = max(dcp_size or 1, 1)
    if pool is not None and shards == 1 and not kv_cache_sharding:
        capacity = limit + REFUSAL_MARGIN if limit is not None else None
        if capacity is not None and context_len is not None and capacity < min(pool, context_len):
            return PromptCapacity(capacity, f"max_req_input_len {limit:,} + 6 (pool {pool:,})")
        return PromptCapacity(pool, f"pool {pool:,}")
    if limit is not None:
        return PromptCapacity(limit + REFUSAL_MARGIN, f"max_req_input_len {limit:,} + 6")
    if pool is None:
        return PromptCapacity(None, "pool unknown")
    if kv_cache_sharding:
        return PromptCapacity(
            None, f"pool {pool:,} widened by KV cache sharding by a factor no figure states"
        )
    if parse_version(version) is None:
        return PromptCapacity(
            pool * shards, f"pool {pool:,} x dcp {shards} (per rank, if before 0.5.21)", True
        )
    if is_below(version, POOL_COUNTS_DCP_SINCE):
        return PromptCapacity(pool * shards, f"pool {pool:,} x dcp {shards}")
    return PromptCapacity(pool, f"pool {pool:,} (over its {shards} dcp ranks)")
