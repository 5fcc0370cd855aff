"""A PD pair restarted to raise its context and its pools together is no pool below context.

Why: blind review 16. Both nodes restart within seconds, the context going from 524,288 to
1,048,576 and the pools from 600k/900k to 2.04M/2.6M; every pool covered its own context at
every moment, yet the first node's new start-up lines were judged against the other's old pool:
"KV pool 600,000 tokens < context 1,048,576", a warning that failed `--fail-on warning` after
routine maintenance. A node judged because another node's configuration moved the context it
is compared with is judged after a grace (`restart_grace_seconds`), by what is in force then;
a gap that outlasts the grace is still said.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics
from tests.engine_lines import finish_line


def _start(at: str, role: str, context: int, pool: int) -> str:
    """The start-up lines of a GLM-5.3 node of `role` (server args at `at`, as in the reference:
    the dict form of 0.5.x), its pool two minutes later."""
    day, clock = at.split()
    hour, minute, _ = clock.split(":")
    later = f"{day} {hour}:{int(minute) + 2:02d}"
    return (
        f"[{at}] server_args={{'model_path': 'zai-org/GLM-5.3-FP8', 'tp_size': 8, "
        f"'context_length': {context}, 'disaggregation_mode': '{role}', "
        "'disaggregation_transfer_backend': 'mooncake', 'log_requests': True}\n"
        f"[{later}:11 TP0] max_total_num_tokens={pool}, chunked_prefill_size=16384, "
        f"max_prefill_tokens=32768, max_running_requests=64, context_len={context}, "
        "available_gpu_mem=52.29 GB\n"
        f"[{later}:21] The server is fired up and ready to roll!\n"
    )


def _pool_findings(folder: Path, out: Path) -> list[dict[str, object]]:
    result = run_forensics([str(folder)], out, write_parquet=False, workers=1)
    return [f for f in result.summary["findings"] if f["detector"] == "pool_below_context"]


@pytest.mark.parametrize(
    ("prefill_restart", "decode_restart"),
    [
        ("2026-10-22 08:10:02", "2026-10-22 08:10:02"),  # the same second
        ("2026-10-22 08:39:02", "2026-10-22 08:39:07"),  # prefill first
        ("2026-10-22 08:39:07", "2026-10-22 08:39:02"),  # decode first
    ],
)
def test_a_pair_restarted_to_a_longer_context_and_bigger_pools_raises_nothing(
    tmp_path: Path, prefill_restart: str, decode_restart: str
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "prefill-0.log").write_text(
        _start("2026-10-22 08:00:00", "prefill", 524_288, 600_000)
        + _start(prefill_restart, "prefill", 1_048_576, 2_040_000)
    )
    (logs / "decode-0.log").write_text(
        _start("2026-10-22 08:00:00", "decode", 524_288, 900_000)
        + _start(decode_restart, "decode", 1_048_576, 2_600_000)
    )
    assert _pool_findings(logs, tmp_path / "out") == []


@pytest.mark.parametrize("joined", [True, False])
def test_a_prefill_left_on_its_old_pool_is_still_said_after_the_grace(
    tmp_path: Path, joined: bool
) -> None:
    """Said as a warning once a request joined the two; with none read, its pool holding the
    context it states, the longer context may be another deployment's (blind review 42 D2):
    said as info."""
    logs = tmp_path / "logs"
    logs.mkdir()
    room, rid = 77001, "a" * 32
    prefill_answer = finish_line("2026-10-22 09:00:00", rid, room, 50_000, tokens=1, e2e=5.0)
    decode_answer = finish_line("2026-10-22 09:00:00", rid, room, 50_000, e2e=20.0)
    (logs / "prefill-0.log").write_text(
        _start("2026-10-22 08:00:00", "prefill", 524_288, 600_000)
        + (prefill_answer if joined else "")
        + "[2026-10-22 09:30:00] The server is fired up and ready to roll!\n"
    )
    (logs / "decode-0.log").write_text(
        _start("2026-10-22 08:00:00", "decode", 524_288, 900_000)
        + _start("2026-10-22 08:39:02", "decode", 1_048_576, 2_600_000)
        + (decode_answer if joined else "")
    )
    findings = _pool_findings(logs, tmp_path / "out")
    said = [(f["node"], f["severity"]) for f in findings]
    assert said == [("prefill-0", "warning" if joined else "info")]
    assert findings[0]["evidence"]["pool_tokens"] == 600_000
    assert findings[0]["evidence"]["context_len"] == 1_048_576
