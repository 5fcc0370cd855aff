"""Answers that pass the learned floor of time to first token only by the queue's margin do not
teach it.

Decode's first token is the only timing (prefill's time stats off): 240 honest answers of 1k to
64k uncached tokens at 4.5e-5 to 5.9e-5 s a token, every 60 s. Then two answers of 61k and 62k
tokens come back in 0.2 and 0.3 s: 11 and 8 times under the node's 2% line. The floor of a
timing that carries the queue judges with its margin of 4 on top of 8, so they pass (a stub's
first token 32 times under the line is what it finds). Learned, those two pulled their band's
line to a tenth of the node's honest speed, and a stub's 0.05 s for 63k tokens, 55 times under
the line, passed as well (blind review 22: the 2.7 s line at 60k fell to 0.29 s).
"""

from __future__ import annotations

import math
from pathlib import Path

from collector.forensics.driver import run_forensics
from tests.engine_lines import finish_line, server_args

DAY = "2026-11-02"
START = 8 * 3600  # 08:00:00


def _at(seconds: int) -> str:
    return f"{DAY} {seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _answer(t: int, index: int, prompt: int, ttft: float) -> str:
    return finish_line(
        _at(t),
        f"d{index}",
        1_000_000 + index,
        prompt,
        e2e=round(ttft + 8.0, 4),
        extra=f", 'first_token_latency': {ttft:.4f}",
    )


def test_answers_passing_by_the_queue_margin_alone_do_not_lower_the_floor(tmp_path: Path) -> None:
    lines = [server_args(DAY, "decode")]
    t = START
    for k in range(240):
        # Log-uniform prompts from 1k to 64k tokens, a per-token time that wanders by 30%.
        prompt = int(
            math.exp(math.log(1_000) + (math.log(64_000) - math.log(1_000)) * (k * 0.618 % 1))
        )
        ttft = 0.03 + prompt * 4.5e-5 * (1.0 + 0.3 * (k * 0.382 % 1))
        lines.append(_answer(t, k, prompt, ttft))
        t += 60
    for index, (prompt, ttft) in enumerate(((61_000, 0.2), (62_000, 0.3), (63_000, 0.05))):
        lines.append(_answer(t + 400 * index, 900 + index, prompt, ttft))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "decode-0.log").write_text("".join(lines))
    summary = run_forensics([str(tmp_path / "logs")], tmp_path / "out", write_parquet=False).summary
    exposed = summary["exposure"]["requests"]
    assert [(r["rid"], r["prompt_tokens"]) for r in exposed] == [("d902", 63_000)]
