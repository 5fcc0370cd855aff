"""Facts for the audit from running engines: `/server_info`, `/v1/models`, `/v1/loads`, `/metrics`.

Each endpoint holds a different part of the answer (the version and checksum flag in
`/server_info`, the effective context only in `/v1/models`, the pool in three places), so all
four are fetched, concurrently, each under one deadline: a target that hangs costs the timeout
once, not four times, and becomes that node's "unreachable" reason, never an exception.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

from collector.audit.facts import NodeFacts
from collector.events import Event
from collector.sglang.prometheus import parse_exposition
from collector.sglang.server_info import parse_server_info
from collector.sglang.signals import config_snapshot

# Endpoint name -> paths tried in order (the deprecated alias only when the first is missing).
ENDPOINTS: Final[dict[str, tuple[str, ...]]] = {
    "server_info": ("/server_info", "/get_server_info"),
    "v1_models": ("/v1/models",),
    "v1_loads": ("/v1/loads",),
    "metrics": ("/metrics",),
}
_ROLES: Final = frozenset({"prefill", "decode", "unified"})
_MAX_BODY: Final = 64 << 20


@dataclass(frozen=True, slots=True)
class Target:
    """One engine to audit: the node name used in the report and its base URL."""

    node: str
    url: str


def parse_target(spec: str) -> Target:
    """`NODE=URL` (URL is the engine's base, e.g. `http://127.0.0.1:30000`); ValueError names
    what is wrong."""
    node, sep, url = spec.partition("=")
    node, url = node.strip(), url.strip()
    if not sep or not node or not url:
        raise ValueError(
            f"--endpoint {spec!r}: expected NODE=URL, e.g. prefill-0=http://10.0.0.5:30000"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--endpoint {spec!r}: URL must be http:// or https:// with a host")
    return Target(node, url.rstrip("/"))


@dataclass(frozen=True, slots=True)
class _Answer:
    endpoint: str
    url: str
    body: bytes | None
    error: str | None


async def fetch_facts_async(
    targets: Sequence[Target],
    *,
    timeout: float,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.time,
) -> list[NodeFacts]:
    """Facts of every target, fetched concurrently; each request ends within `timeout`."""
    limits = httpx.Timeout(timeout)
    async with httpx.AsyncClient(timeout=limits, transport=transport) as client:
        return list(await asyncio.gather(*(_node(client, t, timeout, clock) for t in targets)))


def fetch_facts(
    targets: Sequence[Target],
    *,
    timeout: float,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.time,
) -> list[NodeFacts]:
    """`fetch_facts_async` for callers without an event loop (the CLI)."""
    fetching = fetch_facts_async(targets, timeout=timeout, transport=transport, clock=clock)
    return asyncio.run(fetching)


async def _node(
    client: httpx.AsyncClient, target: Target, timeout: float, clock: Callable[[], float]
) -> NodeFacts:
    answers = await asyncio.gather(
        *(_fetch(client, target.url, name, paths, timeout) for name, paths in ENDPOINTS.items())
    )
    facts = NodeFacts(node=target.node, live=True)
    for answer in answers:
        if answer.error is not None:
            facts.endpoint_errors[answer.endpoint] = answer.error
    answered = [a for a in answers if a.body is not None]
    if not answered:
        first = answers[0]
        facts.unreachable = first.error or "no answer"
        return facts
    now = clock()
    events: dict[str, Event] = {}
    metric_events: list[Event] = []
    for answer in answered:
        assert answer.body is not None
        facts.sources.append(answer.url)
        if answer.endpoint == "metrics":
            outcome = parse_exposition(answer.body, node=target.node, source=answer.url, time=now)
            metric_events = outcome.events
            if not metric_events:
                facts.endpoint_errors["metrics"] = "no samples"
            continue
        outcome = parse_server_info(
            answer.body, node=target.node, source=answer.url, time=now, endpoint=answer.endpoint
        )
        if outcome.events:
            events[answer.endpoint] = outcome.events[0]
        else:
            reasons = ", ".join(sorted(outcome.dropped)) or "nothing usable"
            facts.endpoint_errors[answer.endpoint] = f"unparseable ({reasons})"
    _merge(facts, events, metric_events)
    return facts


def _merge(facts: NodeFacts, events: dict[str, Event], metric_events: list[Event]) -> None:
    info = events.get("server_info")
    models = events.get("v1_models")
    loads = events.get("v1_loads")
    snap = config_snapshot(metric_events, facts.node) if metric_events else None

    def field(event: Event | None, name: str) -> Any:
        return event.get(name) if event is not None else None

    facts.version = _first(field(info, "version"), field(loads, "version"))
    roles = [field(info, "role"), snap.role if snap else None, field(loads, "role")]
    facts.role = _first(*(r for r in roles if r in _ROLES))
    pools = [field(info, "max_total_num_tokens"), field(loads, "max_total_num_tokens")]
    pools.append(snap.pool_tokens if snap else None)
    known_pools = [p for p in pools if isinstance(p, int)]
    # Ranks or endpoints that disagree: the smallest pool is the one a long prompt overflows.
    facts.pool_tokens = min(known_pools) if known_pools else None
    contexts = [field(models, "context_len"), snap.context_len if snap else None]
    contexts.append(field(info, "context_len"))
    known_contexts = [c for c in contexts if isinstance(c, int)]
    facts.context_len = max(known_contexts) if known_contexts else None
    facts.transfer_backend = _first(field(info, "transfer_backend"))
    checksum = field(info, "kv_checksum")
    facts.kv_checksum = checksum if isinstance(checksum, bool) else None


async def _fetch(
    client: httpx.AsyncClient, base: str, endpoint: str, paths: tuple[str, ...], timeout: float
) -> _Answer:
    error = "no answer"
    url = base + paths[0]
    for index, path in enumerate(paths):
        url = base + path
        try:
            response = await asyncio.wait_for(client.get(url), timeout)
        except (TimeoutError, httpx.TimeoutException):
            return _Answer(endpoint, url, None, f"no answer within {timeout:g} s (GET {url})")
        except httpx.HTTPError as exc:
            return _Answer(endpoint, url, None, f"{_describe(exc)} (GET {url})")
        if response.status_code == 404 and index + 1 < len(paths):
            error = f"HTTP 404 (GET {url})"
            continue
        if response.status_code != 200:
            return _Answer(endpoint, url, None, f"HTTP {response.status_code} (GET {url})")
        body = response.content
        if len(body) > _MAX_BODY:
            return _Answer(endpoint, url, None, f"response over {_MAX_BODY >> 20} MB (GET {url})")
        return _Answer(endpoint, url, body, None)
    return _Answer(endpoint, url, None, error)


def _describe(exc: httpx.HTTPError) -> str:
    """A short cause a person recognises (`connection refused`, not the transport's wording)."""
    cause: BaseException | None = exc
    for _ in range(8):
        if cause is None:
            break
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
        cause = cause.__cause__ or cause.__context__
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _first(*values: Any) -> Any:
    for value in values:
        if value is not None:
            return value
    return None
