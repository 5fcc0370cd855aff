"""The few facts kvwatch reads of a trace span, whatever format carried it.

Every trace reader (OTLP protobuf, OTLP/JSON, Jaeger's JSON) turns its spans into these, so
one code path (`otlp.parse_otlp_traces`) classifies and judges them all alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

# Stats key, and the kind of a span until it is classified.
OTHER_SPANS: Final = "other_spans"


@dataclass(slots=True)
class SpanView:
    """What is read of a span, named as OTLP's protobuf `Span` names it (ids as bytes: trace
    16, span 8; times in nanoseconds since the epoch; status code as OTLP's)."""

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    status_code: int
    status_message: str


@dataclass(slots=True, eq=False)
class SpanRef:
    """A span with its resource's attributes and its own, as plain Python values (bytes as
    hex text), and what classifying it found."""

    span: SpanView
    resource: dict[str, Any]
    attributes: dict[str, Any]
    kind: str = OTHER_SPANS
    threads: list[SpanRef] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)
