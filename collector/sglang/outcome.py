"""What a non-log parser hands back: the events it read and what it had to drop, by reason.

Parsers of scraped or pushed documents (Prometheus expositions, `/server_info` JSON, OTLP
payloads) never raise on bad input; they count it here instead, so a malformed scrape shows up
as a number on kvwatch's own metrics rather than as a crashed sidecar.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from collector.events import Event

# Drop reasons shared by the parsers (each parser documents which ones it uses).
MALFORMED_EXPOSITION = "malformed_exposition"
NOT_UTF8 = "not_utf8"
NOT_JSON = "not_json"
NOT_JSON_OBJECT = "not_json_object"
NOT_PROTOBUF = "not_protobuf"
MALFORMED_OTLP_JSON = "malformed_otlp_json"
# One span of an OTLP export no reader takes; the export's other spans are read.
MALFORMED_SPAN = "malformed_span"
# One trace of a Jaeger file whose own shape is not Jaeger's (not an object, spans not a list).
MALFORMED_JAEGER_TRACE = "malformed_jaeger_trace"
# Traces that reached a reader of other documents (a Jaeger file whose first 4 KiB did not
# tell it as traces): not read, so named, never an all-clear's.
TRACE_FORMAT_NOT_READ = "trace_format_not_read"
MISSING_FIELD = "missing_field"
UNRECOGNISED_DOCUMENT = "unrecognised_document"
UNKNOWN_ENDPOINT = "unknown_endpoint"
DOCUMENT_TOO_LARGE = "document_too_large"
# Drops that, in a saved document that gave nothing, mean the document was not read: a cut
# `/server_info`, a login page saved as one, a scrape that is no exposition. The document is
# then named (`ParseStats.dropped_files`), and the rollout gate fails closed on it.
UNREAD_DOCUMENT: Final = frozenset(
    {
        MALFORMED_EXPOSITION,
        NOT_UTF8,
        NOT_JSON,
        NOT_JSON_OBJECT,
        MISSING_FIELD,
        UNRECOGNISED_DOCUMENT,
        UNKNOWN_ENDPOINT,
        DOCUMENT_TOO_LARGE,
    }
)


# Counted in an outcome's `stats` by readers of whole files: a blank line, neither data nor
# loss.
BLANK_LINES: Final = "blank_lines"


@dataclass(slots=True)
class ParseOutcome:
    """Events read plus counts of what was dropped (reason -> count).

    `stats` counts input that was understood but is not an event (metadata lines, thread
    spans): it is neither data nor loss, and keeping it separate lets a caller check that
    every piece of input was accounted for.
    """

    events: list[Event] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str, count: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + count

    def note(self, key: str, count: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + count

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def merge(self, other: ParseOutcome) -> ParseOutcome:
        """Fold `other` into this outcome (in place) and return self, for chaining."""
        self.events.extend(other.events)
        for reason, count in other.dropped.items():
            self.drop(reason, count)
        for key, count in other.stats.items():
            self.note(key, count)
        return self

    @classmethod
    def combine(cls, outcomes: Iterable[ParseOutcome]) -> ParseOutcome:
        total = cls()
        for outcome in outcomes:
            total.merge(outcome)
        return total


def json_object(doc: str | bytes, out: ParseOutcome) -> dict[str, Any] | None:
    """`doc` as a JSON object, or None with `not_json` / `not_json_object` counted in `out`."""
    try:
        data = json.loads(doc)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError included
        out.drop(NOT_JSON)
        return None
    if not isinstance(data, dict):
        out.drop(NOT_JSON_OBJECT)
        return None
    return data
