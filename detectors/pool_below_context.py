"""A KV pool smaller than the context the deployment advertises: the incident's precondition.

Feeds the alert `KVWatchPoolBelowContext`.

Every prompt longer than the pool but within the advertised context is admitted and cannot fit
(in the incident: a 681,280-token prefill pool under a 1,048,576-token context, 35% of the
window). In PD serving the pool that matters is the *prefill* pool, compared with the largest
context any node of its deployment serves: itself and the nodes its requests' rooms joined it
to. Before a room joined it to any, its own context when it states one (two deployments of one
model side by side are not one: blind review 20's healthy pair was warned against the other's
context), the largest of the nodes serving the same model after `link_wait_seconds` with no
room or when it states none. On engines before
0.5.20 such a prompt is refused by prefill yet answered by decode from stale pages, so a prefill
node in that state is critical; when the version is unknown, a refusal on that node that decode
did not retire (answered it, or its answer is not in the logs) makes it critical too: a refused
request decode aborted shows the path closed. Otherwise (fixed engine, decode nodes, non-PD
nodes) the gap means long prompts are refused: a warning. One finding per node and condition; a
restart with a different pool or context raises it again, and so does the same gap come back
after it was mended (`detectors.condition_since`). A node whose verdict moved because another
node's configuration did (a restart raising the context) is judged `restart_grace_seconds`
later, by what is in force then: a pair restarted together to a longer context and bigger pools
is no gap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from typing import ClassVar

from pydantic import Field

from collector.events import Event, iso_time
from collector.state.config_timeline import ConfigChange, ConfigTimeline, NodeConfig
from collector.state.request_record import RequestRecord
from detectors.base import Detector, DetectorConfig
from detectors.condition_since import ConditionSince
from detectors.context import DetectionContext
from detectors.engine_version import is_below
from detectors.finding import Finding, Severity

# The refusals that state a prompt over the node's pool, one the tokenizer let through: the
# context is at least its length (`_context_floor`).
_FOR_THE_POOL = frozenset({"input_too_long", "exceeds_max_tokens"})


def _at(when: str | None) -> str:
    return f" at {when}" if when else ""


class PoolBelowContextConfig(DetectorConfig):
    # First engine where prefill retires a refused request instead of leaking (PR 36988).
    leak_fixed_version: str = "0.5.20"
    # Rejection reasons that show the over-length path being hit on a prefill node.
    refusal_reasons: tuple[str, ...] = (
        "input_too_long",
        "exceeds_max_tokens",
        "context_length",
    )
    # A node judged again because *another* node's configuration moved the advertised context
    # is judged this much later (event seconds), by the configurations in force then: nodes of a
    # deployment restart minutes apart to raise the context and the pools together, and the
    # first one up is no gap the other's old pool left (blind review 16: routine maintenance
    # failed `--fail-on warning`). Its own restart or refusals are judged at once.
    restart_grace_seconds: float = Field(default=300.0, ge=0.0)
    # A node that states its own context is judged against the longer one other nodes of its
    # model serve only when no request's room has joined it to any node this long after its
    # start: two deployments of one model side by side are two (blind review 20: a healthy
    # pair was warned against the other's context), and a deployment's first requests come
    # within minutes of its start.
    link_wait_seconds: float = Field(default=900.0, ge=0.0)


class PoolBelowContext(Detector[PoolBelowContextConfig]):
    """Pool below the advertised context; feeds `KVWatchPoolBelowContext`.

    Examples
    --------
    >>> from collector.events import Event
    >>> from detectors.pipeline import DetectionPipeline
    >>> pipe = DetectionPipeline(detectors=[PoolBelowContext()])
    >>> _ = pipe.process(Event("server_args", "p0", 1.0, "p:1", {"disaggregation_mode": "prefill"}))
    >>> _ = pipe.process(Event("server_info", "p0", 2.0, "p.json", {"version": "0.5.19"}))
    >>> (f,) = pipe.process(Event("capacity", "p0", 3.0, "p:2",
    ...     {"max_total_num_tokens": 681280, "context_len": 1048576}))
    >>> f.severity, f.evidence["gap_tokens"]
    ('critical', 367296)
    """

    name: ClassVar[str] = "pool_below_context"
    alert: ClassVar[str] = "KVWatchPoolBelowContext"
    config_class: ClassVar[type[DetectorConfig]] = PoolBelowContextConfig
    event_kinds: ClassVar[frozenset[str]] = frozenset({"request_rejected"})
    wants_config: ClassVar[bool] = True
    wants_requests: ClassVar[bool] = True
    windowed: ClassVar[bool] = True

    def _init_learned(self) -> None:
        self.refusals_: dict[str, int] = {}
        # Per node, refused requests whose decode answer was a success or is unknown: the leak's
        # path may be open. A refused request decode then aborted shows it closed.
        self.unretired_: dict[str, int] = {}
        # Per node, the time of the first refused request whose decode answer is not in the
        # input, asked about at the end of it (`_on_flush`): a `/server_info` saved after the
        # logs may yet tell a release that refuses for good (blind review 9a: 0.5.23 nodes
        # with a small pool raised a false critical, "the engine version is unknown").
        self.unanswered_: dict[str, float | None] = {}
        # Per node, when a refusal first showed the path may be open (the critical's time).
        self.unretired_since_: dict[str, float | None] = {}
        # Nodes a refused request of which decode answered with success.
        self.answered_: set[str] = set()
        self.faults_ = ConditionSince()
        # Nodes to judge again once event time reaches their time (`restart_grace_seconds`).
        self.deferred_: dict[str, float] = {}
        # Per node, the nodes a request's room joined it to (prefill and decode): its
        # deployment, whose contexts its pool is judged against.
        self.links_: dict[str, set[str]] = {}
        # Per node, (generation, the longest prompt its scheduler refused for the pool, when):
        # the tokenizer passed it, so the context is at least that long (`_context_floor`).
        self.refused_longest_: dict[str, tuple[int, int, float | None]] = {}
        # Per prefill node, (generation, when, decode nodes): its pool below its own context,
        # but not below what the decode nodes answering its requests take since they restarted
        # then (`capped_at`).
        self.capped_: dict[str, tuple[int, float | None, list[str]]] = {}
        self._forget_sync()

    def _forget_sync(self) -> None:
        # What makes evaluating only the nodes whose verdict can have changed exact (see
        # `_on_config`); not learned state: rebuilt by a full evaluation when missing.
        self._synced_with: tuple[ConfigTimeline, int] | None = None
        self._advertised: dict[str | None, int | None] = {}
        self._models: dict[str, str | None] = {}
        self._model_since: tuple[object, float | None] = (None, None)  # `_gap_began`'s last scan

    def _learned_state(self) -> dict[str, object]:
        return {
            "refusals_": dict(self.refusals_),
            "unretired_": dict(self.unretired_),
            "unanswered_": dict(self.unanswered_),
            "unretired_since_": dict(self.unretired_since_),
            "answered_": sorted(self.answered_),
            "faults_": self.faults_.to_state(),
            "deferred_": dict(self.deferred_),
            "links_": {node: sorted(linked) for node, linked in self.links_.items()},
            "refused_longest_": {node: list(seen) for node, seen in self.refused_longest_.items()},
            "capped_": {node: list(seen) for node, seen in self.capped_.items()},
        }

    def _load_learned(self, state: dict[str, object]) -> None:
        raw = state.get("refused_longest_")
        if isinstance(raw, dict):
            self.refused_longest_ = {
                str(k): (int(v[0]), int(v[1]), float(v[2]) if len(v) > 2 and v[2] else None)
                for k, v in raw.items()
            }
        raw = state.get("capped_")
        if isinstance(raw, dict):
            self.capped_ = {
                str(k): (int(v[0]), _time_or_none(v[1]), [str(n) for n in v[2]])
                for k, v in raw.items()
            }
        raw = state.get("refusals_")
        if isinstance(raw, dict):
            self.refusals_ = {str(k): int(v) for k, v in raw.items()}
        raw = state.get("unretired_")
        if isinstance(raw, dict):
            self.unretired_ = {str(k): int(v) for k, v in raw.items()}
        for name in ("unanswered_", "unretired_since_"):
            raw = state.get(name)
            if isinstance(raw, dict):
                setattr(self, name, {str(k): _time_or_none(v) for k, v in raw.items()})
        raw = state.get("answered_")
        if isinstance(raw, list):
            self.answered_ = {str(node) for node in raw}
        self.faults_ = ConditionSince.from_state(state.get("faults_"))
        raw = state.get("deferred_")
        if isinstance(raw, dict):
            self.deferred_ = {str(k): float(v) for k, v in raw.items()}
        raw = state.get("links_")
        if isinstance(raw, dict):
            self.links_ = {
                str(k): {str(n) for n in v} for k, v in raw.items() if isinstance(v, list)
            }

    def due_at(self) -> float:
        deferred = self.__dict__.get("deferred_")
        return min(deferred.values()) if deferred else math.inf

    def _on_config(self, change: ConfigChange, ctx: DetectionContext) -> list[Finding]:
        # A node's verdict depends on its own configuration in force, the context advertised
        # to its model, and whether it has refused: re-judging every node on every change
        # (each asking the advertised context) is what the pipeline's dedup then discards, and
        # cost O(nodes^2) per run. So judge the changed node, and the nodes of each model whose
        # advertised context moved; the findings are the same as judging all of them.
        timeline = ctx.timeline
        if not self._in_sync(timeline, timeline.changes - 1, ctx.now):
            return self._evaluate_all(ctx)
        self._synced_with = None  # until this change is fully handled
        node = change.node
        current = timeline.config_at(node, ctx.now)
        model = current.model if current is not None else None
        before = self._models.get(node, model)
        self._models[node] = model
        keys = {before, model, None}
        if before is None or model is None:
            # A node of unknown model counts toward every model's deployment.
            keys.update(timeline.model_keys())
        others: set[str] = set()
        for key in keys:
            advertised = timeline.advertised_context(ctx.now, key)
            if self._advertised.get(key) != advertised:
                self._advertised[key] = advertised
                others.update(
                    other for other in timeline.nodes_with_model(key) if not self.links_.get(other)
                )
        # Its deployment's contexts are judged against its context too.
        others.update(self.links_.get(node, ()))
        self.deferred_.pop(node, None)
        others.discard(node)
        findings = self._evaluate_nodes([node], ctx)
        if others:
            self._defer(others, ctx)
        self._synced_with = (timeline, timeline.changes)
        return findings

    def _on_event(self, event: Event, ctx: DetectionContext) -> list[Finding]:
        # Counted as it comes; judged with its request (`_on_request`), when decode's answer
        # to it is known.
        reason = event.get("reason")
        if reason is None or str(reason) in self.config.refusal_reasons:
            self.refusals_[event.node] = self.refusals_.get(event.node, 0) + 1
        tokens = event.get("input_tokens")
        if reason not in _FOR_THE_POOL or type(tokens) is not int:
            return []
        config = ctx.config_at(event.node, event.time)
        if config is None:
            return []
        generation, longest, _ = self.refused_longest_.get(event.node, (-1, 0, None))
        if generation == config.generation and tokens <= longest:
            return []
        self.refused_longest_[event.node] = (config.generation, tokens, event.time)
        if config.context_len is not None or config.prompt_pool is None:
            return []
        # A longer context floor: judged again now, as a node whose context was stated would be.
        return self._evaluate_nodes([event.node], ctx)

    def _on_request(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        return self._note_link(record, ctx) + self._on_refusal(record, ctx)

    def _note_link(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        """Join the request's prefill and decode nodes into one deployment; the first request
        to join them judges both against each other's context, at once."""
        prefill, serving = record.prefill, record.serving
        if (
            prefill is None
            or serving is None
            or prefill.traced_only
            or serving.role != "decode"
            or serving.node == prefill.node
            or serving.node in self.links_.get(prefill.node, ())
        ):
            return []
        self.links_.setdefault(prefill.node, set()).add(serving.node)
        self.links_.setdefault(serving.node, set()).add(prefill.node)
        return self._evaluate_nodes(sorted((prefill.node, serving.node)), ctx)

    def _on_refusal(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        prefill = record.prefill
        if prefill is None:
            return []
        stub = prefill.stub_abort or (prefill.stub and record.refused(prefill))
        if not stub and not prefill.rejected:
            return []
        node = prefill.node
        if stub and not prefill.rejected:  # no refusal line of its own: counted here
            self.refusals_[node] = self.refusals_.get(node, 0) + 1
        serving = record.serving
        if serving is not None and not serving.succeeded:
            return []  # decode retired it: on this engine the path is closed
        when = record.began
        if serving is None:
            self.unanswered_.setdefault(node, when)
            return []
        self.answered_.add(node)
        return self._note_unretired(node, when, ctx)

    def _defer(self, nodes: set[str], ctx: DetectionContext) -> None:
        """Judge `nodes` again after the grace (`restart_grace_seconds`); undated: at once."""
        if ctx.now is None:
            self.deferred_.update(dict.fromkeys(nodes, -math.inf))
            return
        due = ctx.now + self.config.restart_grace_seconds
        for other in nodes:
            self.deferred_.setdefault(other, due)

    def _on_flush(self, ctx: DetectionContext, now: float) -> list[Finding]:
        findings = []
        due = sorted(node for node, at in self.deferred_.items() if at <= now)
        if due:
            for node in due:
                del self.deferred_[node]
            # At `now`: the end of input (inf) is past every wait for a room to join a node.
            findings.extend(self._evaluate_nodes(due, ctx, now))
        if not math.isinf(now):
            return findings
        for node, when in sorted(self.unanswered_.items()):
            if node not in self.unretired_:
                findings.extend(self._note_unretired(node, when, ctx))
        self.unanswered_ = {}
        return findings

    def _note_unretired(
        self, node: str, when: float | None, ctx: DetectionContext
    ) -> list[Finding]:
        first = node not in self.unretired_
        self.unretired_[node] = self.unretired_.get(node, 0) + 1
        if not first:
            return []
        self.unretired_since_[node] = when
        # A first refusal can only raise this node's severity.
        if self._in_sync(ctx.timeline, ctx.timeline.changes, ctx.now):
            return self._evaluate_nodes([node], ctx)
        return self._evaluate_all(ctx)

    def _in_sync(self, timeline: ConfigTimeline, changes: int, now: float | None) -> bool:
        """Whether this detector has handled every configuration change of `timeline` up to
        the `changes`-th, and every node's current configuration is in force at `now`."""
        return self._synced_with == (timeline, changes) and timeline.current_at(now)

    def _evaluate_all(self, ctx: DetectionContext) -> list[Finding]:
        """Judge every node (after a restore, a missed change, or at a time before a restart),
        and note what judging only the changed nodes next time relies on."""
        self._forget_sync()
        timeline = ctx.timeline
        findings = self._evaluate_nodes([c.node for c in timeline.configs_at(ctx.now)], ctx)
        if timeline.current_at(ctx.now):
            self._models = {c.node: c.model for c in timeline.configs_at(ctx.now)}
            self._advertised = {
                key: timeline.advertised_context(ctx.now, key) for key in timeline.model_keys()
            }
            self._synced_with = (timeline, timeline.changes)
        return findings

    def _evaluate_nodes(
        self, nodes: list[str], ctx: DetectionContext, at: float | None = None
    ) -> list[Finding]:
        """Findings for `nodes` (sorted) from the configuration each has in force at `now`;
        `at`, when later than `now`, is the time waits are judged by (`deployment_context`)."""
        findings = []
        for node in nodes:
            config = ctx.timeline.config_at(node, ctx.now)
            if config is None:
                continue
            finding = self._evaluate(config, self._advertised_to(config, ctx, at), ctx)
            if finding is not None:
                findings.append(finding)
        return findings

    def _advertised_to(
        self, config: NodeConfig, ctx: DetectionContext, at: float | None = None
    ) -> int | None:
        """The context the node's deployment advertises at `now` (`deployment_context`)."""
        by_model = ctx.timeline.advertised_context(ctx.now, config.model)
        return self.deployment_context(config, ctx, by_model, at)

    def deployment_context(
        self,
        config: NodeConfig,
        ctx: DetectionContext,
        by_model: int | None,
        at: float | None = None,
    ) -> int | None:
        """The context the node's deployment advertises at `now`: the largest of its own and
        those of the nodes rooms joined it to. Before a room joined it to any, its own; the
        larger one its model's nodes serve (`by_model`) once `link_wait_seconds` have passed
        since its start (it is judged again then) or when it states none.

        For a prefill node joined to decode nodes that state theirs, the largest of those
        alone: decode answers, and its tokenizer refuses a prompt over its own context before
        any KV is read. Why: blind review 62 J1, a context capped on decode only, under the
        prefill's pool, mended the leak, and the status said "Not over"."""
        linked = self.links_.get(config.node)
        own = config.context_len
        if linked:
            answering = self._answering(config, ctx)
            if answering:
                return max(c.context_len for c in answering if c.context_len is not None)
            contexts = [own]
            for node in linked:
                other = ctx.timeline.config_at(node, ctx.now)
                contexts.append(other.context_len if other is not None else None)
            known = [context for context in contexts if context is not None]
            return max(known) if known else by_model
        if own is None:
            return by_model
        if by_model is None or by_model <= own:
            return own
        now = ctx.now if at is None or (ctx.now is not None and ctx.now > at) else at
        if config.since is not None and now is not None:
            due = config.since + self.config.link_wait_seconds
            if now < due:
                self.deferred_.setdefault(config.node, due)
                return own
        return by_model

    def _answering(self, config: NodeConfig, ctx: DetectionContext) -> list[NodeConfig]:
        """The configurations in force of the decode nodes rooms joined a prefill node to, of
        those that state their context (none for another role)."""
        if config.role != "prefill":
            return []
        configs = (
            ctx.timeline.config_at(n, ctx.now) for n in sorted(self.links_.get(config.node, ()))
        )
        return [c for c in configs if c is not None and c.role == "decode" and c.context_len]

    def _note_cap(self, config: NodeConfig, pool: int, ctx: DetectionContext) -> None:
        """Note when a prefill's pool, below its own context, came to hold what its decode
        nodes take: they restarted with a context within it (`capped_at`)."""
        own = config.context_len
        if own is None or pool >= own:
            return
        answering = self._answering(config, ctx)
        seen = self.capped_.get(config.node)
        if not answering or (seen is not None and seen[0] == config.generation):
            return
        starts = [c.since for c in (*answering, config) if c.since is not None]
        since = max(starts, default=None)
        self.capped_[config.node] = (config.generation, since, [c.node for c in answering])

    def capped_at(self, node: str, generation: int) -> tuple[float | None, list[str]] | None:
        """When (and by which decode nodes) the pool gap of `node`'s `generation` closed by a
        context capped on decode alone; None when it did not, or opened again since."""
        seen = self.__dict__.get("capped_", {}).get(node)
        if seen is None or seen[0] != generation:
            return None
        return seen[1], seen[2]

    def _evaluate(
        self, config: NodeConfig, advertised: int | None, ctx: DetectionContext
    ) -> Finding | None:
        pool = config.prompt_pool  # what one prompt can take (`NodeConfig.capacity`)
        reference = advertised if config.is_pd else config.context_len
        floor = None
        if reference is None and pool is not None:
            floor = self._context_floor(config)
            reference = floor if floor is not None and floor > pool else None
        if pool is None or reference is None or pool >= reference:
            if pool is not None and reference is not None:
                self.faults_.mended(config.node)
                self._note_cap(config, pool, ctx)
            return None
        self.capped_.pop(config.node, None)
        severity: Severity = "warning"
        told_by_answers = False  # critical since decode answered a refused prompt, not before
        why = "prompts longer than the pool will be refused"
        own = config.context_len
        if floor is None and own is not None and pool >= own and not self.links_.get(config.node):
            # Its pool holds the context it states, and no request joined it to the nodes of
            # its model that serve the longer one: another deployment's context, as likely as
            # its own (blind review 42 D2: a 512k tier, idle its first half hour or its decode
            # logs missing, warned against the 1M tier of the same model beside it). Said, not
            # paged; the first request joining it to them judges it again (`_note_link`).
            severity = "info"
            why = (
                f"its pool holds the {own:,}-token context it states; the longer one is what "
                f"other nodes of {config.model or 'its model'} serve, and no request joined "
                "it to them: a gap only if it serves their deployment"
            )
        elif config.role == "prefill":
            # Never bounded by how its start-up lines look: 0.5.19 already prints server_args
            # as a dict, which the reference gives as 0.5.23's (audit U, against its source).
            version = config.version
            if version is not None and is_below(version, self.config.leak_fixed_version):
                severity = "critical"
            elif version is None and self.unretired_.get(config.node, 0) > 0:
                severity, told_by_answers = "critical", True
            if version is None or severity == "critical":
                why = self._why(version, told_by_answers, config.node in self.answered_)
        since = self.faults_.began(
            config.node,
            (config.role, pool, reference if floor is None else "floor", severity),
            config.generation,
        )
        gap = reference - pool
        role = config.role or "unknown role"
        capacity = config.capacity  # a pool over dcp ranks, or the limit the engine states
        # Said as what it rests on when that is more than the pool: dcp ranks, or the limit the
        # engine stated (its refusals', with no pool read).
        widened = config.pool_tokens is None or capacity.said != f"pool {config.pool_tokens:,}"
        said = f"KV {capacity.said}" if widened else f"KV pool {pool:,} tokens"
        if floor is None:
            against = (
                f"context {reference:,} ({gap:,} tokens, {gap / reference:.0%} of the window "
                "cannot fit)"
            )
        else:  # no context read: the longest prompt it refused for the pool passed the check
            refused_at = iso_time(self._context_floor_at(config))
            against = (
                f"a context of at least {reference:,} tokens (a {reference:,}-token prompt it "
                f"refused for the pool{_at(refused_at)} had passed the context check)"
            )
        summary = (
            f"{config.node} ({role}) {said} < {against}: {why}; "
            f"raise the pool or lower --context-length"
        )
        began = self._gap_began(config, reference, ctx)
        if told_by_answers:
            # From the first such refusal, within this generation: one the node made with an
            # earlier pool says nothing of this one (blind review 9b: dated before the pool).
            first = self.unretired_since_.get(config.node, ctx.now)
            if first is not None and (began is None or first > began):
                began = first
        return self._finding(
            severity,
            time=ctx.since(began),
            node=config.node,
            summary=summary,
            subject=(
                f"{config.node}:{config.role}:{pool}:"
                f"{reference if floor is None else 'floor'}:{severity}:since{since}"
            ),
            evidence={
                "pool_tokens": config.pool_tokens,
                **({"dcp_size": config.dcp_size, "prompt_pool_tokens": pool} if widened else {}),
                "context_len": reference if floor is None else None,
                **(
                    {"context_at_least": floor, "context_at_least_refused_at": refused_at}
                    if floor is not None
                    else {}
                ),
                "node_context_len": config.context_len,
                "gap_tokens": gap,
                "gap_fraction": round(gap / reference, 4),
                "role": config.role,
                "version": config.version,
                "generation": config.generation,
                "refusals": self.refusals_.get(config.node, 0),
            },
        )

    def _context_floor(self, config: NodeConfig) -> int | None:
        """The longest prompt the node's scheduler refused for its pool in this generation
        (`Input length (N tokens) exceeds the maximum allowed length`, or a PD node's
        `Request … exceeds the maximum number of tokens: N > m`): the tokenizer lets
        through only prompts within the context, so the context is at least that. Why: blind
        review 30a, the start-up lines rotated away; refusals of 758,885-token prompts against
        a 681,274 limit proved the gap, and it was never said."""
        seen = self.refused_longest_.get(config.node)
        if seen is None or seen[0] != config.generation:
            return None
        return seen[1]

    def _context_floor_at(self, config: NodeConfig) -> float | None:
        """When the node refused the prompt `_context_floor` is: a gap dated at the node's
        first line quotes a refusal that may come long after it (blind review 59 J3)."""
        seen = self.refused_longest_.get(config.node)
        return seen[2] if seen is not None and seen[0] == config.generation else None

    def _why(self, version: str | None, told_by_answers: bool, answered: bool) -> str:
        """What a prefill's gap means, by its release (`version`) and by what its refusals
        came to (`told_by_answers`: the release unknown, decode answered a refused prompt)."""
        fixed = self.config.leak_fixed_version
        if told_by_answers:
            # Said as the input shows it: answered, or an answer not read (blind review 9b:
            # "decode did not retire them" where no decode log was read).
            retired = (
                "decode answered them"
                if answered
                else ("decode's answers to them are not in the input")
            )
            if version is None:
                return (
                    f"the node refuses over-length prompts, {retired}, and the engine version "
                    f"is unknown: on engines < {fixed} decode answers them from other requests' "
                    "KV"
                )
            if is_below(version, fixed):
                return (
                    f"the node refuses over-length prompts, {retired}, and SGLang {version} < "
                    f"{fixed} answers them from other requests' KV"
                )
            return (
                f"the node refuses over-length prompts and {retired}, though SGLang {version} "
                f"(>= {fixed}) should not"
            )
        if version is None:
            # Not "refused" as if that were safe: the incident's engines refused and still
            # answered. Which it is depends on the version, not known yet.
            return (
                f"prompts longer than the pool are refused on engines >= {fixed}, answered "
                "from other requests' KV before; the engine version is not known yet"
            )
        if is_below(version, fixed):
            return (
                f"SGLang {version} < {fixed} admits them and decode answers from other requests' KV"
            )
        return f"prompts longer than the pool are refused (SGLang {version} >= {fixed})"

    def revise(self, finding: Finding, ctx: DetectionContext) -> Finding:
        """A gap restated with what the whole input told: the release (`_with_release`) and
        the longest refused prompt (`_with_floor`). Its severity and time stay what was known
        when it was raised."""
        return self._with_floor(self._with_release(finding, ctx))

    def _with_floor(self, finding: Finding) -> Finding:
        """A gap against a context floor (`_context_floor`) said with the longest prompt the
        node refused for its pool in that generation, not the first."""
        evidence = finding.evidence
        said = evidence.get("context_at_least")
        seen = self.refused_longest_.get(finding.node or "")
        if not isinstance(said, int) or seen is None or seen[0] != evidence.get("generation"):
            return finding
        longest, refused_at = seen[1], iso_time(seen[2])
        if longest <= said:
            return finding
        summary = finding.summary.replace(f"{said:,}", f"{longest:,}")
        if said_at := evidence.get("context_at_least_refused_at"):
            summary = summary.replace(_at(said_at), _at(refused_at))
        return replace(
            finding,
            summary=summary,
            evidence={
                **evidence,
                "context_at_least": longest,
                "context_at_least_refused_at": refused_at,
            },
        )

    def _with_release(self, finding: Finding, ctx: DetectionContext) -> Finding:
        """A prefill's gap said while its release was unknown, restated with the release the
        input states later (a `/server_info` saved after the incident tells it for the whole
        generation): the report read afterwards said "the engine version is unknown" beside
        the node's 0.5.19 (blind review 27)."""
        evidence = finding.evidence
        if evidence.get("version") is not None or evidence.get("role") != "prefill":
            return finding
        config = ctx.config_at(finding.node or "", finding.time)
        if (
            config is None
            or config.version is None
            or config.generation != evidence.get("generation")
        ):
            return finding
        for told_by_answers, answered in ((True, True), (True, False), (False, False)):
            said = self._why(None, told_by_answers, answered)
            if said in finding.summary:
                break
        else:
            return finding
        now_said = self._why(config.version, told_by_answers, answered)
        summary = finding.summary.replace(said, f"{now_said} (release stated later in the input)")
        return replace(
            finding,
            summary=summary,
            evidence={**evidence, "version": config.version, "version_stated_later": True},
        )

    def _gap_began(self, config: NodeConfig, reference: int, ctx: DetectionContext) -> float | None:
        """When the gap against `reference` began (`DetectionContext.since`): the start of the
        node's generation, or later, of the first configuration of its deployment in force now
        that advertises `reference`. Why: blind review 22, a prefill's gap dated from its own
        start, an hour before its decode restarted with the larger context."""
        began = config.since
        if config.context_len is not None and config.context_len >= reference:
            return began
        linked = self.links_.get(config.node)
        timeline = ctx.timeline
        if linked:
            advertised = _advertised_since(
                (timeline.config_at(node, ctx.now) for node in sorted(linked)), reference
            )
        else:
            # The model's nodes: scanned once per change of the fleet, not once per node.
            key = (id(timeline), timeline.changes, ctx.now, config.model, reference)
            if self._model_since[0] != key:
                configs = timeline.configs_at(ctx.now, config.model)
                self._model_since = (key, _advertised_since(configs, reference))
            advertised = self._model_since[1]
        if advertised is not None and (began is None or advertised > began):
            began = advertised
        return began


def _advertised_since(configs: Iterable[NodeConfig | None], context: int) -> float | None:
    """The earliest start among `configs` advertising `context` or more."""
    starts = [
        config.since
        for config in configs
        if config is not None
        and config.since is not None
        and config.context_len is not None
        and config.context_len >= context
    ]
    return min(starts, default=None)


def _time_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
