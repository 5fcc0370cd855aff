"""The event: one typed fact read from engine telemetry.

Every source (log files, `/metrics`, `/server_info`, OTLP) produces `Event`s, and every detector
reads them, so this module is the seam between parsing and judging. The JSON form is a public
contract (`kvwatch parse --format jsonl`, see the design document): `kind`, `node`, `time`,
`source`, the rank fields the line carried, then the kind's own fields.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

# Kinds named by the event contract. Parsers may emit more (noted in KIND_DOCS) but never fewer.
SERVER_ARGS: Final = "server_args"
CAPACITY: Final = "capacity"
POOL_BELOW_CONTEXT_WARNING: Final = "pool_below_context_warning"
PREFILL_BATCH: Final = "prefill_batch"
DECODE_BATCH: Final = "decode_batch"
# The engine's periodic batch lines: the densest kinds, read for a few sums.
BATCH_KINDS: Final = frozenset({PREFILL_BATCH, DECODE_BATCH})
REQUEST_RECEIVED: Final = "request_received"
REQUEST_FINISHED: Final = "request_finished"
REQUEST_TIME_STATS: Final = "request_time_stats"
REQUEST_REJECTED: Final = "request_rejected"
# A request's own log lines (what a node logged of it, traces and failures aside).
REQUEST_LINE_KINDS: Final = frozenset(
    {REQUEST_RECEIVED, REQUEST_FINISHED, REQUEST_TIME_STATS, REQUEST_REJECTED}
)
TRANSFER_FAILED: Final = "transfer_failed"
CHECKSUM_MISMATCH: Final = "checksum_mismatch"
CHECKSUM_SKIPPED: Final = "checksum_skipped"
METADATA_CORRUPTION: Final = "metadata_corruption"
DEFERRED_RELEASE: Final = "deferred_release"
KV_CANARY_VIOLATION: Final = "kv_canary_violation"
HTTP_ACCESS: Final = "http_access"
METRIC: Final = "metric"
SERVER_INFO: Final = "server_info"
# Kinds beyond the contract's minimum: facts the detectors and responders also want.
KV_POOL_ALLOCATED: Final = "kv_pool_allocated"
LOST_CONNECTION: Final = "lost_connection"
TIMEOUT_ADVICE: Final = "timeout_advice"
RETRACTION: Final = "retraction"
AUTO_TRUNCATED: Final = "auto_truncated"
ENGINE_ERROR: Final = "engine_error"
SERVER_READY: Final = "server_ready"
KV_CANARY_STATS: Final = "kv_canary_stats"
REQUEST_TRACE: Final = "request_trace"
TRANSFER_WARNING: Final = "transfer_warning"
BOOTSTRAP_SERVER: Final = "bootstrap_server"

KIND_DOCS: Final[dict[str, str]] = {
    SERVER_ARGS: "effective server arguments from the startup `server_args=` line",
    CAPACITY: "the scheduler's capacity line (pool size, context length)",
    POOL_BELOW_CONTEXT_WARNING: "the engine's own warning that the pool is below context",
    PREFILL_BATCH: "a `Prefill batch` line, every key/value kept",
    DECODE_BATCH: "a `Decode batch` line, every key/value kept",
    REQUEST_RECEIVED: "a `--log-requests` receive record (metadata only)",
    REQUEST_FINISHED: "a `--log-requests` finish record (metadata only)",
    REQUEST_TIME_STATS: "a `ReqTimeStats(...)` line",
    REQUEST_REJECTED: "the scheduler refused a request (too long, no room, bad request)",
    TRANSFER_FAILED: "a PD bootstrap, handshake or transfer failure",
    CHECKSUM_MISMATCH: "decode's KV checksum did not match prefill's",
    CHECKSUM_SKIPPED: "KV checksum not verified (layout signatures differ)",
    METADATA_CORRUPTION: "decode received another request's metadata",
    DEFERRED_RELEASE: "a deferred decode KV release resolved (timeout, error, drained)",
    KV_CANARY_VIOLATION: "a kv-canary violation summary line",
    HTTP_ACCESS: "a uvicorn access line",
    METRIC: "one sample from a Prometheus exposition",
    SERVER_INFO: "configuration from /server_info, /v1/models or /v1/loads",
    KV_POOL_ALLOCATED: "`KV Cache is allocated` startup line (pool tokens)",
    LOST_CONNECTION: "decode lost its connection to a prefill instance",
    TIMEOUT_ADVICE: "the engine's once-only advice after bootstrap/waiting timeouts",
    RETRACTION: "KV pool full, running requests retracted",
    AUTO_TRUNCATED: "a too-long request was truncated instead of refused",
    ENGINE_ERROR: "a crash, watchdog or health-check failure line",
    SERVER_READY: "the server finished starting",
    KV_CANARY_STATS: "periodic kv-canary statistics",
    REQUEST_TRACE: "one request's root span from OTLP traces",
    TRANSFER_WARNING: "other PD transfer anomalies (metadata not ready, malformed ABORT, ...)",
    BOOTSTRAP_SERVER: "a prefill node's KV bootstrap server started (the host decode fetches from)",
}

RANK_KEYS: Final = ("dp", "pp", "attn_cp", "moe_dp", "tp", "ep")


class Event:
    """One fact from telemetry.

    `time` is seconds since the Unix epoch (UTC) because detectors compare and subtract times
    constantly; the ISO form is produced only at the JSON boundary.

    Fields may be *pending*: log parsers classify every line eagerly but defer extracting the
    fields until a consumer reads them (`Event.deferred`). Counting kinds over weeks of logs then
    costs one regex match per line, while every consumer still sees fully parsed fields.
    """

    __slots__ = ("kind", "node", "time", "source", "ranks", "_fields", "_pending")

    def __init__(
        self,
        kind: str,
        node: str,
        time: float | None,
        source: str,
        fields: dict[str, Any] | None = None,
        ranks: dict[str, int] | None = None,
    ) -> None:
        self.kind = kind
        self.node = node
        self.time = time
        self.source = source
        self.ranks: dict[str, int] = ranks if ranks is not None else {}
        self._fields: dict[str, Any] | None = fields if fields is not None else {}
        self._pending: tuple[Callable[[str], dict[str, Any]], str, int] | None = None

    @classmethod
    def deferred(
        cls,
        kind: str,
        node: str,
        time: float | None,
        source: str,
        parse: Callable[[str], dict[str, Any]],
        text: str,
        ranks: dict[str, int] | None = None,
        offset: int = 0,
    ) -> Event:
        """An event whose fields are `parse(text[offset:])`, computed on first access."""
        event = cls.__new__(cls)
        event.kind = kind
        event.node = node
        event.time = time
        event.source = source
        event.ranks = ranks if ranks is not None else {}
        event._fields = None
        event._pending = (parse, text, offset)
        return event

    @property
    def fields(self) -> dict[str, Any]:
        if self._fields is None:
            pending = self._pending
            self._pending = None
            if pending is None:
                self._fields = {}
            else:
                parse, text, offset = pending
                try:
                    self._fields = parse(text[offset:] if offset else text)
                except (ValueError, OverflowError, RecursionError):
                    # A value no reader of its form expected (an integer of thousands of digits,
                    # 1e309): the line's facts are unknown, never a crash of the stream.
                    self._fields = {}
        return self._fields

    @fields.setter
    def fields(self, value: dict[str, Any]) -> None:
        self._fields = value
        self._pending = None

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (
            self.kind == other.kind
            and self.node == other.node
            and self.time == other.time
            and self.source == other.source
            and self.ranks == other.ranks
            and self.fields == other.fields
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Event(kind={self.kind!r}, node={self.node!r}, time={self.time!r}, "
            f"source={self.source!r}, fields={self.fields!r}, ranks={self.ranks!r})"
        )

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "node": self.node,
            "time": iso_time(self.time),
            "source": self.source,
        }
        out.update(self.ranks)
        for key, value in self.fields.items():
            if key not in out:
                out[key] = value
        return out

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> Event:
        rest = dict(data)
        kind = str(rest.pop("kind"))
        node = str(rest.pop("node", ""))
        raw_time = rest.pop("time", None)
        source = str(rest.pop("source", ""))
        ranks = {k: int(rest.pop(k)) for k in RANK_KEYS if isinstance(rest.get(k), int)}
        return cls(kind, node, parse_iso_time(raw_time), source, rest, ranks)


def iso_time(epoch: float | None) -> str | None:
    """ISO 8601 UTC to the nearest millisecond, `Z` suffix; None stays None. Nearest, not cut:
    a float a hair under `.209` (a sum of durations) is `.209`, as the engine wrote it.

    >>> iso_time(1788653522.2089999), iso_time(1788653522.9996)
    ('2026-09-06T00:12:02.209Z', '2026-09-06T00:12:03.000Z')
    """
    if epoch is None:
        return None
    millis = round(epoch * 1000)
    stamp = datetime.fromtimestamp(millis // 1000, tz=UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis % 1000:03d}Z"


def parse_iso_time(value: Any) -> float | None:
    """Inverse of `iso_time`, tolerant of offsets, a space separator and missing fractions."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip().replace("Z", "+00:00")
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def epoch_from_parts(year: int, month: int, day: int, hour: int, minute: int, second: int) -> float:
    """Wall-clock parts (taken as UTC) to epoch seconds, without datetime's overhead."""
    return float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))
