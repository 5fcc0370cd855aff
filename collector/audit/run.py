"""One audit: gather facts from files and/or live endpoints, judge every node, report.

When a node is given both ways, the live answer is the configuration in force now and wins
field by field; what its logs showed (checksum skips, one-sided checksum) still counts.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from collector.audit.facts import CONFIG_FIELDS, Deployment, NodeFacts
from collector.audit.from_files import gather
from collector.audit.live import Target, fetch_facts, without_credentials
from collector.audit.policy import AuditPolicy, judge_node
from collector.audit.report import AuditReport
from collector.parse import ParseStats

# What the engine states now overrides the files; its version too.
_LIVE_FIELDS = ("version", *CONFIG_FIELDS)


def audit(
    paths: Sequence[str | Path] = (),
    targets: Sequence[Target] = (),
    *,
    policy: AuditPolicy | None = None,
    strict: bool = False,
    allow_unknown: bool = False,
    timeout: float = 5.0,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.time,
) -> AuditReport:
    """Audit the nodes found under `paths` and behind `targets`.

    `report.input["files"]` is the parse account (files, lines, events by kind, drops) when
    paths were given; `report.input["endpoints"]` maps node to URL when targets were.
    """
    rules = policy if policy is not None else AuditPolicy()
    facts: dict[str, NodeFacts] = {}
    earlier: dict[str, list[tuple[NodeFacts, Deployment]]] = {}
    account: dict[str, object] = {}
    if paths:
        stats = ParseStats()
        gathered = gather(paths, stats)
        stats.finished = time.perf_counter()
        facts.update((f.node, f) for f in gathered.nodes)
        earlier = gathered.earlier
        account["files"] = stats.to_json_dict()
        account["ignored_nodes"] = gathered.ignored_nodes
        account["router_nodes"] = gathered.router_nodes
    if targets:
        for live in fetch_facts(targets, timeout=timeout, transport=transport, clock=clock):
            facts[live.node] = overlay(facts.get(live.node), live)
        account["endpoints"] = {t.node: without_credentials(t.url, t.url) for t in targets}
    nodes = list(facts.values())
    deployment = Deployment.of(nodes)
    results = [
        judge_node(f, Deployment.of_model(nodes, f.model), rules, earlier.get(f.node))
        for f in nodes
    ]
    return AuditReport(
        results, deployment, rules, strict=strict, input=account, allow_unknown=allow_unknown
    )


def overlay(base: NodeFacts | None, live: NodeFacts) -> NodeFacts:
    """Live facts over the same node's facts from files (live wins where it states a value;
    where it states one that cannot be right, the field is unknown, not the files' value)."""
    if base is None:
        return live
    if live.unreachable is not None:
        # The engine did not answer: its files still say what it ran, if not what runs now
        # (review: they were dropped, and the line said only "unreachable").
        return dataclasses.replace(
            base,
            unreachable=live.unreachable,
            answered=live.answered,
            endpoint_errors=dict(live.endpoint_errors),
        )
    merged = dataclasses.replace(
        base,
        live=True,
        sources=[*base.sources, *live.sources],
        endpoint_errors=dict(live.endpoint_errors),
    )
    doubts = dict(base.doubts)
    for name in _LIVE_FIELDS:
        value = getattr(live, name)
        if value is not None:
            setattr(merged, name, value)
            doubts.pop(name, None)
        elif name in live.doubts:
            # The engine states it now, with a value that cannot be right: what the files said
            # earlier is not the configuration in force, so the field is unknown.
            setattr(merged, name, None)
            doubts[name] = live.doubts[name]
    merged.doubts = doubts
    merged.set_aside = {**base.set_aside, **live.set_aside}
    if live.version is not None:
        merged.stale_version = None
    return merged
