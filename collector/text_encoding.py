"""Log text in the forms it is saved in, as UTF-8.

Windows PowerShell's `>` writes UTF-16 with a byte-order mark (`Out-File -Encoding utf32`,
UTF-32); some editors leave a UTF-8 mark before the first line; some tools end lines with CR
alone. Read as bytes, every line of a UTF-16 or UTF-32 log is binary, the first line behind a
mark is no engine line, and a CR-ended log is one line. Both the readers and the sniffs that
look at a file's start (newest first? merged? a trace or cloud export?) see the text as UTF-8
with newlines.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import Final

_UTF8_BOM: Final = b"\xef\xbb\xbf"
_UTF16_BOMS: Final = (b"\xff\xfe", b"\xfe\xff")
_UTF32_BOMS: Final = (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")
_TEXT_BYTES: Final = bytes([9, 10, 13, *range(32, 127)])
# A file with CR and no LF in its first bytes has lines ended by CR alone.
_CR_HEAD: Final = 1 << 16


def wide_encoding(head: bytes) -> str | None:
    """The codec of a UTF-16 or UTF-32 text by its first bytes: told by the mark, or, without
    one, by NULs in all but one byte of every 2 (or 4), little- or big-endian, and printable
    ASCII in that one (not any binary with NULs)."""
    if head.startswith(_UTF32_BOMS):  # before UTF-16's: UTF-32-LE's mark begins with it
        return "utf-32"
    if head.startswith(_UTF16_BOMS):
        return "utf-16"
    sample = head[:4096]
    if len(sample) < 64:
        return None
    for width, name in ((4, "utf-32"), (2, "utf-16")):
        units = len(sample) // width
        for text, endian in ((0, "le"), (width - 1, "be")):
            nuls = sum(sample[at::width].count(0) for at in range(width) if at != text)
            if nuls <= 0.9 * (width - 1) * units:  # the usual case, told at once
                continue
            chars = sample[text::width]
            if len(chars) - len(chars.translate(None, _TEXT_BYTES)) > 0.9 * units:
                return f"{name}-{endian}"
    return None


def as_utf8(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """The blocks of a file read from its start, as UTF-8 (see the module docstring)."""
    first = next(blocks, b"")
    encoding = wide_encoding(first)
    if encoding is not None:
        decoder = codecs.getincrementaldecoder(encoding)("replace")
        yield decoder.decode(first).encode("utf-8", "surrogatepass")
        for block in blocks:
            yield decoder.decode(block).encode("utf-8", "surrogatepass")
        yield decoder.decode(b"", final=True).encode("utf-8", "surrogatepass")
        return
    if first.startswith(_UTF8_BOM):
        first = first[len(_UTF8_BOM) :]
    # Told from the same first bytes however the file is cut into blocks.
    if len(first) < _CR_HEAD:
        head, size = [first], len(first)
        while size < _CR_HEAD and (more := next(blocks, None)) is not None:
            head.append(more)
            size += len(more)
        first = b"".join(head)
    if first.find(b"\r", 0, _CR_HEAD) >= 0 and first.find(b"\n", 0, _CR_HEAD) < 0:
        # Lines ended by CR alone (classic Mac, some Windows tools' exports): read as one line,
        # a whole log was its last record, and an all-clear (blind review 13e D2).
        yield first.replace(b"\r", b"\n")
        for block in blocks:
            yield block.replace(b"\r", b"\n")
        return
    if first:
        yield first
    yield from blocks


def head_as_utf8(head: bytes) -> bytes:
    """A file's first bytes as UTF-8 (a character cut at the end is replaced)."""
    return b"".join(as_utf8(iter([head])))
