"""The exposure block: one entry per client response that probably carried another's data.

Forensics reports exactly the findings marked `exposure`, merged per response (several
detectors usually agree on the same one): `{rid, bootstrap_room, node, time, prompt_tokens,
evidence: [detector, ...]}` plus `first`, `last` and `count`. `rid` is the serving (decode)
node's id for the request, `time` when the response finished.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from collector.events import iso_time
from detectors.finding import Finding


def exposed_response(finding: Finding) -> str:
    """The response an exposure finding names, for merging the detectors that agree on it: a
    room's request, or with parallel sampling each of its samples, by its rid (outside PD, the
    node and its rid)."""
    room = finding.bootstrap_room
    return f"room:{room}:{finding.rid}" if room else f"{finding.node}:{finding.rid}"


class ExposureTracker:
    """Accumulates exposure findings; memory is one small entry per exposed response.

    Examples
    --------
    >>> from detectors.examples import incident_events
    >>> from detectors.pipeline import DetectionPipeline
    >>> tracker = ExposureTracker()
    >>> tracker.update(DetectionPipeline().run(incident_events()))
    >>> block = tracker.to_json_dict()
    >>> block["count"], block["requests"][0]["bootstrap_room"], block["requests"][0]["evidence"]
    (1, '1001', ['impossibly_fast_prefill', 'over_length_answered', 'rejected_then_served'])
    """

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Any]] = {}

    def update(self, findings: Iterable[Finding]) -> None:
        for finding in findings:
            self.add(finding)

    def add(self, finding: Finding) -> None:
        if not finding.exposure:
            return
        key = exposed_response(finding)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = {
                "rid": finding.rid,
                "bootstrap_room": finding.bootstrap_room,
                "node": finding.node,
                "time": finding.time,
                "prompt_tokens": finding.evidence.get("prompt_tokens"),
                "evidence": set(),
            }
        entry["evidence"].add(finding.detector)
        if entry["prompt_tokens"] is None:
            entry["prompt_tokens"] = finding.evidence.get("prompt_tokens")
        if finding.time is not None and (entry["time"] is None or finding.time < entry["time"]):
            entry["time"] = finding.time

    def __len__(self) -> int:
        return len(self._entries)

    def requests(self) -> list[dict[str, Any]]:
        ordered = sorted(
            self._entries.values(), key=lambda e: (e["time"] is None, e["time"] or 0.0)
        )
        return [dict(e, evidence=sorted(e["evidence"])) for e in ordered]

    def to_json_dict(self) -> dict[str, Any]:
        requests = self.requests()
        times = [r["time"] for r in requests if r["time"] is not None]
        return {
            "requests": [dict(r, time=iso_time(r["time"])) for r in requests],
            "first": iso_time(min(times)) if times else None,
            "last": iso_time(max(times)) if times else None,
            "count": len(requests),
        }
