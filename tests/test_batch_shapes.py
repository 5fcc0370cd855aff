"""The shaped read of batch lines (one learned pattern per key layout) must give exactly the
fields of the generic key/value read, whatever the lines and in whatever order they come."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.parse import ParseStats, events_by_node
from collector.sglang import batch
from collector.sglang.batch import BatchSampler, parse_batch_fields, parse_batch_fields_generic

DECODE = (
    ", #running-req: 1, #token: 3136, token usage: 0.00, pre-allocated usage: 0.00, "
    "#prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: True, "
    "gen throughput (token/s): 55.16, #queue-req: 0"
)

_keys = st.sampled_from(
    [
        "#running-req",
        "#token",
        "token usage",
        "cuda graph",
        "gen throughput (token/s)",
        "#queue-req",
        "cache hit rate",
        "x",
        "#",
        " ",
    ]
)
_values = st.one_of(
    st.integers(0, 10**9).map(str),
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: f"{v:.2f}"),
    st.sampled_from(["True", "False", "None", "12.5%", "", "abc", "²", "1e5", " 7", "-3", "a: b"]),
)
_bodies = st.lists(st.tuples(_keys, _values), min_size=1, max_size=8).map(
    lambda items: "," + ",".join(f" {k}: {v}" for k, v in items)
)


def _forget() -> None:
    batch._shapes.clear()
    batch._seen_once.clear()


def _learned() -> int:
    return sum(map(len, batch._shapes.values()))


def test_a_learned_shape_reads_later_lines_of_the_layout() -> None:
    _forget()
    first = parse_batch_fields(DECODE)
    assert _learned() == 0  # one sighting is not a shape yet
    parse_batch_fields(DECODE)
    assert _learned() == 1
    later = DECODE.replace("#token: 3136", "#token: 4100").replace("55.16", "61.02")
    fields = parse_batch_fields(later)
    assert fields["token"] == 4100 and fields["gen_throughput"] == 61.02
    assert fields["cuda_graph"] is True and first["token"] == 3136
    assert _learned() == 1  # read by the shape, nothing new learned


def test_a_value_in_another_form_falls_back_to_the_generic_read() -> None:
    _forget()
    parse_batch_fields(DECODE)
    parse_batch_fields(DECODE)
    changed = DECODE.replace("token usage: 0.00", "token usage: 12.5%")
    assert parse_batch_fields(changed)["token_usage"] == 0.125
    assert _learned() == 1
    assert parse_batch_fields(changed)["token_usage"] == 0.125
    assert _learned() == 2


def test_layouts_that_never_repeat_compile_nothing() -> None:
    _forget()
    for n in range(300):
        fields = parse_batch_fields(DECODE.replace("#token:", f"#token-{n}:"))
        assert fields[f"token_{n}"] == 3136
    assert _learned() == 0


def test_unicode_digits_never_raise() -> None:
    assert parse_batch_fields(", a: ², b: 3")["a"] == "²"


@settings(max_examples=400)
@given(st.lists(_bodies, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_shaped_and_generic_reads_agree(bodies: list[str], rng) -> None:  # type: ignore[no-untyped-def]
    _forget()
    # Each body three times, shuffled: the second sight of a layout learns its shape, the third
    # is read by it.
    lines = bodies * 3
    rng.shuffle(lines)
    for body in lines:
        assert _typed(parse_batch_fields(body)) == _typed(parse_batch_fields_generic(body))


def _typed(fields: dict[str, object]) -> list[tuple[str, type, object]]:
    """Fields with their types and order: `1 == 1.0 == True` must not hide a wrong conversion."""
    return [(key, type(value), value) for key, value in fields.items()]


_PICKS = ("token_usage", "queue_req", "gen_throughput", "x")


@settings(max_examples=400)
@given(
    st.lists(_bodies, min_size=1, max_size=6),
    st.sampled_from(["", " [7]", ".", ",,"]),
    st.randoms(use_true_random=False),
)
def test_a_sampler_reads_what_the_full_read_gives(bodies: list[str], lead: str, rng) -> None:  # type: ignore[no-untyped-def]
    """The sampler (used in place of the full read, which it falls back to) gives the picked
    keys exactly as the full read does, or declines; and it declines only lines no learnt
    shape fits."""
    _forget()
    sampler = BatchSampler(_PICKS)
    head = "[2026-09-06 00:00:02 TP0] Decode batch"
    lines = [lead + body for body in bodies] * 3
    rng.shuffle(lines)
    for body in lines:
        line = head + body
        sample = sampler(line, len(head))
        fields = parse_batch_fields(body)
        if sample is None:
            continue
        keys, values = sample
        assert set(keys) == set(fields)
        expected = [fields.get(key) for key in _PICKS]
        assert [(type(v), v) for v in values] == [(type(v), v) for v in expected]
    # Every layout seen three times is learnt: the sampler then reads all of them (iteration
    # numbers aside, which only the full read handles).
    if lead != " [7]":
        readable = [line for line in lines if _learned_fits(line)]
        assert all(sampler(head + body, len(head)) is not None for body in readable)


def _learned_fits(body: str) -> bool:
    stripped = body.lstrip(".,")
    return any(
        shape.pattern.fullmatch(stripped) for shapes in batch._shapes.values() for shape in shapes
    )


def test_a_sampler_picks_the_last_of_a_repeated_key_and_none_for_a_missing_one() -> None:
    _forget()
    body = ", #queue-req: 3, token usage: 0.25, #queue-req: 9"
    parse_batch_fields(body)
    parse_batch_fields(body)
    sample = BatchSampler(("queue_req", "gen_throughput", "token_usage"))("Decode batch" + body, 12)
    assert sample == (("queue_req", "token_usage", "queue_req"), [9, None, 0.25])


def test_a_release_printing_key_equals_value_words_is_read_and_one_with_none_is_drift(
    tmp_path: Path,
) -> None:
    """Blind review 21: `Prefill batch, new_seq=1 new_token=158 …` and `Decode batch |
    running=4 | …` became batch events with no field, and `--stats` counted no drift."""
    (tmp_path / "p.log").write_text(
        "[2027-01-01 10:00:03 TP0] Prefill batch, new_seq=1 new_token=158 cached_token=0 "
        "token_usage=0.08 running_req=31 queue_req=0\n"
        "[2027-01-01 10:00:04 TP0] Decode batch | running=4 | tokens=100 | usage=0.01\n"
        "[2027-01-01 10:00:05 TP0] Prefill batch, something unrecognised here\n"
    )
    stats = ParseStats()
    events = list(events_by_node([tmp_path], stats))
    assert [e.fields for e in events] == [
        {
            "new_seq": 1,
            "new_token": 158,
            "cached_token": 0,
            "token_usage": 0.08,
            "running_req": 31,
            "queue_req": 0,
        },
        {"running": 4, "tokens": 100, "usage": 0.01},
    ]
    assert stats.unclassified_engine == 1
