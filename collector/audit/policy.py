"""The pre-rollout gate's rules: pool against context, engine version, KV checksum.

These are the checks the post-mortems asked operators to run by hand (incident.md, "What
operators were told to do"), made strict enough to block a rollout: in PD, a prefill or decode
pool below the advertised context fails, an engine below 0.5.21 fails (MORI below 0.5.22),
below 0.5.22 (NIXL/MORI below 0.5.23) warns, the KV checksum must be on on both sides and the
logs must not show requests admitted unverified. What cannot be known is reported as UNKNOWN,
never passed: logs do not carry the engine version.

The thresholds differ on purpose from the unsafe-engine-version detector's severities (which
page only below 0.5.20): a gate decides what may ship, a detector what wakes someone up. Version
parsing and ordering are the detector's (`detectors.engine_version`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from collector.audit.facts import ChecksumEvidence, Deployment, NodeFacts, other_pd_role
from collector.events import iso_time
from collector.state.prompt_capacity import prompt_capacity
from detectors.engine_version import VersionPolicy, is_below, parse_version

Status = Literal["PASS", "WARN", "UNKNOWN", "FAIL"]
# UNKNOWN ranks above WARN: a node that could not be checked may be a FAIL.
STATUS_RANK: Final[dict[str, int]] = {"PASS": 0, "WARN": 1, "UNKNOWN": 2, "FAIL": 3}
PD_ROLES: Final = frozenset({"prefill", "decode"})
ROLE_ORDER: Final[dict[str, int]] = {"prefill": 0, "decode": 1, "unified": 2}


_FACTS: Final = VersionPolicy()  # the post-mortems' releases, stated once


class AuditPolicy(BaseModel):
    """Thresholds of the gate; the defaults are the post-mortems'."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Below this a PD prefill leaks over-length prompts (PR 36988); named in the failure.
    leak_fixed: str = _FACTS.leak_fixed
    # PD deployments below this fail: abort race open, deferred release off by default.
    pd_minimum: str = _FACTS.abort_race_fixed
    # PD deployments below this warn (failed Mooncake sends confirmed as drained).
    recommended: str = _FACTS.mooncake_failed_send_fixed
    # MORI below this fails: the abort-race fixes did not cover it.
    mori_minimum: str = _FACTS.mori_fixed
    # NIXL and MORI below this warn: failed sends confirmed as drained (PR 45973).
    nixl_mori_recommended: str = _FACTS.nixl_mori_failed_send_fixed
    # First engine with the KV checksum: below it the checksum check is left to the version.
    checksum_since: str = "0.5.21"
    # First engine whose digests carry a layout signature: a decode on it or later skips, in
    # silence, the unsigned digests of an older prefill.
    signed_checksum_since: str = "0.5.23"
    # Outcome for a PD node running with the checksum off (WARN where the model is not covered).
    checksum_off: Literal["FAIL", "WARN"] = "FAIL"

    @field_validator(
        "leak_fixed",
        "pd_minimum",
        "recommended",
        "mori_minimum",
        "nixl_mori_recommended",
        "checksum_since",
        "signed_checksum_since",
    )
    @classmethod
    def _is_version(cls, value: str) -> str:
        if parse_version(value) is None:
            raise ValueError(f"not a version: {value!r}")
        return value


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check on one node: its outcome, the sentence a person reads, the numbers behind it."""

    check: str
    status: Status
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "status": self.status,
            "reason": self.reason,
            "evidence": dict(self.evidence),
        }


@dataclass(frozen=True, slots=True)
class NodeResult:
    node: str
    role: str | None
    status: Status
    checks: tuple[CheckResult, ...]
    notes: tuple[str, ...]
    facts: NodeFacts
    earlier: tuple[NodeResult, ...] = ()

    @property
    def failed_earlier(self) -> bool:
        """A configuration the node ran before the one in force failed a check."""
        return any(result.status == "FAIL" for result in self.earlier)

    @property
    def reasons(self) -> list[str]:
        """What the node's line says: the non-passing checks, or every check when all pass.
        The checks that decide the status come first, and a warning beside them says it is one
        (review: "FAIL  engine 0.5.21 < 0.5.22 recommended; KV checksum off" read as if the
        upgrade, a WARN, were what blocked the rollout)."""
        if self.status == "PASS":
            picked = [c.reason for c in self.checks]
        else:
            failing = [c for c in self.checks if c.status != "PASS"]
            # Stable: the checks' order; an unknown role stays first, saying how it was judged.
            failing.sort(key=lambda c: (c.check != "role", -STATUS_RANK[c.status]))
            # A warning on a failing or unknown line says it is one: an unknown check says so
            # in its own words.
            picked = [
                f"WARN: {c.reason}" if c.status == "WARN" and self.status != "WARN" else c.reason
                for c in failing
            ]
        return picked + list(self.notes)


# The checks whose failure is a way responses were exposed, not only left unverified.
_EXPOSING_CHECKS: Final = frozenset({"pool", "engine"})


def _role_in_name(node: str) -> str | None:
    """The PD role a node's name spells (`sglang-decode-1`, `prefill_0`), None when it spells
    neither or both."""
    words = set(re.split(r"[^a-z]+", node.lower()))
    said = [role for role in ("prefill", "decode") if role in words]
    return said[0] if len(said) == 1 else None


def worst(statuses: list[Status]) -> Status:
    return max(statuses, key=STATUS_RANK.__getitem__, default="PASS")


def judge_node(
    facts: NodeFacts,
    deployment: Deployment,
    policy: AuditPolicy,
    earlier: list[tuple[NodeFacts, Deployment]] | None = None,
) -> NodeResult:
    """All checks for one node's configuration in force; `earlier` configurations are judged
    too, and a failing one is named in a note (it no longer decides the status)."""
    if facts.unreachable is not None:
        what = "unusable" if facts.answered else "unreachable"
        check = CheckResult("reachable", "FAIL", f"{what}: {facts.unreachable}")
        if not facts.sources or facts.live:
            return NodeResult(facts.node, facts.role, "FAIL", (check,), (), facts)
        # Its files were given too (`run.overlay`): what they show is judged and said, as the
        # configuration it ran then, though not necessarily the one running now.
        then = judge_node(
            replace(facts, unreachable=None, answered=False),
            deployment,
            policy,
            earlier,
        )
        note = f"its files say: {then.status} {'; '.join(then.reasons)}"
        return NodeResult(facts.node, facts.role, "FAIL", (check,), (note,), facts, (then,))
    facts = facts.checked()
    checks = _checks(facts, deployment, policy)
    judged_earlier = tuple(judge_node(f, d, policy) for f, d in (earlier or []))
    notes: list[str] = [
        f"{reason}: set aside, the plausible value is judged" for reason in facts.set_aside.values()
    ]
    named = _role_in_name(facts.node)
    if named is not None and facts.role in PD_ROLES and facts.role != named:
        # A runbook's copy-paste: the node meant was never audited (blind review 46 D5).
        notes.append(f"named as a {named} node, its engine states {facts.role}")
    # What failed before and no longer does: a check failing now is said by the node's own
    # line, not as a failure that ended (blind review 45 D3: "failed until 10:00: engine
    # 0.5.19" of an engine that ran 0.5.19 after 10:00 too).
    failing_now = {c.check for c in checks if c.status == "FAIL"}
    ended = [
        (r, fixed)
        for r in judged_earlier
        if r.status == "FAIL"
        and (fixed := [c for c in r.checks if c.status == "FAIL" and c.check not in failing_now])
    ]
    if ended:
        last, fixed = ended[-1]
        why = ", ".join(c.reason for c in fixed)
        until = last.facts.until
        when = f" until {human_time(until)}" if until is not None else ""
        more = f" ({len(ended) - 1} more before it)" if len(ended) > 1 else ""
        # A pool below the context or an engine with the leak's or the race's bug can have
        # exposed responses; a checksum that was off only left transfers unverified.
        exposing = any(c.check in _EXPOSING_CHECKS for _, checks_then in ended for c in checks_then)
        notes.append(
            f"an earlier configuration failed{when}: {why}{more}"
            + (
                "; responses served under it may be exposed (kvwatch forensics names them)"
                if exposing
                else ""
            )
        )
    caught = [r for r in judged_earlier if r.status != "FAIL" and _caught(r.facts.evidence)]
    if caught:
        # Corrupt transfers caught under a configuration that no longer runs: the strongest
        # sign in such logs that the abort race ran, and that pages were re-let under it
        # (review: said only in --json when that configuration merely warned).
        total = ChecksumEvidence(
            mismatches=sum(r.facts.evidence.mismatches for r in caught),
            corruptions=sum(r.facts.evidence.corruptions for r in caught),
        )
        until = caught[-1].facts.until
        when = f" until {human_time(until)}" if until is not None else ""
        notes.append(
            f"an earlier configuration{when} caught {_caught(total)} (corrupted transfers; "
            "kvwatch forensics names the responses exposed around them)"
        )
    status = worst([c.status for c in checks])
    errors = sorted(facts.endpoint_errors.items())
    if not (status == "UNKNOWN" and "server_info" in facts.endpoint_errors):
        # An endpoint the release does not have (a 404) is no fault of a node that passes.
        errors = [(name, why) for name, why in errors if not why.startswith("HTTP 404")]
    if errors:
        # When the document that states version, role and pool did not come, that is why the
        # node is UNKNOWN; otherwise an endpoint that hung or answered nonsense is said all the
        # same, on a line that passes too: a `/metrics` that hangs is one the alerts cannot
        # scrape (blind review 23).
        notes.append("endpoints: " + "; ".join(f"{name}: {why}" for name, why in errors))
    return NodeResult(
        facts.node, facts.role, status, tuple(checks), tuple(notes), facts, judged_earlier
    )


def _checks(facts: NodeFacts, deployment: Deployment, policy: AuditPolicy) -> list[CheckResult]:
    checks: list[CheckResult] = []
    role = facts.role
    if role is None:
        # A node whose role no source states (or states with a value that cannot be read) is
        # judged as PD, the strictest case.
        why = facts.doubts.get(
            "role", "no server_args, PD batch fields, engine_type label or /server_info"
        )
        checks.append(CheckResult("role", "UNKNOWN", f"role unknown ({why}): judged as PD"))
    pd = role in PD_ROLES or role is None
    checks.append(pool_check(facts, deployment, pd=pd))
    engine = engine_check(facts, policy, pd=pd)
    if engine is not None:
        checks.append(engine)
    if pd:
        checks.extend(checksum_checks(facts, deployment, policy))
    return checks


def pool_check(facts: NodeFacts, deployment: Deployment, *, pd: bool) -> CheckResult:
    """PD: the node's pool against the context the deployment advertises; otherwise its own."""
    pool = facts.pool_tokens
    if pd:
        reference, by = deployment.advertised_context, deployment.advertised_by
    else:
        reference, by = facts.context_len, facts.node
        if reference is None:
            reference, by = deployment.advertised_context, deployment.advertised_by
    if reference is not None and facts.context_len == reference:
        by = facts.node
    evidence: dict[str, Any] = {
        "pool_tokens": pool,
        "context_len": reference,
        "node_context_len": facts.context_len,
        "context_from": by,
    }
    doubted = [
        facts.doubts[name]
        for name in ("pool_tokens", "context_len")
        if name in facts.doubts and getattr(facts, name) is None
    ]
    if doubted:
        # The node stated a pool or context no engine has: nothing it says about them is judged.
        evidence["doubts"] = doubted
        return CheckResult("pool", "UNKNOWN", ", ".join(doubted), evidence)
    if pool is None:
        return CheckResult(
            "pool",
            "UNKNOWN",
            "pool unknown (no capacity line, sglang:max_total_num_tokens or /server_info)",
            evidence,
        )
    if reference is None:
        return CheckResult(
            "pool",
            "UNKNOWN",
            f"pool {pool:,}, context unknown (no capacity line, sglang:context_len or "
            f"/v1/models max_model_len)",
            evidence,
        )
    where = f" advertised by {by}" if by is not None and by != facts.node else ""
    capacity = prompt_capacity(
        pool,
        dcp_size=facts.dcp_size,
        version=facts.version,
        max_req_input_len=facts.max_req_input_len,
        kv_cache_sharding=facts.kv_cache_sharding,
        context_len=facts.context_len,
    )
    pool_said = capacity.said
    if (facts.dcp_size or 1) > 1:
        evidence["dcp_size"] = facts.dcp_size
    if capacity.tokens is None or capacity.guessed:
        # What one prompt can take depends on what the node does not state: its release (whose
        # pool counts dcp ranks from 0.5.21) or its sharding factor. Its limit would settle it.
        return CheckResult(
            "pool",
            "UNKNOWN",
            f"{pool_said}: what one prompt can take is not known without the engine's "
            f"max_req_input_len (/server_info)",
            evidence,
        )
    evidence["prompt_capacity"] = capacity.tokens
    pool = capacity.tokens
    if pool >= reference:
        return CheckResult("pool", "PASS", f"{pool_said} >= context {reference:,}", evidence)
    own = facts.context_len
    if own is not None and own < reference and pool >= own:
        # Its own tokenizer refuses a longer prompt (HTTP 400) before any scheduler sees it: no
        # refusal to hand to decode, the incident's path closed. Two tiers of one model, each
        # holding the context it serves, failed each other (blind review 46 D4).
        return CheckResult(
            "pool",
            "PASS",
            f"{pool_said} >= context {own:,} (its own; {reference:,}{where}: longer prompts "
            "are refused here before they are scheduled)",
            evidence,
        )
    gap = reference - pool
    evidence["gap_tokens"] = gap
    evidence["gap_fraction"] = round(gap / reference, 4)
    reason = f"{pool_said} < context {reference:,}{where} ({_share(gap, reference)} of the window"
    prefilled, at = facts.longest_prefilled or (0, None)
    if prefilled > pool:
        # Blind review 53 D1: a cut archive lost a prefill's restart onto a bigger pool. What
        # it runs now is not what was last read, and not known: a PASS needs its own figures.
        evidence["longest_prefilled"] = prefilled
        return CheckResult(
            "pool",
            "UNKNOWN",
            f"{reason} cannot fit) as last read, but at {human_time(at)} it prefilled whole a "
            f"{prefilled:,}-token prompt, beyond that pool: it restarted with a bigger pool "
            "these logs do not show (save its /server_info or audit it with --endpoint)",
            evidence,
        )
    if pd:
        return CheckResult("pool", "FAIL", reason + " cannot fit)", evidence)
    return CheckResult("pool", "WARN", reason + " cannot fit; not PD: refused)", evidence)


def engine_check(facts: NodeFacts, policy: AuditPolicy, *, pd: bool) -> CheckResult | None:
    """The post-mortems' version policy; applies to PD only (the bugs are in the PD path)."""
    version = facts.version
    backend = _backend(facts.transfer_backend)
    evidence: dict[str, Any] = {"version": version, "transfer_backend": backend}
    if not pd:
        if version is None:
            return None
        return CheckResult("engine", "PASS", f"engine {version}", evidence)
    if version is None:
        if facts.stale_version is not None:
            evidence["stale_version"] = facts.stale_version
            since = f" at {human_time(facts.since)}" if facts.since is not None else ""
            reason = (
                f"engine version unknown since the restart{since} "
                f"({facts.stale_version} was reported before it)"
            )
        elif facts.live:
            reason = "engine version unknown (/server_info and /v1/loads gave none)"
        else:
            reason = (
                "engine version unknown (logs do not carry it: save /server_info next to the "
                "logs or audit with --endpoint)"
            )
        return CheckResult("engine", "UNKNOWN", reason, evidence)
    if parse_version(version) is None:
        return CheckResult(
            "engine", "UNKNOWN", f"engine version {version!r} not understood", evidence
        )
    result = _engine_verdict(facts, policy, version, backend, evidence)
    doubt = facts.doubts.get("version")
    if doubt is None:
        return result
    # Several engines behind one address: the oldest is judged, and never passes unsaid.
    status = "WARN" if result.status == "PASS" else result.status
    return CheckResult(result.check, status, f"{result.reason}; {doubt}", result.evidence)


def _engine_verdict(
    facts: NodeFacts, policy: AuditPolicy, version: str, backend: str, evidence: dict[str, Any]
) -> CheckResult:
    label = {"mori": "MORI", "nixl": "NIXL"}.get(backend, backend)
    if is_below(version, policy.leak_fixed):
        return CheckResult(
            "engine",
            "FAIL",
            f"engine {version} < {policy.leak_fixed} (over-length leak path open)",
            evidence,
        )
    if is_below(version, policy.pd_minimum):
        return CheckResult(
            "engine",
            "FAIL",
            f"engine {version} < {policy.pd_minimum} (abort race open, deferred KV release off "
            f"by default)",
            evidence,
        )
    if backend == "mori" and is_below(version, policy.mori_minimum):
        return CheckResult(
            "engine",
            "FAIL",
            f"engine {version} < {policy.mori_minimum} with MORI (abort race open on MORI)",
            evidence,
        )
    if backend in ("nixl", "mori") and is_below(version, policy.nixl_mori_recommended):
        return CheckResult(
            "engine",
            "WARN",
            f"engine {version} < {policy.nixl_mori_recommended} with {label} (failed sends can "
            f"be confirmed as drained)",
            evidence,
        )
    if is_below(version, policy.recommended):
        why = (
            "failed Mooncake sends confirmed as drained"
            if backend == "mooncake"
            else "release metrics and failed-send fixes"
        )
        return CheckResult(
            "engine",
            "WARN",
            f"engine {version} < {policy.recommended} recommended ({why})",
            evidence,
        )
    return CheckResult("engine", "PASS", f"engine {version}", evidence)


def checksum_checks(
    facts: NodeFacts, deployment: Deployment, policy: AuditPolicy
) -> list[CheckResult]:
    """Enabled on both sides, and verifying: the logs must not say requests went unverified."""
    seen = facts.evidence
    on = facts.kv_checksum
    evidence: dict[str, Any] = {"kv_checksum": on, **seen.to_json_dict()}
    results: list[CheckResult] = []
    old_engine = facts.version is not None and is_below(facts.version, policy.checksum_since)
    nothing_seen = not (seen.skipped or seen.one_side or _caught(seen))
    if old_engine and on is not True and nothing_seen:
        return []  # no checksum before 0.5.21: the engine check already fails the node
    if seen.one_side:
        results.append(
            CheckResult(
                "checksum",
                "FAIL",
                f"KV checksum on one side only ({_times(seen.one_side, 'metadata-buffer error')}"
                f" in the logs: transfers unverified)",
                evidence,
            )
        )
    # Only nodes of the other PD role exchange KV with this one (prefill -> decode): a decode
    # with the checksum off leaves its prefills' transfers unverified, not another decode's.
    peers = deployment.kv_peers(facts.node, facts.role)
    peers_off = [n for n in deployment.checksum_off if n in peers]
    peers_on = [n for n in deployment.checksum_on if n in peers]
    if on is True and peers_off and not seen.one_side:
        results.append(
            CheckResult(
                "checksum",
                "FAIL",
                f"KV checksum on here, off for {', '.join(peers_off)} (one side only: "
                f"transfers unverified)",
                evidence,
            )
        )
    older = _predating_peers(peers, deployment, policy)
    if on is True and older and not seen.one_side:
        named = ", ".join(f"{node} ({version})" for node, version in older)
        results.append(
            CheckResult(
                "checksum",
                "FAIL",
                f"KV checksum on here, but {named} predate{'s' if len(older) == 1 else ''} it "
                f"(first in {policy.checksum_since}: no digest written, transfers unverified)",
                {**evidence, "predating_peers": [node for node, _ in older]},
            )
        )
    unstated = _unstated_peers(peers, older, deployment)
    if on is True and unstated and not seen.one_side:
        results.append(
            CheckResult(
                "checksum",
                "UNKNOWN",
                f"KV checksum on here, setting unknown for {', '.join(unstated)} (verified only "
                f"if {'it runs' if len(unstated) == 1 else 'they run'} it too: audit "
                f"{'its' if len(unstated) == 1 else 'their'} /server_info or startup args)",
                {**evidence, "unstated_peers": unstated},
            )
        )
    other = other_pd_role(facts.role)
    if on is True and other and not peers and not seen.one_side and not _caught(seen):
        # Verified only if the other side runs it too, and no node of it was audited (blind
        # review 46 D3: a decode audited alone passed); a mismatch caught shows it verifying.
        results.append(
            CheckResult(
                "checksum",
                "UNKNOWN",
                f"KV checksum on here, no {other} node audited (verified only if "
                f"{other} runs it too: audit it with this node)",
                evidence,
            )
        )
    silent = _unsigned_peers(facts, peers_on, deployment, policy)
    if on is True and silent:
        results.append(
            CheckResult(
                "checksum",
                "FAIL",
                f"KV checksum cannot verify transfers from {', '.join(silent)} (releases before "
                f"{policy.signed_checksum_since} write no layout signature, and "
                f"{facts.version} skips such digests without a word)",
                {**evidence, "unsigned_peers": silent},
            )
        )
    differing = _other_layouts(facts, peers_on, deployment, policy)
    if on is True and differing and not seen.one_side and not seen.skipped:
        results.append(
            CheckResult(
                "checksum",
                "FAIL",
                f"KV checksum cannot verify transfers {'from' if facts.role == 'decode' else 'to'} "
                f"{'; '.join(differing)}: decode compares a digest only within one TP width, PP "
                "stage and page size and admits the rest unverified, logging `KV checksum "
                "skipped` only after the first",
                {**evidence, "layout": dict(facts.layout), "other_layout_peers": differing},
            )
        )
    if seen.skipped:
        layouts = len(seen.skipped_signatures) or seen.skipped
        first = seen.skipped_signatures[0] if seen.skipped_signatures else (None, None)
        pair = f" ({first[0]} vs this decode's {first[1]})" if first[0] or first[1] else ""
        results.append(
            CheckResult(
                "checksum",
                "FAIL",
                f"KV checksum skipped for {_times(layouts, 'prefill layout')}{pair}: requests "
                f"admitted unverified",
                evidence,
            )
        )
    if on is False:
        if peers_on and not seen.one_side:
            results.append(
                CheckResult(
                    "checksum",
                    "FAIL",
                    f"KV checksum off here, on for {', '.join(peers_on)} (one side only: "
                    f"transfers unverified)",
                    evidence,
                )
            )
        elif not peers_on:
            results.append(
                CheckResult(
                    "checksum",
                    policy.checksum_off,
                    "KV checksum off (--disaggregation-enable-kv-checksum not set)",
                    evidence,
                )
            )
    if on is None and not seen.skipped and not seen.one_side:
        results.append(
            CheckResult(
                "checksum",
                "UNKNOWN",
                f"KV checksum setting unknown (not stated by server_args or /server_info; "
                f"engines before {policy.checksum_since} have none)",
                evidence,
            )
        )
    if _caught(seen):
        results.append(
            CheckResult(
                "checksum",
                "WARN",
                f"{_caught(seen)} caught (corrupted transfers: run kvwatch forensics)",
                evidence,
            )
        )
    if not results:
        quiet_release = facts.version is not None and is_below(
            facts.version, policy.signed_checksum_since
        )
        if facts.logs_read and quiet_release:
            # 0.5.21 and 0.5.22 log no skipped verification at all (audit T): quiet logs show
            # nothing either way.
            reason = f"KV checksum on ({facts.version} logs no skipped verification)"
        elif facts.logs_read:
            reason = "KV checksum on, no skips in the logs"
        else:
            reason = "KV checksum on (verification shows only in the logs: audit them too)"
        results.append(CheckResult("checksum", "PASS", reason, evidence))
    return results


def _predating_peers(
    peers: frozenset[str], deployment: Deployment, policy: AuditPolicy
) -> list[tuple[str, str]]:
    """The peers, setting unstated, on a release known to predate the checksum: they compute
    none, so this node's checksum verifies nothing from them (blind review: a decode verifying
    behind a 0.5.19 prefill passed). A peer whose release is not known is not judged here: its
    own line says its setting is unknown."""
    stated = set(deployment.checksum_on) | set(deployment.checksum_off)
    return [
        (node, version)
        for node, version in deployment.pd_versions
        if node in peers and node not in stated and is_below(version, policy.checksum_since)
    ]


def _unstated_peers(
    peers: frozenset[str], older: list[tuple[str, str]], deployment: Deployment
) -> list[str]:
    """The peers whose checksum setting nothing stated and whose release is not known to
    predate it: this node's checksum verifies their transfers only if they run it too, so a
    PASS here would vouch for what was never seen (the decode passed while its prefill's own
    line said its setting was unknown)."""
    known = set(deployment.checksum_on) | set(deployment.checksum_off)
    known.update(node for node, _ in older)
    return sorted(node for node in peers if node not in known)


def _unsigned_peers(
    facts: NodeFacts, peers_on: list[str], deployment: Deployment, policy: AuditPolicy
) -> list[str]:
    """The prefills, checksum on, whose digests this decode skips silently: from 0.5.23 decode
    compares each digest's layout signature and skips a digest without one (signature 0), which
    0.5.21 and 0.5.22 prefills write (audit T: 0.5.22 `MetadataBuffers.set_kv_checksum` fills
    slot 0 only; 0.5.23 `DecodeTransferQueue._kv_checksum_comparable`). Nothing is logged."""
    if facts.role != "decode" or facts.version is None:
        return []
    if is_below(facts.version, policy.signed_checksum_since):
        return []
    versions = dict(deployment.pd_versions)
    return [
        peer
        for peer in peers_on
        if versions.get(peer) is not None and is_below(versions[peer], policy.signed_checksum_since)
    ]


def _other_layouts(
    facts: NodeFacts, peers_on: list[str], deployment: Deployment, policy: AuditPolicy
) -> list[str]:
    """The peers, checksum on, whose stated KV layout differs from this node's: `prefill-0
    (tp_size 8 there, 4 here)`. A decode from 0.5.23 signs each digest with the layout it was
    written in and skips one of another layout (telemetry: `KV checksum skipped ... admitted
    unverified`, logged once a signature, after the first such transfer): a gate run before
    traffic sees no such line, yet the stated layouts already say it (blind review 46 D1: TP 8
    prefill, TP 4 decode, "KV checksum on, no skips in the logs"). Before 0.5.23 nothing is
    known of it."""
    mine = dict(facts.layout)
    if not mine:
        return []
    versions = dict(deployment.pd_versions)
    layouts = dict(deployment.pd_layouts)
    found = []
    for peer in sorted(peers_on):
        decode = facts.version if facts.role == "decode" else versions.get(peer)
        if decode is not None and is_below(decode, policy.signed_checksum_since):
            continue
        theirs = dict(layouts.get(peer, ()))
        differ = [
            f"{name} {theirs[name]} there, {mine[name]} here"
            for name in mine
            if name in theirs and theirs[name] != mine[name]
        ]
        if differ:
            found.append(f"{peer} ({', '.join(differ)})")
    return found


def human_time(epoch: float | None) -> str:
    """`2026-09-09 19:40:00 UTC`: the form a person compares against a post-mortem timeline."""
    text = iso_time(epoch)
    if text is None:
        return "an unknown time"
    return text[:19].replace("T", " ") + " UTC"


def _backend(name: str | None) -> str:
    """The transfer backend, with SGLang's default (mooncake) when none is stated."""
    text = (name or "mooncake").strip().lower()
    return "mooncake" if text == "mooncake_tcp" else text


def _share(part: int, whole: int) -> str:
    fraction = part / whole
    if 0 < fraction < 0.01:
        return "<1%"
    return f"{fraction:.0%}"


def _caught(seen: ChecksumEvidence) -> str:
    """The corrupted transfers a node's logs caught, as a person reads them ("" when none):
    checksum mismatches, and metadata of another room, which is caught whatever the checksum
    setting (blind review 28b: two such lines went unsaid beside the mismatches)."""
    said = []
    if seen.mismatches:
        said.append(_times(seen.mismatches, "KV checksum mismatch", "es"))
    if seen.corruptions:
        said.append(_times(seen.corruptions, "metadata corruption"))
    return " and ".join(said)


def _times(count: int, noun: str, plural: str = "s") -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else plural)
