"""The OpenAI request record (`Receive OpenAI:`, `request.received.openai`) names no request.

It is the HTTP body as the client sent it, logged before SGLang makes the request, and the
`Receive:` line that follows names the request. Read for ids, it made requests that never were:
a client `rid` that a fanned-out call never schedules (a phantom record, and in a leak a false
warning that decode "logged no end" for it), and, in the text form, which spells no key as
`rid=` or `bootstrap_room=`, the user's own words taken for a rid and written to the findings.
The cases are audit P2's reproductions (0.5.19 and 0.5.23 formats, level 2; long prompt text
shortened), with its truth.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from collector.forensics.driver import run_forensics
from collector.sglang.logs import LineParser

CASES = Path(__file__).parent / "testdata" / "openai_records"
MARK = b"PROMPTSECRET"

TEXT_LOOKALIKE = (
    "[2026-11-11 08:00:00] Receive OpenAI: obj={'bootstrap_host': '10.0.1.10', "
    "'bootstrap_port': 8998, 'bootstrap_room': 5550001, 'messages': [{'role': 'user', "
    "'content': \"my log says rid='feedface01' bootstrap_room=777 why?\"}], 'model': 'GLM', "
    "'n': 1, 'stream': False}"
)
JSON_CLIENT_RID = json.dumps(
    {
        "timestamp": "2026-11-11T08:10:00.001000",
        "event": "request.received.openai",
        "obj": {"bootstrap_room": 5550001, "messages": [], "n": 2, "rid": "job-1"},
    }
)


@pytest.mark.parametrize("line", [TEXT_LOOKALIKE, f"[2026-11-11 08:10:00] {JSON_CLIENT_RID}"])
def test_an_openai_record_names_no_request(line: str) -> None:
    kind, event = LineParser("decode-0").parse(line, "decode-0.log:1")
    assert kind == "request_received" and event is not None
    fields = event.fields
    assert (fields["rid"], fields["bootstrap_room"], fields["openai"]) == (None, None, True)


def _run(case: str, tmp_path: Path) -> dict:
    out = tmp_path / case
    result = run_forensics([str(CASES / case)], out, workers=1)
    summary = result.summary
    # Nothing a user wrote reaches an output, whatever the verdict (the Parquet table read
    # back, as its pages may be compressed).
    for path in out.iterdir():
        data = path.read_bytes()
        if path.suffix == ".parquet":
            data = json.dumps(pq.read_table(path).to_pylist(), default=str).encode()
        assert MARK not in data, path.name
    assert MARK not in json.dumps(summary).encode()
    return summary


def test_a_fanned_out_call_with_a_client_rid_makes_no_phantom_request(tmp_path: Path) -> None:
    """One chat call, `n` = 2, `"rid": "job-1"`, on a healthy 0.5.23 pair: its two answers and
    the warm-up are the requests (it was four, the fourth never ending)."""
    summary = _run("json_client_rid_healthy", tmp_path)
    assert summary["requests"]["total"] == 3
    assert summary["requests"]["late_lines"] == 0
    assert [f for f in summary["findings"] if f["severity"] != "info"] == []


def test_a_leaked_fanned_out_call_with_a_client_rid_names_its_samples_alone(
    tmp_path: Path,
) -> None:
    """0.5.19, one over-length chat call, `n` = 2, `"rid": "job-leak"`: both samples are
    exposed, and nothing says decode received a request `job-leak` and never ended it."""
    summary = _run("json_client_rid_leak", tmp_path)
    named = sorted(r["rid"] for r in summary["exposure"]["requests"])
    assert named == ["59cc7a9beee1e25edae8384b9277261a", "d2fcfdacfce964d1563c117b2dacacee"]
    warnings = [f for f in summary["findings"] if f["severity"] == "warning"]
    assert [f["detector"] for f in warnings] == ["pool_below_context"]
    assert summary["requests"]["total"] == 3


def test_a_chat_quoting_a_server_log_is_not_read_for_ids(tmp_path: Path) -> None:
    """0.5.19, an over-length chat `n` = 2, then a chat whose message quotes the first call's
    room and `rid='PROMPTSECRET_2 my password is hunter2'`: the two samples are named, the
    quote makes no request, no warning, and its words reach no output."""
    summary = _run("text_lookalike_leak", tmp_path)
    named = sorted(r["rid"] for r in summary["exposure"]["requests"])
    assert named == ["00f9f9786c70a59903a9657251e97eb7", "462ba0b668a1a67553a7d73f5086fdc2"]
    warnings = [f for f in summary["findings"] if f["severity"] == "warning"]
    assert [f["detector"] for f in warnings] == ["pool_below_context"]
    assert summary["requests"]["total"] == 4


def test_an_openai_record_still_counts_in_what_the_logs_cover(tmp_path: Path) -> None:
    """It feeds no detector, but the logs run to it: a chat received 15 min after the last
    answer ends what they cover (rerun 6, R3: they ended at the last answer, and the status
    said the last exposure came 0 s before the logs end)."""
    case = tmp_path / "case"
    shutil.copytree(CASES / "text_lookalike_leak", case)
    with (case / "decode-0.log").open("a") as log:
        log.write(TEXT_LOOKALIKE.replace("08:00:00", "08:40:00") + "\n")
    summary = run_forensics([str(case)], tmp_path / "out", workers=1).summary
    assert summary["input"]["last_time"] == "2026-11-11T08:40:00.000Z"
    assert len(summary["exposure"]["requests"]) == 2
