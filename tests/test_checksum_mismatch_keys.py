"""A KV checksum mismatch line is read by its keys, not their positions.

Why: blind review 17. The reference says to key on `key=value` tokens; a mismatch line with
`bootstrap_room=` before `req=` was read with no room at all, and its critical finding said
"bootstrap_room None (req None, on a peer rank)": the one fact a responder needs, lost, and a
peer rank invented. Hashes written without `0x` were dropped the same way.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.sglang.logs import LineParser
from collector.sglang.pd import parse_checksum_mismatch
from detectors.checksum_mismatch import ChecksumMismatch
from detectors.pipeline import DetectionPipeline

PREFIX = "[2026-11-02 10:06:00 TP0] KV checksum mismatch "
ROOM = "6904575690293806187"


@pytest.mark.parametrize(
    ("tail", "expected", "got"),
    [
        (
            f"req=dbd5 bootstrap_room={ROOM} expected=0x5e1a03c7 got=0x5e1a03c6",
            "0x5e1a03c7",
            "0x5e1a03c6",
        ),
        (
            f"bootstrap_room={ROOM} req=dbd5 expected=0x5e1a03c7 got=0x5e1a03c6",
            "0x5e1a03c7",
            "0x5e1a03c6",
        ),
        (f"got=0x2 expected=0x1 bootstrap_room={ROOM} req=dbd5", "0x1", "0x2"),
        (f"req=dbd5 bootstrap_room={ROOM} expected=5e1a03c7 got=5e1a03c6", "5e1a03c7", "5e1a03c6"),
        (f"req='dbd5', bootstrap_room={ROOM}, expected=0x1, got=0x2 layer=3", "0x1", "0x2"),
    ],
)
def test_the_room_rid_and_hashes_are_read_in_any_order(tail: str, expected: str, got: str) -> None:
    _, event = LineParser("decode-0").parse(PREFIX + tail, "decode-0.log:13")
    assert event is not None and event.kind == "checksum_mismatch"
    fields = event.fields
    assert (fields["rid"], fields["bootstrap_room"]) == ("dbd5", ROOM)
    assert (fields["expected"], fields["got"], fields["peer_rank"]) == (expected, got, False)


def test_a_value_not_of_its_form_is_unknown_never_a_wrong_room() -> None:
    fields = parse_checksum_mismatch("req=a bootstrap_room=12ab expected=0xZZ got=0x2")
    assert (fields["bootstrap_room"], fields["expected"], fields["got"]) == (None, None, "0x2")
    # A key inside another word is not the key: `xreq=` names no rid.
    assert parse_checksum_mismatch(f"xreq=a bootstrap_room={ROOM}")["rid"] is None


def test_the_finding_names_the_room_and_says_peer_rank_only_for_a_peer_ranks_line() -> None:
    parser = LineParser("decode-0")
    lines = [
        PREFIX + f"bootstrap_room={ROOM} req=dbd5 expected=0x5e1a03c7 got=0x5e1a03c6",
        PREFIX + "on a peer rank req=aa bootstrap_room=11",
        PREFIX + "bootstrap_room=22 req=bb",  # no hashes, and no peer rank either
    ]
    events = [parser.parse(line, f"decode-0.log:{n}")[1] for n, line in enumerate(lines, 1)]
    pipeline = DetectionPipeline(detectors=[ChecksumMismatch()], raise_errors=True)
    findings = {f.bootstrap_room: f for f in pipeline.run(e for e in events if e is not None)}
    assert set(findings) == {ROOM, "11", "22"}
    assert all(f.severity == "critical" for f in findings.values())
    assert "expected 0x5e1a03c7, got 0x5e1a03c6" in findings[ROOM].summary
    assert "on a peer rank" in findings["11"].summary
    assert "peer rank" not in findings["22"].summary
    assert "req bb" in findings["22"].summary


@given(st.text(alphabet="req=bootsap_m0123456789xabcdefgot '\",;()", max_size=200))
def test_the_reader_never_raises_and_a_room_it_gives_is_digits_in_the_line(text: str) -> None:
    fields = parse_checksum_mismatch(text)
    room = fields["bootstrap_room"]
    assert room is None or (
        room.isdigit() and f"bootstrap_room={room}" in text.replace("'", "").replace('"', "")
    )
