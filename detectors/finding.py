"""The finding: what a detector concluded, with the numbers that made the call.

Findings leave kvwatch through the store, the sinks, its own metrics and the forensics report,
so the JSON form is a public contract (see the design: `detector`, `severity`, `time`, `node`,
`rid`, `bootstrap_room`, `summary`, `evidence`, `dedup_key`, `runbook`). `exposure` marks the
findings that say a client response probably carried another request's data; forensics builds
its `exposure` block from exactly those.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from collector.events import iso_time, parse_iso_time

Severity = Literal["critical", "warning", "info"]
CRITICAL: Final = "critical"
WARNING: Final = "warning"
INFO: Final = "info"
SEVERITIES: Final[tuple[Severity, ...]] = ("critical", "warning", "info")
SEVERITY_RANK: Final[dict[str, int]] = {"critical": 2, "warning": 1, "info": 0}


@dataclass(frozen=True, slots=True)
class Finding:
    """One conclusion. `evidence` holds JSON scalars only (numbers first, a few strings)."""

    detector: str
    severity: Severity
    time: float | None
    node: str | None
    summary: str
    runbook: str
    dedup_key: str
    evidence: dict[str, Any] = field(default_factory=dict)
    rid: str | None = None
    bootstrap_room: str | None = None
    exposure: bool = False
    # When the pipeline raised it, on the stream's clock: later than `time` by what the finding
    # waited for (a request's lines to settle, a canary's attribution, a window's close), as a
    # live sidecar would page. Not part of what the finding says (`compare=False`).
    raised_at: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"unknown severity {self.severity!r}")

    @property
    def rank(self) -> int:
        return SEVERITY_RANK[self.severity]

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "severity": self.severity,
            "time": iso_time(self.time),
            "node": self.node,
            "rid": self.rid,
            "bootstrap_room": self.bootstrap_room,
            "summary": self.summary,
            "evidence": dict(self.evidence),
            "dedup_key": self.dedup_key,
            "runbook": self.runbook,
            "exposure": self.exposure,
            "raised_at": iso_time(self.raised_at),
        }

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(
            detector=str(data["detector"]),
            severity=data["severity"],
            time=parse_iso_time(data.get("time")),
            node=data.get("node"),
            summary=str(data.get("summary", "")),
            runbook=str(data.get("runbook", "")),
            dedup_key=str(data.get("dedup_key", "")),
            evidence=dict(data.get("evidence") or {}),
            rid=data.get("rid"),
            bootstrap_room=data.get("bootstrap_room"),
            exposure=bool(data.get("exposure", False)),
            raised_at=parse_iso_time(data.get("raised_at")),
        )
