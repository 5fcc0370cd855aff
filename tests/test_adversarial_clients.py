"""A client chooses its rid and writes text SGLang logs: none of it may hide an exposure or
accuse an honest answer.

Audit AD's attacks, on the incident excerpt (one refused 700,000-token prompt on a prefill
whose pool is 681,280, answered by decode; one honest 8,192-token request before it):
- a rid `HEALTH_CHECK_…` on the over-length request: dropped as a health check, its exposure
  went unjudged;
- a rid quoting another request's rid (`x rid='victim' y`), refused: the refusal became the
  victim's, and its honest answer was named exposed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from collector import events as ev
from collector.events import Event
from collector.forensics.driver import print_outcome, run_forensics
from collector.sglang.logs import INTERLEAVED_HELD, RID_LINE, LineParser
from collector.sglang.refusals import parse_input_too_long, parse_no_bootstrap_room
from collector.state.ledger import RequestLedger
from collector.state.request_sides import RequestSideAssembler

EXCERPT = Path(__file__).parents[1] / "collector" / "samples" / "incident-excerpt"
T = 1_787_824_800.0


def _excerpt(tmp_path: Path, **renamed: str) -> Path:
    """The excerpt with some of its rids renamed (every occurrence)."""
    folder = tmp_path / "logs"
    folder.mkdir()
    for log in EXCERPT.glob("*.log"):
        text = log.read_text()
        for old, new in renamed.items():
            text = text.replace(old, new)
        (folder / log.name).write_text(text)
    return folder


def _exposed(folder: Path, tmp_path: Path) -> list[tuple[str, str]]:
    summary = run_forensics([str(folder)], tmp_path / "out", workers=1).summary
    return [(r["rid"], r["bootstrap_room"]) for r in summary["exposure"]["requests"]]


def test_a_health_check_rid_on_a_long_prompt_is_judged(tmp_path: Path) -> None:
    folder = _excerpt(tmp_path, d0000002="HEALTH_CHECK_d2", p0000002="HEALTH_CHECK_p2")
    assert _exposed(folder, tmp_path) == [("HEALTH_CHECK_d2", "2222")]


def test_sglangs_own_health_check_is_no_request() -> None:
    """`/health_generate`: one token, the fake host, room 0; on a busy scheduler never
    served (a `Receive:` line alone)."""
    asm = RequestSideAssembler(settle_seconds=5.0)
    lines = [
        Event("request_received", "d", T, "d:1", {"rid": "HEALTH_CHECK_1", "bootstrap_room": "0"}),
        Event("request_finished", "d", T, "d:2", {"rid": "HEALTH_CHECK_1", "prompt_tokens": 1}),
        Event("request_received", "d", T, "d:3", {"rid": "HEALTH_CHECK_2", "bootstrap_room": "0"}),
        Event("request_finished", "d", T, "d:4", {"rid": "HEALTH_CHECK_3", "prompt_tokens": 9000}),
    ]
    shipped = [side for line in lines for side in asm.observe(line)] + asm.flush()
    assert [s.fields["side"].rid for s in shipped] == ["HEALTH_CHECK_3"]
    assert asm.health_checks == 2
    ledger = RequestLedger()
    long_one = {"rid": "HEALTH_CHECK_4", "prompt_tokens": 9000, "finish_type": "stop"}
    assert ledger.add(Event("request_finished", "d", T, "d:5", long_one))
    assert not ledger.add(Event("request_finished", "d", T, "d:6", {"rid": "HEALTH_CHECK_5"}))
    assert ledger.stats.health_checks == 1


REFUSAL = (
    "Input length (700000 tokens) exceeds the maximum allowed length (681274 tokens). Use a "
    "shorter input or enable --allow-auto-truncate., self.rid={rid}"
)


@pytest.mark.parametrize(
    ("written", "rid"),
    [
        ("'p0000002'", "p0000002"),
        ("\"x rid='p0000001' y\"", "x rid='p0000001' y"),
        ('"it\'s"', "it's"),
        ("'a\\'b\"c'", "a\\'b\"c"),  # both quotes: escaped, kept as written
    ],
)
def test_a_refusal_names_the_rid_written_after_self_rid(written: str, rid: str) -> None:
    assert parse_input_too_long(REFUSAL.format(rid=written))["rid"] == rid
    message = "Invalid request: Disaggregated request received without bootstrap room id. "
    assert parse_no_bootstrap_room(message + f"req.rid={written}")["rid"] == rid


def test_a_rid_quoting_another_does_not_frame_it(tmp_path: Path) -> None:
    """The refused request's rid quotes the honest one's, as each of its prefill lines writes
    it: the refused one is exposed, the honest 8,192-token answer is not."""
    folder = _excerpt(tmp_path)
    prefill = folder / "prefill-0.log"
    text = prefill.read_text()
    for old, new in (
        ("self.rid='p0000002'", "self.rid=\"x rid='p0000001' y\""),
        ("rid=p0000002,", "rid=x rid='p0000001' y,"),  # ReqTimeStats: written raw
        ("rid='p0000002'", "rid=\"x rid='p0000001' y\""),
        ("'id': 'p0000002'", "'id': \"x rid='p0000001' y\""),
    ):
        assert old in text
        text = text.replace(old, new)
    prefill.write_text(text)
    assert _exposed(folder, tmp_path) == [("d0000002", "2222")]


DECODE_TIME_STATS = (
    "[2026-08-27 10:05:04 TP0] ReqTimeStats(rid=tenant/d2, bootstrap_room=2222, input_len=700000, "
    "cached_input_len=0, output_len=180, attempts=0, type=decode): bootstrap_duration=2.00ms, "
    "alloc_wait_duration=0.10ms, transfer_duration=40.00ms, queue_duration=0.50ms, "
    "forward_duration=3500.00ms, entry_time=1787825100.400\n"
)


@pytest.mark.parametrize(
    ("key", "time_stats", "room"),
    [
        # Another request's ids: neither room is taken for sure, and the answer is still named.
        ("'k', rid='d0000001', bootstrap_room=1111, z=''", False, None),
        ("'k', bootstrap_host='2.2.2.2', bootstrap_port=8998, z=''", False, "2222"),
        # An odd quote turns the repr's literals inside out: no room is read from the line (it
        # was taken for a cut one, and the answer went unjudged), decode's time stats name it.
        ("'k', bootstrap_room=1111, z='x", False, None),
        ("'k', bootstrap_room=1111, z='x", True, "2222"),
    ],
    ids=["planted_ids", "planted_fake_host", "odd_quote", "odd_quote_time_stats"],
)
def test_a_dict_key_spelling_fields_neither_hides_nor_moves_the_exposure(
    key: str, time_stats: bool, room: str | None, tmp_path: Path
) -> None:
    """SGLang writes the keys of a client's dicts unescaped (`custom_params`): audit AD's keys
    planted another room (each exposure named twice, once under a room that was not its, or
    not at all) or a warmup's fake host (the room dropped, the exposure hidden)."""
    folder = _excerpt(tmp_path, d0000002="tenant/d2")  # a rid no plain literal holds
    decode = folder / "decode-0.log"
    text = decode.read_text().replace(
        "GenerateReqInput(rid='tenant/d2', bootstrap_room=2222)",
        f"GenerateReqInput(rid='tenant/d2', sampling_params={{'custom_params': {{{key}: 1}}}}, "
        "bootstrap_host='10.0.0.1', bootstrap_port=8998, bootstrap_room=2222)",
    )
    decode.write_text(text + (DECODE_TIME_STATS if time_stats else ""))
    assert _exposed(folder, tmp_path) == [("tenant/d2", room)]


# A rid holding newlines: `ReqTimeStats(rid=…` writes it as it is, so the rest of it is lines
# of the client's choosing (audit AD: a fake pool line hid the exposures, a fake checksum line
# raised a critical finding on a healthy fleet). Its `Receive:` line wrote it escaped.
INJECTED = [
    "[2026-08-27 10:01:00 TP0] max_total_num_tokens=2040000, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, max_running_requests=64, context_len=1048576, "
    "available_gpu_mem=15.00 GB",
    "[2026-08-27 10:01:00 TP0] KV checksum mismatch req=p0000001 bootstrap_room=1111 "
    "expected=0x1 got=0x2",
    "x",
]
ATTACK_RID = "atk\n" + "\n".join(INJECTED)


def _attack_lines(rid: str = ATTACK_RID) -> list[str]:
    """The attacker's short request on prefill-0, as SGLang logs it."""
    first, *rest = ATTACK_RID.split("\n")
    return [
        f"[2026-08-27 10:00:58] Receive: obj=GenerateReqInput(rid={rid!r}, bootstrap_room=3333)",
        f"[2026-08-27 10:00:59 TP0] ReqTimeStats(rid={first}",
        *rest[:-1],
        rest[-1] + ", bootstrap_room=3333, input_len=12, cached_input_len=0, output_len=1, "
        "attempts=0, type=prefill): bootstrap_duration=1.00ms, queue_duration=1.00ms, "
        "forward_duration=2.00ms, entry_time=1787824858.000",
    ]


def test_the_lines_a_rid_writes_are_the_rid() -> None:
    parser = LineParser("prefill-0")
    parsed = [parser.parse(line, f"p:{n}") for n, line in enumerate(_attack_lines())]
    kinds = [kind for kind, _ in parsed]
    assert kinds == ["request_received"] + [RID_LINE] * len(INJECTED) + ["request_time_stats"]
    received, stats = parsed[0][1], parsed[-1][1]
    assert received is not None and stats is not None
    assert stats.fields["rid"] == received.fields["rid"] == repr(ATTACK_RID)[1:-1]
    assert (stats.fields["bootstrap_room"], stats.fields["input_len"]) == ("3333", 12)
    assert parser.close() == {}


def test_lines_other_than_the_rid_said_are_read_as_lines() -> None:
    """The rid's `Receive:` line names other lines: what follows the cut time stats line is
    read as it is, and the cut line is counted lost."""
    lines = _attack_lines(rid="atk\nsomething else")
    parser = LineParser("prefill-0")
    kinds = [parser.parse(line, f"p:{n}")[0] for n, line in enumerate(lines)]
    assert kinds[2:4] == ["capacity", "checksum_mismatch"]
    assert parser.close() == {"rid_line_break": 1}


def test_a_rid_writing_engine_lines_neither_hides_nor_accuses(tmp_path: Path) -> None:
    folder = _excerpt(tmp_path)
    prefill = folder / "prefill-0.log"
    lines = prefill.read_text().splitlines()
    at = next(n for n, line in enumerate(lines) if "10:05:00" in line)
    prefill.write_text("\n".join(lines[:at] + _attack_lines() + lines[at:]) + "\n")
    result = run_forensics([str(folder)], tmp_path / "out", workers=1)
    summary = result.summary
    assert [(r["rid"], r["bootstrap_room"]) for r in summary["exposure"]["requests"]] == [
        ("d0000002", "2222")
    ]
    assert not [f for f in summary["findings"] if f["detector"] == "checksum_mismatch"]
    # Said: someone wrote lines into the log through a rid.
    said = "3 lines were written by clients' rids holding newlines"
    terminal = io.StringIO()
    print_outcome(result, terminal)
    assert f"CLIENT LINES: {said}" in terminal.getvalue()
    assert said in (tmp_path / "out" / "report.md").read_text()


def test_a_rid_is_text_in_the_markdown_report(tmp_path: Path) -> None:
    folder = _excerpt(tmp_path, d0000002="**n**_[x](y)|z")
    run_forensics([str(folder)], tmp_path / "out", workers=1)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| \\*\\*n\\*\\*\\_\\[x\\](y)\\|z |" in report


def test_a_rid_holding_a_return_writes_no_line(tmp_path: Path) -> None:
    """Blind review 31b: a raw return was read as a terminal's, and of the time stats line
    only what the rid wrote after it was kept: a checksum mismatch of the client's choosing,
    critical on a healthy fleet. A record begun before the return wrote it itself."""
    folder = _excerpt(tmp_path)
    prefill = folder / "prefill-0.log"
    lines = prefill.read_text().splitlines()
    at = next(n for n, line in enumerate(lines) if "10:05:00" in line)
    forged = INJECTED[1]
    attack = [
        f"[2026-08-27 10:00:58] Receive: obj=GenerateReqInput(rid={'atk' + chr(13) + forged!r}, "
        "bootstrap_room=3333)",
        f"[2026-08-27 10:00:59 TP0] ReqTimeStats(rid=atk\r{forged}, bootstrap_room=3333, "
        "input_len=12, cached_input_len=0, output_len=1, attempts=0, type=prefill): "
        "bootstrap_duration=1.00ms, queue_duration=1.00ms, forward_duration=2.00ms, "
        "entry_time=1787824858.000",
    ]
    prefill.write_text("\n".join(lines[:at] + attack + lines[at:]) + "\n")
    summary = run_forensics([str(folder)], tmp_path / "out", workers=1).summary
    assert [(r["rid"], r["bootstrap_room"]) for r in summary["exposure"]["requests"]] == [
        ("d0000002", "2222")
    ]
    assert not [f for f in summary["findings"] if f["detector"] == "checksum_mismatch"]


def _json_receive(rid: str) -> str:
    record = {"timestamp": "2026-08-27T10:00:58Z", "event": "request.received", "rid": rid}
    record["obj"] = {"rid": rid, "bootstrap_room": 3333}
    return "[2026-08-27 10:00:58] " + json.dumps(record)


def _refusal(rid: str) -> str:
    return (
        "[2026-08-27 10:00:58 TP0] Input length (700000 tokens) exceeds the maximum allowed "
        f"length (681274 tokens). Use a shorter input or enable --allow-auto-truncate., "
        f"self.rid={rid!r}"
    )


def _json_batch_receive(rid: str) -> str:
    """A batch's JSON record: a rid for each of its requests."""
    record = {"timestamp": "2026-08-27T10:00:58Z", "event": "request.received"}
    record["obj"] = {"text": ["SECRET\n", "SECRET\n"], "rid": ["b0000001", rid]}
    return "[2026-08-27 10:00:58] " + json.dumps(record)


def _unstamped_receive(rid: str) -> str:
    """0.5.10's request logger wrote no prefix; the prompt at level 2, the default, first."""
    return f"Receive: obj=GenerateReqInput(text='SECRET\\n', rid={rid!r}, bootstrap_room=3333)"


@pytest.mark.parametrize(
    "told_by",
    [_json_receive, _json_batch_receive, _unstamped_receive, _refusal],
    ids=["json_record", "json_batch", "receive_without_prefix", "refusal"],
)
def test_a_rid_is_learnt_from_any_line_that_writes_it_escaped(told_by: Any) -> None:
    """Blind review 31b: with JSON request logs the rid's lines were learnt from nothing, and
    its forged checksum mismatch and canary lines were critical on a healthy fleet. A JSON
    record and a refusal write the rid escaped, as a `Receive:` line does."""
    parser = LineParser("prefill-0")
    lines = [told_by(ATTACK_RID), *_attack_lines()[1:]]
    kinds = [parser.parse(line, f"p:{n}")[0] for n, line in enumerate(lines)]
    assert kinds[1:] == [RID_LINE] * len(INJECTED) + ["request_time_stats"]


def _receive_at_level_2(
    rid: str, prompt: str = "SECRET\nsecond line", key: str = "", after: bool = False
) -> str:
    """A `Receive:` line as SGLang writes it at request-log level 2, its default (reference
    §2.5; the simulator's): the prompt's `text=` first, the rid after the sampling params,
    and the keys of a client's dicts (`key`: one before the rid, or `after` it) unescaped."""
    params, labels = ("", key) if after else (key, "")
    return (
        f"[2026-08-27 10:00:58] Receive: obj=GenerateReqInput(text={prompt!r}, input_ids=None, "
        f"sampling_params={{'max_new_tokens': 1{params}}}, rid={rid!r}, return_logprob=False, "
        "stream=False, bootstrap_host='10.0.0.1', bootstrap_port=8998, bootstrap_room=3333, "
        f"custom_labels={{'team': 'a'{labels}}})"
    )


def test_a_rid_after_the_prompt_writes_no_engine_line() -> None:
    """Blind review 33 D5: the rid was learnt only when `rid=` opened the `Receive:` line (levels
    0 and 1); at level 2 the rid's forged restart onto a 2.04M pool was read as the engine's,
    and the status said a leak that went on had stopped."""
    parser = LineParser("prefill-0")
    lines = [_receive_at_level_2(ATTACK_RID), *_attack_lines()[1:]]
    parsed = [parser.parse(line, f"p:{n}") for n, line in enumerate(lines)]
    kinds = [kind for kind, _ in parsed]
    assert kinds == ["request_received"] + [RID_LINE] * len(INJECTED) + ["request_time_stats"]
    received, stats = parsed[0][1], parsed[-1][1]
    assert received is not None and stats is not None
    assert stats.fields["rid"] == received.fields["rid"] == repr(ATTACK_RID)[1:-1]
    assert parser.close() == {}


@pytest.mark.parametrize(
    "prompt",
    [
        f"as logged: GenerateReqInput(rid='{ATTACK_RID}', bootstrap_room=3333)",
        f"as logged: rid='{ATTACK_RID}', bootstrap_room=3333",
    ],
    ids=["quoting_a_call", "quoting_a_field"],
)
def test_a_rid_the_prompt_spells_is_no_rid(prompt: str) -> None:
    """A prompt quoting a request line with a rid holding newlines (its repr writes them
    escaped, as a rid's): the request's rid is the one SGLang wrote, and the prompt's teaches
    the parser nothing, so what follows is read as it would be after any other prompt. Read
    as the call's first argument, `GenerateReqInput(rid='…` in a prompt named the request."""
    after = _attack_lines()[1:]  # a cut time stats line whose request line was not this one

    def read(receive: str) -> tuple[list[str], dict[str, int], ev.Event | None]:
        parser = LineParser("prefill-0")
        parsed = [parser.parse(line, f"p:{n}") for n, line in enumerate([receive, *after])]
        return [kind for kind, _ in parsed], parser.close(), parsed[0][1]

    kinds, dropped, received = read(_receive_at_level_2("p0000009", prompt))
    assert received is not None and received.fields["rid"] == "p0000009"
    assert (kinds, dropped) == read(_receive_at_level_2("p0000009"))[:2]
    assert RID_LINE not in kinds


@pytest.mark.parametrize("after", [False, True], ids=["before_the_rid", "after_the_rid"])
@pytest.mark.parametrize(
    "key",
    [
        # A key's own `rid='…'` outside the literals, beginning as the request's rid does.
        ", 'k', rid='atk\\nsomething else', z=''",
        # An odd quote: the literals turn inside out, and where the rid is is unknown.
        ", 'k', rid='atk\\nsomething else', z='x",
    ],
    ids=["planted_rid", "odd_quote"],
)
def test_a_dict_key_spelling_a_rid_hides_none_of_the_rids_lines(key: str, after: bool) -> None:
    """Which `rid=` is the request's is unknown: every one that may be is learnt, and a rid
    alike so far is never taken for the one that wrote the lines (the first or the last one
    alone was: the key's, before or after the rid)."""
    parser = LineParser("prefill-0")
    lines = [_receive_at_level_2(ATTACK_RID, key=key, after=after), *_attack_lines()[1:]]
    kinds = []
    for n, line in enumerate(lines):
        # The odd quote leaves the line open where the rid writes a prefix: held for the next.
        kinds += [kind for kind, _ in [parser.parse(line, f"p:{n}"), *parser.more]]
        parser.more.clear()
    kinds = [kind for kind in kinds if kind != INTERLEAVED_HELD]
    assert kinds == ["request_received"] + [RID_LINE] * len(INJECTED) + ["request_time_stats"]
    assert parser.close() == {}


def test_a_rid_that_goes_on_outweighs_one_that_would_end() -> None:
    """The key's rid would end at the rid's second line, which spells the engine's last
    fields: taken for ended, the checksum mismatch after it was read as the engine's."""
    tail = _attack_lines()[-1].removeprefix("x")
    rid = "\n".join(["atk", "y" + tail, INJECTED[1], "x"])
    parser = LineParser("prefill-0")
    lines = [
        _receive_at_level_2(rid, key=", 'k', rid='atk\\ny', z=''", after=True),
        "[2026-08-27 10:00:59 TP0] ReqTimeStats(rid=atk",
        *rid.split("\n")[1:-1],
        "x" + tail,
    ]
    kinds = [parser.parse(line, f"p:{n}")[0] for n, line in enumerate(lines)]
    assert kinds == ["request_received", RID_LINE, RID_LINE, RID_LINE, "request_time_stats"]
