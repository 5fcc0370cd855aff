"""Logs compressed with xz or bzip2 (logrotate's `compresscmd`), and with what cannot be read.

From an audit of rotated logs: a decode rotation recompressed as `decode-0.log.1.xz` was read
as 270 lines of binary, under the share of unusable lines that is said; its exposure was lost
and the window's start moved an hour later without a word.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import shutil
import subprocess
import sys
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.compression import Format, stream_blocks
from collector.files import ReadStats, discover, read_lines

LINES = [f"[2026-09-06 00:00:{i % 60:02d} TP0] Decode batch, #token: {i}" for i in range(5000)]
TEXT = "".join(line + "\n" for line in LINES).encode()

COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "xz": lzma.compress,
    "bz2": bz2.compress,
    "gz": gzip.compress,
}


def _read(path: Path) -> tuple[list[str], dict[str, int]]:
    stats = ReadStats()
    return [line for _, line in read_lines(path, stats)], stats.dropped


@pytest.mark.parametrize("suffix", ["xz", "bz2"])
def test_xz_and_bzip2_rotations_read_as_their_text(tmp_path: Path, suffix: str) -> None:
    packed = COMPRESSORS[suffix](TEXT)
    # Two streams one after the other (`cat a.xz b.xz`), as two gzip members are read.
    path = tmp_path / f"decode-0.log.1.{suffix}"
    path.write_bytes(packed + packed)
    lines, dropped = _read(path)
    assert lines == LINES + LINES
    assert dropped == {}
    assert [(f.node, f.order) for f in discover([tmp_path])] == [("decode-0", (-1, "~"))]


@pytest.mark.parametrize("suffix", ["xz", "bz2"])
def test_a_cut_or_damaged_stream_yields_what_is_readable_and_is_counted(
    tmp_path: Path, suffix: str
) -> None:
    # Long enough for bzip2's blocks (900 kB of text each) to end before the cut.
    many = LINES * 12
    packed = COMPRESSORS[suffix]("".join(line + "\n" for line in many).encode())
    cut = tmp_path / "cut.log"
    cut.write_bytes(packed[: len(packed) * 2 // 3])
    lines, dropped = _read(cut)
    assert lines == many[: len(lines)] and 0 < len(lines) < len(many)
    assert dropped == {f"truncated_{suffix}": 1, f"truncated_{suffix}_partial_line": 1}

    junk = tmp_path / "junk.log"
    junk.write_bytes(packed + b"\x00garbage after the stream")
    lines, dropped = _read(junk)
    assert lines == many
    assert dropped == {f"trailing_garbage_after_{suffix}": 1}


def test_zstd_is_counted_and_said_not_read_as_binary(tmp_path: Path) -> None:
    # zstd's frame magic and some frame: the standard library has no reader for it.
    case = tmp_path / "case"
    shutil.copytree(Path(__file__).parent / "testdata" / "reference_incident", case)
    (case / "decode-0.log.1.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(range(256)) * 40)
    lines, dropped = _read(case / "decode-0.log.1.zst")
    assert lines == [] and dropped == {"compressed_not_read": 1}
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", "--quiet", "--no-parquet"]
        + [str(case), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert "UNREAD: files not read whole: compressed_not_read 1" in done.stdout


@pytest.mark.parametrize("suffix", ["xz", "bz2"])
def test_an_incident_with_its_decode_log_in_xz_or_bzip2_names_the_same_exposures(
    tmp_path: Path, suffix: str
) -> None:
    reference = Path(__file__).parent / "testdata" / "reference_incident"
    runs = {}
    for name in ("plain", suffix):
        case = tmp_path / name
        shutil.copytree(reference, case)
        if name != "plain":
            decode = case / "decode-0.log"
            (case / f"decode-0.log.1.{suffix}").write_bytes(
                COMPRESSORS[suffix](decode.read_bytes())
            )
            decode.write_text("")
        done = subprocess.run(
            [sys.executable, "-m", "collector.cli", "forensics", "--quiet", "--no-parquet"]
            + [str(case), "--out", str(tmp_path / f"out-{name}")],
            capture_output=True,
            text=True,
        )
        runs[name] = [line for line in done.stdout.splitlines() if "rid=" in line]
    assert runs["plain"] and runs[suffix] == runs["plain"]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["xz", "bz2", "gz"]),
    st.integers(min_value=0, max_value=4000),
    st.binary(max_size=64),
)
def test_stream_blocks_never_raise_on_damage(suffix: str, cut: int, junk: bytes) -> None:
    packed = COMPRESSORS[suffix](TEXT[:20000])
    damaged = packed[:cut] + junk + packed[cut + len(junk) :]
    name: Format = "xz" if suffix == "xz" else "bz2" if suffix == "bz2" else "gzip"
    out = list(stream_blocks(io.BytesIO(damaged), name, 4096))
    text = b"".join(b for b in out if isinstance(b, bytes))
    reasons = [b for b in out if isinstance(b, str)]
    assert len(reasons) <= 1 and (not reasons or out[-1] == reasons[0])
    assert all(len(b) <= 4096 for b in out if isinstance(b, bytes))
    if damaged == packed:
        assert not reasons and text == TEXT[:20000]


def test_a_gzip_bomb_is_read_a_bounded_block_at_a_time(tmp_path: Path) -> None:
    """A small gzip file that inflates to 64 MiB: inflated by one call per 1 MiB read, it was
    held whole in memory at once (a bigger one would end the run)."""
    path = tmp_path / "decode-0.log.1.gz"
    line = b"[2026-09-06 00:00:00 TP0] Decode batch, #running-req: 1\n"
    inflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(path, "wb") as out:
        block = line * ((1 << 20) // len(line))
        for _ in range(64):
            out.write(inflater.compress(block))
        out.write(inflater.flush())
    assert path.stat().st_size < 1 << 20
    with open(path, "rb") as handle:
        sizes = [len(b) for b in stream_blocks(handle, "gzip", 1 << 16) if isinstance(b, bytes)]
    assert sum(sizes) == 64 * len(block) and max(sizes) <= 1 << 16
    stats = ReadStats()
    tracemalloc.start()
    try:
        lines = sum(1 for _ in read_lines(path, stats))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines == 64 * (len(block) // len(line)) and stats.dropped == {}
    assert peak < 16 << 20
