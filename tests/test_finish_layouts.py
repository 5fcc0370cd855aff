"""`Finish:` lines whose meta_info is read by a learnt layout give what the generic read gives."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.sglang import request_log
from collector.sglang.templates import Layouts


def generic(message: str) -> dict[str, Any]:
    """The generic read alone: ids from the obj repr, every meta_info scalar by the rule."""
    meta_text = request_log._meta_info_text(message)
    out_at = message.rfind(", out={")
    rid, room = request_log._obj_ids(message[: out_at if out_at > 0 else len(message)])
    meta = (
        request_log._meta_from_text(request_log._meta_dict_text(meta_text))
        if meta_text is not None
        else {}
    )
    return request_log._finished_fields(meta, rid, room)


def typed(fields: dict[str, Any]) -> list[tuple[str, Any, type]]:
    return [(key, value, type(value)) for key, value in fields.items()]


NUMBERS = st.sampled_from(["96349", "0", "2.5", "-3", "1e-05", "None", "True", "'7'", "''"])
IDS = st.sampled_from(["'536f6d38f2fa'", "'42'", "None", "''", "'a-b'"])
FINISHES = st.sampled_from(
    [
        "{'type': 'stop', 'matched': 151329}",
        "{'type': 'stop', 'matched': '</s>'}",
        "{'type': 'length', 'length': 128}",
        "{'type': 'abort', 'message': 'Input length (912384 tokens) exceeds', "
        "'status_code': 400, 'err_type': 'BadRequestError'}",
        "None",
    ]
)
KEYS = [
    "prompt_tokens",
    "weight_version",
    "total_retractions",
    "num_retractions",
    "reasoning_tokens",
    "completion_tokens",
    "cached_tokens",
    "e2e_latency",
    "queue_time",
    "first_token_latency",
    "decode_throughput",
    "prompt_tokens",  # a key written twice
]


@st.composite
def finish_line(draw: st.DrawFn) -> str:
    items = [f"'id': {draw(IDS)}", f"'finish_reason': {draw(FINISHES)}"]
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=9, unique=False)):
        value = "'default'" if key == "weight_version" else draw(NUMBERS)
        items.append(f"'{key}': {value}")
    if draw(st.booleans()):
        items.append("'cached_tokens_details': {'device': 96064, 'host': 0}")
    obj = "GenerateReqInput(text='hi', rid='d1c0b3a2', bootstrap_room=7701188362211045501)"
    return f"Finish: obj={obj}, out={{'text': 'ok', 'meta_info': {{{', '.join(items)}}}}}"


@settings(max_examples=500, deadline=None)
@given(lines=st.lists(finish_line(), min_size=1, max_size=5))
def test_a_layout_reads_every_finish_line_as_the_generic_read_does(lines: list[str]) -> None:
    layouts = Layouts()
    for line in lines * 3:  # later passes read lines seen twice by a layout
        assert typed(request_log.read_text_finish(line, layouts)) == typed(generic(line))


def test_a_repeated_meta_info_layout_is_reused_and_an_abort_never_learnt() -> None:
    layouts = Layouts()
    line = (
        "Finish: obj=GenerateReqInput(rid='d1'), out={'meta_info': {'id': 'd1', 'finish_reason': "
        "{'type': 'stop', 'matched': 151329}, 'prompt_tokens': 4096, 'completion_tokens': 256, "
        "'cached_tokens': 0, 'e2e_latency': 6.73, 'first_token_latency': 2.41}}"
    )
    for _ in range(2):
        request_log.read_text_finish(line, layouts)
    other = line.replace("4096", "912384").replace("'d1'", "'e5'")
    assert layouts.read(request_log._meta_info_text(other) or "") is not None
    assert request_log.read_text_finish(other, layouts) == generic(other)
    abort = line.replace(
        "{'type': 'stop', 'matched': 151329}",
        "{'type': 'abort', 'message': 'x', 'status_code': 400}",
    )
    for _ in range(3):
        request_log.read_text_finish(abort, layouts)
    assert layouts.read(request_log._meta_info_text(abort) or "") is None
