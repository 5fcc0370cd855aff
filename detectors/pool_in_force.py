"""Which prefill pool a request met: the one in force on its prefill node when it ran.

Both the over-length verdict and the learning guard of the timing detector need it. The room's
own prefill node is used when the ledger saw it (none when that node's pool is not known). When
no prefill side was seen, decode's `bootstrap_host` names the node if one of those read announced
it (`CommonKVBootstrapServer started ... on host:port`), and none when the nodes read announced
other addresses (the request went to a prefill node whose logs are not here). Otherwise the
largest prefill pool of the serving node's deployment (same model) in force at the request's time
(the most lenient choice: a prompt longer than every prefill pool cannot have fit anywhere);
outside PD, the serving node's own pool.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final

from collector.state.request_record import RequestRecord
from detectors.context import DetectionContext

_MEMO_KEY: Final = "pool_in_force"
# SGLang refuses a prompt of `max_req_input_len` tokens or more, min(context - 1, pool - 1) - 5
# (sglang-telemetry.md, refusals): with the pool the smaller, from pool - 6 on.
REFUSAL_MARGIN: Final = 6


@dataclass(frozen=True, slots=True)
class PoolInForce:
    tokens: int
    node: str
    generation: int
    basis: str

    @property
    def longest_accepted(self) -> int:
        """The longest prompt this pool lets the engine take: one token longer is refused."""
        return self.tokens - REFUSAL_MARGIN - 1


def pool_in_force(record: RequestRecord, ctx: DetectionContext) -> PoolInForce | None:
    """The pool `record` met; kept in the record's memo while the timeline and `now` stay put,
    as every request detector that judges the record asks."""
    stamp = (ctx.timeline, ctx.timeline.version, ctx.now)
    kept = record.memo.get(_MEMO_KEY)
    if kept is not None and kept[0] == stamp:
        return kept[1]  # type: ignore[no-any-return]
    pool = _pool_in_force(record, ctx)
    record.memo[_MEMO_KEY] = (stamp, pool)
    return pool


def _pool_in_force(record: RequestRecord, ctx: DetectionContext) -> PoolInForce | None:
    when = record.start_time if record.start_time is not None else record.time
    prefill = record.prefill
    if prefill is not None:
        at = prefill.start_time if prefill.start_time is not None else when
        config = ctx.config_at(prefill.node, at)
        if config is not None and config.pool_tokens is not None:
            return PoolInForce(config.pool_tokens, prefill.node, config.generation, "prefill node")
        # The room's prefill node is known and its pool is not (its start-up lines rotated
        # away, no snapshot): another node's pool says nothing about it. Taking the largest
        # known one is lenient only when every prefill node's pool is known; with the small
        # node's the only one known, it accused requests a big node had really prefilled.
        return None
    serving = record.serving
    host = serving.bootstrap_host if serving is not None else None
    if host is not None:
        owner = ctx.timeline.bootstrap_node(host)
        if owner is not None:
            config = ctx.config_at(owner, when)
            if config is None or config.pool_tokens is None:
                return None
            return PoolInForce(config.pool_tokens, owner, config.generation, "bootstrap host")
        if _elsewhere(host, ctx.timeline.bootstrap_hosts()):
            return None
    model = None
    if serving is not None:
        serving_config = ctx.config_at(serving.node, when)
        model = serving_config.model if serving_config is not None else None
    largest = ctx.timeline.largest_prefill_pool(when, model)
    if largest is not None:
        node, tokens = largest
        config = ctx.config_at(node, when)
        generation = config.generation if config is not None else 0
        return PoolInForce(tokens, node, generation, "largest prefill pool in force")
    if serving is not None and serving.role == "unified":
        config = ctx.config_at(serving.node, when)
        if config is not None and config.pool_tokens is not None:
            return PoolInForce(config.pool_tokens, serving.node, config.generation, "node pool")
    return None


def _elsewhere(host: str, announced: frozenset[str]) -> bool:
    """Whether decode's `bootstrap_host`, which no node read announced, surely names a prefill
    node whose logs were not read: the nodes read did announce their hosts, and in the same
    form (IP addresses both): a name beside addresses may be one of them by another name."""
    if not announced or not _is_address(host):
        return False
    return all(_is_address(other) for other in announced)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
