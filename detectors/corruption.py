"""Decode caught one request's transfer corrupt: one critical finding per bootstrap room.

The KV checksum (`checksum_mismatch`) and the metadata room check (`metadata_corruption`) are
the engine proving, for one request, that what decode received is not what prefill sent. The
request is aborted, so its own client is not exposed; the finding is critical all the same, as
the slot reuse behind it is what exposes other requests. A request whose own finish record says
it was answered all the same is named exposed (`_answered_anyway`). Both name the request by its
room (a line without one, by node, rid and time) and keep the line's source; a `RoomCorruption`
subclass says only what the line reports (`_describe`).

The request's finish record says the same when it was aborted for it (`abort_reason`): with
only request logs collected, that record is the proof, and a joined request whose side carries
it gives the same finding (one per room either way: the same subject, so the pipeline keeps
whichever comes first).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, ClassVar, Final, TypeVar

from collector.events import Event, iso_time
from collector.state.request_record import RequestRecord, SideRecord
from detectors.base import Detector, DetectorConfig, answered
from detectors.context import DetectionContext
from detectors.finding import Finding

C = TypeVar("C", bound=DetectorConfig)

# Rooms a line reported caught, remembered for the request's answer (`_answered_anyway`); the
# oldest are let go past this many.
ROOMS_REMEMBERED: Final = 10_000
# How long before a request began a line about its room may have come.
LINE_SLACK_SECONDS: Final = 60.0


class RoomCorruption(Detector[C]):
    """Base of the per-request corruption detectors (see the module docstring)."""

    wants_requests: ClassVar[bool] = True
    # How the finish record words the abort (`SideRecord` flag set from its `abort_reason`).
    cause: ClassVar[str] = ""

    def _init_learned(self) -> None:
        # Rooms a line reported caught, oldest first: (node, rid, time of the line).
        self.caught_: OrderedDict[str, tuple[str, str | None, float | None]] = OrderedDict()

    def _learned_state(self) -> dict[str, Any]:
        return {"caught": [[room, *seen] for room, seen in self.caught_.items()]}

    def _load_learned(self, state: dict[str, Any]) -> None:
        for room, node, rid, when in state.get("caught") or []:
            self.caught_[str(room)] = (str(node), rid, when)

    def _on_request(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        return self._aborted(record) + self._answered_anyway(record)

    def _answered_anyway(self, record: RequestRecord) -> list[Finding]:
        """The request a line reported caught, answered all the same by the node that caught
        it: its client got text built on KV that was not what prefill sent. Named exposed.

        Why: blind review 64 D1, a mismatch on a peer rank, then the same rid finished `stop`
        with 300 tokens: the run said the engine "aborted those requests" and found nothing,
        exit 0 under `--fail-on exposure`."""
        room, serving = record.bootstrap_room, record.serving
        if room is None or serving is None or not serving.delivered:
            return []
        seen = self.caught_.get(room)
        if seen is None:
            return []
        node, rid, when = seen
        began = record.began
        if (
            serving.node != node
            or (rid is not None and serving.rid is not None and rid != serving.rid)
            or (when is not None and began is not None and when < began - LINE_SLACK_SECONDS)
        ):
            return []
        del self.caught_[room]
        sent = serving.sent_time
        what = f"bootstrap_room {room} (req {serving.rid})"
        return [
            self._finding(
                "critical",
                time=sent if sent is not None else record.time,
                node=serving.node,
                summary=(
                    f"{serving.node} {answered(serving, what)} after logging a {self.cause} "
                    f"for it at {iso_time(when)}: its client got an answer built on KV that was "
                    "not what prefill sent"
                ),
                subject=f"room:{room}:answered",
                evidence={"caught_at": iso_time(when), "source": serving.sources[-1:]},
                rid=serving.rid,
                bootstrap_room=room,
                exposure=True,
            )
        ]

    def _aborted(self, record: RequestRecord) -> list[Finding]:
        """The finding of a request whose finish record says it was aborted for the cause."""
        room = record.bootstrap_room
        if room is None:
            return []  # no KV crossed between nodes: no transfer to be corrupt
        for side in record.sides:
            if self._flagged(side) and not side.delivered:
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
        if room is not None:
            self.caught_[room] = (event.node, rid, event.time)
            self.caught_.move_to_end(room)
            while len(self.caught_) > ROOMS_REMEMBERED:
                self.caught_.popitem(last=False)
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
