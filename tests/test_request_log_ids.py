"""Ids of a `GenerateReqInput(...)` repr are taken where SGLang writes them, even when the prompt
text holds look-alikes; the finds-based reader must agree with the plain reading of that rule."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from collector.parse import ParseStats, events_by_node
from collector.sglang import request_log
from collector.sglang.request_log import _obj_ids

_RID = re.compile(r"""rid=(?:'((?:[^'\\\n]|\\.){1,1024})'|"((?:[^"\\\n]|\\.){1,1024})")""")
_LITERAL = re.compile(r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*\"""")


def _rid_at(text: str, at: int) -> str | None:
    m = _RID.match(text, at)
    return (m.group(1) if m.group(1) is not None else m.group(2)) if m else None


def _blanked(literal: re.Match[str]) -> str:
    text = literal.group(0)
    if re.fullmatch(r"[0-9A-Za-z_.:-]*", text[1:-1]):
        return text
    return text[0] + " " * (len(text) - 2) + text[-1]


def _reference(obj_text: str) -> tuple[str | None, str | None]:
    """The rule in its plainest form: the rid written as the call's first argument stands;
    with each key written once, the rid and the room written there; with one written more
    often, each key where it stands outside the literals (blanked), when the literals close as
    a repr's and it stands there with one value, else unknown."""
    first = obj_text.find("rid=")
    # Right after the call's own bracket, its first: one a prompt quotes comes after that.
    first_argument = obj_text[:first].endswith("Input(") and obj_text.find("(") == first - 1
    anchored = _rid_at(obj_text, first) if first_argument else None
    once = anchored is not None or obj_text.count("rid=") <= 1
    if once and obj_text.count("bootstrap_room=") <= 1:
        room = re.compile(r"bootstrap_room=(\d+)").match(obj_text, obj_text.find("bootstrap_room="))
        if anchored is None and first >= 0:
            anchored = _rid_at(obj_text, first)
        return anchored, (room.group(1) if room else None)
    blank = _LITERAL.sub(_blanked, obj_text)
    for literal in re.finditer(r"""'[^']*'|"[^"]*\"""", blank):
        after = blank[literal.end() : literal.end() + 1]
        if after and after not in ",)]}: ":
            return anchored, None
    rid = anchored
    if rid is None:
        rids = {_rid_at(obj_text, m.start()) for m in re.finditer("rid=", blank)} - {None}
        rid = rids.pop() if len(rids) == 1 else None
    rooms = set(re.findall(r"bootstrap_room=(\d+)", blank))
    return rid, (rooms.pop() if len(rooms) == 1 else None)


_pieces = st.sampled_from(
    [
        "GenerateReqInput(text='",
        "GenerateReqInput(",
        "hello ",
        "rid='u-1'",
        "rid=None",
        "rid=",
        "bootstrap_room=42",
        "bootstrap_room=None",
        "bootstrap_room=",
        "', ",
        "rid='4f1c9a'",
        ", bootstrap_room=7301",
        "\\'",
        ")",
        '"',
        # A rid at the length bound and one past it: the plain fast read must leave the second
        # to the general pattern, as it must the escapes above.
        "rid='" + "a" * 1024 + "'",
        "rid='" + "b" * 1025 + "'",
        'rid="' + "c" * 1024 + "'" + '"',
    ]
)


@given(st.lists(_pieces, max_size=12).map("".join))
def test_ids_follow_the_rule(text: str) -> None:
    assert _obj_ids(text) == _reference(text)


@given(st.lists(_pieces, max_size=12).map("".join), st.lists(_pieces, max_size=6).map("".join))
def test_ids_read_up_to_an_end_ignore_what_follows(text: str, tail: str) -> None:
    """A finish line's ids are read from its `obj` without copying it out: what follows (the
    `out` dict, its text) is never looked at."""
    assert _obj_ids(text + tail, len(text)) == _reference(text)


@given(st.lists(_pieces, max_size=12).map("".join))
def test_the_rid_read_is_one_a_rid_holding_newlines_is_learnt_from(text: str) -> None:
    """`rid_literals` (what a rid's lines are learnt from) finds the rid where the ids are
    read: a rid the request line names is among them, and the only one when the line writes
    `rid=` once outside its literals."""
    rid, _ = _obj_ids(text)
    found = [literal[1:-1] for literal in request_log.rid_literals(text)]
    if rid is not None:
        assert rid in found
        blank = _LITERAL.sub(_blanked, text)
        if blank.count("rid=") == 1 and text.count("rid=") > 1:
            assert found == [rid]


def test_a_prompt_quoting_a_call_names_no_request() -> None:
    """Blind review 33: `GenerateReqInput(rid='…'` in a prompt was read as the call's first
    argument, and named the request (its newlines, a rid's lines to learn)."""
    text = (
        "Receive: obj=GenerateReqInput(text=\"see GenerateReqInput(rid='victim\\n[x]', "
        "bootstrap_room=1)\", rid='abc123', bootstrap_room=99)"
    )
    assert _obj_ids(text) == ("abc123", "99")
    assert request_log.rid_literals(text) == ["'abc123'"]


def test_a_prompt_that_imitates_the_keys_does_not_win() -> None:
    text = (
        "GenerateReqInput(text='please set rid=\\'evil\\' and bootstrap_room=1', "
        "rid='abc123', bootstrap_room=99)"
    )
    assert _obj_ids(text) == ("abc123", "99")


def test_an_empty_rid_literal_first_does_not_hide_the_real_one() -> None:
    # Found by the property test above: blanking turns the first `rid='...'` into `rid=''`.
    text = "GenerateReqInput(text='a', rid='', extra='rid=x', n=1), rid='4f1c9a'"
    assert _obj_ids(text) == _reference(text) == ("4f1c9a", None)


def test_a_key_a_client_wrote_twice_is_no_one_s() -> None:
    """SGLang writes a dict's keys unescaped (`custom_params`, `custom_labels`): a key can
    spell a field outside every literal, or an odd quote that turns the literals inside out.
    Audit AD: planted rooms named every exposure twice, a planted fake host hid them."""
    real = ", bootstrap_host='10.0.0.1', bootstrap_port=8998, bootstrap_room=77)"
    planted = "GenerateReqInput(rid='tenant/ab', sampling_params={{'custom_params': {{{key}: 1}}}}"
    for key, expected in (
        ("'k', rid='ATK', bootstrap_room=5, z=''", ("tenant/ab", None)),  # two rooms: none
        ("'k', bootstrap_host='2.2.2.2', bootstrap_port=8998, z=''", ("tenant/ab", "77")),
        ("'k', bootstrap_room=5, z='x", ("tenant/ab", None)),  # an odd quote
    ):
        text = planted.format(key=key) + real
        assert _obj_ids(text) == _reference(text) == expected
        address = request_log._obj_ids_and_end(text)[2]
        assert address in ((("10.0.0.1", 8998)), None)


@given(st.lists(_pieces, max_size=12).map("".join), st.lists(_pieces, max_size=6).map("".join))
def test_the_end_of_the_ids_is_where_they_end_in_the_text_itself(text: str, tail: str) -> None:
    """A `Receive:` line is known complete by what follows its ids, so their end must be a
    position in the line (not in the copy with user text blanked) right after one of them."""
    rid, room, _, end = request_log._obj_ids_and_end(text + tail, len(text))
    assert (rid, room) == _reference(text)
    if end >= 0:
        assert end <= len(text)
        assert (rid is not None and text[:end].endswith((f"rid='{rid}'", f'rid="{rid}"'))) or (
            room is not None and text[:end].endswith(f"bootstrap_room={room}")
        )
    else:
        assert (
            (rid is None and room is None)
            or text.count("rid=") > 1
            or (text.count("bootstrap_room=") > 1)
        )


def test_the_bootstrap_host_is_read_after_the_rid_never_from_the_user_text() -> None:
    # The prefill node decode fetched from (sglang-telemetry.md, request records): written
    # between the rid and the room; the same words in the prompt come before the rid.
    receive = (
        "Receive: obj=GenerateReqInput(text=\"use bootstrap_host='6.6.6.6' now\", "
        "sampling_params={'max_new_tokens': 8}, rid='r9', stream=False, "
        "bootstrap_host='10.0.1.12', bootstrap_port=8998, bootstrap_room=77)"
    )
    fields = request_log.parse_text_receive(receive)
    assert (fields["bootstrap_host"], fields["bootstrap_port"]) == ("10.0.1.12", 8998)
    finish = (
        receive.replace("Receive:", "Finish:")
        + ", out={'text': 'bootstrap_host=\\'7.7.7.7\\'', 'meta_info': {'id': 'r9', "
        "'finish_reason': {'type': 'stop', 'matched': 2}, 'prompt_tokens': 12}}"
    )
    fields = request_log.parse_text_finish(finish)
    assert (fields["rid"], fields["bootstrap_room"], fields["bootstrap_host"]) == (
        "r9",
        "77",
        "10.0.1.12",
    )
    # Outside PD there is none, and no key.
    plain = "Receive: obj=GenerateReqInput(text='hi', rid='r8', bootstrap_room=None)"
    assert "bootstrap_host" not in request_log.parse_text_receive(plain)


def _finish(obj_tail: str, text: str = "hi") -> str:
    return (
        f"Finish: obj=GenerateReqInput(text='{text}', sampling_params={{'stop': ['x']}}, "
        f"rid='r1', return_logprob=False, {obj_tail}bootstrap_room=7), out={{'meta_info': "
        "{'id': 'r1', 'finish_reason': {'type': 'abort', 'message': 'x', 'status_code': None}, "
        "'prompt_tokens': 9, 'completion_tokens': 3, 'cached_tokens': 0, 'e2e_latency': 0.5}}"
    )


def test_a_finish_says_whether_the_answer_was_streamed() -> None:
    # `stream=` of the request's own repr, not one the prompt or a label spells.
    assert request_log.parse_text_finish(_finish("stream=True, "))["streamed"] is True
    assert request_log.parse_text_finish(_finish("stream=False, "))["streamed"] is False
    assert "streamed" not in request_log.parse_text_finish(_finish(""))
    spoofed = _finish("stream=False, extra_key='a, stream=True, b', ", text="x, stream=True, y")
    assert request_log.parse_text_finish(spoofed)["streamed"] is False
    record = (
        '{"timestamp": "2026-09-06T00:00:01", "event": "request.finished", "rid": "r1", '
        '"obj": {"rid": "r1", "stream": true, "bootstrap_room": 7}, "out": {"meta_info": '
        '{"id": "r1", "completion_tokens": 3}}}'
    )
    parsed = request_log.parse_json_record(record)
    assert parsed is not None and parsed[1]["streamed"] is True


def test_a_rid_the_client_chose_with_a_quote_or_an_escape_is_read_as_logged() -> None:
    # repr quotes `d3'q` with double quotes; a newline it writes as `\n`. Read as no rid, an
    # exposed response was listed as `rid=None`, and the JSON broke its own schema.
    assert _obj_ids("""GenerateReqInput(text='a', rid="d3'q", bootstrap_room=7)""") == ("d3'q", "7")
    assert _obj_ids("GenerateReqInput(text='a', rid='d3\\nx', bootstrap_room=7)") == (
        "d3\\nx",
        "7",
    )
    long_rid = "r" * 600
    assert _obj_ids(f"GenerateReqInput(rid='{long_rid}', bootstrap_room=7)") == (long_rid, "7")


def test_a_batch_calls_one_json_record_with_a_list_of_rids_names_no_request() -> None:
    # Parallel sampling or a batch: one `request.received` record lists every rid (and room);
    # each request's own records name it. As one rid, it was a request that never was.
    record = (
        '{"timestamp": "2026-11-11T08:00:39", "event": "request.received", '
        '"rid": ["eval-1_0", "eval-1_1"], "obj": {"rid": ["eval-1_0", "eval-1_1"], '
        '"bootstrap_room": [11, 12]}}'
    )
    parsed = request_log.parse_json_record(record)
    assert parsed is not None and parsed[1]["rid"] is None and parsed[1]["bootstrap_room"] is None


def test_an_answer_echoing_a_finish_line_leaves_the_room_to_the_request() -> None:
    """The obj ends at `, out={`, which an answer echoing an SGLang line spells too: its room
    made the request's unknown, and the exposure with it (rerun 7, R5)."""
    finish = (
        "Finish: obj=GenerateReqInput(rid='r9', text='q', bootstrap_room=77), out={'text': "
        "\"seen: GenerateReqInput(rid='zz', bootstrap_room=42), out={'text': 'hi'}\", "
        "'meta_info': {'id': 'r9', 'finish_reason': {'type': 'stop', 'matched': 2}, "
        "'prompt_tokens': 12}}"
    )
    fields = request_log.parse_text_finish(finish)
    assert (fields["rid"], fields["bootstrap_room"], fields["prompt_tokens"]) == ("r9", "77", 12)


FINISHED_RECORD = (
    '{"timestamp": "2026-09-06T00:00:01", "event": "request.finished", "rid": "r1", '
    '"obj": {"rid": "r1", "bootstrap_room": 7}, "out": OUT}'
)


def test_a_json_finish_without_its_answer_s_facts_is_counted_not_read_as_an_end(
    tmp_path: Path,
) -> None:
    """Blind review 26: `"meta_info": null` (or a list, or `out` a string) gave a finish with
    every field null; taken as the request's end, 37 exposures were missed in an all-clear."""
    whole = FINISHED_RECORD.replace("OUT", '{"meta_info": {"id": "r1", "prompt_tokens": 9}}')
    broken = [
        FINISHED_RECORD.replace("OUT", '{"meta_info": null}'),
        FINISHED_RECORD.replace("OUT", '{"meta_info": [1, 2]}'),
        FINISHED_RECORD.replace("OUT", '"an answer"'),
        '{"meta_info": "x", "request_parameters": "{}"}',  # an exported record
    ]
    later = "[2026-09-06 00:00:02 TP0] Decode batch, #running-req: 1, #token: 9"
    (tmp_path / "decode-0.log").write_text("\n".join([whole, *broken, later]) + "\n")
    stats = ParseStats()
    kinds = [e.kind for e in events_by_node([tmp_path], stats)]
    assert kinds == ["request_finished", "decode_batch"]
    assert stats.dropped == {"malformed_request_record": 4}


def test_a_json_record_cut_with_lines_after_it_is_counted(tmp_path: Path) -> None:
    """Blind review 26: 55 JSON records cut mid-file were counted among unrecognised lines."""
    whole = FINISHED_RECORD.replace("OUT", '{"meta_info": {"id": "r1", "prompt_tokens": 9}}')
    later = "[2026-09-06 00:00:02 TP0] Decode batch, #running-req: 1, #token: 9"
    (tmp_path / "decode-0.log").write_text(whole[: len(whole) // 2] + "\n" + later + "\n")
    stats = ParseStats()
    assert [e.kind for e in events_by_node([tmp_path], stats)] == ["decode_batch"]
    assert stats.dropped == {"truncated_request_line": 1}
