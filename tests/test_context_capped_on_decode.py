"""A context capped on decode alone, within the prefill's pool, closes the prefill's pool gap.

Why: blind review 62 J1. The leak's mitigation was a restart of decode with `--context-length
655360`, below the prefill's 681,280-token pool: decode's tokenizer refuses every longer prompt
before any KV is read, so nothing more could leak. The prefill still stated a 1,048,576-token
context, and the status said "Not over" three hours after the last exposure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics
from tests.engine_lines import finish_line, prefill_start, refusal_line, server_args

DAY = "2026-09-03"
POOL = 681_280


def _decode_start(at: str, context: int) -> str:
    return server_args(DAY, "decode").replace("00:00:00", at).replace(
        "context_length=1048576", f"context_length={context}"
    ) + (
        f"[{DAY} {at[:-2]}40 TP0] max_total_num_tokens=1400000, chunked_prefill_size=16384, "
        f"max_prefill_tokens=16384, max_running_requests=64, context_len={context}, "
        "available_gpu_mem=6.10 GB\n"
    )


@pytest.mark.parametrize("capped", [True, False])
def test_a_decode_restarted_with_a_context_within_the_pool_closes_the_gap(
    tmp_path: Path, capped: bool
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    prefill = [server_args(DAY, "prefill"), prefill_start(DAY, "10.1.0.11", POOL)]
    decode = [_decode_start("07:00:00", 1_048_576)]
    # The leak: a 900,000-token prompt refused by prefill at 08:10, answered by decode.
    prefill += [
        refusal_line(f"{DAY} 08:10:00", "leak", 900_000, POOL),
        finish_line(f"{DAY} 08:10:00", "leak", 9001, 900_000, tokens=1),
    ]
    decode.append(finish_line(f"{DAY} 08:10:02", "leak", 9001, 900_000, e2e=2.0))
    # Decode restarts at 10:00, with the context capped (or not); honest traffic to 12:00.
    decode.append(_decode_start("10:00:00", 655_360 if capped else 1_048_576))
    for i, hour in enumerate((10, 11, 12)):
        at = f"{DAY} {hour:02d}:30:00"
        prefill.append(finish_line(at, f"p{i}", 7000 + i, 20_000, tokens=1))
        decode.append(finish_line(at.replace(":30:00", ":30:05"), f"p{i}", 7000 + i, 20_000))
    # At 11:00 an over-length prompt prefill refuses, of which decode logs nothing: with the
    # cap, its tokenizer refused it (400) before any line; without, its answer is missing.
    prefill += [
        refusal_line(f"{DAY} 11:00:00", "late", 900_000, POOL),
        finish_line(f"{DAY} 11:00:00", "late", 9002, 900_000, tokens=1),
    ]
    (logs / "prefill-0.log").write_text("".join(prefill))
    (logs / "decode-0.log").write_text("".join(decode))
    summary = run_forensics([str(logs)], tmp_path / "out", write_parquet=False).summary
    assert [r["rid"] for r in summary["exposure"]["requests"]] == ["leak"]
    status = summary["verdict"]["status"]
    capped_info = summary["nodes"]["prefill-0"].get("capped")
    report = (tmp_path / "out" / "report.md").read_text()
    refused = summary["requests"]["refused_without_decode"]["count"]
    told = summary["requests"]["refused_over_decode_context"]
    assert (refused, told) == ((0, 1) if capped else (1, 0))
    if capped:
        assert status == "stopped"
        assert capped_info == {"time": f"{DAY}T10:00:00.000Z", "by": ["decode-0"]}
        assert "from then decode-0, answering its requests, ran a context within" in report
    else:
        # Its gap still open, as far as anything read tells.
        assert status in ("not_over", "possibly_not_over") and capped_info is None
