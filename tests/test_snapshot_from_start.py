"""A prefill node known only from a snapshot saved after the logs, its own logs lost.

A pool is set when its engine starts; with no log of the node, no restart of it is seen. Its
`.prom` scrape or `/server_info`, named with no time, is dated by its file: after the logs, so
it was read after them and every decode answer judged before it met a prefill of no known pool
(blind review 5b: 1 and 0 of 6 exposures found, the pool gap "from" a time after the logs end).
Such a snapshot's configuration is now read first, in force from the start.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collector.forensics.driver import run_forensics
from tests.engine_lines import server_args

DAY = "2026-08-27"
POOL = 681_280
# Rooms exposed (prompts over the pool), each answered at its hour; honest ones between.
EXPOSED = {f"72829884804737032{n:02d}": (6 + n, 790_000 + n) for n in range(5)}
HONEST = {f"72829884804737033{n:02d}": (6 + n, 30_000 + n) for n in range(5)}


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


def _finish(hour: int, room: str, prompt: int) -> str:
    rid = f"{int(room):032x}"[-32:]
    return (
        f"[{DAY} {hour:02d}:20:00] Finish: obj=GenerateReqInput(rid='{rid}', "
        f"bootstrap_host='10.1.0.11', bootstrap_port=8998, bootstrap_room={room}), "
        f"out={{'meta_info': {{'id': '{rid}', 'finish_reason': {{'type': 'stop', "
        f"'matched': 151336}}, 'prompt_tokens': {prompt}, 'completion_tokens': 700, "
        "'cached_tokens': 0, 'e2e_latency': 21.9}}\n"
    )


def _case(root: Path, snapshot: str, *, served_as: str = "", apart: bool = False) -> Path:
    """`served_as`: decode's `served_model_name`; `apart`: decode's request lines in a file
    named for its host, its own log holding none."""
    case = root / "case"
    case.mkdir()
    answers = sorted({**EXPOSED, **HONEST}.items(), key=lambda item: item[1])
    start = server_args(DAY, "decode")
    if served_as:
        start = start.replace("tp_size=8", f"served_model_name='{served_as}', tp_size=8")
    finishes = "".join(_finish(hour, room, prompt) for room, (hour, prompt) in answers)
    if apart:
        (case / "requests").mkdir()
        (case / "requests" / "gpu-d0_0.log").write_text(finishes)
        batches = "".join(
            f"[{DAY} {hour:02d}:19:00 TP0] Decode batch, #running-req: 1, #token: 4096, "
            "token usage: 0.01, pre-allocated usage: 0.00, #prealloc-req: 0, "
            "#transfer-req: 0, #retracted-req: 0, cuda graph: True, "
            "gen throughput (token/s): 40.00, #queue-req: 0\n"
            for hour in range(6, 11)
        )
        (case / "decode-0.log").write_text(start + batches)
    else:
        (case / "decode-0.log").write_text(start + finishes)
    labels = 'engine_type="prefill",model_name="zai-org/GLM-5.3",tp_rank="0"'
    saved = case / f"prefill-0.{snapshot}"
    if snapshot == "prom":
        saved.write_text(
            "# TYPE sglang:max_total_num_tokens gauge\n"
            f"sglang:max_total_num_tokens{{{labels}}} {POOL}.0\n"
            "# TYPE sglang:context_len gauge\n"
            f"sglang:context_len{{{labels}}} 1048576.0\n"
        )
    else:
        saved.write_text(
            json.dumps(
                {
                    "model_path": "zai-org/GLM-5.3",
                    "disaggregation_mode": "prefill",
                    "disaggregation_bootstrap_port": 8998,
                    "context_length": 1048576,
                    "max_total_num_tokens": POOL,
                    "version": "0.5.19",
                }
            )
        )
    later = _epoch(f"{DAY} 12:30:00")  # saved after the logs, as a responder collects it
    os.utime(saved, (later, later))
    return case


def _summary(tmp_path: Path, snapshot: str, **layout: Any) -> dict[str, Any]:
    case = _case(tmp_path, snapshot, **layout)
    summary: dict[str, Any] = run_forensics([str(case)], tmp_path / "out").summary
    return summary


def test_a_scrape_saved_after_the_logs_judges_every_answer(tmp_path: Path) -> None:
    summary = _summary(tmp_path, "prom")
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == set(EXPOSED)
    assert summary["exposure"]["first"] == f"{DAY}T06:20:00.000Z"
    assert summary["nodes"]["prefill-0"]["config"][0]["time"] is None
    report = (tmp_path / "out" / "report.md").read_text()
    assert "from the start of the logs" in report and "None" not in report


def test_a_server_info_saved_after_the_logs_judges_every_answer(tmp_path: Path) -> None:
    summary = _summary(tmp_path, "server_info.json")
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == set(EXPOSED)


def test_a_snapshot_naming_the_model_by_its_path_is_of_the_served_name_s_deployment(
    tmp_path: Path,
) -> None:
    """Decode's start-up line serves `zai-org/GLM-5.3` as `glm-5.3`; the prefill's saved
    `/server_info` states the path alone. Told apart, no prefill was of decode's deployment and
    the answers were judged against no pool (blind review 5b: 1 of 6)."""
    summary = _summary(tmp_path, "server_info.json", served_as="glm-5.3")
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == set(EXPOSED)


def test_answers_logged_apart_with_no_prefill_log_are_decode_s(tmp_path: Path) -> None:
    """A room's one side, answering with tokens, in a request log named for its host: in PD
    only decode answers. With no role, it was judged as no one's (0 of 6, NOT JUDGED)."""
    summary = _summary(tmp_path, "server_info.json", apart=True)
    exposed = summary["exposure"]["requests"]
    assert {r["bootstrap_room"] for r in exposed} == set(EXPOSED)
    assert {r["node"] for r in exposed} == {"gpu-d0_0"}
    rows = {row["node"]: row for row in summary["requests"]["nodes_not_judged"]}
    assert rows["decode-0"]["request_logs"] == ["gpu-d0_0"]
