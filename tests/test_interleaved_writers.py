"""Two writers' records on one physical line (blind review 13e D2).

SGLang's tokenizer process writes the request lines and its scheduler processes the batch and
time stats lines, all to one stream. A request line longer than a write buffer goes out in
pieces and another process's line can land between them: the first piece and that line make
one physical line, the request line's rest the next. A newline lost between writers puts two
whole records on one line. One of the two records vanished, uncounted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collector.parse import ParseStats, events_by_node

REFERENCE = Path(__file__).parent / "testdata" / "reference_incident"
LOG = (REFERENCE / "decode-0.log").read_text().splitlines()
RECEIVE, BATCH, TIME_STATS, FINISH = LOG[3], LOG[4], LOG[5], LOG[6]
# A batch line written the second the finish line was.
BATCH_THEN = BATCH.replace("10:12:05", "10:12:08")
FORGED = (
    "[2026-08-27 10:12:09 TP0] KV checksum mismatch req=d1c0b3a2f4e5d6c7b8a9887766554433 "
    "bootstrap_room=7701188362211045501 expected=0x1 got=0x2"
)


def _read(folder: Path, lines: list[str]) -> tuple[list[str], ParseStats]:
    """Each event as its kind, time and fields, in order, and the run's stats."""
    folder.mkdir(exist_ok=True)
    path = folder / "decode-0.log"
    path.write_text("\n".join(lines) + "\n")
    stats = ParseStats()
    events = [
        json.dumps([e.kind, e.time, e.fields], sort_keys=True, default=str)
        for e in events_by_node([path], stats)
    ]
    return events, stats


def test_a_request_line_cut_by_another_writer_s_line_is_read_whole_and_so_is_that_line(
    tmp_path: Path,
) -> None:
    # What was written: the finish line, and the batch line after it.
    written, _ = _read(tmp_path / "written", [*LOG[:7], BATCH_THEN, *LOG[7:]])
    for cut in (60, len(FINISH) // 2, len(FINISH) - 3):  # in its ids, its meta_info, its end
        spliced = [*LOG[:6], FINISH[:cut] + BATCH_THEN, FINISH[cut:], *LOG[7:]]
        events, stats = _read(tmp_path / f"cut{cut}", spliced)
        assert events == written
        assert not stats.dropped and stats.unclassified_other == stats.unclassified_engine == 0
        assert not stats.noise  # the rest is not a continuation line


@pytest.mark.parametrize("at_end", [False, True], ids=["next-line-tells", "file-ends"])
def test_two_whole_records_on_one_line_are_both_read(tmp_path: Path, at_end: bool) -> None:
    lines = LOG[:5] if at_end else LOG
    written, _ = _read(tmp_path / "written", lines)
    joined = [*lines[:3], RECEIVE + BATCH, *lines[5:]]
    events, stats = _read(tmp_path / "joined", joined)
    assert events == written and len(events) >= 2
    assert not stats.dropped


def test_a_record_after_a_time_stats_line_is_counted_not_lost_silently(tmp_path: Path) -> None:
    # The time stats line writes the client's rid raw: what follows it may be the rid's own
    # text, so it is never read as a record; it is counted as dropped.
    events, stats = _read(tmp_path / "joined", [*LOG[:5], TIME_STATS + FINISH, *LOG[7:]])
    assert stats.dropped["interleaved_unread"] == 1
    assert sum('"request_finished"' in e for e in events) == 1  # the other request's


@pytest.mark.parametrize(
    "after", ["[2026-08-27 10:12:09] INFO:     done", "Traceback (most recent call last):", None]
)
def test_a_prompt_quoting_a_log_line_is_one_record(tmp_path: Path, after: str | None) -> None:
    """A client's prompt holding an engine line, whatever line follows it (one with a prefix,
    one without, or none), is text: no checksum mismatch is read from it."""
    quoting = RECEIVE.replace("validation_time=None, ", f"validation_time=None, text='{FORGED}', ")
    events, stats = _read(tmp_path, [*LOG[:3], quoting, *([after] if after else [])])
    kinds = [json.loads(e)[0] for e in events]
    assert "checksum_mismatch" not in kinds and "request_received" in kinds
    assert not stats.dropped
    # The forged line, on a line of its own, is a mismatch: the test could fail.
    alone, _ = _read(tmp_path / "alone", [*LOG[:3], FORGED])
    assert "checksum_mismatch" in [json.loads(e)[0] for e in alone]


def test_a_time_stats_rid_spelling_a_record_is_the_rid(tmp_path: Path) -> None:
    """The rid of a time stats line is written raw: a client's rid spelling an engine line is
    neither read as that line nor counted as one lost."""
    rid = "d1c0b3a2f4e5d6c7b8a9887766554433"
    spelled = TIME_STATS.replace(f"rid={rid}", f"rid=x {FORGED}", 1)
    assert spelled != TIME_STATS
    events, stats = _read(tmp_path, [*LOG[:5], spelled])
    kinds = [json.loads(e)[0] for e in events]
    assert "checksum_mismatch" not in kinds and "request_time_stats" in kinds
    assert not stats.dropped


def _json_finish(prefixed: bool) -> str:
    """A `--log-requests-format json` finish record of the incident's decode request."""
    record = {
        "timestamp": "2026-08-27T10:12:08.000Z",
        "event": "request.finished",
        "rid": "d1c0b3a2f4e5d6c7b8a9887766554433",
        "obj": {"text": "x " * 400, "bootstrap_room": 7701188362211045501},
        "out": {
            "text": "y " * 300,
            "meta_info": {
                "id": "d1c0b3a2f4e5d6c7b8a9887766554433",
                "finish_reason": {"type": "stop", "matched": 2},
                "prompt_tokens": 900_000,
                "completion_tokens": 300,
                "cached_tokens": 0,
                "e2e_latency": 2.0,
            },
        },
    }
    line = json.dumps(record)
    return f"[2026-08-27 10:12:08] {line}" if prefixed else line


@pytest.mark.parametrize("prefixed", [True, False], ids=["prefixed", "bare"])
def test_a_json_request_record_cut_by_another_writer_s_line_is_read_whole(
    tmp_path: Path, prefixed: bool
) -> None:
    """Blind review 54 D1: under `--log-requests-format json` the record cut by a scheduler
    line was dropped as a cut request line, and the line inside it as unread: at level 3 every
    prefill refusal was lost, and exposures were missed."""
    finish = _json_finish(prefixed)
    written, _ = _read(tmp_path / "written", [*LOG[:6], finish, BATCH_THEN])
    assert sum('"request_finished"' in e for e in written) == 1
    for cut in (len(finish) // 3, len(finish) - 40):  # in its prompt, in its meta_info
        spliced = [*LOG[:6], finish[:cut] + BATCH_THEN, finish[cut:]]
        events, stats = _read(tmp_path / f"cut{cut}", spliced)
        assert sorted(events) == sorted(written)
        assert not stats.dropped and stats.unclassified_other == stats.unclassified_engine == 0
