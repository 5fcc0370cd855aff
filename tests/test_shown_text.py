"""What the logs chose (a client's rid, a file's name) is shown inert: on the terminal, in
report.md and in findings.csv.

From an audit of the outputs: an escape sequence in a rid cleared the responder's screen and
printed a fake line; a `|` or a newline in one added columns and rows to report.md's tables,
and HTML in it went into the Markdown as written; rids and node names starting with `=` or `+`
were formulas in findings.csv.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

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
