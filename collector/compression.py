"""Compressed logs, known by their first bytes, never by their names.

logrotate compresses with gzip unless told otherwise (`compresscmd /usr/bin/xz`, `bzip2`),
and a responder's copy may lose or change the suffix. gzip is read by `collector.files`; xz
and bzip2 here, with the standard library: streamed, several streams one after the other, and
a stream cut short yielding what is readable. zstd and lz4 the standard library cannot read:
such a file is counted (`compressed_not_read`) and said, never read as lines of binary.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Iterator
from typing import BinaryIO, Final, Literal

Format = Literal["gzip", "xz", "bz2"]

_MAGIC: Final[dict[Format, bytes]] = {"gzip": b"\x1f\x8b", "xz": b"\xfd7zXZ\x00", "bz2": b"BZh"}
# Formats no one reads here: zstd's frame magic, lz4's.
_UNREADABLE_MAGIC: Final = (b"\x28\xb5\x2f\xfd", b"\x04\x22\x4d\x18")
# Bytes to look at to tell the format.
MAGIC_BYTES: Final = 6
# What xz and bzip2 raise on damaged data.
_ERRORS: Final = (lzma.LZMAError, OSError, EOFError, ValueError)


def compression_of(start: bytes) -> Format | None:
    """The format of a file whose first bytes (at least `MAGIC_BYTES` of them) are `start`."""
    for name, magic in _MAGIC.items():
        if start.startswith(magic) and (name != "bz2" or start[3:4] in b"123456789"):
            return name
    return None


def unreadable_compression(start: bytes) -> bool:
    """Whether a file is compressed in a format not read here (zstd, lz4)."""
    return start.startswith(_UNREADABLE_MAGIC)


def _decompressor(name: Format) -> lzma.LZMADecompressor | bz2.BZ2Decompressor:
    return lzma.LZMADecompressor() if name == "xz" else bz2.BZ2Decompressor()


def decompressed_head(start: bytes, size: int) -> bytes | None:
    """Up to `size` bytes of text from a compressed file's first bytes `start`; None when it is
    not compressed in a format read here."""
    name = compression_of(start[:MAGIC_BYTES])
    if name is None:
        return None
    try:
        if name == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(start, size)
        return _decompressor(name).decompress(start, size)
    except (zlib.error, *_ERRORS):
        return b""


def stream_blocks(handle: BinaryIO, name: Format, read_size: int) -> Iterator[bytes | str]:
    """The text of an xz or bzip2 file (`name`) in blocks of at most `read_size` bytes, stream
    after stream; a damaged or cut file ends with the reason as a `str` (`corrupt_xz`,
    `truncated_bz2`, `trailing_garbage_after_xz`), after all that could be read of it.

    Output is bounded per call (`max_length`), so a small file that inflates enormously is read
    a block at a time like any other."""
    assert name != "gzip", "gzip is read by collector.files"
    stream = _decompressor(name)
    pending = b""
    while True:
        if stream.eof:
            rest = stream.unused_data or handle.read(read_size)
            if not rest:
                return
            if len(rest) < MAGIC_BYTES:  # the next stream's header cut by the read
                rest += handle.read(read_size)
            if compression_of(rest[:MAGIC_BYTES]) != name:
                yield f"trailing_garbage_after_{name}"
                return
            stream, pending = _decompressor(name), rest
        if stream.needs_input:
            data = pending or handle.read(read_size)
            pending = b""
            if not data:
                yield f"truncated_{name}"
                return
        else:
            data = b""
        try:
            block = stream.decompress(data, read_size)
        except _ERRORS:
            yield f"corrupt_{name}"
            return
        if block:
            yield block
