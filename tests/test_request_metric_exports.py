"""`--export-metrics-to-file` records: each node's, read beside its log, judged like its requests.

Every node writes its exports as `sglang-request-metrics-YYYYMMDD_HH.log`, so the file name
says nothing of the node: one kept in a host's folder is that host's. The records carry no time
but `request_finished_ts`, and their ids (room, prefill host, rid) sit inside
`request_parameters`, beside the prompt, of which nothing may be kept.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from collector.files import EXPORT_NAME, discover
from collector.forensics.driver import run_forensics
from collector.parse import streams_of
from collector.sglang.request_log import parse_json_record

T = 1_788_674_400.0  # 2026-09-06T06:00:00Z
SECRET = "MARK-do-not-keep-this-prompt"


def _export(
    rid: str, room: int, prompt: int, ttft: float, finished: float, *, v0519: bool = False
) -> str:
    """A record as 0.5.23 writes it; `v0519`: as 0.5.19 does, with no `first_token_latency`
    but the time the request's prefill finished (audit V, against its source)."""
    params = {
        "text": f"{SECRET} " * 4,
        "rid": rid,
        "bootstrap_host": "10.0.1.10",
        "bootstrap_port": 8998,
        "bootstrap_room": room,
    }
    record = {
        "request_parameters": json.dumps(params),
        "id": rid,
        "finish_reason": {"type": "stop", "matched": 2},
        "prompt_tokens": prompt,
        "completion_tokens": 120,
        "cached_tokens": 0,
        "e2e_latency": ttft + 4.0,
        "first_token_latency": ttft,
        "request_received_ts": finished - ttft - 4.0,
        "request_finished_ts": finished,
    }
    if v0519:
        del record["first_token_latency"]
        record["prefill_finished_time"] = finished - 4.0
    return json.dumps(record)


def _server_args(mode: str) -> str:
    args = {"model_path": "zai-org/GLM-5.3", "context_length": 1048576, "tp_size": 8}
    return f"[2026-09-06 05:00:00] server_args={dict(args, disaggregation_mode=mode)!r}"


def _deployment(root: Path) -> None:
    capacity = (
        "max_total_num_tokens={}, chunked_prefill_size=16384, max_prefill_tokens=16384, "
        "max_running_requests=64, context_len=1048576, available_gpu_mem=21.95 GB"
    )
    (root / "prefill-0").mkdir(parents=True)
    (root / "prefill-0" / "sglang.log").write_text(
        f"{_server_args('prefill')}\n"
        f"[2026-09-06 05:00:55 TP0] {capacity.format(681280)}\n"
        "[2026-09-06 05:00:56] CommonKVBootstrapServer started successfully on 10.0.1.10:8998\n"
    )
    (root / "decode-0" / "metrics").mkdir(parents=True)
    (root / "decode-0" / "sglang.log").write_text(
        f"{_server_args('decode')}\n[2026-09-06 05:00:55 TP0] {capacity.format(2040000)}\n"
    )
    (root / "decode-0" / "metrics" / f"{EXPORT_NAME}-20260906_06.log").write_text(
        _export("honest", 11, 40_000, 4.1, T + 60)
        + "\n"
        + _export("leaked", 22, 813_151, 0.03, T + 900)
        + "\n"
    )


def test_an_export_record_gives_its_ids_and_time_and_none_of_its_text() -> None:
    kind, fields = parse_json_record(_export("r1", 7, 900_000, 0.03, T)) or ("", {})
    assert kind == "request_finished"
    assert (fields["rid"], fields["bootstrap_room"], fields["bootstrap_host"]) == (
        "r1",
        "7",
        "10.0.1.10",
    )
    assert fields["record_time"] == "2026-09-06T06:00:00.000Z"
    assert SECRET not in json.dumps(fields)


def test_an_export_in_a_hosts_folder_is_that_hosts_and_its_own_stream(tmp_path: Path) -> None:
    _deployment(tmp_path)
    nodes = {f.path.name: f.node for f in discover([tmp_path])}
    assert nodes[f"{EXPORT_NAME}-20260906_06.log"] == "decode-0"
    # Written beside the log, not after it: merged by time with it, not read after it.
    assert set(streams_of([tmp_path])) == {
        ("decode-0", "log"),
        ("decode-0", "log:export"),
        ("prefill-0", "log"),
    }
    # Alone, with no host to belong to, it keeps the name it has.
    alone = tmp_path / "decode-0" / "metrics"
    assert {f.node for f in discover([alone])} == {EXPORT_NAME}


def test_exports_in_a_folder_of_the_node_s_name_beside_its_log_are_that_node_s(
    tmp_path: Path,
) -> None:
    """`logs/decode-0.log` with its exports in `logs/decode-0/` (blind review 54): the two were
    named apart by their paths, and the answers in the exports never met the pool."""
    _deployment(tmp_path / "nested")
    logs = tmp_path / "beside" / "logs"
    for node in ("prefill-0", "decode-0"):
        (logs / node).mkdir(parents=True)
        (tmp_path / "nested" / node / "sglang.log").rename(logs / f"{node}.log")
    export = f"{EXPORT_NAME}-20260906_06.log"
    (tmp_path / "nested" / "decode-0" / "metrics" / export).rename(logs / "decode-0" / export)
    with open(logs / "decode-0.log", "a", encoding="utf-8") as log:  # running past the exports
        log.write(
            "[2026-09-06 06:30:00 TP0] Decode batch, #running-req: 1, #token: 900, "
            "token usage: 0.01, gen throughput (token/s): 40.00, #queue-req: 0\n"
        )
    # prefill-0's exports too: the folders of two nodes' exports name them.
    (logs / "prefill-0" / export).write_text(_export("honest", 11, 40_000, 4.1, T + 60) + "\n")
    assert {str(f.path.relative_to(logs)): f.node for f in discover([logs])} == {
        "prefill-0.log": "prefill-0",
        "decode-0.log": "decode-0",
        f"prefill-0/{export}": "prefill-0",
        f"decode-0/{export}": "decode-0",
    }
    summary = run_forensics([str(logs)], tmp_path / "out", write_parquet=False).summary
    assert [(r["rid"], r["node"]) for r in summary["exposure"]["requests"]] == [
        ("leaked", "decode-0")
    ]
    assert "over_length_answered" in summary["exposure"]["requests"][0]["evidence"]


def test_an_over_length_prompt_known_only_from_an_export_is_named(tmp_path: Path) -> None:
    _deployment(tmp_path / "logs")
    result = run_forensics([str(tmp_path / "logs")], tmp_path / "out", write_parquet=False)
    exposure = result.summary["exposure"]
    assert [(r["rid"], r["bootstrap_room"], r["node"]) for r in exposure["requests"]] == [
        ("leaked", "22", "decode-0")
    ]
    assert exposure["first"] == "2026-09-06T06:15:00.000Z"
    for name in ("report.md", "report.html", "findings.csv", "forensics.json"):
        assert SECRET not in (tmp_path / "out" / name).read_text()


def test_exports_no_node_could_be_found_for_are_said_not_judged(tmp_path: Path) -> None:
    _deployment(tmp_path / "logs")
    export = tmp_path / "logs" / "decode-0" / "metrics" / f"{EXPORT_NAME}-20260906_06.log"
    export.rename(tmp_path / "logs" / export.name)  # beside every node's folder, in none
    result = run_forensics([str(tmp_path / "logs")], tmp_path / "out", write_parquet=False)
    assert result.summary["requests"]["unattributed_exports"] == 2
    # Answers with tokens in a room are decode's: judged by the pool of the prefill host each
    # names, and by timing, whatever node wrote them.
    assert [r["rid"] for r in result.summary["exposure"]["requests"]] == ["leaked"]
    head = (tmp_path / "out" / "report.md").read_text().split("## ")[0]
    assert "2 requests were read from request-metric exports" in head


def test_records_without_the_metrics_times_are_judged_at_their_file_s_hour(tmp_path: Path) -> None:
    # Without `--enable-metrics` a record has no `*_ts` times: only its file's name says when
    # it was written. Left without a time, the leaked answer was judged unserved and the run
    # said "no exposed responses found".
    _deployment(tmp_path / "logs")
    export = tmp_path / "logs" / "decode-0" / "metrics" / f"{EXPORT_NAME}-20260906_06.log"
    timeless = []
    for line in export.read_text().splitlines():
        record = json.loads(line)
        for key in ("request_received_ts", "request_finished_ts", "first_token_latency"):
            del record[key]
        timeless.append(json.dumps(record))
    export.write_text("\n".join(timeless) + "\n")
    result = run_forensics([str(tmp_path / "logs")], tmp_path / "out", write_parquet=False)
    exposure = result.summary["exposure"]
    assert [(r["rid"], r["node"]) for r in exposure["requests"]] == [("leaked", "decode-0")]
    assert exposure["first"] == "2026-09-06T06:00:00.000Z"  # the hour its file names


def test_exports_no_node_could_be_found_for_are_no_all_clear(tmp_path: Path) -> None:
    """Audit V: exports alone in a host's folder (no log beside them) were unjudged, and the
    run said "no exposed responses found", exit 0. Their answers are decode's (a room's one
    side answering with tokens), judged by their timing alone: the leaked one is named; with
    it left out, the honest one is no all-clear."""
    _deployment(tmp_path / "logs")
    metrics = tmp_path / "logs" / "decode-0" / "metrics"
    found = run_forensics([str(metrics)], tmp_path / "found", write_parquet=False).summary
    assert [r["rid"] for r in found["exposure"]["requests"]] == ["leaked"]
    assert found["requests"]["unattributed_exports"] == 2
    export = metrics / f"{EXPORT_NAME}-20260906_06.log"
    export.write_text(export.read_text().splitlines()[0] + "\n")  # the honest record alone
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", str(metrics), "--no-parquet"]
        + ["--out", str(tmp_path / "out"), "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-400:]
    assert "NOT JUDGED" in done.stdout and "NOT JUDGED" in done.stderr
    said = (
        f"1 requests were read from request-metric exports ({EXPORT_NAME}-*.log) that no node "
        "read could be found for"
    )
    assert said in done.stdout
    assert "no exposed responses found" not in done.stdout


def test_a_0519_export_s_time_to_first_token_is_read_from_its_stamps(tmp_path: Path) -> None:
    """600,000 uncached tokens prefilled in 0.03 s by the stamps of a record with no
    `first_token_latency`: too fast, said as a warning, not an exposure, since the 681,280-token
    pool took the prompt (no refusal for length can have sent it to decode: blind review 47)."""
    _deployment(tmp_path / "logs")
    export = tmp_path / "logs" / "decode-0" / "metrics" / f"{EXPORT_NAME}-20260906_06.log"
    export.write_text(
        _export("honest", 11, 40_000, 4.1, T + 60, v0519=True)
        + "\n"
        + _export("leaked", 22, 600_000, 0.03, T + 900, v0519=True)
        + "\n"
    )
    result = run_forensics([str(tmp_path / "logs")], tmp_path / "out", write_parquet=False)
    assert result.summary["exposure"]["requests"] == []
    (fast,) = [f for f in result.summary["findings"] if f["detector"] == "impossibly_fast_prefill"]
    assert (fast["rid"], fast["severity"]) == ("leaked", "warning")
    assert abs(fast["evidence"]["seconds"] - 0.03) < 1e-6
    assert "pool took prompts of up to 681,273 tokens" in fast["summary"]  # 681,280 - 6 - 1


def test_what_exports_alone_cover_begins_at_their_first_request(tmp_path: Path) -> None:
    """Audit V: shipped once settled, a request's side began "logs cover" 5 s after the first
    record's own time."""
    _deployment(tmp_path / "logs")
    metrics = tmp_path / "logs" / "decode-0" / "metrics"
    summary = run_forensics([str(metrics)], tmp_path / "out", write_parquet=False).summary
    assert (summary["input"]["first_time"], summary["input"]["last_time"]) == (
        "2026-09-06T06:01:00.000Z",
        "2026-09-06T06:15:00.000Z",
    )
