"""Facts for the audit from files: logs, `.prom` snapshots and saved `/server_info` JSON.

The node configuration timeline (`collector.state.config_timeline`) splits each node's history
into generations (startups); the audit judges the last one and names earlier ones that failed.
Two things are added here:

* Snapshots are placed in time among the node's log lines. Discovery yields a node's JSON and
  `.prom` files as whole streams before or after its logs, which would fold a snapshot taken
  after a restart into the first startup; here they are read first (they are small) and fed in
  at their own time.
* A snapshot that merely states the version of the generation already running is not a new
  startup. The timeline starts a generation whenever a reported version differs from the one it
  carried over from before a restart; the audit keeps such a generation together with the one
  the logs started, so the restart's pool and context stay with the version that ran them.

Only a version stated during a generation counts for it: one carried over a restart is
"stale" (the incident's engine was replaced at exactly such a restart).
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from collector.audit.facts import (
    CONFIG_FIELDS,
    LAYOUT_FIELDS,
    ChecksumEvidence,
    Deployment,
    NodeFacts,
    layout_size,
    mode_doubt,
    token_doubt,
)
from collector.events import Event
from collector.files import (
    EXPORT_STREAM,
    ReadStats,
    TelemetryFile,
    discover,
    file_time,
    is_export,
    read_lines,
)
from collector.parse import (
    MAX_DOCUMENT_BYTES,
    ParseStats,
    file_events,
    stream_clock,
    stream_repeats,
    stream_zones,
)
from collector.repeated_lines import in_reading_order
from collector.state.config_timeline import (
    ONE_INSTANT_SECONDS,
    PD_ROLES,
    ConfigTimeline,
    NodeConfig,
    implausible_tokens,
)

_CONFIG_KINDS: Final = frozenset(
    {
        "server_args",
        "capacity",
        "pool_below_context_warning",
        "server_info",
        "metric",
        "auto_truncated",
    }
)
# Kinds the timeline reads only to guess a role; once a node is known PD they change nothing.
_ROLE_HINT_KINDS: Final = frozenset(
    {"prefill_batch", "decode_batch", "request_time_stats", "request_trace"}
)
# The timeline's version is judged per generation (`_Generation.version`); its model is merged.
_MERGED_FIELDS: Final = ("model", *CONFIG_FIELDS)
# What a node's files can state that the gate checks: its configuration but the role (batch
# lines alone tell a role) and what its versions and prefills show.
_STATED_FIELDS: Final = (
    *(name for name in CONFIG_FIELDS if name != "role"),
    "version",
    "stale_version",
    "longest_prefilled",
)
_MAX_SOURCES: Final = 8
# Set by `_mode_checked` on a server_info event whose document states a mode of the wrong type.
_ROLE_DOUBT: Final = "audit_role_doubt"


@dataclass
class _Generation:
    """One audit generation: the timeline generations that belong to one startup."""

    timeline_gens: list[int] = field(default_factory=list)
    version: str | None = None
    evidence: ChecksumEvidence = field(default_factory=ChecksumEvidence)
    mismatch_keys: set[str] = field(default_factory=set)
    corruption_keys: set[str] = field(default_factory=set)
    sources: list[str] = field(default_factory=list)
    doubts: dict[str, str] = field(default_factory=dict)
    # The longest prompt its own time stats show prefilled whole, and when (`NodeFacts`).
    longest_prefilled: tuple[int, float | None] | None = None
    # The KV layout its documents state (`NodeFacts.layout`): a saved /server_info states it
    # too, which the configuration timeline reads from startup lines alone.
    layout: dict[str, int] = field(default_factory=dict)


@dataclass
class Gathered:
    """Per node, the configuration in force at the end, and the earlier ones with the
    deployment as it stood when each ended."""

    nodes: list[NodeFacts]
    earlier: dict[str, list[tuple[NodeFacts, Deployment]]]
    ignored_nodes: list[str]
    timeline: ConfigTimeline
    # Nodes that stated a router's or gateway's metrics (`smg_*`, `sgl_router_*`).
    router_nodes: list[str] = field(default_factory=list)


class _Tracker:
    def __init__(self) -> None:
        self.timeline = ConfigTimeline()
        self.generations: dict[str, list[_Generation]] = defaultdict(list)
        self.seen_nodes: set[str] = set()
        self.router_nodes: set[str] = set()

    def feed(self, event: Event) -> None:
        kind = event.kind
        self.seen_nodes.add(event.node)
        if kind == "metric" and event.get("role") == "router":
            self.router_nodes.add(event.node)
        if kind in _ROLE_HINT_KINDS:
            current = self.timeline.current(event.node)
            if current is None or current.role not in PD_ROLES:
                self._update(event)
            if kind == "request_time_stats" and event.get("role") == "prefill":
                self._prefilled(event)
        elif kind in _CONFIG_KINDS:
            self._update(event)
        elif kind == "checksum_skipped":
            gen = self._generation(event.node)
            seen = gen.evidence
            pair = (_text(event.get("prefill_signature")), _text(event.get("decode_signature")))
            seen.skipped += 1
            if pair not in seen.skipped_signatures:
                seen.skipped_signatures.append(pair)
            if seen.skipped_source is None:
                seen.skipped_source = event.source
        elif kind == "transfer_warning" and event.get("warning") == "checksum_one_side":
            gen = self._generation(event.node)
            gen.evidence.one_side += 1
            if gen.evidence.one_side_source is None:
                gen.evidence.one_side_source = event.source
        elif kind == "checksum_mismatch":
            # Every TP rank may log the same mismatch; count requests, not lines.
            gen = self._generation(event.node)
            room = event.get("bootstrap_room") or event.get("rid") or event.source
            gen.mismatch_keys.add(str(room))
            gen.evidence.mismatches = len(gen.mismatch_keys)
        elif kind == "metadata_corruption":
            gen = self._generation(event.node)
            room = event.get("bootstrap_room") or event.get("rid") or event.source
            gen.corruption_keys.add(str(room))
            gen.evidence.corruptions = len(gen.corruption_keys)

    def _prefilled(self, event: Event) -> None:
        # A prompt refused for its length leaves a one-token stub's stats (reference §5).
        tokens = event.get("input_len")
        if not isinstance(tokens, int) or tokens <= 1:
            return
        gen = self._generation(event.node)
        if gen.longest_prefilled is None or tokens > gen.longest_prefilled[0]:
            gen.longest_prefilled = (tokens, event.time)

    def _generation(self, node: str) -> _Generation:
        gens = self.generations[node]
        if not gens:
            gens.append(_Generation())
        return gens[-1]

    def _update(self, event: Event) -> None:
        node = event.node
        before = self.timeline.current(node)
        self.timeline.update(event)
        after = self.timeline.current(node)
        if after is None:
            return
        # A pool of -1: the timeline takes it as unknown, the line says why.
        stated = implausible_tokens(event)
        gens = self.generations[node]
        if before is None or after.generation != before.generation:
            if gens and (not gens[-1].timeline_gens or _same_startup(gens[-1], before, event)):
                gens[-1].timeline_gens.append(after.generation)
            else:
                gens.append(_Generation(timeline_gens=[after.generation]))
        gen = gens[-1]
        doubt = event.get(_ROLE_DOUBT)
        if doubt is not None:
            gen.doubts["role"] = str(doubt)
        for name, value in stated.items():
            gen.doubts[name] = token_doubt(name, value)
        if event.kind == "server_info" and event.get("version") is not None:
            gen.version = str(event.get("version"))
        if event.kind in ("server_info", "server_args"):
            for name in LAYOUT_FIELDS:
                value = layout_size(event.get(name))
                if value is not None:
                    gen.layout[name] = value
        path = event.source.rsplit(":", 1)[0] if event.kind != "server_info" else event.source
        if path not in gen.sources and len(gen.sources) < _MAX_SOURCES:
            gen.sources.append(path)


def _same_startup(gen: _Generation, before: NodeConfig | None, event: Event) -> bool:
    """A snapshot that only states the version of a generation whose version was carried over
    (not stated since its startup) continues that generation."""
    if before is None or event.kind != "server_info" or gen.version is not None:
        return False
    pool = event.get("max_total_num_tokens")
    return pool is None or before.pool_tokens is None or pool == before.pool_tokens


def gather(paths: Iterable[str | Path], stats: ParseStats) -> Gathered:
    """Read every telemetry file under `paths` and reduce it to per-node facts. What discovery
    passes over is counted in `stats.dropped` (`collector.passed_over`)."""
    files = discover(paths, stats.dropped, stats.dropped_files)
    documents: dict[str, list[Event]] = defaultdict(list)
    saved: dict[str, list[tuple[TelemetryFile, list[Event]]]] = defaultdict(list)
    logs: dict[str, list[TelemetryFile]] = defaultdict(list)
    for tf in files:
        if tf.kind == "otlp":
            # Trace spans state no configuration, and name servers by service and host, not
            # as the nodes read are named: every server would be one more unknown node.
            continue
        if tf.kind == "log":
            logs[tf.node].append(tf)
        else:
            saved[tf.node].append((tf, _mode_checked(tf, list(file_events(tf, stats)))))
    for node, read in saved.items():
        _dated_together(read)
        for _, events in read:
            documents[node].extend(events)
    zones = stream_zones(_streams(logs, saved), stats)
    tracker = _Tracker()
    for node in sorted(set(documents) | set(logs)):
        pending = sorted(documents.get(node, []), key=_time_key)
        index = 0
        node_logs = logs.get(node, [])
        # Snapshots are dated in UTC: the logs are too, once their zone is known, by their own
        # stamps or, where none tells it, by the rooms they share with other nodes, as
        # forensics reads them (blind review 28a: a prefill's local times read as UTC put its
        # roll-back to the small pool before a snapshot of the good one, and the gate passed).
        own_logs = in_reading_order([tf for tf in node_logs if not is_export(tf.path)])
        clock = stream_clock((node, "log"), own_logs, zones.get((node, "log")))
        repeats = stream_repeats((node, "log"), own_logs)
        node_logs = own_logs + [tf for tf in node_logs if is_export(tf.path)]
        for tf in node_logs:
            exported = is_export(tf.path)
            for event in file_events(
                tf,
                stats,
                clock=None if exported else clock,
                repeats=None if exported else repeats,
            ):
                if event.time is not None:
                    while index < len(pending) and _time_key(pending[index]) <= event.time:
                        tracker.feed(pending[index])
                        index += 1
                tracker.feed(event)
        for event in pending[index:]:
            tracker.feed(event)
    return _facts(tracker, logged=frozenset(logs))


def _streams(
    logs: dict[str, list[TelemetryFile]],
    saved: dict[str, list[tuple[TelemetryFile, list[Event]]]],
) -> dict[tuple[str, str], list[TelemetryFile]]:
    """The files as `parse.streams_of` keys them, for `stream_zones`: each node's own logs,
    its request exports, its snapshots by kind."""
    streams: dict[tuple[str, str], list[TelemetryFile]] = {}
    for node, node_logs in logs.items():
        own = in_reading_order([tf for tf in node_logs if not is_export(tf.path)])
        if own:
            streams[(node, "log")] = own
        exports = [tf for tf in node_logs if is_export(tf.path)]
        if exports:
            streams[(node, EXPORT_STREAM)] = exports
    for node, read in saved.items():
        for tf, _ in read:
            streams.setdefault((node, tf.kind), []).append(tf)
    return streams


def _tells(facts: NodeFacts) -> bool:
    """Whether a node's configuration states anything the gate checks, or its logs show the
    checksum at work."""
    stated = (getattr(facts, name) for name in _STATED_FIELDS)
    evidence = facts.evidence
    seen = (evidence.skipped, evidence.one_side, evidence.mismatches, evidence.corruptions)
    # A value stated that cannot be right (a pool of -1) is said on the node's own line.
    return any(value is not None for value in stated) or any(seen) or bool(facts.doubts)


def _facts(tracker: _Tracker, *, logged: frozenset[str]) -> Gathered:
    by_node: dict[str, list[NodeFacts]] = {}
    for node in sorted(tracker.generations):
        history = tracker.timeline.history(node)
        facts_list: list[NodeFacts] = []
        reported: str | None = None  # the last version reported before this generation
        for number, gen in enumerate(tracker.generations[node]):
            configs = [history[g] for g in gen.timeline_gens if g < len(history)]
            facts = _node_facts(node, number, gen, configs, reported)
            reported = facts.version or facts.stale_version
            facts.logs_read = node in logged
            facts_list.append(facts)
        for current, following in zip(facts_list, facts_list[1:], strict=False):
            current.until = following.since
        by_node[node] = facts_list
    # A node whose files state no configuration and show no checksum at work (a role told by
    # batch lines alone) is checked by nothing: passed over, not a line of unknowns that
    # --allow-unknown would pass (blind review 58 D5).
    silent = {node for node, facts_list in by_node.items() if not any(map(_tells, facts_list))}
    by_node = {node: facts_list for node, facts_list in by_node.items() if node not in silent}
    final = [facts_list[-1] for facts_list in by_node.values()]
    earlier: dict[str, list[tuple[NodeFacts, Deployment]]] = {}
    for node, facts_list in by_node.items():
        earlier[node] = [
            (facts, _deployment_at(by_node, _end_of(facts), facts.model))
            for facts in facts_list[:-1]
        ]
    ignored = sorted((tracker.seen_nodes - set(by_node)) | silent)
    routers = sorted(tracker.router_nodes)
    return Gathered(final, earlier, ignored, tracker.timeline, routers)


def _node_facts(
    node: str,
    number: int,
    gen: _Generation,
    configs: list[NodeConfig],
    reported_before: str | None = None,
) -> NodeFacts:
    merged: dict[str, Any] = dict.fromkeys(_MERGED_FIELDS)
    # The timeline forgets a version at a restart; one reported before it may be stale.
    carried_version: str | None = reported_before
    for config in configs:
        for name in _MERGED_FIELDS:
            value = getattr(config, name)
            if value is not None:
                merged[name] = value
        if config.version is not None:
            carried_version = config.version
    merged.update(gen.layout)  # the last document of the startup that states each
    since = configs[0].since if configs else None
    # A mode that could not be read explains an unknown role; another source may state it.
    doubts = {k: v for k, v in gen.doubts.items() if merged.get(k) is None}
    set_aside = {k: v for k, v in gen.doubts.items() if k not in doubts}
    facts = NodeFacts(
        node=node,
        version=gen.version,
        stale_version=carried_version if gen.version is None else None,
        generation=number,
        since=since,
        evidence=dataclasses.replace(gen.evidence),
        sources=list(gen.sources),
        doubts=doubts,
        set_aside=set_aside,
        longest_prefilled=gen.longest_prefilled,
        **merged,
    )
    return facts.checked()


def _end_of(facts: NodeFacts) -> float | None:
    if facts.until is not None:
        return facts.until - 1e-3
    return facts.since


def _deployment_at(
    by_node: dict[str, list[NodeFacts]], when: float | None, model: str | None
) -> Deployment:
    """`model`'s deployment as it stood at `when`: each node's configuration in force then
    (before a node's first startup, its first one, as the timeline does)."""
    in_force: list[NodeFacts] = []
    for facts_list in by_node.values():
        chosen = facts_list[0]
        if when is not None:
            for facts in facts_list:
                if facts.since is not None and facts.since <= when:
                    chosen = facts
        in_force.append(chosen)
    return Deployment.of_model(in_force, model)


def _mode_checked(tf: TelemetryFile, events: list[Event]) -> list[Event]:
    """`events` of one saved document, with a disaggregation mode of the wrong type (`5`,
    `[1]`, `{}`, `true`) made unknown instead of "not disaggregated".

    The parser reads such a mode as no mode (the event then has no `role` and no
    `disaggregation_mode`), and the gate must say why. Only then is the document read again
    (it is small: larger ones give no events) to see what it stated."""
    suspects = [
        i
        for i, e in enumerate(events)
        if e.kind == "server_info"
        and e.get("role") in ("unified", None)
        and e.get("disaggregation_mode") is None
    ]
    if tf.kind != "json" or not suspects:
        return events
    document = _document(tf)
    checked = list(events)
    for index in suspects:
        event = events[index]
        doubt = mode_doubt(document, str(event.get("endpoint")))
        if doubt is None:
            continue
        fields = {k: v for k, v in event.fields.items() if k != "disaggregation_mode"}
        fields["role"] = None
        fields[_ROLE_DOUBT] = doubt
        checked[index] = Event(
            event.kind, event.node, event.time, event.source, fields, event.ranks
        )
    return checked


def _document(tf: TelemetryFile) -> Any:
    """The decoded JSON of a saved document, read as `collector.parse` reads it (gzip too);
    None when it cannot be read."""
    chunks: list[bytes] = []
    size = 0
    try:
        for _, line in read_lines(tf.path, ReadStats()):
            encoded = line.encode()
            size += len(encoded) + 1
            if size > MAX_DOCUMENT_BYTES:
                return None
            chunks.append(encoded)
        return json.loads(b"\n".join(chunks))
    except (OSError, ValueError, RecursionError):
        return None


def _dated_together(read: list[tuple[TelemetryFile, list[Event]]]) -> None:
    """One node's documents saved together (their files' times within one instant) are of one
    instant: where one of them dates itself (`/v1/loads`' `timestamp`, a sample's own time),
    the others, dated only by their files, are moved to that time. Why: a `/v1/loads` stating
    10:00 beside `/server_info`, `/v1/models` and `/metrics` written with it at 18:23 was read
    as a restart in between, and its rank's pool below the context as an earlier configuration
    (blind review 23; the live audit of the same answers failed the node)."""
    by_file: list[tuple[float, list[Event], float | None]] = []
    for tf, events in read:
        written = file_time(tf.path) if tf.snapshot_time is None else None
        if written is None:
            continue
        dated = [e.time for e in events if e.time is not None and e.time != written]
        by_file.append((written, events, min(dated) if dated else None))
    for written, events, itself in by_file:
        if itself is not None:
            continue
        stated = [
            when
            for other, _, when in by_file
            if when is not None and abs(other - written) < ONE_INSTANT_SECONDS
        ]
        if stated:
            for event in events:
                if event.time == written:
                    event.time = min(stated)


def _time_key(event: Event) -> float:
    return event.time if event.time is not None else float("-inf")


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
