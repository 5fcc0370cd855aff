"""The framing of an OpenTelemetry Collector file exporter's `format: proto` file: each export
its length (four bytes, big-endian), then its protobuf bytes. Apart from the decoding
(`otlp_file`), so telling such a file by its first bytes imports no protobuf."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

LENGTH_BYTES: Final = 4
# No export is larger when told by its head; a text's first byte alone makes a length of
# hundreds of megabytes.
_LARGEST_HEAD_LENGTH: Final = 1 << 26


def framed_export_head(head: bytes) -> bool:
    """Whether a file's first bytes open a `format: proto` trace file: a length within reason,
    then an `ExportTraceServiceRequest`'s first field, `resource_spans` (field 1, length-
    delimited), whose own length fits in the export."""
    if len(head) < LENGTH_BYTES + 2 or head[LENGTH_BYTES] != 0x0A:
        return False
    length = int.from_bytes(head[:LENGTH_BYTES], "big")
    if not 2 <= length <= _LARGEST_HEAD_LENGTH:
        return False
    inner, shift, at = 0, 0, LENGTH_BYTES + 1
    while at < len(head) and shift < 35:
        byte = head[at]
        inner |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return at - LENGTH_BYTES + inner <= length
        shift += 7
    return False


def frames(blocks: Iterable[bytes], max_frame_bytes: int) -> Iterator[bytes | str]:
    """Each export's bytes, from the file's bytes in blocks; a frame longer than
    `max_frame_bytes` is `"document_too_large"` (passed over by its length, so the framing
    holds), and a file cut inside a frame ends with `"truncated_export"`."""
    pending = bytearray()
    skip = 0  # bytes still to pass over of a frame too large to keep
    for block in blocks:
        if skip:
            passed = min(skip, len(block))
            skip -= passed
            block = block[passed:]
        pending += block
        start = 0
        while len(pending) - start >= LENGTH_BYTES:
            length = int.from_bytes(pending[start : start + LENGTH_BYTES], "big")
            body = start + LENGTH_BYTES
            if length > max_frame_bytes:
                yield "document_too_large"
                skip = max(0, body + length - len(pending))
                start = min(len(pending), body + length)
                continue
            if len(pending) - body < length:
                break
            yield bytes(pending[body : body + length])
            start = body + length
        del pending[:start]
    if pending or skip:
        yield "truncated_export"
