"""Decode caught one request's transfer corrupt: one critical finding per bootstrap room.

The KV checksum (`checksum_mismatch`) and the metadata room check (`metadata_corruption`) are
the engine proving, for one request, that what decode received is not what prefill sent. The
request is aborted, so its own client is not exposed; the finding is critical all the same, as
the slot reuse behind it is what exposes other requests. Both name the request by its room (a
line without one, by node, rid and time) and keep the line's source; a `RoomCorruption`
subclass says only what the line reports (`_describe`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from collector.events import Event
from detectors.base import Detector, DetectorConfig
from detectors.context import DetectionContext
from detectors.finding import Finding

C = TypeVar("C", bound=DetectorConfig)


class RoomCorruption(Detector[C]):
    """Base of the per-request corruption detectors (see the module docstring)."""

    def _on_event(self, event: Event, ctx: DetectionContext) -> list[Finding]:
        room = optional_text(event.get("bootstrap_room"))
        rid = optional_text(event.get("rid"))
        summary, evidence = self._describe(event, room, rid)
        return [
            self._event_finding(
                "critical",
                event,
                summary=summary,
                subject=f"room:{room}" if room else f"{event.node}:{rid}:{event.time}",
                evidence=evidence,
                rid=rid,
                bootstrap_room=room,
            )
        ]

    def _describe(
        self, event: Event, room: str | None, rid: str | None
    ) -> tuple[str, dict[str, Any]]:
        """The finding's summary and evidence (the line's source is added) for one line."""
        raise NotImplementedError


def optional_text(value: object) -> str | None:
    """A field as text, None staying None (rooms and rids may arrive as numbers)."""
    return None if value is None else str(value)
