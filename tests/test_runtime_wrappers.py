"""Lines as container runtimes store them: split pieces joined, bare lines given the runtime's
time, and what cannot be joined counted, never parsed as a fragment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from collector.events import iso_time
from collector.files import TelemetryFile, discover
from collector.parse import ParseStats, file_events
from collector.sglang import runtime_wrappers
from collector.sglang.logs import LineParser

FINISH = (
    "Finish: obj=GenerateReqInput(rid='d5523', bootstrap_host='10.0.1.10', bootstrap_port=8998, "
    "bootstrap_room=5523401987766512300, text='a {prompt} with ) and } inside'), "
    "out={'meta_info': {'id': 'd5523', 'finish_reason': {'type': 'stop', 'matched': 2}, "
    "'prompt_tokens': 912384, 'completion_tokens': 150, 'cached_tokens': 0, 'e2e_latency': 5.1}}"
)
BATCH = "[2026-08-27 10:14:50 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.01"


def _events(tmp_path: Path, lines: list[str]) -> tuple[list, ParseStats]:
    path = tmp_path / "decode-0.log"
    path.write_text("\n".join(lines) + "\n")
    stats = ParseStats()
    events = list(file_events(TelemetryFile(path, "decode-0", "log", (0, "~")), stats))
    return events, stats


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _finish_fields(events: list) -> dict:
    (finished,) = [e for e in events if e.kind == "request_finished"]
    return {"time": iso_time(finished.time), **finished.fields}


def test_containerd_pieces_make_the_line_whole_again_per_stream(tmp_path: Path) -> None:
    stamp = "2026-08-27T10:14:52.250000Z"
    pieces = _pieces(FINISH, 40)
    lines = [f"{stamp} stdout P {p}" for p in pieces[:-1]]
    # stderr's lines interleave with stdout's pieces without breaking them.
    lines.insert(2, f"2026-08-27T10:14:50Z stderr F {BATCH}")
    lines.append(f"{stamp} stdout F {pieces[-1]}")
    events, stats = _events(tmp_path, lines)
    whole, _ = _events(tmp_path, [f"[2026-08-27 10:14:52.250000] {FINISH}"])
    assert _finish_fields(events) == _finish_fields(whole)
    assert _finish_fields(events)["prompt_tokens"] == 912384
    assert _finish_fields(events)["time"] == "2026-08-27T10:14:52.250Z"  # the runtime's time
    assert [e.kind for e in events] == ["decode_batch", "request_finished"]
    assert stats.noise["split_line_piece"] == len(pieces) - 1


def test_docker_records_are_joined_until_the_piece_that_ends_the_line(tmp_path: Path) -> None:
    pieces = _pieces(FINISH + "\n", 64)
    lines = [
        json.dumps({"log": p, "stream": "stdout", "time": "2026-08-27T12:14:52.5+02:00"})
        for p in pieces
    ]
    events, stats = _events(tmp_path, lines)
    fields = _finish_fields(events)
    assert (fields["rid"], fields["bootstrap_room"]) == ("d5523", "5523401987766512300")
    assert fields["time"] == "2026-08-27T10:14:52.500Z"  # the offset taken off
    assert stats.noise["split_line_piece"] == len(pieces) - 1 and not stats.dropped


@pytest.mark.parametrize(
    "wrapped",
    [
        "2026-08-27T10:14:52Z stdout F {line}",
        "2026-08-27T10:14:52.000000000Z {line}",  # kubectl logs --timestamps
        '{{"log": {json_line}, "stream": "stdout", "time": "2026-08-27T10:14:52Z"}}',
        "2026-08-27T10:14:52+0000 gpu-7 python3[4127]: {line}",  # journalctl -o short-iso
        "2026-08-27T12:14:52.000000+02:00 gpu-7.lan sglang[4127]: {line}",  # rsyslog, precise
        "2026-08-27T10:14:52Z {{}}  {line}",  # logcli query, one stream: no labels to tell
        "2026-08-27T10:14:52.000000+00:00 sglang/sglang-decode-0/3f2a {line}",  # aws logs tail
    ],
)
def test_a_bare_request_line_takes_the_runtimes_time(tmp_path: Path, wrapped: str) -> None:
    line = wrapped.format(line=FINISH, json_line=json.dumps(FINISH + "\n"))
    events, _ = _events(tmp_path, [BATCH, line])
    assert _finish_fields(events)["time"] == "2026-08-27T10:14:52.000Z"


def test_journalctl_iso_lines_are_the_engines_lines_they_carry(tmp_path: Path) -> None:
    """`journalctl -o short-iso` keeps the engine's own prefix behind its stamp and tag."""
    lines = [f"2026-08-27T10:14:50+0000 gpu-7 python3[4127]: {BATCH}"] * 2
    events, stats = _events(tmp_path, lines)
    plain, _ = _events(tmp_path, [BATCH] * 2)
    assert [(e.kind, e.time, e.fields) for e in events] == [
        (e.kind, e.time, e.fields) for e in plain
    ]
    assert stats.unclassified_other == 0


def test_syslog_takes_its_year_from_the_files_dated_lines_or_is_not_guessed(
    tmp_path: Path,
) -> None:
    line = f"Aug 27 10:14:52 gpu-7 sglang[4127]: {FINISH}"
    events, _ = _events(tmp_path, [BATCH, line])
    assert _finish_fields(events)["time"] == "2026-08-27T10:14:52.000Z"
    new_year, _ = _events(
        tmp_path, [BATCH.replace("2026-08-27", "2026-12-31"), "Jan  2" + line[6:]]
    )
    assert _finish_fields(new_year)["time"] == "2027-01-02T10:14:52.000Z"
    events, stats = _events(tmp_path, [line])  # no dated line: no year to give it
    assert not [e for e in events if e.kind == "request_finished"]
    assert stats.unclassified_other == 1


def test_pieces_that_never_end_or_grow_too_long_are_counted_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stamp = "2026-08-27T10:14:52Z"
    cut = [f"{stamp} stdout P {p}" for p in _pieces(FINISH, 50)]
    events, stats = _events(tmp_path, cut)
    assert not [e for e in events if e.kind == "request_finished"]
    assert stats.dropped["unfinished_split_line"] == 1

    monkeypatch.setattr(runtime_wrappers, "MAX_JOINED_CHARS", 120)
    pieces = _pieces(FINISH, 50)
    long_line = [f"{stamp} stdout P {p}" for p in pieces[:-1]] + [f"{stamp} stdout F {pieces[-1]}"]
    events, stats = _events(tmp_path, [*long_line, f"{stamp} stdout F {BATCH}"])
    assert [e.kind for e in events] == ["decode_batch"]  # the next line is read as usual
    assert stats.dropped["line_too_long"] == 1


def test_runtime_lines_keep_their_own_prefix_and_leave_unwrapped_lines_alone() -> None:
    parser = LineParser("decode-0")
    bucket, event = parser.parse(f"2026-08-27T10:14:55Z stderr F {BATCH}", "x:1")
    assert event is not None and iso_time(event.time) == "2026-08-27T10:14:50.000Z"
    # A wrapper that re-renders records with a level (`<RFC3339>  INFO mod: msg`) is not a
    # runtime's timestamp: `peel` reads it as before.
    assert runtime_wrappers.RuntimeLines().unwrap("2026-08-27T10:14:55Z  INFO sglang: x") is None


def test_a_bare_finish_line_takes_its_time_from_its_meta_info(tmp_path: Path) -> None:
    """Unwrapped and unprefixed (0.5.10's request logger): with `--enable-metrics` the line
    says when it finished; the batch line hours before is not its time."""
    stamped = FINISH.replace(
        "'e2e_latency': 5.1}", "'e2e_latency': 5.1, 'request_finished_ts': 1788500092.5}"
    )
    events, _ = _events(tmp_path, [BATCH, stamped])
    assert _finish_fields(events)["time"] == iso_time(1788500092.5)
    # Reply text that quotes the key does not stand in for the meta_info, which ends the line.
    quoted = stamped.replace(
        "text='a {prompt}", "text=\"'request_finished_ts': 1111111111, \" 'a {prompt}"
    )
    events, _ = _events(tmp_path, [BATCH, quoted])
    assert _finish_fields(events)["time"] == iso_time(1788500092.5)


@pytest.mark.parametrize(
    ("shipper", "engine", "expected"),
    [
        # The engine writes local time (+02:00), as the shipper's ISO time and epoch agree.
        ("1788674400000\t2026-09-06T08:00:00.000+02:00", "2026-09-06 08:00:00", "06:00:00"),
        # West of UTC, minutes in the offset, the shipper a few seconds behind the engine.
        ("1788699003000\t2026-09-06T07:20:03.000-05:30", "2026-09-06 07:20:00", "12:50:00"),
        # The engine's container on UTC beside a shipper on local time: the engine's own.
        ("1788674400000\t2026-09-06T08:00:00.000+02:00", "2026-09-06 06:00:00", "06:00:00"),
        # A shipper catching up three hours late: nothing agrees, the engine's own stamp.
        ("1788685200000\t2026-09-06T11:00:00.000+02:00", "2026-09-06 06:00:00", "06:00:00"),
        # A shipper in UTC.
        ("1788674400000\t2026-09-06T06:00:00.000Z", "2026-09-06 06:00:00", "06:00:00"),
    ],
)
def test_a_shippers_zone_applies_to_the_engines_local_stamp_only_when_its_clock_agrees(
    tmp_path: Path, shipper: str, engine: str, expected: str
) -> None:
    events, _ = _events(tmp_path, [f"{shipper}\t[{engine}] {FINISH}"])
    assert _finish_fields(events)["time"] == f"2026-09-06T{expected}.000Z"


@pytest.mark.parametrize(
    "record",
    [
        # Fluent Bit's CRI parser: time first, pieces marked by `_p`, no newline
        lambda text, last: {
            "time": "2026-08-27T10:14:52.25Z",
            "stream": "stdout",
            "_p": "F" if last else "P",
            "log": text,
        },
        # Vector's kubernetes_logs source: the line in `message`, metadata before it
        lambda text, last: {
            "file": "/var/log/pods/sglang_decode-0_uid/sglang/0.log",
            "kubernetes": {"pod_name": "decode-0"},
            "message": text,
            "timestamp": "2026-08-27T10:14:52.250Z",
        },
        # journalctl -o json
        lambda text, last: {
            "__REALTIME_TIMESTAMP": "1787825692250000",
            "_SYSTEMD_UNIT": "sglang-decode.service",
            "MESSAGE": text,
        },
    ],
    ids=["fluent-bit-cri", "vector", "journald-json"],
)
def test_a_shipper_s_json_record_holds_the_engine_s_line(tmp_path: Path, record: Any) -> None:
    pieces = _pieces(FINISH, 64)
    if "_p" in record("", True):  # only Fluent Bit's CRI parser keeps the runtime's pieces
        lines = [json.dumps(record(p, i == len(pieces) - 1)) for i, p in enumerate(pieces)]
    else:
        lines = [json.dumps(record(FINISH, True))]
    lines.append(json.dumps(record(BATCH, True)))
    events, stats = _events(tmp_path, lines)
    whole, _ = _events(tmp_path, [f"[2026-08-27 10:14:52.250000] {FINISH}", BATCH])
    assert _finish_fields(events) == _finish_fields(whole)
    assert [e.kind for e in events] == ["request_finished", "decode_batch"]
    assert stats.unclassified_engine == stats.unclassified_other == 0 and not stats.dropped


def test_sglang_s_own_json_request_record_is_no_wrapper() -> None:
    record = {"timestamp": "2026-08-27T10:14:52Z", "event": "request.finished", "rid": "a1"}
    record["obj"] = {"message": "a prompt"}
    assert runtime_wrappers.RuntimeLines().unwrap(json.dumps(record)) is None


def test_journald_records_whose_message_it_left_out_are_counted_and_said(tmp_path: Path) -> None:
    # `journalctl -o json` without `--all` writes MESSAGE as null for a field over 4,096 bytes:
    # a request line with its prompt. Said, not taken for an unknown line (or, with time stats
    # off, for a clock disagreeing: decode's finish is missing, its receive stays).
    from collector.forensics.report import unread_line

    stamp = '"__REALTIME_TIMESTAMP": "1788677870107751", "SYSLOG_IDENTIFIER": "sglang"'
    lines = [
        "{" + stamp + ', "MESSAGE": ' + json.dumps(BATCH) + "}",
        "{" + stamp + ', "MESSAGE": null}',
    ]
    events, stats = _events(tmp_path, lines)
    assert [e.kind for e in events] == ["decode_batch"]
    assert stats.dropped == {"journal_message_left_out": 1}
    assert stats.unclassified_other == 0
    summary = {"input": {"lines": 10_000, "dropped_by_reason": dict(stats.dropped)}}
    assert "journal_message_left_out 1" in unread_line(summary)


def test_journald_json_saved_as_json_is_read_as_its_lines(tmp_path: Path) -> None:
    """`journalctl -o json --all > decode-0.json`: one record a line, not one document."""
    stamp = '"__REALTIME_TIMESTAMP": "1788677870107751", "SYSLOG_IDENTIFIER": "sglang"'
    path = tmp_path / "decode-0.json"
    path.write_text(
        "".join("{" + stamp + ', "MESSAGE": ' + json.dumps(BATCH) + "}\n" for _ in "ab")
    )
    (tmp_path / "prefill-0.json").write_text('{"model_path": "m",\n "version": "0.5.23"}\n')
    stats = ParseStats()
    kinds = {tf.node: tf.kind for tf in discover([tmp_path])}
    assert kinds == {"decode-0": "log", "prefill-0": "json"}
    events = [e for tf in discover([path]) for e in file_events(tf, stats)]
    assert [e.kind for e in events] == ["decode_batch", "decode_batch"]


@pytest.mark.parametrize(
    "coloured",
    [
        "\x1b[2m[2026-08-27 10:14:52]\x1b[0m {line}",  # an engine run on a terminal
        "2026-08-27T10:14:52Z stdout F \x1b[2m[2026-08-27 10:14:52]\x1b[0m {line}",
        '{{"log": {json_line}, "stream": "stdout", "time": "2026-08-27T10:14:52Z"}}',
    ],
)
def test_terminal_colours_around_an_engine_line_are_not_its_text(
    tmp_path: Path, coloured: str
) -> None:
    """Blind review 8b: coloured container lines went unread (704 of 712), and the one line
    read made the run an all-clear."""
    json_line = json.dumps("\x1b[32m[2026-08-27 10:14:52]\x1b[0m " + FINISH + "\x1b[K\n")
    events, stats = _events(tmp_path, [BATCH, coloured.format(line=FINISH, json_line=json_line)])
    fields = _finish_fields(events)
    assert (fields["time"], fields["prompt_tokens"]) == ("2026-08-27T10:14:52.000Z", 912384)
    assert not stats.dropped


def test_a_request_line_whose_head_is_unread_configures_nothing() -> None:
    """Blind review 8b: `max_total_num_tokens=1000` in the prompt of a request line that was
    not read as one became a 1,000-token pool on a healthy node."""
    parser = LineParser("decode-0")
    prompt = "max_total_num_tokens=1000, context_len=1048576, KV checksum mismatch"
    garbled = "[2026-08-27 10:14:52] ~Finish: " + FINISH.replace("{prompt}", prompt)
    _, event = parser.parse(garbled, "d.log:1")
    assert event is None or event.kind not in ("capacity", "checksum_mismatch")
    glued = (
        "[2026-08-27 10:14:52 TP0] Memory pool end. max_total_num_tokens=681280, "
        "context_len=1048576"
    )
    _, event = parser.parse(glued, "d.log:2")
    assert event is not None and event.kind == "capacity"
