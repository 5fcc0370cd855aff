"""Forensics on logs written by hand from SGLang's formats, not by the simulator, and on the same
incident rewritten in the other forms the reference documents (JSON request logs, the refusal
without its rid or as the PD capacity check, DP-attention prefixes)."""

from __future__ import annotations

import ast
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics

LOGS = Path(__file__).parent / "testdata" / "reference_incident"
SNAPSHOTS = Path(__file__).parent / "testdata" / "audit" / "incident"


def test_the_refused_then_served_response_is_exposed_with_both_halves(tmp_path: Path) -> None:
    summary = run_forensics([str(LOGS)], tmp_path, write_parquet=False).summary
    (exposed,) = summary["exposure"]["requests"]
    assert exposed == {
        "rid": "e5f4a3b2c1d0e9f8a7b6554433221100",  # the id decode answered with
        "bootstrap_room": "5523401987766512300",
        "node": "decode-0",
        "time": "2026-08-27T10:14:52.000Z",
        "prompt_tokens": 912384,
        "cached_tokens": 0,
        "prefill_node": "prefill-0",
        "prefill_rid": "b2e1d4f3c5a6b7988877665544332222",
        # Decode's 0.88 ms wait for 912,384 tokens of KV tells it as well.
        "evidence": ["impossibly_fast_prefill", "over_length_answered", "rejected_then_served"],
    }
    assert summary["requests"]["total"] == 2  # the honest 4,096-token request is not exposed
    prefill = summary["nodes"]["prefill-0"]
    assert prefill["role"] == "prefill"
    assert (prefill["config"][0]["max_total_num_tokens"], prefill["config"][0]["context_len"]) == (
        681280,
        1048576,
    )
    critical = {f["detector"] for f in summary["findings"] if f["severity"] == "critical"}
    assert {"pool_below_context", "over_length_answered", "rejected_then_served"} <= critical
    # One refused request: its refusal line and the stub it was swapped for are one refusal.
    (gap,) = [
        f
        for f in summary["findings"]
        if f["detector"] == "pool_below_context" and f["severity"] == "critical"
    ]
    assert gap["evidence"]["refusals"] == 1


def test_logs_in_a_folder_per_host_meet_their_snapshots_on_one_node(tmp_path: Path) -> None:
    """`prefill-0/sglang.log` and `snapshots/prefill-0@….server_info.json` are one node: the
    version, which SGLang logs nowhere, comes from the snapshot and sets the severity of the
    pool gap on the node whose logs show it."""
    for log in LOGS.glob("*.log"):
        host = tmp_path / "hosts" / log.stem
        host.mkdir(parents=True)
        shutil.copy(log, host / "sglang.log")
    (tmp_path / "snapshots").mkdir()
    for snapshot in SNAPSHOTS.glob("*.server_info.json"):
        shutil.copy(snapshot, tmp_path / "snapshots" / snapshot.name)
    summary = run_forensics([str(tmp_path)], tmp_path / "out", write_parquet=False).summary
    assert sorted(summary["nodes"]) == ["decode-0", "prefill-0"]
    assert summary["nodes"]["prefill-0"]["config"][0]["version"] == "0.5.19"
    (exposed,) = summary["exposure"]["requests"]
    assert (exposed["node"], exposed["prefill_node"]) == ("decode-0", "prefill-0")
    gaps = {
        (f["node"], f["severity"])
        for f in summary["findings"]
        if f["detector"] == "pool_below_context"
    }
    assert ("prefill-0", "critical") in gaps and {node for node, _ in gaps} == {"prefill-0"}


def _json_request_logs(line: str) -> str:
    """`--log-requests-format json`: the same request lines as JSON records (§2.5)."""
    m = re.match(
        r"^\[([^\]]+)\] (Receive|Finish): obj=GenerateReqInput\((.*?)\)(?:, out=(\{.*\}))?$", line
    )
    if m is None:
        return line
    stamp, event, obj_text, out = m.groups()
    obj = {
        key: ast.literal_eval(value) for key, value in re.findall(r"(\w+)=('[^']*'|\w+)", obj_text)
    }
    record = {
        "timestamp": stamp.replace(" ", "T") + "Z",
        "event": "request.received" if event == "Receive" else "request.finished",
        "rid": obj["rid"],
        "obj": obj,
    }
    if out is not None:
        record["out"] = ast.literal_eval(out)
    return f"[{stamp}] {json.dumps(record)}"


REFUSAL = re.compile(
    r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\)\. "
    r"Use a shorter input or enable --allow-auto-truncate\., self\.rid='(\w+)'"
)


def _runtime_stamp(line: str) -> str:
    """The line's own time as a runtime's RFC3339 stamp (the runtime sees it as it is printed)."""
    m = re.match(r"\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)", line)
    assert m is not None, line
    return f"{m.group(1)}T{m.group(2)}.000000123Z"


def _cri_split(line: str, piece: int = 97) -> str:
    """containerd's CRI file: a line longer than `piece` (16 KiB in containerd) split into `P`
    pieces and a last `F` one, the bare request lines without SGLang's prefix (§2.5)."""
    stamp = _runtime_stamp(line)
    text = re.sub(r"^\[[^\]]*\] (?=Receive|Finish)", "", line)
    pieces = [text[i : i + piece] for i in range(0, len(text), piece)] or [""]
    flags = ["P"] * (len(pieces) - 1) + ["F"]
    return "\n".join(f"{stamp} stdout {f} {p}" for f, p in zip(flags, pieces, strict=True))


def _docker_split(line: str, piece: int = 89) -> str:
    """Docker's json-file records, a long line split: only the last piece ends in a newline."""
    stamp = _runtime_stamp(line)
    text = line + "\n"
    pieces = [text[i : i + piece] for i in range(0, len(text), piece)]
    return "\n".join(json.dumps({"log": p, "stream": "stderr", "time": stamp}) for p in pieces)


VARIANTS: dict[str, Callable[[str], str]] = {
    "containerd-split-lines": _cri_split,
    "docker-split-lines": _docker_split,
    "json-request-logs": _json_request_logs,
    "refusal-without-rid": lambda line: re.sub(r", self\.rid='\w+'$", "", line),
    "pd-capacity-refusal": lambda line: REFUSAL.sub(
        r"Request \3 exceeds the maximum number of tokens: \1 > \2", line
    ),
    "dp-attention-prefix": lambda line: line.replace(" TP0] ", " DP0 TP0 EP0] "),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_same_incident_in_other_formats_exposes_the_same_response(
    tmp_path: Path, variant: str
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for log in LOGS.glob("*.log"):
        lines = log.read_text().splitlines()
        (logs / log.name).write_text("\n".join(VARIANTS[variant](x) for x in lines) + "\n")
    rewritten = [log.read_text() for log in sorted(logs.glob("*.log"))]
    assert rewritten != [log.read_text() for log in sorted(LOGS.glob("*.log"))]
    summary = run_forensics([str(logs)], tmp_path / "out", write_parquet=False).summary
    assert summary["input"]["unclassified_engine_lines"] == 0
    (exposed,) = summary["exposure"]["requests"]
    assert (exposed["bootstrap_room"], exposed["prefill_rid"]) == (
        "5523401987766512300",
        "b2e1d4f3c5a6b7988877665544332222",
    )
    assert "rejected_then_served" in exposed["evidence"]
