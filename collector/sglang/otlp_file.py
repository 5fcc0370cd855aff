"""Files of OTLP trace exports, as a collector's file exporter leaves them, read export by export.

SGLang's `opentelemetry.yaml` sends traces to an OpenTelemetry Collector whose `file` exporter
writes `/tmp/otel_trace.json`: one OTLP/JSON `ExportTraceServiceRequest` a line. A responder may
also hold one export saved by hand (indented, or several as one JSON array, maybe behind a
byte-order mark), or the exporter's `format: proto` file: each export its length (four bytes,
big-endian) and then its protobuf bytes (`read_framed_exports`). A request's spans can straddle
exports; one `SpanCarry` per file joins them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, Final

from collector.sglang.otlp import SpanCarry, parse_otlp_traces
from collector.sglang.otlp_framing import frames
from collector.sglang.outcome import BLANK_LINES, ParseOutcome

_JSON: Final = "application/json"
_PROTOBUF: Final = "application/x-protobuf"


def read_trace_exports(
    lines: Iterable[tuple[int, str]], prefix: str, max_document_bytes: int
) -> Iterator[ParseOutcome]:
    """What each export of a trace file gives, from its numbered lines (`prefix` + number
    names a line as the events' source). An indented export is read whole, up to
    `max_document_bytes` (past that, one `document_too_large` drop)."""
    carry = SpanCarry()
    document: list[tuple[int, str]] | None = None
    size = 0
    first = True
    for number, line in lines:
        if document is not None:
            size += len(line) + 1
            if size > max_document_bytes:
                too_large = ParseOutcome()
                too_large.drop("document_too_large")
                yield too_large
                return
            document.append((number, line))
            continue
        if first:
            line = line.removeprefix("\ufeff")  # a byte-order mark
        if not line.strip():
            blank = ParseOutcome()
            blank.note(BLANK_LINES)
            yield blank
            continue
        if first and (line.lstrip().startswith("[") or line.rstrip().endswith(("{", "["))):
            document, size = [(number, line)], len(line) + 1  # indented, or an array
            continue
        first = False
        yield parse_otlp_traces(line, content_type=_JSON, source=prefix + str(number), carry=carry)
    yield carry.flush()
    if document is not None:
        yield from _document(document, prefix)


def _document(document: list[tuple[int, str]], prefix: str) -> Iterator[ParseOutcome]:
    """An indented export read whole; failing that, its lines one by one, in case the first
    line only looked like a document's opening (a cut line), so the rest is not lost."""
    text = "\n".join(line for _, line in document)
    source = prefix + str(document[0][0])
    if text.lstrip().startswith("["):  # exports saved as one JSON array
        exports = _json_array(text)
        if exports is not None:
            carry = SpanCarry()
            for export in exports:
                yield parse_otlp_traces(
                    json.dumps(export), content_type=_JSON, source=source, carry=carry
                )
            yield carry.flush()
            return
    whole = parse_otlp_traces(text, content_type=_JSON, source=source)
    if whole.events or not whole.dropped:
        yield whole
        return
    by_line = [
        parse_otlp_traces(line, content_type=_JSON, source=prefix + str(number))
        for number, line in document
        if line.strip()
    ]
    if not any(outcome.events for outcome in by_line):
        yield whole  # one damaged document: one drop
        return
    yield from by_line


def _json_array(text: str) -> list[Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, list) else None


def read_framed_exports(
    blocks: Iterable[bytes], prefix: str, max_document_bytes: int
) -> Iterator[ParseOutcome]:
    """What each export of a `format: proto` trace file gives, from the file's bytes in blocks
    (`prefix` + the export's number names it as the events' source). Framing damage is a drop
    (`otlp_framing.frames`). Why read it at all: blind review 8c, a collector set to
    `format: proto` left every span unread, and the exposures they carried unnamed."""
    carry = SpanCarry()
    for number, frame in enumerate(frames(blocks, max_document_bytes), start=1):
        if isinstance(frame, str):
            damaged = ParseOutcome()
            damaged.drop(frame)
            yield damaged
            continue
        yield parse_otlp_traces(
            frame, content_type=_PROTOBUF, source=prefix + str(number), carry=carry
        )
    yield carry.flush()
