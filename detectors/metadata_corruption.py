"""Metadata corruption: decode received another request's metadata (a buffer index collision).

Feeds the alert `KVWatchMetadataCorruption`.

Decode checks that the metadata it received carries the request's own `bootstrap_room`
(`Context corruption detected: ... received metadata from bootstrap_room=...`). A mismatch
means two requests shared a metadata buffer slot: the same class of slot reuse that exposes
KV. The request is aborted (HTTP 500); the finding is critical and names both rooms.
"""

from __future__ import annotations

from typing import Any, ClassVar

from collector.events import Event
from collector.state.request_record import SideRecord
from detectors.base import DetectorConfig
from detectors.corruption import RoomCorruption, optional_text


class MetadataCorruptionConfig(DetectorConfig):
    """No knobs: every corruption is critical."""


class MetadataCorruption(RoomCorruption[MetadataCorruptionConfig]):
    """Critical finding per metadata corruption; feeds `KVWatchMetadataCorruption`.

    Examples
    --------
    >>> from collector.events import Event
    >>> from detectors.context import DetectionContext
    >>> (f,) = MetadataCorruption().observe(Event("metadata_corruption", "decode-0", 5.0,
    ...     "d.log:3", {"rid": "r1", "bootstrap_room": "11", "actual_room": "12"}),
    ...     DetectionContext())
    >>> f.severity, f.bootstrap_room, f.evidence["actual_room"]
    ('critical', '11', '12')
    """

    name: ClassVar[str] = "metadata_corruption"
    alert: ClassVar[str] = "KVWatchMetadataCorruption"
    config_class: ClassVar[type[DetectorConfig]] = MetadataCorruptionConfig
    event_kinds: ClassVar[frozenset[str]] = frozenset({"metadata_corruption"})

    cause: ClassVar[str] = "metadata corruption"

    def _flagged(self, side: SideRecord) -> bool:
        return side.metadata_corruption

    def _describe(
        self, event: Event, room: str | None, rid: str | None
    ) -> tuple[str, dict[str, Any]]:
        actual = optional_text(event.get("actual_room"))
        summary = (
            f"Decode {event.node} received metadata of bootstrap_room {actual} for request "
            f"{rid} (bootstrap_room {room}): metadata buffer index collision between requests"
        )
        return summary, {"actual_room": actual}
