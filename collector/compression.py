"""Compressed logs, known by their first bytes, never by their names.

logrotate compresses with gzip unless told otherwise (`compresscmd /usr/bin/xz`, `bzip2`),
and a responder's copy may lose or change the suffix. All three are read here, with the
standard library and one reader: streamed, output bounded per call (a small file that inflates
to gigabytes is read a block at a time), several streams one after the other, and a stream cut
short yielding what is readable. zstd and lz4 the standard library cannot read:
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
# What the decompressors raise on damaged data.
_ERRORS: Final = (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError)


def compression_of(start: bytes) -> Format | None:
    """The format of a file whose first bytes (at least `MAGIC_BYTES` of them) are `start`."""
    for name, magic in _MAGIC.items():
        if start.startswith(magic) and (name != "bz2" or start[3:4] in b"123456789"):
            return name
    return None


def unreadable_compression(start: bytes) -> bool:
    """Whether a file is compressed in a format not read here (zstd, lz4)."""
    return start.startswith(_UNREADABLE_MAGIC)


class _Gunzip:
    """One gzip member, with the interface of `lzma`'s and `bz2`'s decompressors: zlib keeps
    the input a bounded call left over in `unconsumed_tail`, and may hold output back when a
    call filled `max_length`, where those two say `needs_input`."""

    __slots__ = ("_inflate", "needs_input")

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.needs_input = True

    @property
    def eof(self) -> bool:
        return self._inflate.eof

    @property
    def unused_data(self) -> bytes:
        return self._inflate.unused_data

    def decompress(self, data: bytes, max_length: int) -> bytes:
        inflate = self._inflate
        out = inflate.decompress(inflate.unconsumed_tail + data, max_length)
        self.needs_input = not inflate.unconsumed_tail and len(out) < max_length
        return out


Decompressor = lzma.LZMADecompressor | bz2.BZ2Decompressor | _Gunzip


def _decompressor(name: Format) -> Decompressor:
    if name == "gzip":
        return _Gunzip()
    return lzma.LZMADecompressor() if name == "xz" else bz2.BZ2Decompressor()


def decompressed_head(start: bytes, size: int) -> bytes | None:
    """Up to `size` bytes of text from a compressed file's first bytes `start`; None when it is
    not compressed in a format read here."""
    name = compression_of(start[:MAGIC_BYTES])
    if name is None:
        return None
    try:
        return _decompressor(name).decompress(start, size)
    except _ERRORS:
        return b""


def stream_blocks(handle: BinaryIO, name: Format, read_size: int) -> Iterator[bytes | str]:
    """The text of a compressed file (`name`) in blocks of at most `read_size` bytes, stream
    after stream (gzip's members, `cat a.xz b.xz`); a damaged or cut file ends with the reason
    as a `str` (`corrupt_gzip`, `truncated_bz2`, `trailing_garbage_after_xz`), after all that
    could be read of it.

    Output is bounded per call (`max_length`), so a small file that inflates enormously is read
    a block at a time like any other."""
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
