"""KV canary violations: the engine's own guard found a KV slot holding what it should not.

Feeds the alert `KVWatchKVCanaryViolation`.

`--kv-canary log|raise` stamps canaries into KV slots and verifies them around kernel launches;
a violation (`kv_canary violation: launch_tag=... fail_reason=...`) means a slot was written by
the wrong request or at the wrong position. Any violation is critical. One finding per node,
launch tag, slot and position, so a sweep that reports the same slot again does not page twice.
"""

from __future__ import annotations

from typing import ClassVar

from collector.events import Event
from detectors.base import Detector, DetectorConfig
from detectors.context import DetectionContext
from detectors.finding import Finding


class KVCanaryViolationConfig(DetectorConfig):
    """No knobs: every violation is critical."""


class KVCanaryViolation(Detector[KVCanaryViolationConfig]):
    """Critical finding per canary violation; feeds `KVWatchKVCanaryViolation`.

    Examples
    --------
    >>> from collector.events import Event
    >>> from detectors.context import DetectionContext
    >>> (f,) = KVCanaryViolation().observe(Event("kv_canary_violation", "decode-0", 5.0,
    ...     "d.log:3", {"launch_tag": "TAIL_K_FULL", "fail_reason": "verify_chain_hash",
    ...                 "slot_idx": 18433, "position": 511}), DetectionContext())
    >>> f.severity, f.dedup_key
    ('critical', 'kv_canary_violation:decode-0:TAIL_K_FULL:18433:511')
    """

    name: ClassVar[str] = "kv_canary_violation"
    alert: ClassVar[str] = "KVWatchKVCanaryViolation"
    config_class: ClassVar[type[DetectorConfig]] = KVCanaryViolationConfig
    event_kinds: ClassVar[frozenset[str]] = frozenset({"kv_canary_violation"})

    def _on_event(self, event: Event, ctx: DetectionContext) -> list[Finding]:
        tag = event.get("launch_tag")
        reason = event.get("fail_reason")
        slot = event.get("slot_idx")
        position = event.get("position")
        summary = (
            f"KV canary violation on {event.node}: {tag} failed {reason} at slot {slot}, "
            f"position {position}; a KV slot holds data it should not"
        )
        return [
            self._event_finding(
                "critical",
                event,
                summary=summary,
                subject=f"{event.node}:{tag}:{slot}:{position}",
                evidence={
                    "launch_tag": tag,
                    "fail_reason": reason,
                    "slot_idx": slot,
                    "position": position,
                },
            )
        ]
