"""A line cut before its end never becomes facts: the partial last line of a gzip cut short is
dropped unread, and a request record (text `Receive:`/`Finish:` or JSON) left incomplete gives no
fields and is counted as a drop. Complete lines, with or without a final newline, read as before.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector import files
from collector.events import Event
from collector.files import ReadStats, read_lines
from collector.forensics.driver import run_forensics
from collector.parse import ParseStats, events_by_node
from collector.sglang import request_log
from collector.sglang.envelope import peel
from collector.sglang.templates import Layouts
from tests.golden import GOLDEN

REFERENCE = Path(__file__).parent / "testdata" / "reference_incident"


def _request_lines(name: str, head: str) -> list[str]:
    return [
        line
        for line in (REFERENCE / name).read_text().splitlines()
        if peel(line).message.startswith(head)
    ]


FINISH_LINES = _request_lines("decode-0.log", "Finish: ")
RECEIVE_LINES = _request_lines("prefill-0.log", "Receive: ")


def _facts(fields: dict[str, Any]) -> dict[str, Any]:
    """What a record says: its fields that have a value (`openai` is the head's, not the
    record's)."""
    return {key: value for key, value in fields.items() if value is not None and key != "openai"}


def _events(path: Path) -> tuple[list[Event], ParseStats]:
    stats = ParseStats()
    events = list(events_by_node([path], stats))
    for event in events:
        event.to_json_dict()
    return events, stats


def _room_line(room: int, second: int) -> str:
    return (
        f"[2026-08-27 10:12:{second:02d}] Receive: obj=GenerateReqInput(validation_time=None, "
        f"rid='{room:032x}', return_logprob=False, stream=False, bootstrap_host='10.0.1.10', "
        f"bootstrap_port=8998, bootstrap_room={room})"
    )


def _readable_prefix(blob: bytes) -> bytes:
    """What a gzip stream cut to `blob` decompresses to (as the file reader reads it)."""
    inflater = zlib.decompressobj(wbits=31)
    return inflater.decompress(blob) + inflater.flush()


# -- the truncated gzip ------------------------------------------------------------------------

CUT_ROOM = 4668159569240117731


def _gzip_cut_inside_the_room(folder: Path) -> tuple[Path, str]:
    """`prefill-0.log.3.gz` whose compressed bytes end where its last line is cut inside the
    digits of `bootstrap_room=4668159569240…`; returns the path and the digits left."""
    rooms = [7701188362211045501 + 977 * n for n in range(40)]
    body = "".join(_room_line(room, n % 60) + "\n" for n, room in enumerate(rooms))
    body += _room_line(CUT_ROOM, 59) + "\n"
    blob = gzip.compress(body.encode())
    for size in range(len(blob) - 1, 0, -1):
        last = _readable_prefix(blob[:size]).decode().rsplit("\n", 1)[-1]
        tail = last.rsplit("bootstrap_room=", 1)[-1] if "bootstrap_room=" in last else ""
        if tail.isdigit() and len(tail) < len(str(CUT_ROOM)):
            path = folder / "prefill-0.log.3.gz"
            path.write_bytes(blob[:size])
            return path, tail
    raise AssertionError("no cut of the compressed bytes ends inside the room")


def test_a_gzip_cut_inside_a_room_number_makes_no_phantom_request(tmp_path: Path) -> None:
    path, digits = _gzip_cut_inside_the_room(tmp_path)
    assert str(CUT_ROOM).startswith(digits) and digits != str(CUT_ROOM)
    events, stats = _events(path)
    rooms = [event.get("bootstrap_room") for event in events]
    assert digits not in rooms
    assert str(CUT_ROOM) not in rooms  # nor the room it would have been
    assert len(rooms) == 40 and None not in rooms  # the complete lines are all there
    assert stats.dropped == {"truncated_gzip": 1, "truncated_gzip_partial_line": 1}
    assert stats.lines == 41


def test_the_partial_line_of_any_stream_cut_short_is_dropped_unread(tmp_path: Path) -> None:
    """Not only request lines: whatever follows the last newline of a cut stream is cut."""
    line = "[2026-11-02 10:00:01 TP0] Decode batch, #running-req: 12, #token: 10, token usage: 0.1"
    blob = gzip.compress((line + "\n" + line + "\n").encode(), compresslevel=0)
    path = tmp_path / "decode-0.log.1.gz"
    path.write_bytes(blob[: len(blob) - 8 - len(line) // 2 - 1])  # cut mid second line
    read = ReadStats()
    assert [text for _, text in read_lines(path, read)] == [line]
    assert read.dropped == {"truncated_gzip": 1, "truncated_gzip_partial_line": 1}
    assert read.lines == 2
    # A damaged gzip (its checksum wrong) read in small blocks: all it gave before the damage
    # is kept but the text after its last newline, which may be cut.
    blob = bytearray(gzip.compress((line + "\n" + line).encode(), compresslevel=0))
    blob[-8:-4] = bytes(4)
    path.write_bytes(bytes(blob))
    read = ReadStats()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "BLOCK_SIZE", 16)
        assert [text for _, text in read_lines(path, read)] == [line]
    assert read.dropped == {"corrupt_gzip": 1, "corrupt_gzip_partial_line": 1}


def test_forensics_json_counts_the_cut_line(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _gzip_cut_inside_the_room(logs)
    finish = FINISH_LINES[1]
    (logs / "decode-0.log").write_text(finish[: finish.index("'prompt_tokens'") + 20])
    result = run_forensics([str(logs)], tmp_path / "out", write_parquet=False, workers=1)
    summary = json.loads(result.outputs["json"].read_text())
    assert summary["input"]["dropped_by_reason"] == {
        "truncated_gzip": 1,
        "truncated_gzip_partial_line": 1,
        "truncated_request_line": 1,
    }
    assert summary["input"]["events_by_kind"].get("request_finished", 0) == 0


# -- a plain file whose last line is being written ---------------------------------------------


def test_the_audit_finish_line_cut_at_its_prompt_tokens_says_nothing(tmp_path: Path) -> None:
    """`... 'prompt_tokens': 18` (of 185230) was read as a finish with 18 tokens, type stop."""
    full = FINISH_LINES[0].replace("'prompt_tokens': 4096", "'prompt_tokens': 185230")
    cut = full[: full.index("'prompt_tokens': 185230") + len("'prompt_tokens': 18")]
    assert _facts(request_log.parse_text_finish(peel(cut).message)) == {}
    path = tmp_path / "decode-0.log"
    path.write_text(FINISH_LINES[1] + "\n" + cut)
    events, stats = _events(path)
    assert [event.get("prompt_tokens") for event in events] == [912384]
    assert stats.dropped == {"truncated_request_line": 1}
    assert stats.lines == 2


@pytest.mark.parametrize("line", FINISH_LINES + RECEIVE_LINES)
def test_every_proper_prefix_of_a_real_record_says_nothing_or_what_the_line_says(
    line: str,
) -> None:
    """Every cut point of the reference records: no fields, or the full line's (for the keys
    given). Learnt layouts included: the full line is read twice first, so its layout is there."""
    message = peel(line).message
    finish = message.startswith("Finish: ")
    parse = request_log.parse_text_finish if finish else request_log.parse_text_receive
    full = _facts(parse(message))
    full = _facts(parse(message))  # the second sighting compiles the layout
    assert full.keys() >= {"rid", "bootstrap_room"}
    for cut in range(len(message)):
        facts = _facts(parse(message[:cut]))
        assert facts == {key: full[key] for key in facts}, (cut, message[:cut][-40:])
        assert not facts  # a proper prefix of these records is never complete


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(FINISH_LINES + RECEIVE_LINES), st.data())
def test_a_log_ending_in_a_cut_record_gives_the_facts_of_its_complete_lines_only(
    tmp_path: Path, line: str, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(min_value=1, max_value=len(line) - 1), label="cut")
    complete = "\n".join(FINISH_LINES[:2] + RECEIVE_LINES[:2]) + "\n"
    path = tmp_path / "node.log"
    path.write_text(complete)
    expected, _ = _events(path)
    path.write_text(complete + line[:cut])
    events, stats = _events(path)
    request_events = [e for e in events if e.kind.startswith("request_")]
    assert [(e.kind, _facts(e.fields)) for e in request_events] == [
        (e.kind, _facts(e.fields)) for e in expected if e.kind.startswith("request_")
    ]
    head_kept = peel(line[:cut]).message.startswith(("Finish: ", "Receive: "))
    assert stats.dropped == ({"truncated_request_line": 1} if head_kept else {})
    accounted = (
        sum(stats.events.values())
        + sum(stats.noise.values())
        + stats.unclassified_engine
        + stats.unclassified_other
        + sum(stats.dropped.values())
    )
    assert accounted == stats.lines == 5


# -- literal-aware: prompt text with braces, parentheses, quotes and look-alike keys -----------

TRICKY = st.lists(
    st.sampled_from(
        list("ab (){}[]'\"\\,:=") + ["'meta_info': {", "'prompt_tokens': 1", "out={", "\\'"]
    ),
    max_size=30,
).map("".join)


@st.composite
def records(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    prompt, reply = draw(TRICKY), draw(TRICKY)
    rid, room = "4f1c9a77", "4668159569240117731"
    obj = f"GenerateReqInput(text={prompt!r}, rid='{rid}', bootstrap_room={room})"
    if draw(st.booleans()):
        return f"Receive: obj={obj}", {"rid": rid, "bootstrap_room": room}
    out = (
        f"{{'text': {reply!r}, 'meta_info': {{'id': '{rid}', 'finish_reason': "
        f"{{'type': 'stop', 'matched': 151329}}, 'prompt_tokens': 185230, "
        f"'completion_tokens': 12}}}}"
    )
    expected = {"rid": rid, "bootstrap_room": room, "prompt_tokens": 185230}
    return f"Finish: obj={obj}, out={out}", expected | {"finish_type": "stop"}


def _read(message: str) -> dict[str, Any]:
    if message.startswith("Finish: "):
        return _facts(request_log.read_text_finish(message, Layouts()))
    return _facts(request_log.parse_text_receive(message))


@settings(max_examples=300, deadline=None)
@given(records(), st.data())
def test_text_inside_literals_neither_closes_nor_opens_a_record(
    record: tuple[str, dict[str, Any]], data: st.DataObject
) -> None:
    message, expected = record
    full = _read(message)
    assert {key: full.get(key) for key in expected} == expected
    assert not request_log.cut_record("[2026-08-27 10:12:08] " + message)
    cut = data.draw(st.integers(min_value=0, max_value=len(message) - 1), label="cut")
    facts = _read(message[:cut])
    assert facts == {key: full[key] for key in facts}
    assert request_log.cut_record("[2026-08-27 10:12:08] " + message[:cut]) == (
        message[:cut].startswith(("Finish: ", "Receive: "))
    )


PY_VALUES = st.recursive(
    st.none() | st.integers() | st.floats(allow_nan=False) | st.text() | st.booleans(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(PY_VALUES, max_size=4), st.data())
def test_the_walk_reads_python_reprs_as_python_does(values: list[Any], data: st.DataObject) -> None:
    """Any repr SGLang could print (quotes of both kinds, escapes, brackets inside text): the
    whole is one closed group, and every proper prefix of it is open."""
    text = f"GenerateReqInput(values={values!r})"
    assert request_log._last_group(text) == (text.index("("), len(text))
    cut = data.draw(st.integers(min_value=len("GenerateReqInput("), max_value=len(text) - 1))
    assert request_log._last_group(text[:cut]) is None


# -- JSON records ------------------------------------------------------------------------------


def test_a_cut_json_record_is_dropped_and_counted(tmp_path: Path) -> None:
    record = json.dumps(
        {
            "timestamp": "2026-08-27T10:12:08Z",
            "event": "request.finished",
            "rid": "d1c0",
            "obj": {"rid": "d1c0", "bootstrap_room": 7701188362211045501},
            "out": {"meta_info": {"id": "d1c0", "prompt_tokens": 185230}},
        }
    )
    path = tmp_path / "decode-0.jsonl"
    path.write_text(record + "\n" + record[: record.index("185230") + 2])
    events, stats = _events(path)
    assert [event.get("prompt_tokens") for event in events] == [185230]
    assert stats.dropped == {"truncated_request_line": 1}
    path.write_text(record + "\n" + record)  # complete, no final newline: kept
    events, stats = _events(path)
    assert [event.get("prompt_tokens") for event in events] == [185230, 185230]
    assert stats.dropped == {}


# -- complete lines read as before -------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    sorted(REFERENCE.glob("*.log")) + sorted((GOLDEN / "logs").glob("*.log")),
    ids=lambda path: path.name,
)
def test_a_log_without_its_final_newline_reads_as_with_it(tmp_path: Path, path: Path) -> None:
    text = path.read_text().rstrip("\n")
    ended = tmp_path / path.name
    ended.write_text(text + "\n")
    expected, expected_stats = _events(ended)
    for name, data in (
        ("open.log", text.encode()),
        ("open.log.1.gz", gzip.compress(text.encode())),
    ):
        unended = tmp_path / name
        unended.write_bytes(data)
        events, stats = _events(unended)
        assert [(e.kind, e.time, e.fields) for e in events] == [
            (e.kind, e.time, e.fields) for e in expected
        ]
        assert stats.dropped == expected_stats.dropped
        assert stats.lines == expected_stats.lines


REQUEST_RECORDS = [
    line
    for path in (
        REFERENCE / "decode-0.log",
        REFERENCE / "prefill-0.log",
        GOLDEN / "logs" / "requests.log",
    )
    for line in path.read_text().splitlines()
    if peel(line).message.startswith(("Finish: ", "Receive: ", "Receive OpenAI: ", "{"))
]


@pytest.mark.parametrize("line", REQUEST_RECORDS)
def test_a_complete_request_record_last_without_its_newline_is_read(
    tmp_path: Path, line: str
) -> None:
    assert not request_log.cut_record(line)
    path = tmp_path / "node.log"
    path.write_text(line + "\n")
    expected, _ = _events(path)
    path.write_text(line)
    events, stats = _events(path)
    assert [(e.kind, e.fields) for e in events] == [(e.kind, e.fields) for e in expected]
    assert len(events) == 1 and stats.dropped == {}


@pytest.mark.parametrize("compressed", [False, True])
def test_a_line_cut_in_two_by_a_rotation_is_read_whole(tmp_path: Path, compressed: bool) -> None:
    """logrotate's `copytruncate` copied the log while a line was half written: the rotated
    file ends in its first half, the live file begins with the rest. The halves were a cut
    request record (dropped) and a line of nothing; the exposure it named was lost."""
    case = tmp_path / "case"
    case.mkdir()
    (case / "prefill-0.log").write_bytes((REFERENCE / "prefill-0.log").read_bytes())
    text = (REFERENCE / "decode-0.log").read_bytes()
    finish = text.index(b"Finish: obj=")
    cut = text.index(b"'prompt_tokens'", finish)  # mid-record, where a lone half says nothing
    older, newer = text[:cut], text[cut:]
    rotated = case / ("decode-0.log.1.gz" if compressed else "decode-0.log.1")
    rotated.write_bytes(gzip.compress(older) if compressed else older)
    (case / "decode-0.log").write_bytes(newer)
    whole = run_forensics([str(REFERENCE)], tmp_path / "whole", write_parquet=False).summary
    split = run_forensics([str(case)], tmp_path / "split", write_parquet=False).summary
    assert split["exposure"]["requests"] == whole["exposure"]["requests"] != []
    assert "truncated_request_line" not in split["input"]["dropped_by_reason"]
    assert split["input"]["unclassified_other_lines"] == whole["input"]["unclassified_other_lines"]
    assert split["input"]["events_by_kind"] == whole["input"]["events_by_kind"]


def test_a_rotated_file_ending_mid_line_before_a_whole_line_keeps_both(tmp_path: Path) -> None:
    """Joined only to a continuation: a live file that begins with a line of its own leaves
    the rotated file's cut last line to be read (or dropped) as before."""
    lines = (REFERENCE / "decode-0.log").read_text().splitlines(keepends=True)
    (tmp_path / "decode-0.log.1").write_text("".join(lines[:5]) + lines[5][:40])
    (tmp_path / "decode-0.log").write_text("".join(lines[6:]))
    stats = ParseStats()
    events = list(events_by_node([tmp_path], stats))
    sources = {e.source.rsplit(":", 1)[0].rsplit("/", 1)[1] for e in events}
    assert sources == {"decode-0.log.1", "decode-0.log"}
    assert len([e for e in events if e.source.endswith("decode-0.log:1")]) == 1


@pytest.mark.parametrize("lines", ["FINISH_LINES", "RECEIVE_LINES"])
@pytest.mark.parametrize("prefix", ["sglang", "none"])
def test_a_record_cut_with_lines_after_it_is_counted_not_read(
    tmp_path: Path, lines: str, prefix: str
) -> None:
    """Blind review 19: a `Finish:` cut inside its meta_info, then more lines (a copy spliced,
    a writer killed mid-line), became a `request_finished` with every field null, uncounted;
    16 of them made forensics say decode "logged no end" for the requests it had answered.
    The same behind no prefix at all (a record a collector kept without its stamp)."""
    record = globals()[lines][1]
    if prefix == "none":
        record = record[record.index("] ") + 2 :]
    later = "[2026-11-02 10:00:01 TP0] Decode batch, #running-req: 12, #token: 10\n"
    (tmp_path / "decode-0.log").write_text(record[: len(record) // 2] + "\n" + later)
    stats = ParseStats()
    events = list(events_by_node([tmp_path], stats))
    assert [e.kind for e in events] == ["decode_batch"]
    assert stats.dropped == {"truncated_request_line": 1}
    # Whole, it is read.
    (tmp_path / "decode-0.log").write_text(record.rstrip("\n") + "\n" + later)
    stats = ParseStats()
    assert len(list(events_by_node([tmp_path], stats))) == 2 and not stats.dropped
