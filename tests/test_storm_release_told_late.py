"""A storm of clients' aborts on engines whose release a snapshot saved after the logs tells.

Up to 0.5.19 decode frees an aborted transfer's pages at once (the abort race's condition); from
0.5.21 it holds them until drained, and clients' aborts are no failures. SGLang's logs do not
say the release; `/server_info` does, and one saved after the logs is dated by its file, so it
is read after every line. The storm was judged before it: only `info` (blind review 5a: 28
aborts in 5 minutes against a baseline of 2 on 0.5.19), while the same run raised the unsafe
version as critical. The question is asked again at the end of the input.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collector.forensics.driver import run_forensics

DAY = "2026-11-02"


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


def _abort(stamp: str, n: int) -> str:
    room = 956105262562600000 + n
    return (
        f"[{stamp} TP0] Decode transfer failed for request rank=0 "
        f"decode_req.req.rid='{n:032x}' decode_req.req.bootstrap_room={room} with exception "
        f"KVTransferError(bootstrap_room={room}): Aborted by AbortReq.\n"
    )


def _batch(stamp: str) -> str:
    return (
        f"[{stamp} TP0] Decode batch, #running-req: 12, #token: 40960, token usage: 0.10, "
        "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, "
        "cuda graph: True, gen throughput (token/s): 480.00, #queue-req: 0\n"
    )


def _case(root: Path, version: str | None, saved: str | None) -> Path:
    """Four quiet hours on one decode node (a client's abort every half hour), then 28 aborts
    in five minutes; its `/server_info` saved at `saved`."""
    case = root / "case"
    case.mkdir()
    lines = [
        f"[{DAY} 06:00:06] server_args=ServerArgs(model_path='zai-org/GLM-5.3', tp_size=1, "
        "disaggregation_mode='decode', disaggregation_transfer_backend='mooncake')\n"
    ]
    for minute in range(4 * 60):
        stamp = f"{DAY} {6 + minute // 60:02d}:{minute % 60:02d}:30"
        lines.append(_batch(stamp))
        if minute % 30 == 17:
            lines.append(_abort(stamp, minute))
    for n in range(28):
        lines.append(_abort(f"{DAY} 10:0{n // 6}:{(n * 9) % 60:02d}", 1000 + n))
    lines.append(_batch(f"{DAY} 10:06:00"))
    (case / "decode-0.log").write_text("".join(lines))
    if version is not None and saved is not None:
        info = case / "decode-0.server_info.json"
        info.write_text(
            json.dumps(
                {
                    "model_path": "zai-org/GLM-5.3",
                    "disaggregation_mode": "decode",
                    "disaggregation_transfer_backend": "mooncake",
                    "version": version,
                }
            )
        )
        os.utime(info, (_epoch(saved), _epoch(saved)))
    return case


def _findings(tmp_path: Path, version: str | None, saved: str | None) -> list[dict[str, Any]]:
    summary = run_forensics(
        [str(_case(tmp_path, version, saved))], tmp_path / "out", write_parquet=False
    ).summary
    findings: list[dict[str, Any]] = summary["findings"]
    return findings


def _storms(tmp_path: Path, version: str | None, saved: str | None) -> list[dict[str, Any]]:
    found = _findings(tmp_path, version, saved)
    return [f for f in found if f["detector"] == "transfer_failure_storm"]


def test_an_unsafe_release_told_late_is_dated_from_its_engine_s_start(tmp_path: Path) -> None:
    """Stamped when its snapshot was read, the finding stood an hour and a half past the logs
    (a month, where the file's time was when it was copied)."""
    unsafe = [
        f
        for f in _findings(tmp_path, "0.5.19", f"{DAY} 11:30:00")
        if f["detector"] == "unsafe_engine_version"
    ]
    assert unsafe and unsafe[0]["time"] == f"{DAY}T06:00:06.000Z"
    assert unsafe[0]["raised_at"] == f"{DAY}T11:30:00.000Z"


def test_a_release_told_after_the_logs_makes_the_storm_a_page(tmp_path: Path) -> None:
    storms = _storms(tmp_path, "0.5.19", f"{DAY} 11:30:00")
    assert "warning" in [f["severity"] for f in storms]
    paged = next(f for f in storms if f["severity"] == "warning")
    assert paged["evidence"]["failures"] >= 28
    assert paged["time"].startswith(f"{DAY}T10:")


def test_a_release_that_holds_aborted_pages_leaves_no_storm_to_page(tmp_path: Path) -> None:
    storms = _storms(tmp_path, "0.5.23", f"{DAY} 11:30:00")
    assert [f["severity"] for f in storms if f["severity"] != "info"] == []


def test_no_release_told_leaves_the_storm_a_question(tmp_path: Path) -> None:
    storms = _storms(tmp_path, None, None)
    assert [f["severity"] for f in storms] == ["info"]
