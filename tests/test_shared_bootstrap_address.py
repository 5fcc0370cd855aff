"""Two deployments of one model whose prefill nodes are reached at the same address.

Clusters built from one template announce the same bootstrap addresses. With the leaking
deployment's oldest prefill rotation gone, its announcement went with it: every answer its decode
gave before the first prefill line kept was judged against the pool of the other deployment's
prefill, the only node read that announced that address, 2.04M tokens, and no over-length answer
was said by `over_length_answered` (blind review 27: 58 exposures named by their timing alone,
one not at all). That node's rooms met the other decode's answers, never these: they went to
another node at that address, the one their later answers meet, whose pool is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collector.forensics.driver import run_forensics
from detectors.over_length_answered import OverLengthAnswered
from detectors.pipeline import PipelineConfig
from tests.engine_lines import finish_line, prefill_start, refusal_line, server_args

DAY = "2026-08-27"
POOL = 681_280
BIG_POOL = 2_040_000
HOST = "10.1.0.11"
# Leaking deployment's decode answers, by room: (hour, prompt). Its prefill log begins at noon.
EARLY_EXPOSED = {f"5502{n:015d}": (2 + 2 * n, 790_000 + n) for n in range(4)}
EARLY_HONEST = {f"5503{n:015d}": (1 + h, 20_000 + h) for h in range(11) for n in (h,)}
LATE_HONEST = {f"5505{n:015d}": (12 + n, 30_000 + n) for n in range(3)}
LATE_EXPOSED = {"5504000000000000000": (13, 800_000)}
# The healthy deployment's 800k-token prompts, prefilled for real (40 s).
HEALTHY_LONG = {f"6601{n:015d}": (3 + 3 * n, 800_000 + n) for n in range(3)}


def _at(hour: int, second: int = 0) -> str:
    return f"{DAY} {hour:02d}:20:{second:02d}"


def _answer(room: str, hour: int, prompt: int, e2e: float = 2.0) -> str:
    return finish_line(_at(hour), f"{int(room):032x}", room, prompt, host=HOST, e2e=e2e)


def _prefill_finish(room: str, hour: int, prompt: int) -> str:
    return finish_line(
        _at(hour, 0).replace(":20:", ":19:"), f"{int(room):032x}", room, prompt, tokens=1, host=HOST
    )


def _case(root: Path, prefill_begins: int) -> None:
    leaking = {**EARLY_EXPOSED, **EARLY_HONEST, **LATE_HONEST, **LATE_EXPOSED}
    exposed = {**EARLY_EXPOSED, **LATE_EXPOSED}
    decode = [server_args(DAY, "decode")]
    prefill = [
        f"[{DAY} {prefill_begins:02d}:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 8192, "
        "#cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0, "
        "#pending-token: 0, #bootstrap-req: 0, #inflight-req: 0, #optimistic-req: 0, "
        "cuda graph: False, input throughput (token/s): 24000.00\n"
    ]
    for room, (hour, prompt) in sorted(leaking.items(), key=lambda item: item[1]):
        decode.append(_answer(room, hour, prompt))
        if hour < prefill_begins:
            continue  # in the rotation that is gone
        if room in exposed:
            prefill.append(
                refusal_line(_at(hour).replace(":20:", ":19:"), f"{int(room):032x}", prompt, POOL)
            )
        else:
            prefill.append(_prefill_finish(room, hour, prompt))
    healthy_prefill = [server_args(DAY, "prefill"), prefill_start(DAY, HOST, BIG_POOL)]
    healthy_decode = [server_args(DAY, "decode")]
    healthy = {f"6600{h:015d}": (1 + h, 25_000 + h) for h in range(14)} | HEALTHY_LONG
    for room, (hour, prompt) in sorted(healthy.items(), key=lambda item: item[1]):
        long = room in HEALTHY_LONG
        healthy_prefill.append(_prefill_finish(room, hour, prompt))
        healthy_decode.append(_answer(room, hour, prompt, e2e=40.0 if long else 2.0))
    for folder, node, lines in (
        ("leaking", "prefill-0", prefill),
        ("leaking", "decode-0", decode),
        ("healthy", "prefill-0", healthy_prefill),
        ("healthy", "decode-0", healthy_decode),
    ):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / f"{node}.log").write_text("".join(lines))


def _run(tmp_path: Path, prefill_begins: int) -> dict[str, Any]:
    _case(tmp_path / "case", prefill_begins)
    summary: dict[str, Any] = run_forensics([str(tmp_path / "case")], tmp_path / "out").summary
    return summary


@pytest.mark.parametrize("prefill_begins", [12, 1])
def test_answers_naming_an_address_another_deployment_announced_meet_their_own_pool(
    tmp_path: Path, prefill_begins: int
) -> None:
    """`prefill_begins`: the hour the leaking prefill's log begins (1: it is whole, bar its
    start-up lines, and every answer meets its own prefill side)."""
    summary = _run(tmp_path, prefill_begins)
    exposed = set(EARLY_EXPOSED) | set(LATE_EXPOSED)
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == exposed
    over_length = {
        f["bootstrap_room"]: f
        for f in summary["findings"]
        if f["detector"] == OverLengthAnswered.name
    }
    # Each exposure said by the pool it met, not by its timing alone; no healthy answer accused.
    assert set(over_length) == exposed
    assert all(f["severity"] == "critical" for f in over_length.values())
    assert {f["evidence"]["pool_node"] for f in over_length.values()} == {"leaking/prefill-0"}


def test_past_its_cap_the_hold_lets_the_shortest_prompts_go_first(tmp_path: Path) -> None:
    """Held answers beyond `max_held` are judged at once, by no pool. Letting the newest go
    lost every long prompt that came after 10,000 short ones (blind review 27): the shortest,
    the likeliest to have fit any pool, go first."""
    _case(tmp_path / "case", 12)
    config = PipelineConfig(detectors={OverLengthAnswered.name: {"max_held": len(EARLY_EXPOSED)}})
    summary = run_forensics([str(tmp_path / "case")], tmp_path / "out", config=config).summary
    said = {
        f["bootstrap_room"]
        for f in summary["findings"]
        if f["detector"] == OverLengthAnswered.name and f["severity"] == "critical"
    }
    assert said == set(EARLY_EXPOSED) | set(LATE_EXPOSED)
