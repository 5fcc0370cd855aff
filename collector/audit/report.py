"""The audit's answer: one line per node a person can read, a verdict, and the exit status.

The line carries the numbers that decided it (`pool 681,280 < context 1,048,576`), because the
person reading it is deciding whether a rollout goes ahead, and the JSON form carries every
check with its evidence for the machine that gates the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collector.audit.facts import Deployment
from collector.audit.policy import ROLE_ORDER, STATUS_RANK, AuditPolicy, NodeResult, Status, worst
from collector.passed_over import (
    GATE_UNREAD,
    documents_unread,
    input_unread,
    not_opened,
    not_read_whole,
    passed_over,
    unread_documents,
)
from collector.shown_text import printable

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_USAGE = 2  # usage and input errors (`command.EXIT_USAGE` is the same number)
# No check failed, but a node could not be checked: a gate fails closed (the incident's engines
# were below every scanner's notice). Nagios's number for UNKNOWN.
EXIT_UNKNOWN = 3


@dataclass
class AuditReport:
    results: list[NodeResult]
    deployment: Deployment
    policy: AuditPolicy
    strict: bool = False
    input: dict[str, Any] = field(default_factory=dict)
    allow_unknown: bool = False

    def __post_init__(self) -> None:
        self.results = sorted(self.results, key=lambda r: (ROLE_ORDER.get(r.role or "", 3), r.node))

    @property
    def _dropped(self) -> dict[str, int]:
        files = self.input.get("files")
        return (files.get("dropped_by_reason") or {}) if isinstance(files, dict) else {}

    @property
    def _dropped_files(self) -> dict[str, list[str]]:
        files = self.input.get("files")
        return (files.get("dropped_files") or {}) if isinstance(files, dict) else {}

    def _unjudged(self) -> tuple[list[str], list[str]]:
        """Nodes whose files stated no engine configuration: (routers, the rest)."""
        ignored = self.input.get("ignored_nodes") or []
        routers = set(self.input.get("router_nodes") or [])
        return [n for n in ignored if n in routers], [n for n in ignored if n not in routers]

    def _not_judged(self) -> str:
        """Nodes read and not judged, named (blind review 23: a router's `smg_*` scrape
        beside the engines' vanished from the output)."""
        routers, others = self._unjudged()
        said = []
        if routers:
            said.append(
                f"{_names(routers)} {'is a router' if len(routers) == 1 else 'are routers'} or "
                "gateway (smg_* or sgl_router_* metrics only), not an engine: not judged (the "
                "engines behind it are judged by their own files)."
            )
        if others:
            said.append(
                f"{_names(others)}: no engine configuration read (no server_args, capacity "
                "line, pool or context metric, /server_info): not judged."
            )
        return " ".join(said)

    @property
    def input_unread(self) -> bool:
        """A file or folder given could not be read: a node whose logs it held is checked by
        nothing, so the gate fails closed whatever `allow_unknown` says (that lifts what the
        nodes it did read leave unknown, not nodes it never saw)."""
        return (
            input_unread(self._dropped, GATE_UNREAD)
            or documents_unread(self._dropped_files)
            or bool(self._unjudged()[1])
        )

    @property
    def status(self) -> Status:
        return worst([r.status for r in self.results] + (["UNKNOWN"] if self.input_unread else []))

    @property
    def exit_status(self) -> int:
        """1 on any FAIL (with `strict`, on any WARN or UNKNOWN too); else 3 when input went
        unread, or on any UNKNOWN unless `allow_unknown`; else 0."""
        statuses = {r.status for r in self.results}
        if "FAIL" in statuses or (self.strict and self.status in ("WARN", "UNKNOWN")):
            return EXIT_FAIL
        if self.input_unread or ("UNKNOWN" in statuses and not self.allow_unknown):
            return EXIT_UNKNOWN
        return EXIT_PASS

    def lines(self) -> list[str]:
        rows = [(r.node, r.role or "unknown", r.status, "; ".join(r.reasons)) for r in self.results]
        if not rows:
            return []
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        return [
            f"{node:<{widths[0]}}  {role:<{widths[1]}}  {status:<{widths[2]}}  {why}".rstrip()
            for node, role, status, why in rows
        ]

    def verdict(self) -> str:
        by: dict[str, list[str]] = {s: [] for s in STATUS_RANK}
        for result in self.results:
            by[result.status].append(result.node)
        total = len(self.results)
        fail, unknown, warn = by["FAIL"], by["UNKNOWN"], by["WARN"]
        # Nodes whose configuration in force passed, after one that failed (a restart fixed
        # it): the verdict is the rollout's, and still says what may have been served before.
        before = [r.node for r in self.results if r.status != "FAIL" and r.failed_earlier]
        if fail:
            text = f"verdict: FAIL - {_of(fail, total)} failed ({', '.join(fail)})"
            text += _also(unknown, "unknown") + _also(warn, "warned") + "; do not roll out"
        elif self.input_unread:
            text = "verdict: UNKNOWN - no check failed, but input could not be read (PASSED OVER)"
            text += _also(unknown, "not fully checked") + _also(warn, "warned")
            text += "; confirm before rolling out"
            if not self.strict:
                text += " (exit 3, whatever --allow-unknown: make it readable or leave it out)"
        elif unknown:
            text = (
                f"verdict: UNKNOWN - no check failed, but {_of(unknown, total)} could not be "
                f"fully checked ({', '.join(unknown)})"
            )
            text += _also(warn, "warned") + "; confirm before rolling out"
            if not self.allow_unknown and not self.strict:
                text += " (exit 3; --allow-unknown: exit 0)"
        elif warn:
            text = f"verdict: WARN - no check failed; {_of(warn, total)} warned ({', '.join(warn)})"
        else:
            passed = "1 node passed" if total == 1 else f"all {total} nodes passed"
            text = f"verdict: PASS - {passed}"
        if self.strict and (warn or unknown) and not fail:
            text += " (--strict: exit 1)"
        if before:
            text += (
                f"; earlier configurations of {_of(before, total)} failed "
                f"({', '.join(before)}): run kvwatch forensics over the time they ran"
            )
        return text

    def passed_over(self) -> str:
        said = passed_over(self._dropped, self._dropped_files)
        if damaged := not_read_whole(self._dropped, self._dropped_files):
            said = f"{said} {damaged}; what they held past the damage is not in the verdicts."
        if bundles := not_opened(self._dropped, self._dropped_files):
            said = f"{said} {bundles}"
        if unread := unread_documents(self._dropped_files):
            states = "what it states is" if unread.startswith("1 ") else "what they state is"
            said = f"{said} {unread}; {states} not in the verdicts."
        if not_judged := self._not_judged():
            said = f"{said} {not_judged}"
        return f"PASSED OVER: {said.strip()}" if said else ""

    def text(self) -> str:
        return "\n".join(filter(None, [*self.lines(), self.passed_over(), self.verdict()])) + "\n"

    def to_json_dict(self) -> dict[str, Any]:
        lines = self.lines()
        return {
            "verdict": self.status,
            "summary": self.verdict(),
            "passed_over": self.passed_over(),
            "exit_status": self.exit_status,
            "strict": self.strict,
            "allow_unknown": self.allow_unknown,
            "policy": self.policy.model_dump(),
            "deployment": self.deployment.to_json_dict(),
            "nodes": [
                _node_json(result, line) for result, line in zip(self.results, lines, strict=True)
            ],
            "input": self.input,
        }


def _node_json(result: NodeResult, line: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "node": result.node,
        "role": result.role,
        "status": result.status,
        "reasons": result.reasons,
        "checks": [c.to_json_dict() for c in result.checks],
        "notes": list(result.notes),
        "config": result.facts.config_json(),
        "earlier": [_node_json(r, None) for r in result.earlier],
    }
    if line is not None:
        out["line"] = line
    return out


def _names(nodes: list[str]) -> str:
    shown = ", ".join(printable(n) for n in nodes[:_NAMED])
    return shown + (f" and {len(nodes) - _NAMED:,} more" if len(nodes) > _NAMED else "")


_NAMED = 5


def _of(nodes: list[str], total: int) -> str:
    return f"{len(nodes)} of {total} node{'s' if total != 1 else ''}"


def _also(nodes: list[str], what: str) -> str:
    return f", {len(nodes)} {what} ({', '.join(nodes)})" if nodes else ""
