"""Prefix-cache hits a prefill node states only in its batch lines, kept to be tied to requests.

A prefill node that logs no request lines still prints `Prefill batch, #new-seq: 1, #new-token:
586, #cached-token: 793600` for a request it prefilled alone; decode may state `cached_tokens: 0`
for the same request (the reference does not say decode carries prefill's hits). Read as nothing
cached, an honest answer over a cached 794k-token prefix is "impossibly fast" (blind review 40
D2: 7 false criticals). A single-sequence batch line is one request's prefill: its new and cached
tokens add up to that prompt's length. The leak's prompts never have such a line: prefill refused
them (a prompt longer than its pool cannot be held, cached part and all), so a line of exactly a
prompt's length around its time says the prompt was prefilled, and with how much cached.

A prompt whose uncached part is longer than `--chunked-prefill-size` is prefilled in chunks, a
single-sequence line each on its DP rank: the first states the hit (`#new-token: 16384,
#cached-token: 309913`), the rest only their chunk (`#new-token: 8730, #cached-token: 0`), so
no one line adds up to the prompt (blind review 60 D2: 66 honest HiCache answers named
exposed). `ChunkRuns` follows each rank's run of chunks and states the hit at every length the
run reaches: the first chunk's line and each chunk after it that continues a full one.

Lines with several sequences cannot be told apart and are not kept.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final

from collector.events import Event

__all__ = ["PREFILL_HIT", "ChunkRuns", "PrefillHits", "batch_hit", "prefill_hit"]

# A worker's event for a single-sequence prefill batch line with cached tokens, so that batch
# lines themselves never leave the worker (`collector.state.node_windows`).
PREFILL_HIT: Final = "prefill_hit"
# How long a line is kept for a request to be tied to it (event time): decode judges a request
# once its answer settled, minutes after prefill's line at most.
KEEP_SECONDS: Final = 3600.0
# Lines kept at most (a busy prefill prints one every few milliseconds; a deque of three numbers
# and a dict entry each: a few MiB).
MAX_KEPT: Final = 100_000


def prefill_hit(
    node: str, time: float, source: str, new_seq: Any, new_tokens: Any, cached: Any
) -> Event | None:
    """The `PREFILL_HIT` event of a prefill batch line's values, when it is one request's
    prefill over a cached prefix; None otherwise (most lines)."""
    if new_seq != 1 or type(cached) is not int or cached <= 0 or type(new_tokens) is not int:
        return None
    if new_tokens < 0:
        return None
    return Event(
        PREFILL_HIT, node, time, source, {"new_tokens": new_tokens, "cached_tokens": cached}
    )


class _Run:
    """One rank's chunked prefill over a cached prefix, as far as its lines have come."""

    __slots__ = ("cached", "chunk", "last", "new_tokens", "time")

    def __init__(self, cached: int, chunk: int, time: float) -> None:
        self.cached = cached
        self.chunk = chunk  # the first chunk's new tokens: a full chunk, if more follow
        self.last = chunk  # the latest chunk's
        self.new_tokens = chunk
        self.time = time


class ChunkRuns:
    """Per DP rank of one node, the run of single-sequence prefill lines a chunked prompt
    prints (see the module docstring): `step` takes each prefill line's values and gives the
    `PREFILL_HIT` it states, the chunks so far added up, or None.

    A run starts at a line with cached tokens and goes on while the rank's next lines are single
    sequences with none cached, each after a full chunk (one as long as the first); any other
    line on the rank ends it. A run matched to no prompt states nothing: a hit is taken only at
    a prompt's exact length (`PrefillHits.cached`)."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: dict[int | None, _Run] = {}

    def step(
        self,
        node: str,
        time: float,
        source: str,
        rank: int | None,
        new_seq: Any,
        new_tokens: Any,
        cached: Any,
    ) -> Event | None:
        hit = prefill_hit(node, time, source, new_seq, new_tokens, cached)
        runs = self._runs
        if hit is not None:
            runs[rank] = _Run(hit.fields["cached_tokens"], hit.fields["new_tokens"], time)
            return hit
        run = runs.pop(rank, None) if runs else None
        if (
            run is None
            or new_seq != 1
            or cached != 0
            or type(new_tokens) is not int
            or not 0 < new_tokens <= run.chunk
            or run.last != run.chunk
            or not 0 <= time - run.time <= KEEP_SECONDS
        ):
            return None
        run.new_tokens += new_tokens
        run.last = new_tokens
        run.time = time
        runs[rank] = run
        return Event(
            PREFILL_HIT,
            node,
            time,
            source,
            {"new_tokens": run.new_tokens, "cached_tokens": run.cached},
        )


def batch_hit(runs: ChunkRuns, event: Event) -> Event | None:
    """`ChunkRuns.step` of a `prefill_batch` event's fields and DP rank (live, or a line no
    learnt shape read in a worker)."""
    if event.time is None:
        return None
    fields = event.fields
    return runs.step(
        event.node,
        event.time,
        event.source,
        event.ranks.get("dp"),
        fields.get("new_seq"),
        fields.get("new_token"),
        fields.get("cached_token"),
    )


class PrefillHits:
    """Recent single-sequence prefills with cached tokens, by prompt length (new + cached).

    `note` takes a `PREFILL_HIT` event or a raw `prefill_batch` event (live, or a worker that
    ships batch lines); `cached(prompt_tokens, start, end)` is the most any such line between
    `start` and `end` states cached for a prompt of exactly that length, else None.
    """

    __slots__ = ("_by_length", "_order", "_runs")

    def __init__(self) -> None:
        self._by_length: dict[int, list[tuple[float, str, int]]] = {}
        self._order: deque[tuple[float, int]] = deque()
        self._runs: dict[str, ChunkRuns] = {}  # of raw batch lines, by node

    def __len__(self) -> int:
        return len(self._order)

    def note(self, event: Event) -> None:
        if event.kind == PREFILL_HIT:
            hit: Event | None = event
        else:
            runs = self._runs.get(event.node)
            if runs is None:
                runs = self._runs[event.node] = ChunkRuns()
            hit = batch_hit(runs, event)
        if hit is None or hit.time is None:
            return
        time = hit.time
        new_tokens, cached = hit.fields.get("new_tokens"), hit.fields.get("cached_tokens")
        if type(new_tokens) is not int or type(cached) is not int:
            return
        length = new_tokens + cached
        self._by_length.setdefault(length, []).append((time, event.node, cached))
        order = self._order
        order.append((time, length))
        while order and (len(order) > MAX_KEPT or order[0][0] < time - KEEP_SECONDS):
            self._forget(*order.popleft())

    def _forget(self, time: float, length: int) -> None:
        kept = self._by_length.get(length)
        if not kept:
            return
        for index, (at, _, _) in enumerate(kept):
            if at == time:
                del kept[index]
                break
        if not kept:
            del self._by_length[length]

    def cached(
        self, prompt_tokens: int, start: float, end: float, nodes: frozenset[str] | None = None
    ) -> int | None:
        """The cached tokens a line of exactly `prompt_tokens` between `start` and `end` states
        (the most, if several), on one of `nodes` when given; None when no line matches."""
        kept = self._by_length.get(prompt_tokens)
        if not kept:
            return None
        found = [
            cached
            for at, node, cached in kept
            if start <= at <= end and (nodes is None or node in nodes)
        ]
        return max(found) if found else None
