"""The shaped read of batch lines (one learned pattern per key layout) must give exactly the
fields of the generic key/value read, whatever the lines and in whatever order they come."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.sglang import batch
from collector.sglang.batch import parse_batch_fields, parse_batch_fields_generic

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
