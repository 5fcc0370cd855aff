"""A folder of thousands of small logs costs work in proportion to its files (blind review
13e J2: 20,000 one-line logs took over two minutes, each node's name looked for in every other
and each clock set against every other; now about 20 s). Counted in calls, never timed."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector import merged_logs
from collector.sglang import clock_join
from collector.sglang.clock_join import Sample, align
from collector.sglang.log_clock import ZoneReading

HOUR = 3600.0


@given(
    st.text(alphabet="ab01-_.", min_size=1, max_size=12),
    st.text(alphabet="ab01-_.", min_size=1, max_size=6),
)
def test_a_name_s_whole_parts_are_the_names_it_holds_between_separators(
    name: str, node: str
) -> None:
    between_separators = re.search(rf"(?<![^-_.]){re.escape(node)}(?![^-_.])", name)
    assert (node in merged_logs._whole_parts(name)) == (between_separators is not None)


def test_a_pod_s_log_is_still_known_as_its_node() -> None:
    known = {f"decode-{i}" for i in range(2000)} | {"prefill-1"}
    assert merged_logs.known_as("sglang-prefill-1-7d9f8c6b5-f7hkr", known) == "prefill-1"
    assert merged_logs.known_as("sglang.decode-10.abc123", known) == "decode-10"
    assert merged_logs.known_as("decode-10-and-decode-11", known) is None  # two: neither


def test_clocks_of_thousands_of_streams_sharing_no_room_are_each_looked_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = 0
    real_offset = clock_join.offset

    def counted(mine: dict[str, float], theirs: dict[str, float]) -> float | None:
        nonlocal calls
        calls += 1
        return real_offset(mine, theirs)

    monkeypatch.setattr(clock_join, "offset", counted)
    t = 1_790_000_000.0
    shared = {str(100 + i): t + 60.0 * i for i in range(5)}
    prefill, decode = ("prefill-0", "log"), ("decode-0", "log")
    samples = {
        prefill: Sample(shared, None),
        decode: Sample({room: stamp + 2 * HOUR for room, stamp in shared.items()}, None),
    }
    lone = [(f"node-{i}", "log") for i in range(3000)]
    samples.update({stream: Sample({f"x{i}": t}, None) for i, stream in enumerate(lone)})
    readings = {stream: ZoneReading(0.0, stream == prefill, True) for stream in samples}
    aligned = align(readings, samples)
    assert {stream: a.zone for stream, a in aligned.items()} == {decode: 2 * HOUR}
    assert calls <= 2  # decode-0, tried once; the others share no room with anyone
