"""What the audit knows about one node: the configuration in force, and what its logs showed.

Both sources of an audit (files and live endpoints) reduce to these facts, and one policy judges
them, so a node reads the same whether its numbers came from a startup line or `/server_info`.
`None` always means "not stated by any source", never a default: the audit reports unknowns
instead of guessing them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Final

from collector.events import iso_time
from collector.state.config_timeline import plausible_tokens

# Field -> the word the node's line uses for it.
_TOKEN_FIELDS: Final = {"pool_tokens": "pool", "context_len": "context"}
# The configuration facts both sources state, by NodeFacts field: files through the
# configuration timeline, live endpoints through `/server_info` and the rest.
CONFIG_FIELDS: Final = (
    "role",
    "pool_tokens",
    "dcp_size",
    "kv_cache_sharding",
    "max_req_input_len",
    "context_len",
    "transfer_backend",
    "kv_checksum",
    "tp_size",
    "pp_size",
    "page_size",
)
# What a KV transfer's layout signature is made of, by NodeFacts field.
LAYOUT_FIELDS: Final = ("tp_size", "pp_size", "page_size")


def other_pd_role(role: str | None) -> str | None:
    """The PD role a node of `role` exchanges KV with (None for a unified or unknown one)."""
    return {"prefill": "decode", "decode": "prefill"}.get(role or "")


def layout_size(value: Any) -> int | None:
    """A stated TP width, PP size or page size, when it is one (a positive whole number)."""
    return value if type(value) is int and value > 0 else None


@dataclass
class ChecksumEvidence:
    """KV-checksum behaviour seen in one node's logs during one configuration."""

    # `KV checksum skipped: ... admitted unverified` lines (decode logs them once per signature).
    skipped: int = 0
    # (prefill signature, decode signature) pairs named by those lines, first seen first.
    skipped_signatures: list[tuple[str | None, str | None]] = field(default_factory=list)
    skipped_source: str | None = None
    # `Decode ... registered N metadata buffers but this prefill has M` (checksum on one side).
    one_side: int = 0
    one_side_source: str | None = None
    # `KV checksum mismatch` lines: the checksum verified and caught corrupted transfers.
    mismatches: int = 0
    # `Context corruption detected` lines (metadata of another room): caught whatever the
    # checksum setting, the same race's other sign.
    corruptions: int = 0

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "checksum_skipped": self.skipped,
            "skipped_signatures": [{"prefill": p, "decode": d} for p, d in self.skipped_signatures],
            "skipped_source": self.skipped_source,
            "checksum_one_side": self.one_side,
            "one_side_source": self.one_side_source,
            "checksum_mismatches": self.mismatches,
            "metadata_corruptions": self.corruptions,
        }


@dataclass
class NodeFacts:
    """One node's configuration (one generation of it) plus the evidence gathered while it ran.

    `stale_version` holds a version reported before the node's last restart: it may no longer be
    true (the incident's engine was replaced at such a restart), so it is not judged, only named.
    """

    node: str
    role: str | None = None
    # The model served (None: not known): the nodes of one model are one deployment.
    model: str | None = None
    version: str | None = None
    stale_version: str | None = None
    pool_tokens: int | None = None
    # Ranks one request's KV is sharded over (`--dcp-size`), and `--enable-kv-cache-sharding`:
    # what the pool means for one prompt (`collector.state.prompt_capacity`).
    dcp_size: int | None = None
    kv_cache_sharding: bool | None = None
    # The prompt limit the engine stated (`/server_info`, a truncation warning).
    max_req_input_len: int | None = None
    context_len: int | None = None
    transfer_backend: str | None = None
    kv_checksum: bool | None = None
    # What a KV transfer's layout signature is made of (TP width, PP stage, page size): a
    # prefill and a decode that differ in one exchange digests that cannot be compared.
    tp_size: int | None = None
    pp_size: int | None = None
    page_size: int | None = None
    generation: int = 0
    since: float | None = None
    until: float | None = None
    evidence: ChecksumEvidence = field(default_factory=ChecksumEvidence)
    # The longest prompt the node's own time stats show it prefilling whole while this
    # configuration was the last read, and when (tokens, time): one beyond its pool says it
    # restarted with a bigger pool no line read shows.
    longest_prefilled: tuple[int, float | None] | None = None
    sources: list[str] = field(default_factory=list)
    # Set when the facts came (at least partly) from live endpoints.
    live: bool = False
    # Set when the node's own log files were read (only logs show whether the checksum verifies).
    logs_read: bool = False
    # Live only: why the node could not be read at all, and whether it answered (with nothing
    # an engine gives: a login page, a cut document, a router).
    unreachable: str | None = None
    answered: bool = False
    # Live only: endpoints that answered with an error or nothing usable, endpoint -> reason.
    endpoint_errors: dict[str, str] = field(default_factory=dict)
    # Values a source stated that cannot be right, field -> reason ("pool value -1 not
    # plausible", "disaggregation_mode 5 not understood"): the field is then None (unknown).
    doubts: dict[str, str] = field(default_factory=dict)
    # Values a source stated that cannot be right, beside a plausible value of the same field
    # (a top-level pool of -5 beside a rank's 681,280): the plausible one is judged, and these
    # are said, never dropped unsaid (blind review 58 D4).
    set_aside: dict[str, str] = field(default_factory=dict)

    @property
    def layout(self) -> tuple[tuple[str, int], ...]:
        """The parts of a KV transfer's layout signature this node states, (name, value)."""
        return tuple(
            (name, value) for name in LAYOUT_FIELDS if (value := getattr(self, name)) is not None
        )

    def checked(self) -> NodeFacts:
        """These facts with implausible token counts (`config_timeline.plausible_tokens`)
        made unknown, each with its reason in `doubts`; `self` when there are none."""
        bad = {
            name: getattr(self, name)
            for name in _TOKEN_FIELDS
            if getattr(self, name) is not None and not plausible_tokens(getattr(self, name))
        }
        if not bad:
            return self
        doubts = dict(self.doubts)
        for name, value in bad.items():
            doubts[name] = token_doubt(name, value)
        changes: dict[str, Any] = dict.fromkeys(bad)
        return dataclasses.replace(self, doubts=doubts, **changes)

    def config_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "since": iso_time(self.since),
            "until": iso_time(self.until),
            "role": self.role,
            "version": self.version,
            "stale_version": self.stale_version,
            "max_total_num_tokens": self.pool_tokens,
            "dcp_size": self.dcp_size,
            "kv_cache_sharding": self.kv_cache_sharding,
            "max_req_input_len": self.max_req_input_len,
            "context_len": self.context_len,
            "transfer_backend": self.transfer_backend,
            "kv_checksum": self.kv_checksum,
            "evidence": self.evidence.to_json_dict(),
            "sources": list(self.sources),
            "live": self.live,
            "logs_read": self.logs_read,
            "endpoint_errors": dict(self.endpoint_errors),
            "doubts": dict(self.doubts),
            "set_aside": dict(self.set_aside),
        }


def token_doubt(name: str, value: object) -> str:
    """`pool value -1 not plausible`: why a token count stated for field `name` is not used."""
    return f"{_TOKEN_FIELDS.get(name, name)} value {_short(value)} not plausible"


def mode_doubt(document: object, endpoint: str) -> str | None:
    """Why a `/server_info`, `/v1/loads` or `/model_info` document's disaggregation mode
    cannot be read, or None.

    The parser reads a mode that is not text (`5`, `[1]`, `{}`, `true`) as "not
    disaggregated", which would make a PD node unified and skip its PD checks; the audit asks
    this instead and treats the role as unknown. The mode is looked up where the parser looks
    (`collector.sglang.server_info`)."""
    if not isinstance(document, dict):
        return None
    raw: Any = None
    if endpoint == "server_info":
        raw = document.get("disaggregation_mode")
        if raw is None:
            states = document.get("internal_states")
            first = (
                next((s for s in states if isinstance(s, dict)), {})
                if isinstance(states, list)
                else {}
            )
            raw = first.get("disaggregation_mode")
    elif endpoint == "v1_loads":
        raw = _section(document).get("mode")
        entries = document.get("loads")
        for entry in entries if isinstance(entries, list) else []:
            if raw is not None:
                break
            if isinstance(entry, dict):
                raw = _section(entry).get("mode")
    elif endpoint == "model_info":
        raw = document.get("disaggregation_mode")
    if raw is None or isinstance(raw, str):
        return None
    return f"disaggregation_mode {_short(raw)} not understood"


def _section(container: dict[str, Any]) -> dict[str, Any]:
    section = container.get("disaggregation")
    return section if isinstance(section, dict) else {}


def _short(value: object) -> str:
    """A stated value as a person reads it: `-1`, `1e+308`, `[1]`, `true` (at most 40 chars)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) <= 10**15:
            text = f"{value:,}"
        else:
            try:
                text = f"{float(value):.3g}"
            except OverflowError:
                text = "above 1e+308"
    else:
        try:
            text = json.dumps(value, allow_nan=True)
        except (TypeError, ValueError, RecursionError):
            text = f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def same_deployment(nodes: list[NodeFacts], model: str | None) -> list[NodeFacts]:
    """The nodes serving `model`, with those whose model is not known: one deployment, as in
    forensics (`ConfigTimeline.advertised_context`). A node whose model is not known is judged
    against every node, the strictest case. Why: two clusters of two models audited from one
    case folder failed the smaller model's pools against the larger model's context."""
    if model is None:
        return nodes
    return [n for n in nodes if n.model is None or n.model == model]


@dataclass(frozen=True, slots=True)
class Deployment:
    """What a node is judged against besides itself.

    `advertised_context` is the largest context any node reports (capacity line,
    `sglang:context_len`, `/v1/models` `max_model_len`): in PD the router admits prompts up to
    it, so every prefill pool must hold it.
    """

    pd: bool
    advertised_context: int | None
    advertised_by: str | None
    checksum_on: tuple[str, ...] = ()
    checksum_off: tuple[str, ...] = ()
    # (node, role) of every reachable PD node: KV flows prefill -> decode only, so a node's
    # checksum peers are the nodes of the other role (`kv_peers`).
    pd_roles: tuple[tuple[str, str], ...] = ()
    # (node, release) of every reachable PD node whose release is known: a checksum both sides
    # enable may still verify nothing between releases that write and read it differently.
    pd_versions: tuple[tuple[str, str], ...] = ()
    # (node, its KV layout as stated: `NodeFacts.layout`) of every reachable PD node.
    pd_layouts: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()

    @classmethod
    def of_model(cls, nodes: list[NodeFacts], model: str | None) -> Deployment:
        """The deployment `model`'s nodes make (`same_deployment`)."""
        return cls.of(same_deployment(nodes, model))

    @classmethod
    def of(cls, nodes: list[NodeFacts]) -> Deployment:
        # An engine that did not answer still counts by its files, when they were given.
        reachable = [n for n in nodes if n.unreachable is None or not n.live]
        pd = any(n.role in ("prefill", "decode") for n in reachable)
        best: NodeFacts | None = None
        for facts in sorted((n.checked() for n in reachable), key=lambda n: n.node):
            if facts.context_len is not None and (
                best is None or best.context_len is None or facts.context_len > best.context_len
            ):
                best = facts
        # A node whose role nothing stated is judged as PD beside PD nodes (the strictest case):
        # it may be any of their peers (blind review 46 F11: a decode beside `prefill-0`, its role
        # unstated, said "no prefill node audited").
        pd_nodes = [
            n for n in reachable if n.role in ("prefill", "decode") or (pd and n.role is None)
        ]
        return cls(
            pd=pd,
            advertised_context=best.context_len if best else None,
            advertised_by=best.node if best else None,
            checksum_on=tuple(sorted(n.node for n in pd_nodes if n.kv_checksum is True)),
            checksum_off=tuple(sorted(n.node for n in pd_nodes if n.kv_checksum is False)),
            pd_roles=tuple(sorted((n.node, n.role or "unknown") for n in pd_nodes)),
            pd_versions=tuple(sorted((n.node, n.version) for n in pd_nodes if n.version)),
            pd_layouts=tuple(sorted((n.node, n.layout) for n in pd_nodes if n.layout)),
        )

    def kv_peers(self, node: str, role: str | None) -> frozenset[str]:
        """The PD nodes `node` can exchange KV with: decodes for a prefill, prefills for a
        decode. Two prefills (or two decodes) never exchange KV. A node of unknown role is
        judged as PD, the strictest case: every PD node but itself may be its peer, and it may be
        anyone's. A unified (non-PD) node has none."""
        if role is None:
            return frozenset(n for n, _ in self.pd_roles if n != node)
        other = other_pd_role(role)
        if other is None:
            return frozenset()
        return frozenset(n for n, r in self.pd_roles if r in (other, "unknown") and n != node)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "pd": self.pd,
            "advertised_context": self.advertised_context,
            "advertised_by": self.advertised_by,
            "kv_checksum_on": list(self.checksum_on),
            "kv_checksum_off": list(self.checksum_off),
            "pd_roles": {n: r for n, r in self.pd_roles},
        }
