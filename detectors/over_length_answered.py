"""Over-length prompts answered with success: the incident's exposed responses, by arithmetic.

Feeds the alert `KVWatchOverLengthAnswered`.

A prompt longer than the prefill KV pool cannot have been prefilled: its KV does not fit, and the
engine refuses any prompt from six tokens short of the pool on. If decode nevertheless answered one
with success, the answer was computed over pages that held other requests' KV (incident.md, "The
mechanism"). The pool is the one *in force* when the request ran (see `detectors.pool_in_force`):
after a restart with a bigger pool, the same lengths are served honestly and are not flagged. With
the pool unknown, the prompt limit the engine stated is judged against: with `--allow-auto-truncate`
a PD prefill cuts a longer prompt to it and decode answers over the whole one (audit W). In PD
this is critical and an exposure; outside PD (where over-length prompts are refused or truncated,
not leaked) a warning.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, ClassVar, Final

from pydantic import Field

from collector.events import iso_time
from collector.state.request_record import RequestRecord, SideRecord
from detectors.base import Detector, DetectorConfig, answered
from detectors.context import DetectionContext
from detectors.engine_version import LEAK_FIXED, refuses_for_good
from detectors.finding import Finding
from detectors.pool_in_force import (
    LENIENT_BASIS,
    PREFILL_HOST_UNREAD,
    PoolInForce,
    first_read_after,
    host_owner_stranger,
    hosts_ruled_out,
    largest_prefill_pool,
    pairing_undecided,
    pool_in_force,
    ran_by_then,
    served_elsewhere,
    serving_model,
    strictest_prefill_pool,
    unread_prefill_host,
)

# The `pool_basis` of the warning given where no line names the prefill node a prompt met.
NO_PREFILL_NAMED: Final = "no prefill node named"
# ... and of the one given where the pool was last told of before the decode node restarted.
PREFILL_UNTOLD_SINCE_RESTART: Final = "prefill not read since decode restart"
# ... and of the one given where the pool's node, unread from before the answer, was next read
# prefilling whole a prompt beyond that pool: a restart with a bigger pool went unread.
PREFILL_OUTGREW_POOL: Final = "prefill read past its pool later"
# Prefill sides read are remembered by the minute, per node (`_read_between`).
READ_MINUTE: Final = 60.0
# An answer whose pool's node was read within this many minutes of it is judged at once.
UNREAD_MINUTES: Final = 2
# ... and of the one given where no room of the decode node met a prefill side read, while
# other decode nodes' did (`collector.state.room_pairs`).
PREFILL_NOT_READ: Final = "prefill node not read"


class OverLengthAnsweredConfig(DetectorConfig):
    # Tokens a prompt may exceed the longest the pool accepts (pool - 6) before it counts.
    margin_tokens: int = Field(default=0, ge=0)
    # From this version a prefill refuses an over-length prompt for good (decode does not
    # answer it): a prompt that might have met such a node is no warning.
    leak_fixed_version: str = LEAK_FIXED
    # PD answers judged while no prefill pool of their deployment was read yet, held to be
    # judged again at the end of the input (`_unpriced`); beyond this many, those with the
    # shortest prompts are judged at once, by what is known then (`_hold`).
    max_held: int = Field(default=10_000, ge=0)
    # PD answers judged against a prefill pool last read before their decode node (re)started
    # wait this long (event time) for a line or snapshot that tells the pool since
    # (`_untold_since_restart`), then are judged by what is known (at most `max_held` wait).
    untold_wait_seconds: float = Field(default=3600.0, gt=0)


class OverLengthAnswered(Detector[OverLengthAnsweredConfig]):
    """Prompt longer than the prefill pool in force, answered with success; feeds
    `KVWatchOverLengthAnswered`.

    Examples
    --------
    >>> from detectors.examples import incident_events
    >>> from detectors.pipeline import DetectionPipeline
    >>> pipe = DetectionPipeline(detectors=[OverLengthAnswered()])
    >>> findings = list(pipe.run(incident_events()))
    >>> [(f.bootstrap_room, f.severity, f.exposure) for f in findings]
    [('1001', 'critical', True)]
    """

    name: ClassVar[str] = "over_length_answered"
    alert: ClassVar[str] = "KVWatchOverLengthAnswered"
    config_class: ClassVar[type[DetectorConfig]] = OverLengthAnsweredConfig
    wants_requests: ClassVar[bool] = True

    def _init_learned(self) -> None:
        super()._init_learned()
        # Decode answers no prefill pool of their deployment was known for when they were
        # judged (`_unpriced`). Not kept in the state: a question of one forensics pass, asked
        # again at its end.
        # A heap by prompt length (prompt, order held, record): the shortest let go first.
        self.held_: list[tuple[int, int, RequestRecord]] = []
        self.held_count_ = 0
        # Decode answers with no prefill side read, by decode node, waiting on the node's next
        # answers to tell whether its prefill node is one of those read (`pairing_undecided`):
        # at most `MIN_UNPAIRED` a node.
        self.pairing_: dict[str, list[RequestRecord]] = {}
        # Decode answers waiting to be told the prefill pool since their node's restart: a
        # heap of (until when, order held, record).
        self.untold_: list[tuple[float, int, RequestRecord]] = []
        # Prefill node -> the minutes in which a request's prefill side on it was read
        # (`_read_between`).
        self.read_minutes_: dict[str, set[int]] = {}
        # "node|generation" -> when a prefill side read on it first prefilled whole a prompt
        # beyond that generation's pool (`_outgrown`).
        self.outgrown_: dict[str, float] = {}
        # Prefill node -> the minutes in which a refusal of its was read: its small pool still
        # held then (`_outgrown`).
        self.refused_minutes_: dict[str, set[int]] = {}
        # Prefill node -> the answers judged by no pool because its logs begin with its
        # start-up after them (`_ran_by_then`): another process, of no pool read, prefilled them.
        self.before_start_: dict[str, int] = {}

    def due_at(self) -> float:
        return self.untold_[0][0] if self.untold_ else math.inf

    def _on_flush(self, ctx: DetectionContext, now: float) -> list[Finding]:
        findings = []
        while self.untold_ and self.untold_[0][0] <= now:
            findings.extend(self._judge(heapq.heappop(self.untold_)[2], ctx, late=True))
        if not math.isinf(now):
            return findings
        held = [record for _, _, record in sorted(self.held_, key=lambda entry: entry[1])]
        self.held_ = []
        held += [record for waiting in self.pairing_.values() for record in waiting]
        self.pairing_ = {}
        for record in held:
            findings.extend(self._judge(record, ctx, late=True))
        return findings

    def _on_request(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        prefill = record.prefill
        if prefill is not None and not prefill.traced_only:
            # When its lines were logged (not when the request came: one that came before a
            # span of the node's logs was lost is logged after it).
            minutes = self.read_minutes_.setdefault(prefill.node, set())
            for when in (prefill.first_time, prefill.last_time):
                if when is not None:
                    minutes.add(int(when // READ_MINUTE))
            if record.refused(prefill) and prefill.last_time is not None:
                refused = self.refused_minutes_.setdefault(prefill.node, set())
                refused.add(int(prefill.last_time // READ_MINUTE))
        if pairing_undecided(record, ctx) and record.serving is not None:
            # Why: blind review 8a, the first answers of a decode node served by a prefill whose
            # logs were not read were judged against another deployment's pool, before enough
            # of them told the node apart (`served_elsewhere`).
            self.pairing_.setdefault(record.serving.node, []).append(record)
            return []
        findings = self._judge(record, ctx, late=False)
        serving = record.serving
        waiting = self.pairing_.pop(serving.node, None) if serving is not None else None
        for held in waiting or ():
            findings.extend(self._judge(held, ctx, late=False))  # judged as it would be now
        return findings

    def _judge(self, record: RequestRecord, ctx: DetectionContext, late: bool) -> list[Finding]:
        serving = record.serving
        prompt = record.prompt_tokens
        if serving is None or not serving.delivered or prompt is None:
            return []
        pool = pool_in_force(record, ctx)
        if pool is None:
            if not late and self._unpriced(record, serving, ctx):
                released = self._hold(record, prompt)
                if released is None:
                    return []
                if released is not record:
                    return self._judge(released, ctx, late=True)
            return self._prefill_host_unread(record, serving, prompt, ctx)
        if not self._ran_by_then(record, pool, ctx):
            self.before_start_[pool.node] = self.before_start_.get(pool.node, 0) + 1
            return []
        if prompt <= pool.longest_accepted + self.config.margin_tokens:
            return self._perhaps_over_length(record, serving, prompt, pool, ctx)
        prefill = record.prefill
        if (
            prefill is not None
            and prefill.input_len is not None
            and prefill.input_len >= prompt
            and not record.refused(prefill)
        ):
            # Prefill's own time stats say it prefilled the whole prompt (a refused one is
            # swapped for a one-token stub, reference §5): the pool in force held it, whatever
            # the timeline knows of that pool (a restart's start-up lines may be missing). Its
            # finish line is no such proof: it says what was asked, not what was computed (a
            # full-prompt "success" in 35 ms hid 20 true exposures, audit O's v04).
            since = prefill.first_time
            if prefill.node == pool.node and since is not None:
                key = f"{pool.node}|{pool.generation}"
                self.outgrown_[key] = min(self.outgrown_.get(key, since), since)
            return []
        pd = serving.role == "decode"
        if pd:
            untold = self._untold_since_restart(record, serving, prompt, pool, ctx)
            if untold is not None:
                return untold if late else self._wait_untold(record, ctx)
            if prefill is None and not late and self._unread_around(pool.node, record.began):
                return self._wait_untold(record, ctx)
            outgrown = self._outgrown(record, serving, prompt, pool) if prefill is None else None
            if outgrown is not None:
                return outgrown
            consequence = "the answer was probably generated from other requests' KV"
        else:
            consequence = "the prompt was probably truncated"
        if pool.tokens is not None:
            in_force = (
                f"the prefill pool in force was {pool.tokens:,} tokens ({pool.node}, which "
                f"takes prompts of up to {pool.longest_accepted:,} tokens)"
            )
        else:  # only the limit its engine stated is known (a truncation warning)
            in_force = (
                f"{pool.node} takes prompts of up to {pool.longest_accepted:,} tokens (its "
                f"engine's stated limit; its pool is not known)"
            )
        read_later = ""
        first = self._read_after(record, pool, ctx) if late else None
        if first is not None:
            read_later = (
                f", as first read at {iso_time(first)}, after this answer (the configuration "
                f"{pool.node} was running with when its logs begin)"
            )
        summary = (
            f"{serving.node} {answered(serving, f'a {prompt:,}-token prompt')} although "
            f"{in_force}{read_later}: {consequence}"
        )
        return [
            self._request_finding(
                "critical" if pd else "warning",
                record,
                serving,
                summary=summary,
                evidence={
                    "prompt_tokens": prompt,
                    "cached_tokens": record.cached_tokens,
                    "completion_tokens": serving.completion_tokens,
                    "pool_tokens": pool.tokens,
                    "pool_node": pool.node,
                    "pool_generation": pool.generation,
                    "pool_basis": pool.basis,
                    "longest_accepted": pool.longest_accepted,
                    "excess_tokens": prompt - pool.longest_accepted,
                    "finish_type": serving.finish_type,
                    "pool_read_after_answer": first is not None,
                },
                exposure=pd,
            )
        ]

    def _perhaps_over_length(
        self,
        record: RequestRecord,
        serving: SideRecord,
        prompt: int,
        pool: PoolInForce,
        ctx: DetectionContext,
    ) -> list[Finding]:
        """A warning where nothing named the prefill node a decode answer's prompt met, the
        most lenient pool took it, and another prefill node in force would have refused it.

        Why: with pools of several sizes in force (a staggered upgrade) and no line naming the
        room's prefill node (decode's time stats alone, a prefill logging no request lines),
        the answers the small node gave from other requests' KV were judged against the large
        node's pool and said nowhere (audit KS: 25 of 60 leaked answers silent). Not an
        exposure: the large node may have computed it."""
        if pool.basis != LENIENT_BASIS or serving.role != "decode":
            return []
        # Decode names the host it met: not the nodes that announced others (blind review 63
        # J1: a healthy deployment's answers, its prefill known from a snapshot alone, warned
        # against the pool of a leaking prefill announced at another address).
        _, ruled_out = hosts_ruled_out(record, ctx)
        strictest = strictest_prefill_pool(record, ctx, ruled_out)
        margin = self.config.margin_tokens
        if strictest is None or prompt <= strictest.longest_accepted + margin:
            return []
        when = record.began
        config = ctx.config_at(strictest.node, when)
        version = config.version if config is not None else None
        if refuses_for_good(version, self.config.leak_fixed_version):
            return []
        summary = (
            f"{serving.node} {answered(serving, f'a {prompt:,}-token prompt')} and no line "
            f"names the prefill node that computed it: {pool.node} took prompts of up to "
            f"{pool.longest_accepted:,} tokens, {strictest.node} of up to "
            f"{strictest.longest_accepted:,}. If it went to {strictest.node}, the answer was "
            f"generated from other requests' KV"
        )
        return self._possible(
            record,
            serving,
            summary,
            NO_PREFILL_NAMED,
            strictest_pool_node=strictest.node,
            strictest_pool_tokens=strictest.tokens,
            strictest_longest_accepted=strictest.longest_accepted,
            largest_pool_node=pool.node,
            largest_pool_tokens=pool.tokens,
            largest_longest_accepted=pool.longest_accepted,
        )

    def _untold_since_restart(
        self,
        record: RequestRecord,
        serving: SideRecord,
        prompt: int,
        pool: PoolInForce,
        ctx: DetectionContext,
    ) -> list[Finding] | None:
        """A warning, not an exposure, where no prefill side of the answer was read and the
        prefill pool judged against was last told of before the decode node (re)started.

        Why: blind review 30a, decode logs and prefill snapshots taken 3.3 hours before the
        deployment restarted with a bigger pool: the 33 honest long answers after the restart
        were called exposed against the old pool (precision 0.69). A restart is when a
        deployment's configuration changes; a prefill nothing told of since may have changed
        with it, so the answer leaked only if it still ran that pool."""
        prefill = record.prefill
        if prefill is not None and not prefill.traced_only:
            return None
        when = record.began
        own = ctx.config_at(serving.node, when)
        if own is None or own.since is None:
            return None
        if own.generation == 0 and ctx.timeline.began_mid_run(serving.node):
            return None  # it ran before its logs begin: no start of it was read
        told = ctx.timeline.last_told(pool.node)
        if told is None or told >= own.since:
            return None
        started = "restarted" if own.generation else "started"
        summary = (
            f"{serving.node} {answered(serving, f'a {prompt:,}-token prompt')} after it "
            f"{started} at {iso_time(own.since)}; the prefill pool last read, {pool.tokens or 0:,} "
            f"tokens on {pool.node} (prompts of up to {pool.longest_accepted:,}), was read at "
            f"{iso_time(told)}, before that, and nothing read tells of {pool.node} since. If it "
            f"still ran that pool, the answer was generated from other requests' KV: read "
            f"{pool.node}'s logs or a snapshot of it after {iso_time(own.since)} to tell"
        )
        return self._possible(
            record,
            serving,
            summary,
            PREFILL_UNTOLD_SINCE_RESTART,
            **_judged_against(pool),
            pool_last_read=iso_time(told),
            decode_started=iso_time(own.since),
        )

    def outgrown_at(self, node: str, generation: int) -> float | None:
        """When `node`'s `generation` was first read prefilling whole a prompt beyond its pool
        (it restarted with a bigger pool unread), None if it was not: the configuration gap's
        end at the latest."""
        outgrown: dict[str, float] = self.__dict__.get("outgrown_", {})
        return outgrown.get(f"{node}|{generation}")

    def answered_before_start(self, node: str) -> int:
        """The answers judged by no pool because `node`'s logs begin with its start-up after
        them: the exposures named may be fewer than there were (said beside the verdict)."""
        before: dict[str, int] = self.__dict__.get("before_start_", {})
        return before.get(node, 0)

    def _unread_around(self, node: str, when: float | None) -> bool:
        """Whether prefill sides on `node` were read, but none within `READ_MINUTE` x
        `UNREAD_MINUTES` before `when`: what it ran then is told by what is read of it
        next (`_outgrown`), which the answer waits for (`untold_wait_seconds`). A node none of
        whose requests is read (a sidecar shipped decode's logs alone) tells nothing next: its
        answers are judged at once."""
        if when is None or not self.read_minutes_.get(node):
            return False
        return not self._read_near(node, when)

    def _read_near(self, node: str, when: float) -> bool:
        """Whether a prefill side on `node` was read in the minutes up to `when` (its minute
        included): what the node ran then. Lines read only after it tell what ran after: a
        restart onto a bigger pool in the hour of log lost before them went unseen, and an
        honest answer a minute before the log resumed was named exposed against the old pool
        (blind review 62 D1)."""
        return self._read_between(
            node, when - (UNREAD_MINUTES + 1) * READ_MINUTE, when + READ_MINUTE
        )

    def _read_between(self, node: str, since: float, until: float) -> bool:
        """Whether a prefill side on `node` was read in a minute after `since`'s and before
        `until`'s."""
        return _minute_between(self.read_minutes_.get(node, set()), since, until)

    def _outgrown(
        self, record: RequestRecord, serving: SideRecord, prompt: int, pool: PoolInForce
    ) -> list[Finding] | None:
        """A warning, not an exposure, where nothing of the pool's node was read around the
        answer, and it was later read prefilling whole a prompt beyond that pool with no
        refusal of its read in between: it restarted with a bigger pool unread (its start-up
        lines in a cut archive), perhaps before this answer. None otherwise. Short prompts read
        in between tell nothing: both pools take them.

        Why: blind review 53 D1, a `.gz` cut short lost a prefill's restart onto a bigger pool:
        20 honest answers after it, prefilled in two minutes each, were named exposed against
        the old pool, and the leak said to go on. Its leaked answers in the same span stay
        exposures by their timing (`impossibly_fast_prefill`)."""
        when = record.began
        outgrown = self.outgrown_.get(f"{pool.node}|{pool.generation}")
        if when is None or outgrown is None or outgrown <= when:
            return None
        refused = self.refused_minutes_.get(pool.node, set())
        if self._read_near(pool.node, when) or _minute_between(refused, when, outgrown):
            return None
        summary = (
            f"{serving.node} {answered(serving, f'a {prompt:,}-token prompt')}, longer than "
            f"{pool.node}'s pool as last read ({pool.tokens or 0:,} tokens, prompts of up to "
            f"{pool.longest_accepted:,}); but nothing of {pool.node} was read around the "
            f"answer, and no refusal of its from then until {iso_time(outgrown)}, when its own "
            f"time stats show it prefilling whole a prompt beyond that pool: it restarted with "
            f"a bigger pool unread, perhaps before this answer. If it had not yet, the answer "
            f"was generated from other requests' KV: read {pool.node}'s logs of that span to tell"
        )
        return self._possible(
            record,
            serving,
            summary,
            PREFILL_OUTGREW_POOL,
            **_judged_against(pool),
            outgrown_at=iso_time(outgrown),
        )

    def _wait_untold(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        """Hold `record` until a later line or snapshot may tell the prefill pool since the
        restart; past `max_held`, judge the one held longest by what is known now.

        Why: judged at once, an honest long answer after a restart was a warning although a
        snapshot 13 minutes later told the prefill's bigger pool."""
        when = record.began
        until = (when if when is not None else ctx.now or 0.0) + self.config.untold_wait_seconds
        self.held_count_ += 1
        heapq.heappush(self.untold_, (until, self.held_count_, record))
        if len(self.untold_) <= self.config.max_held:
            return []
        return self._judge(heapq.heappop(self.untold_)[2], ctx, late=True)

    @staticmethod
    def _read_after(
        record: RequestRecord, pool: PoolInForce, ctx: DetectionContext
    ) -> float | None:
        """When `pool`'s node was first read, if after the answer `record` judges."""
        return first_read_after(pool.node, record.began, ctx)

    @staticmethod
    def _ran_by_then(record: RequestRecord, pool: PoolInForce, ctx: DetectionContext) -> bool:
        return ran_by_then(pool.node, pool.generation, record.began, ctx)

    def _unpriced(self, record: RequestRecord, serving: SideRecord, ctx: DetectionContext) -> bool:
        """Whether a decode answer is held to be judged at the end of the input: no line of its
        prefill side was read and no prefill pool of its deployment is known yet.

        Why: a prefill's oldest rotation gone, or its capture begun later than decode's, left
        every answer before its first line judged against no pool, and said nowhere (blind
        review 8a: 15 of 36 and 9 of 22 exposures unseen). A prefill log that begins mid-run
        tells the pool its engine had been running with; read at the end, the timeline takes
        a node's first configuration as in force before its first line."""
        if serving.role != "decode" or record.prefill is not None:
            return False
        when = record.began
        if largest_prefill_pool(
            ctx, when, serving_model(record, ctx)
        ) is not None and not host_owner_stranger(record, ctx):
            return False
        return True

    def _hold(self, record: RequestRecord, prompt: int) -> RequestRecord | None:
        """Hold `record` to the end of the input; past `max_held`, let go (return) the held
        answer with the shortest prompt, the likeliest to have fit any pool.

        Why: blind review 27, a deployment whose oldest prefill rotation was gone held its
        decode nodes' every answer, and at 10,000 the long prompts that came next were judged
        by no pool: exposures named by their timing alone, one not at all."""
        self.held_count_ += 1
        entry = (prompt, self.held_count_, record)
        if len(self.held_) < self.config.max_held:
            heapq.heappush(self.held_, entry)
            return None
        if not self.held_:
            return record
        return heapq.heappushpop(self.held_, entry)[2]

    def _prefill_host_unread(
        self, record: RequestRecord, serving: SideRecord, prompt: int, ctx: DetectionContext
    ) -> list[Finding]:
        """A warning where decode's answer names a prefill host no log read announced, and the
        prompt is longer than every prefill pool read would take.

        Why: that node's pool is unknown, so its requests are judged by no pool (another
        node's says nothing of it); with its log missing, the answers it handed decode from
        other requests' KV were said nowhere, and a run whose only exposures went through it
        read as an all-clear (blind review 4b: 0 of 4 found, exit 0). Not an exposure: the
        unread node may have had a larger pool."""
        if serving.role != "decode":
            return []
        when = record.began
        model = serving_model(record, ctx)
        host = unread_prefill_host(record, ctx)
        if host is None and not served_elsewhere(serving.node, when, model, ctx):
            return []
        pool = largest_prefill_pool(ctx, when, model)
        if pool is None or prompt <= pool.longest_accepted + self.config.margin_tokens:
            return []
        node = pool.node
        config = ctx.config_at(node, when)
        if config is None or refuses_for_good(config.version, self.config.leak_fixed_version):
            return []
        if host is not None:
            summary = (
                f"{serving.node} {answered(serving, f'a {prompt:,}-token prompt')} prefilled "
                f"on {host}, which no log read announced: its pool is not known, and every "
                f"prefill pool read takes prompts of up to {pool.longest_accepted:,} tokens "
                f"({node}). If {host}'s was no larger, the answer was generated from other "
                f"requests' KV: read that node's logs to tell"
            )
            return self._possible(
                record,
                serving,
                summary,
                PREFILL_HOST_UNREAD,
                bootstrap_host=host,
                largest_pool_node=node,
                largest_pool_tokens=pool.tokens,
                largest_longest_accepted=pool.longest_accepted,
            )
        own = ctx.config_at(serving.node, when)
        if own is not None and refuses_for_good(own.version, self.config.leak_fixed_version):
            return []  # its deployment's release refuses over-length prompts for good
        summary = (
            f"{serving.node} {answered(serving, f'a {prompt:,}-token prompt')}; none of its "
            f"requests met a prefill node read, while those read ({node} the largest, taking "
            f"prompts of up to {pool.longest_accepted:,} tokens) met other decode nodes': it is "
            f"served by a prefill node whose logs are not here. If that node's pool was no "
            f"larger, the answer was generated from other requests' KV: read its logs to tell"
        )
        return self._possible(
            record,
            serving,
            summary,
            PREFILL_NOT_READ,
            largest_pool_node=node,
            largest_pool_tokens=pool.tokens,
            largest_longest_accepted=pool.longest_accepted,
        )

    def _possible(
        self,
        record: RequestRecord,
        serving: SideRecord,
        summary: str,
        basis: str,
        **pools: Any,
    ) -> list[Finding]:
        """A warning, not an exposure: the answer leaked if its prompt met the pool `basis`
        says no line tells of (`pools`: the pools it may have met)."""
        evidence: dict[str, Any] = {
            "prompt_tokens": record.prompt_tokens,
            "completion_tokens": serving.completion_tokens,
            "pool_basis": basis,
            **pools,
            "finish_type": serving.finish_type,
        }
        return [
            self._request_finding(
                "warning", record, serving, summary=summary, evidence=evidence, exposure=False
            )
        ]


def _minute_between(minutes: set[int], since: float, until: float) -> bool:
    """Whether one of `minutes` (of `READ_MINUTE`) lies after `since`'s and before `until`'s."""
    first, last = int(since // READ_MINUTE) + 1, int(until // READ_MINUTE)
    if last - first > len(minutes):
        return any(first <= minute < last for minute in minutes)
    return any(minute in minutes for minute in range(first, last))


def _judged_against(pool: PoolInForce) -> dict[str, Any]:
    """A warning's evidence of the pool it would have leaked against."""
    return {
        "pool_node": pool.node,
        "pool_tokens": pool.tokens,
        "longest_accepted": pool.longest_accepted,
    }
