"""Decode caught one request's transfer corrupt: one critical finding per bootstrap room.

The KV checksum (`checksum_mismatch`) and the metadata room check (`metadata_corruption`) are
the engine proving, for one request, that what decode received is not what prefill sent. The
request is aborted, so its own client is not exposed; the finding is critical all the same, as
the slot reuse behind it is what exposes other requests. Both name the request by its room (a
line without one, by node, rid and time) and keep the line's source; a `RoomCorruption`
subclass says only what the line reports (`_describe`).

The request's finish record says the same when it was aborted for it (`abort_reason`): with
only request logs collected, that record is the proof, and a joined request whose side carries
it gives the same finding (one per room either way: the same subject, so the pipeline keeps
whichever comes first).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from collector.events import Event
from collector.state.request_record import RequestRecord, SideRecord
from detectors.base import Detector, DetectorConfig
from detectors.context import DetectionContext
from detectors.finding import Finding

C = TypeVar("C", bound=DetectorConfig)


class RoomCorruption(Detector[C]):
    """Base of the per-request corruption detectors (see the module docstring)."""

    wants_requests: ClassVar[bool] = True
    # How the finish record words the abort (`SideRecord` flag set from its `abort_reason`).
    cause: ClassVar[str] = ""

    def _on_request(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        room = record.bootstrap_room
        if room is None:
            return []  # no KV crossed between nodes: no transfer to be corrupt
        for side in record.sides:
            if self._flagged(side):
                return [
                    self._finding(
                        "critical",
                        time=side.finished_time if side.finished_time is not None else record.time,
                        node=side.node,
                        summary=(
                            f"{side.node} aborted bootstrap_room {room} (req {side.rid}) for a "
                            f"{self.cause}, as its finish record says: transferred KV was not "
                            f"what prefill sent"
                        ),
                        subject=f"room:{room}",
                        evidence={"abort_reason": self.name, "source": side.sources[-1:]},
                        rid=side.rid,
                        bootstrap_room=room,
                    )
                ]
        return []

    def _flagged(self, side: SideRecord) -> bool:
        """Whether the side's finish record names this detector's cause."""
        raise NotImplementedError

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
