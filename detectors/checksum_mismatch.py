"""KV checksum mismatches: decode proved that the KV it received is not the KV prefill sent.

Feeds the alert `KVWatchKVChecksumMismatch`.

With `--disaggregation-enable-kv-checksum` (0.5.21+), decode compares an Adler-32 of each
transferred KV page set with prefill's. A mismatch means the pages were overwritten in flight
(the abort race: a late RDMA write landing in re-let pages) or corrupted otherwise. Decode
aborts the request (HTTP 500), so that client is not exposed, but the same race on a
deployment without the checksum would have been silent, and the neighbour whose pages were
overwritten may have been. Every mismatch is critical and names its `bootstrap_room`.

Each TP rank checks its own shard: the rank that saw the bad page logs the hashes, its peers log
"on a peer rank" without them, in the same second and in any order. A peer's line waits
`peer_rank_wait_seconds` of log time for the line with the hashes, so the one finding a room
gets carries them whichever line came first.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

from pydantic import Field

from collector.events import Event
from collector.state.request_record import RequestRecord, SideRecord
from detectors.base import DetectorConfig
from detectors.context import DetectionContext
from detectors.corruption import RoomCorruption
from detectors.finding import Finding


class ChecksumMismatchConfig(DetectorConfig):
    """Every mismatch is critical; a peer rank's line, without hashes, waits this long (log
    seconds) for the line that has them."""

    peer_rank_wait_seconds: float = Field(default=2.0, ge=0.0)


class ChecksumMismatch(RoomCorruption[ChecksumMismatchConfig]):
    """Critical finding per KV checksum mismatch; feeds `KVWatchKVChecksumMismatch`.

    Examples
    --------
    >>> from collector.events import Event
    >>> from detectors.context import DetectionContext
    >>> det = ChecksumMismatch()
    >>> (f,) = det.observe(Event("checksum_mismatch", "decode-1", 1.0, "d.log:9",
    ...     {"rid": "7c2e", "bootstrap_room": "2170015846053279415",
    ...      "expected": "0x5e1a03c7", "got": "0x5e1a03c6"}), DetectionContext())
    >>> f.severity, f.bootstrap_room, f.runbook
    ('critical', '2170015846053279415', 'KVWatchKVChecksumMismatch')
    """

    name: ClassVar[str] = "checksum_mismatch"
    alert: ClassVar[str] = "KVWatchKVChecksumMismatch"
    config_class: ClassVar[type[DetectorConfig]] = ChecksumMismatchConfig
    event_kinds: ClassVar[frozenset[str]] = frozenset({"checksum_mismatch"})

    windowed: ClassVar[bool] = True

    cause: ClassVar[str] = "KV checksum mismatch"

    def _init_learned(self) -> None:
        super()._init_learned()
        # Peer ranks' findings (no hashes) by subject, oldest first, until the line with the
        # hashes for the same room comes or their wait is over.
        self.waiting_: dict[str, Finding] = {}

    def _learned_state(self) -> dict[str, Any]:
        return {
            **super()._learned_state(),
            "waiting": [f.to_json_dict() for f in self.waiting_.values()],
        }

    def _load_learned(self, state: dict[str, Any]) -> None:
        super()._load_learned(state)
        for raw in state.get("waiting") or []:
            finding = Finding.from_json_dict(raw)
            self.waiting_[finding.dedup_key] = finding

    def due_at(self) -> float:
        waiting = self.__dict__.get("waiting_")
        if not waiting:
            return math.inf
        first = next(iter(waiting.values()))
        return (first.time or 0.0) + self.config.peer_rank_wait_seconds

    def _on_event(self, event: Event, ctx: DetectionContext) -> list[Finding]:
        (finding,) = super()._on_event(event, ctx)
        peer = self.waiting_.pop(finding.dedup_key, None)
        if event.get("expected") or event.get("got"):
            if peer is not None and peer.time is not None:  # reported first, by a peer rank
                return [
                    dataclasses.replace(finding, time=min(peer.time, finding.time or peer.time))
                ]
            return [finding]
        if peer is not None:  # a third rank's line: the first one's wait goes on
            self.waiting_[finding.dedup_key] = peer
            return []
        if finding.time is None:
            return [finding]  # undated: nothing to wait by
        self.waiting_[finding.dedup_key] = finding
        return []

    def _on_request(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        # The request is judged: a peer's line still waiting is its finding (the line first,
        # as when it had the hashes).
        if self.waiting_ and record.bootstrap_room is not None:
            waiting = self.waiting_.pop(f"{self.name}:room:{record.bootstrap_room}", None)
            if waiting is not None:
                return [waiting, *self._answered_anyway(record)]
        return super()._on_request(record, ctx)

    def _on_flush(self, ctx: DetectionContext, now: float) -> list[Finding]:
        due: list[Finding] = []
        wait = self.config.peer_rank_wait_seconds
        while self.waiting_:
            key, first = next(iter(self.waiting_.items()))
            if (first.time or 0.0) + wait > now:
                break
            due.append(self.waiting_.pop(key))
        return due

    def _flagged(self, side: SideRecord) -> bool:
        return side.checksum_mismatch

    def _describe(
        self, event: Event, room: str | None, rid: str | None
    ) -> tuple[str, dict[str, Any]]:
        expected, got = event.get("expected"), event.get("got")
        if expected or got:
            detail = f"expected {expected}, got {got}"
        else:  # said only where the line says so (a line without readable hashes is no peer's)
            detail = "on a peer rank" if event.get("peer_rank") else "its hashes not logged"
        summary = (
            f"KV checksum mismatch on {event.node} for bootstrap_room {room} (req {rid}, "
            f"{detail}): transferred KV was overwritten; check deferred-release timeouts and "
            f"aborts mid-transfer"
        )
        return summary, {"expected": expected, "got": got}
