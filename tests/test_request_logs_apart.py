"""Request logs in files named for the host, undated, beside engine logs without time stats.

SGLang's default PD logging plus `--log-requests --log-requests-target DIR`: the request logger
writes `{hostname}_{rank}.log`, its lines unprefixed (reference §2.5, §8), and without
`--enable-metrics` the finish holds no wall-clock stamp; without
`--enable-request-time-stats-logging` no engine line names the requests either, except the
prefill's refusals. Blind review 4a v27: 0 of 10 exposures found, "NOT JUDGED NODES". An
undated finish now counts as a finish, a finish whose abort states the refusal is one, the
engine's refusal line (by rid, or by length in the 2025 form) dates its request, and the
engines are said to have logged under the host's name instead of "not judged".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from collector.forensics.driver import SCHEMA_PATH, run_forensics
from collector.forensics.report import answering_not_judged
from tests.engine_lines import prefill_start, server_args

DAY = "2026-09-04"
POOL = 681_280
LIMIT = POOL - 6  # the scheduler's max_req_input_len in the refusal's sentence
EXPOSED = {"6200000000000000000": 900_000, "6200000000000000002": 900_002}
HONEST = {"6200000000000000001": 400_001, "6200000000000000003": 400_003}


def _stamp(room: str) -> str:
    return f"{DAY} 00:{10 + int(room[-1]):02d}:00"


def _refusal_sentence(prompt: int) -> str:
    return (
        f"Input length ({prompt} tokens) exceeds the maximum allowed length ({LIMIT} tokens). "
        "Use a shorter input or enable --allow-auto-truncate."
    )


def _finish(role: str, room: str, prompt: int) -> str:
    """The request logger's two lines of a request, unprefixed and with no time: prefill ends
    after its one token, or aborts with the refusal's sentence; decode answers 200 tokens."""
    rid = f"{role[0]}{room[-6:]}"
    ids = f"rid='{rid}', bootstrap_host='10.0.0.5', bootstrap_port=8998, bootstrap_room={room}"
    if role == "decode":
        reason, completion = "{'type': 'stop', 'matched': 151336}", 200
    elif room in EXPOSED:
        reason = (
            f"{{'type': 'abort', 'message': {_refusal_sentence(prompt)!r}, 'status_code': 400, "
            "'err_type': 'BadRequestError'}"
        )
        completion = 0
    else:
        reason, completion = "{'type': 'length', 'length': 1}", 1
    return (
        f"Receive: obj=GenerateReqInput({ids})\n"
        f"Finish: obj=GenerateReqInput({ids}), out={{'meta_info': {{'id': '{rid}', "
        f"'finish_reason': {reason}, 'prompt_tokens': {prompt}, "
        f"'completion_tokens': {completion}, 'cached_tokens': 0, 'e2e_latency': 3.5}}}}\n"
    )


def _decode_batch(stamp: str) -> str:
    return (
        f"[{stamp} TP0] Decode batch, #running-req: 1, #token: 4096, token usage: 0.01, "
        "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, "
        "cuda graph: True, gen throughput (token/s): 40.00, #queue-req: 0\n"
    )


def _case(
    root: Path, *, refusal: str = "rid", exposed: dict[str, int] = EXPOSED, decode_engines: int = 1
) -> Path:
    """Engine logs without time stats, request logs in `reqlogs/` named for the hosts.
    `refusal`: "rid" (0.5.x), "2025" (no rid in the line) or "" (no refusal line read)."""
    case = root / "case"
    (case / "reqlogs").mkdir(parents=True)
    rooms = sorted({**exposed, **HONEST}.items())
    prefill = server_args(DAY, "prefill") + prefill_start(DAY, "10.0.0.5", POOL)
    for room, prompt in rooms:
        if room in exposed and refusal:
            named = f", self.rid='p{room[-6:]}'" if refusal == "rid" else ""
            prefill += f"[{_stamp(room)} TP0] {_refusal_sentence(prompt)}{named}\n"
        elif room not in exposed:
            prefill += (
                f"[{_stamp(room)} TP0] Prefill batch, #new-seq: 1, #new-token: 16384, "
                "#cached-token: 0, token usage: 0.60, #running-req: 0, #queue-req: 0\n"
            )
    (case / "prefill-0.log").write_text(prefill)
    for index in range(decode_engines):
        lines = "".join(_decode_batch(_stamp(room)) for room, _ in rooms)
        (case / f"decode-{index}.log").write_text(server_args(DAY, "decode") + lines)
    (case / "reqlogs" / "glm53-decode-0-7d9f4_0.log").write_text(
        "".join(_finish("decode", room, prompt) for room, prompt in rooms)
    )
    (case / "reqlogs" / "glm53-prefill-0-7d9f4_0.log").write_text(
        "".join(_finish("prefill", room, prompt) for room, prompt in rooms)
    )
    return case


def _forensics(tmp_path: Path, case: Path) -> dict[str, Any]:
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    jsonschema.validate(summary, json.loads(SCHEMA_PATH.read_text()))
    return summary


def _exposed(summary: dict[str, Any]) -> dict[str, Any]:
    return {r["bootstrap_room"]: r for r in summary["exposure"]["requests"]}


def test_refusal_naming_its_rid_dates_the_exposed_answers(tmp_path: Path) -> None:
    summary = _forensics(tmp_path, _case(tmp_path))
    exposed = _exposed(summary)
    assert set(exposed) == set(EXPOSED)
    # The decode file answered; the prefill file refused (the roles are told by how each
    # finishes, not by which file sorts first).
    assert {r["node"] for r in exposed.values()} == {"glm53-decode-0-7d9f4_0"}
    assert {r["prefill_node"] for r in exposed.values()} == {"glm53-prefill-0-7d9f4_0"}
    assert summary["exposure"]["first"] == f"{DAY}T00:10:00.000Z"
    assert summary["exposure"]["last"] == f"{DAY}T00:12:00.000Z"
    assert summary["exposure"]["undated"] == 0
    # Each engine logged under the host's name, which is said, not "not judged".
    rows = {row["node"]: row for row in summary["requests"]["nodes_not_judged"]}
    assert rows["decode-0"]["request_logs"] == ["glm53-decode-0-7d9f4_0"]
    assert rows["prefill-0"]["request_logs"] == ["glm53-prefill-0-7d9f4_0"]
    assert answering_not_judged(summary) == []
    # The refusal lines joined their requests: none is a request of its own.
    assert summary["requests"]["total"] == len(EXPOSED) + len(HONEST)
    assert summary["requests"]["refused_without_decode"]["count"] == 0


def test_refusal_naming_no_request_joins_by_the_length_its_finish_states(
    tmp_path: Path,
) -> None:
    summary = _forensics(tmp_path, _case(tmp_path, refusal="2025"))
    assert set(_exposed(summary)) == set(EXPOSED)
    assert summary["exposure"]["first"] == f"{DAY}T00:10:00.000Z"
    assert summary["exposure"]["undated"] == 0
    assert summary["requests"]["total"] == len(EXPOSED) + len(HONEST)
    assert summary["requests"]["refused_without_decode"]["count"] == 0


def test_exposures_no_line_dates_are_named_without_a_time(tmp_path: Path) -> None:
    summary = _forensics(tmp_path, _case(tmp_path, refusal=""))
    exposure = summary["exposure"]
    assert set(_exposed(summary)) == set(EXPOSED)
    assert exposure["undated"] == len(EXPOSED)
    assert exposure["first"] is None and exposure["last"] is None
    assert all(r["time"] is None for r in exposure["requests"])
    report = (tmp_path / "out" / "report.md").read_text()
    assert "at times no line of the logs states" in report
    assert "Not known from these logs" in report


def test_healthy_requests_logged_apart_are_an_all_clear(tmp_path: Path) -> None:
    summary = _forensics(tmp_path, _case(tmp_path, exposed={}))
    assert summary["exposure"]["count"] == 0
    assert summary["requests"]["total"] == len(HONEST)
    assert answering_not_judged(summary) == []
    assert not [f for f in summary["findings"] if f["severity"] == "critical"]


def test_fewer_request_logs_than_engines_leave_the_engines_not_judged(tmp_path: Path) -> None:
    """One decode request log beside two decode engines that logged nothing: which engine's it
    is cannot be told, and the other's answers were not judged."""
    summary = _forensics(tmp_path, _case(tmp_path, exposed={}, decode_engines=2))
    rows = {row["node"]: row for row in summary["requests"]["nodes_not_judged"]}
    assert "request_logs" not in rows["decode-0"] and "request_logs" not in rows["decode-1"]
    assert {row["node"] for row in answering_not_judged(summary)} == {"decode-0", "decode-1"}
