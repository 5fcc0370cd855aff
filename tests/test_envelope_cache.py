"""The prefix caches must never change what a prefix means: every line read through them gets the
time and ranks its own text states, whatever was read before it."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from collector.sglang import envelope
from collector.sglang.envelope import cached_head

_stamps = st.datetimes(datetime(2024, 1, 1), datetime(2027, 12, 31)).map(
    lambda d: d.replace(microsecond=0)
)
_ranks = st.sampled_from(["", " TP0", " TP3", " DP6 TP6 EP6", " PP0 ATTN_CP0 TP0"])


def _line(stamp: datetime, ranks: str, fraction: str = "") -> str:
    return f"[{stamp:%Y-%m-%d %H:%M:%S}{fraction}{ranks}] Decode batch, #running-req: 1"


@given(st.lists(st.tuples(_stamps, _ranks, st.sampled_from(["", ".5", ".123"])), max_size=40))
def test_cached_heads_state_each_lines_own_time(heads: list[tuple[datetime, str, str]]) -> None:
    envelope._head_cache.clear()
    envelope._minute_cache.clear()
    # Neighbours in the same minute are what the minute cache serves: add them on purpose.
    lines = []
    for stamp, ranks, fraction in heads:
        lines.append((stamp, ranks, fraction))
        lines.append((stamp.replace(second=(stamp.second + 17) % 60), ranks, ""))
    for stamp, ranks, fraction in lines:
        line = _line(stamp, ranks, fraction)
        hit = cached_head(line)
        assert hit is not None
        when, rank_map, offset = hit
        expected = stamp.replace(tzinfo=UTC).timestamp() + (float(fraction) if fraction else 0.0)
        assert when == expected
        assert line[offset:].startswith("Decode batch")
        assert rank_map == {
            name.lower(): int(n)
            for name, n in (envelope._RANK.fullmatch(tok).groups() for tok in ranks.split())  # type: ignore[union-attr]
        }


def test_a_prefix_that_is_not_sglangs_is_not_read_as_one() -> None:
    envelope._minute_cache.clear()
    assert cached_head("[2026-09-06 00:00:04 TP0] x") is not None
    # Same minute key shape, but the seconds are not digits.
    assert cached_head("[2026-09-06 00:00:x4 TP0] x") is None
    assert cached_head("[16:43:29 TP0] Finish: obj=GenerateReqInput(text='a] b')") is None
