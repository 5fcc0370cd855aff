"""What one prompt can take on a node, by release (audit T, against each release's source)."""

from __future__ import annotations

import pytest

from collector.state.prompt_capacity import prompt_capacity

POOL = 681_280


@pytest.mark.parametrize(
    ("pool", "dcp", "version", "stated", "sharding", "tokens", "guessed"),
    [
        # One rank, no sharding: the pool is what a prompt can take, on any release.
        (POOL, None, None, None, None, POOL, False),
        (POOL, 1, "0.5.23", None, None, POOL, False),
        # 0.5.19 and 0.5.20 report one rank's pool; the limit multiplies it by dcp_size.
        (POOL, 2, "0.5.19", None, None, 2 * POOL, False),
        (POOL, 2, "0.5.20", None, None, 2 * POOL, False),
        # From 0.5.21 the pool reported already counts the ranks.
        (POOL, 8, "0.5.21", None, None, POOL, False),
        (POOL, 8, "0.5.23", None, None, POOL, False),
        # Release unknown: one rank's (the larger capacity), marked a guess.
        (POOL, 2, None, None, None, 2 * POOL, True),
        (POOL, 2, "a build string", None, None, 2 * POOL, True),
        # The limit the engine states settles it: limit + 6.
        (POOL, 8, "0.5.23", POOL - 6, None, POOL, False),
        (POOL, 2, None, 1_048_570, None, 1_048_576, False),
        # KV cache sharding widens the pool by a factor no figure carries.
        (262_144, None, "0.5.23", None, True, None, False),
        (262_144, None, "0.5.23", 1_048_570, True, 1_048_576, False),
        # No pool: the stated limit alone, else nothing.
        (None, None, None, POOL - 6, None, POOL, False),
        (None, 2, "0.5.23", None, None, None, False),
        # A stated limit no engine has (under a 1,024-token context's) is not taken.
        (POOL, 2, "0.5.19", 0, None, 2 * POOL, False),
    ],
)
def test_capacity_by_release(
    pool: int | None,
    dcp: int | None,
    version: str | None,
    stated: int | None,
    sharding: bool | None,
    tokens: int | None,
    guessed: bool,
) -> None:
    capacity = prompt_capacity(
        pool,
        dcp_size=dcp,
        version=version,
        max_req_input_len=stated,
        kv_cache_sharding=sharding,
    )
    assert (capacity.tokens, capacity.guessed) == (tokens, guessed)
    assert capacity.said  # always something a person can read


@pytest.mark.parametrize(
    ("stated", "context", "tokens"),
    [
        # Below the pool and the context: something else binds, and the engine refuses there.
        (681_274, 1_048_576, 681_280),
        # The context binds (limit = context - 6): the pool is what it holds.
        (1_048_570, 1_048_576, 2_040_000),
        (524_282, 524_288, 2_040_000),
        # The context unknown: the limit may be the context's own, not taken.
        (681_274, None, 2_040_000),
    ],
)
def test_a_plain_pool_s_stated_limit_below_it_and_the_context_binds(
    stated: int, context: int | None, tokens: int
) -> None:
    """Blind review 46 D2: `max_req_input_len` 681,274 beside a plain 2,040,000-token pool and
    a 1M context passed the gate as "pool 2,040,000 >= context"; the engine refuses every
    prompt of 681,274 tokens or more whatever its pool."""
    capacity = prompt_capacity(
        2_040_000, dcp_size=None, version="0.5.22", max_req_input_len=stated, context_len=context
    )
    assert capacity.tokens == tokens
