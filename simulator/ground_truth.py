"""What really happened in a run, so detectors and forensics can be scored against it.

Counts only: no prompt text, no reply text, no marker strings ever go into this file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from simulator.telemetry.logfmt import iso_utc

Cause = Literal["over_length_stub", "late_write", "metadata_corruption"]


@dataclass(slots=True)
class GroundTruth:
    scenario: str
    seed: int
    start: float
    end: float
    requests_total: int = 0
    requests_rejected_by_router: int = 0
    exposed: list[dict[str, Any]] = field(default_factory=list)
    caught: list[dict[str, Any]] = field(default_factory=list)
    stub_served_without_foreign_content: list[dict[str, Any]] = field(default_factory=list)
    deferred_release_timeouts: list[dict[str, Any]] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)
    phases: list[dict[str, Any]] = field(default_factory=list)
    constants: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def response(
        *,
        rid: str,
        room: int,
        node: str,
        t: float,
        prompt_tokens: int,
        cause: Cause,
        http_status: int,
        foreign_marker_count: int,
    ) -> dict[str, Any]:
        return {
            "rid": rid,
            "bootstrap_room": str(room),
            "node": node,
            "time": iso_utc(t),
            "prompt_tokens": prompt_tokens,
            "cause": cause,
            "http_status": http_status,
            "foreign_marker_count": foreign_marker_count,
        }

    def add_phase(self, kind: str, start: float, stop: float, **extra: Any) -> None:
        self.phases.append({"kind": kind, "start": iso_utc(start), "stop": iso_utc(stop), **extra})

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "start": iso_utc(self.start),
            "end": iso_utc(self.end),
            "requests_total": self.requests_total,
            "requests_rejected_by_router": self.requests_rejected_by_router,
            "exposed": self.exposed,
            "caught": self.caught,
            "stub_served_without_foreign_content": self.stub_served_without_foreign_content,
            "deferred_release_timeouts": self.deferred_release_timeouts,
            "restarts": self.restarts,
            "phases": self.phases,
            "constants": self.constants,
        }

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")
