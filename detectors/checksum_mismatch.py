"""KV checksum mismatches: decode proved that the KV it received is not the KV prefill sent.

Feeds the alert `KVWatchKVChecksumMismatch`.

With `--disaggregation-enable-kv-checksum` (0.5.21+), decode compares an Adler-32 of each
transferred KV page set with prefill's. A mismatch means the pages were overwritten in flight
(the abort race: a late RDMA write landing in re-let pages) or corrupted otherwise. Decode
aborts the request (HTTP 500), so that client is not exposed, but the same race on a
deployment without the checksum would have been silent, and the neighbour whose pages were
overwritten may have been. Every mismatch is critical and names its `bootstrap_room`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from collector.events import Event
from collector.state.request_record import SideRecord
from detectors.base import DetectorConfig
from detectors.corruption import RoomCorruption


class ChecksumMismatchConfig(DetectorConfig):
    """No knobs: every mismatch is critical."""


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

    cause: ClassVar[str] = "KV checksum mismatch"

    def _flagged(self, side: SideRecord) -> bool:
        return side.checksum_mismatch

    def _describe(
        self, event: Event, room: str | None, rid: str | None
    ) -> tuple[str, dict[str, Any]]:
        expected, got = event.get("expected"), event.get("got")
        detail = f"expected {expected}, got {got}" if expected or got else "on a peer rank"
        summary = (
            f"KV checksum mismatch on {event.node} for bootstrap_room {room} (req {rid}, "
            f"{detail}): transferred KV was overwritten; check deferred-release timeouts and "
            f"aborts mid-transfer"
        )
        return summary, {"expected": expected, "got": got}
