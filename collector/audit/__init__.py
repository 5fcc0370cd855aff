"""`kvwatch audit`: the pre-rollout gate the post-mortems asked for.

Pool against context on every node, the engine version policy, and the KV checksum enabled and
actually verifying, over logs and snapshots or live endpoints.

Names are imported on first use, so that building the `kvwatch` argument parser (which needs
only `add_audit_arguments`) does not pay for httpx and pydantic on every command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collector.audit.command import add_audit_arguments, run_audit
    from collector.audit.facts import ChecksumEvidence, Deployment, NodeFacts
    from collector.audit.from_files import Gathered, gather
    from collector.audit.live import Target, fetch_facts, fetch_facts_async, parse_target
    from collector.audit.policy import AuditPolicy, CheckResult, NodeResult, Status, judge_node
    from collector.audit.report import AuditReport
    from collector.audit.run import audit, overlay

_HOMES: Final[dict[str, str]] = {
    "add_audit_arguments": "command",
    "run_audit": "command",
    "ChecksumEvidence": "facts",
    "Deployment": "facts",
    "NodeFacts": "facts",
    "Gathered": "from_files",
    "gather": "from_files",
    "Target": "live",
    "fetch_facts": "live",
    "fetch_facts_async": "live",
    "parse_target": "live",
    "AuditPolicy": "policy",
    "CheckResult": "policy",
    "NodeResult": "policy",
    "Status": "policy",
    "judge_node": "policy",
    "AuditReport": "report",
    "audit": "run",
    "overlay": "run",
}

__all__ = [
    "AuditPolicy",
    "AuditReport",
    "CheckResult",
    "ChecksumEvidence",
    "Deployment",
    "Gathered",
    "NodeFacts",
    "NodeResult",
    "Status",
    "Target",
    "add_audit_arguments",
    "audit",
    "fetch_facts",
    "fetch_facts_async",
    "gather",
    "judge_node",
    "overlay",
    "parse_target",
    "run_audit",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
