"""What the logs chose (a client's rid, a file's name) is shown inert: on the terminal, in
report.md and in findings.csv.

From an audit of the outputs: an escape sequence in a rid cleared the responder's screen and
printed a fake line; a `|` or a newline in one added columns and rows to report.md's tables,
and HTML in it went into the Markdown as written; rids and node names starting with `=` or `+`
were formulas in findings.csv.
"""

from __future__ import annotations

import calendar
import csv
import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from collector.forensics.driver import run_forensics
from collector.shown_text import printable, printable_lines

REFERENCE = Path(__file__).parent / "testdata" / "reference_incident"
DECODE_RID = "e5f4a3b2c1d0e9f8a7b6554433221100"
HOSTILE_RID = "=HYPERLINK(x)|<img src=x onerror=alert(1)>"


def test_a_hostile_rid_and_node_name_are_inert_in_every_human_output(tmp_path: Path) -> None:
    case = tmp_path / "case"
    case.mkdir()
    shutil.copy(REFERENCE / "prefill-0.log", case / "prefill-0.log")
    decode = (REFERENCE / "decode-0.log").read_text().replace(DECODE_RID, HOSTILE_RID)
    (case / "decode-\x1b[2J\x1b[31mred.log").write_text(decode)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", "--quiet", "--no-parquet"]
        + [str(case), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert f"rid={HOSTILE_RID}" in done.stdout  # named, as logged
    for text in (done.stdout, done.stderr, (out / "report.md").read_text()):
        assert "\x1b" not in text
    assert "decode-\\x1b[2J\\x1b[31mred" in done.stdout
    markdown = (out / "report.md").read_text()
    assert "<img" not in markdown and "&lt;img src=x" in markdown
    (row,) = [line for line in markdown.splitlines() if "HYPERLINK" in line and line[0] == "|"]
    header = next(line for line in markdown.splitlines() if line.startswith("| time | node | rid"))
    assert row.replace("\\|", "").count("|") == header.count("|")
    with open(out / "findings.csv", newline="") as handle:
        rids = {row["rid"] for row in csv.DictReader(handle) if "HYPERLINK" in row["rid"]}
    assert rids == {"'" + HOSTILE_RID}


@given(st.text())
def test_printable_text_has_no_control_characters_and_keeps_printable_text(text: str) -> None:
    shown = printable(text)
    assert shown.isprintable()
    if text.isprintable():
        assert shown == text
    lines = printable_lines(text)
    assert lines.count("\n") == text.count("\n")
    assert all(line.isprintable() for line in lines.split("\n"))


def test_a_forged_engine_line_s_free_text_is_not_taken_as_an_engine_word() -> None:
    """Blind review 50 D1/D2: a client's rid with newlines forges engine lines; a sentence where
    the engine writes a backend's name reached the reports as configuration, and a 3,000-
    character launch tag the findings. What the engine writes there is one short word."""
    from collector.sglang.pd import parse_checksum_skipped, parse_kv_canary
    from collector.sglang.server_info import _server_info
    from collector.sglang.startup import parse_server_args

    sentence = "my SSN is 078-05-1120 and my diagnosis is flu"
    args = parse_server_args(
        "server_args=ServerArgs(model_path='m', disaggregation_mode='decode', "
        f"disaggregation_transfer_backend='{sentence}', kv_canary='log')"
    )
    assert (args["transfer_backend"], args["kv_canary"]) == (None, "log")
    assert (
        parse_server_args("server_args={'disaggregation_transfer_backend': 'mooncake'}")[
            "transfer_backend"
        ]
        == "mooncake"
    )
    canary = parse_kv_canary(
        f"kv_canary violation: launch_tag={'A' * 3000} fail_reason=a+b slot_idx=1 position=2"
    )
    assert (canary["launch_tag"], canary["fail_reason"], canary["slot_idx"]) == (None, "a+b", 1)
    skipped = parse_checksum_skipped(
        f"KV checksum skipped: prefill layout signature {'x' * 200} differs from this decode's "
        "0x1f2e"
    )
    assert (skipped["prefill_signature"], skipped["decode_signature"]) == (None, "0x1f2e")
    info = _server_info({"disaggregation_transfer_backend": sentence, "max_total_num_tokens": 9})
    assert info is not None and info["transfer_backend"] is None


def test_a_rid_holding_a_colour_code_is_one_request_however_its_lines_spell_it(
    tmp_path: Path,
) -> None:
    """Blind review 58 D2: SGLang writes a rid as a repr in its request lines (the colour code
    stays as `\\x1b[31m` text) and raw in its time stats (the code is taken off with the
    line's colours). With both nodes' sides in both spellings, the room was two requests, and
    its one exposure was named twice, once under a rid no client sent."""
    shown, raw = "=evil\\x1b[31m|rid", "=evil\x1b[31m|rid"
    case = tmp_path / "case"
    case.mkdir()
    prefill = (REFERENCE / "prefill-0.log").read_text()
    prefill = prefill.replace("b2e1d4f3c5a6b7988877665544332222", shown)
    entry = calendar.timegm((2026, 8, 27, 10, 14, 38, 0, 0, 0))
    prefill += (
        f"[2026-08-27 10:14:40 TP0] ReqTimeStats(rid={raw}, bootstrap_room=5523401987766512300, "
        "input_len=1, cached_input_len=0, output_len=1, attempts=0, type=prefill): "
        "bootstrap_duration=1.00ms, queue_duration=0.50ms, forward_duration=50.00ms, "
        f"entry_time={entry}.000\n"
    )
    (case / "prefill-0.log").write_text(prefill)
    decode = (REFERENCE / "decode-0.log").read_text().splitlines(keepends=True)
    decode = [
        line.replace(DECODE_RID, raw if "ReqTimeStats(" in line else shown) for line in decode
    ]
    (case / "decode-0.log").write_text("".join(decode))
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert summary["exposure"]["count"] == 1
    (exposed,) = summary["exposure"]["requests"]
    assert (exposed["rid"], exposed["bootstrap_room"]) == (shown, "5523401987766512300")
    named = [f for f in summary["findings"] if f["exposure"]]
    assert sorted(f["detector"] for f in named) == [
        "impossibly_fast_prefill",
        "over_length_answered",
        "rejected_then_served",
    ]
