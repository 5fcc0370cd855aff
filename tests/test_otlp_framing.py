"""The framing of a collector's `format: proto` trace file, cut into blocks anywhere."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from collector.sglang.otlp_framing import framed_export_head, frames


def _framed(bodies: list[bytes]) -> bytes:
    return b"".join(len(body).to_bytes(4, "big") + body for body in bodies)


def _blocks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(0, 10_000)))
def test_every_export_comes_back_whole_wherever_the_blocks_cut(
    bodies: list[bytes], cuts: list[int]
) -> None:
    assert list(frames(_blocks(_framed(bodies), cuts), max_frame_bytes=1000)) == bodies


@given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=6), st.data())
def test_a_file_cut_inside_an_export_keeps_the_exports_before_and_says_so(
    bodies: list[bytes], data: st.DataObject
) -> None:
    whole = _framed(bodies)
    last_start = len(whole) - len(bodies[-1]) - 4
    cut = data.draw(st.integers(last_start + 1, len(whole) - 1))
    assert list(frames([whole[:cut]], max_frame_bytes=1000)) == [*bodies[:-1], "truncated_export"]


def test_an_export_too_large_is_passed_over_by_its_length_and_the_next_is_read() -> None:
    data = _framed([b"x" * 50, b"kept"])
    blocks = _blocks(data, [3, 20, 40])
    assert list(frames(blocks, max_frame_bytes=10)) == ["document_too_large", b"kept"]


@given(st.binary(max_size=200), st.lists(st.integers(0, 300)))
def test_junk_never_raises(data: bytes, cuts: list[int]) -> None:
    for frame in frames(_blocks(data, cuts), max_frame_bytes=64):
        assert isinstance(frame, str) or len(frame) <= 64
    framed_export_head(data)


def test_only_a_length_and_resource_spans_that_fit_open_a_framed_file() -> None:
    resource_spans = b"\x0a\x03abc"  # field 1, length-delimited, 3 bytes
    assert framed_export_head(_framed([resource_spans]))
    assert not framed_export_head(_framed([b"\x12\x03abc"]))  # another field first
    assert not framed_export_head(_framed([b"\x0a\x09abc"]))  # longer than the export
    # Text: its first byte alone is a length of hundreds of megabytes.
    assert not framed_export_head(b"[2026-08-27 10:00:00] Prefill batch, #new-seq: 1")
    assert not framed_export_head(b'{"resourceSpans": []}')
