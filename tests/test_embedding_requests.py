"""Embedding, reward and classification requests state no prefix-cache hits: never a timing tell.

From audit H3 (SGLang 0.5.23, a 0.6B reward model behind `/classify`, prefix cache on): sixteen
answers scored against one long prompt reuse its prefix, and SGLang writes no `cached_tokens`
into an `EmbeddingReqInput`'s meta_info (`TokenizerManager._handle_batch_output` adds it to
generation outputs only). Read as nothing cached, 69 honest scores were "impossibly fast"
exposures. The same finish as a generation, which does state its hits, is still judged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics
from collector.sglang.request_log import parse_text_finish

RID = "9d684253cee803adba686a6bb06532ec"
STARTUP = (
    "[2026-11-11 07:56:40] server_args={'model_path': 'Skywork/Skywork-Reward-V2-Qwen3-0.6B', "
    "'is_embedding': True, 'tp_size': 1, 'dp_size': 1, 'disable_radix_cache': False, "
    "'log_requests': True, 'log_requests_level': 1, 'enable_metrics': True}\n"
    "[2026-11-11 07:56:48] max_total_num_tokens=540672, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, max_running_requests=2048, context_len=40960, "
    "available_gpu_mem=12.31 GB\n"
)


def _request(obj: str, cached: str = "") -> str:
    ids = f"obj={obj}(rid='{RID}', log_metrics=True, lora_id=None)"
    meta = (
        f"{{'id': '{RID}', 'finish_reason': {{'type': 'length', 'length': 0}}, "
        f"'prompt_tokens': 39298, {cached}'e2e_latency': 0.065376, "
        "'first_token_latency': 0.064976, 'response_sent_to_client_ts': 1794384138.683538}"
    )
    return (
        f"[2026-11-11 08:02:18] Receive: {ids}\n"
        f"[2026-11-11 08:02:18] Finish: {ids}, out={{'meta_info': {meta}}}\n"
    )


def _exposed(tmp_path: Path, text: str) -> list[str]:
    case = tmp_path / "case"
    case.mkdir()
    (case / "reward-0.log").write_text(STARTUP + text)
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert summary["requests"]["total"] == 1
    return [r["rid"] for r in summary["exposure"]["requests"]]


def test_the_finish_of_an_embedding_request_says_so() -> None:
    embedding = _request("EmbeddingReqInput").splitlines()[1]
    fields = parse_text_finish(embedding[embedding.index("Finish: ") :])
    assert fields["embedding"] is True and fields["cached_tokens"] is None
    generation = _request("GenerateReqInput").splitlines()[1]
    assert "embedding" not in parse_text_finish(generation[generation.index("Finish: ") :])


def test_an_embedding_request_without_its_cache_hits_is_not_judged_by_its_speed(
    tmp_path: Path,
) -> None:
    # 39,298 tokens in 0.065 s on one GPU: below the 0.079 s a 1B-parameter floor asks of a
    # prompt with nothing cached, and ordinary for a 0.6B model over a cached prefix.
    assert _exposed(tmp_path, _request("EmbeddingReqInput")) == []


@pytest.mark.parametrize(
    ("cached", "judged"), [("", ["warning"]), ("'cached_tokens': 36732, ", [])]
)
def test_a_generation_states_its_hits_and_is_judged_by_them(
    tmp_path: Path, cached: str, judged: list[str]
) -> None:
    """Too fast with nothing cached, and said so; a warning, not an exposure: its 540,672-token
    pool took the prompt, and a server that is not disaggregated hands no refusal to a decode
    (blind review 47)."""
    assert _exposed(tmp_path, _request("GenerateReqInput", cached)) == []
    findings = run_forensics(
        [str(tmp_path / "case")], tmp_path / "again", write_parquet=False
    ).summary["findings"]
    assert [f["severity"] for f in findings if f["detector"] == "impossibly_fast_prefill"] == (
        judged
    )


def test_an_embedding_request_is_not_judged_by_its_speed_though_its_hits_are_stated(
    tmp_path: Path,
) -> None:
    """Blind review 40 (h11): time stats stating `cached_input_len=0` made embeddings' hits
    "stated", and 7k-token embeddings in 11 ms on one GPU fell under the 1B-parameter floor
    (26 warnings): a 0.6B model reads them that fast, and no embedding is ever decoded."""
    assert _exposed(tmp_path, _request("EmbeddingReqInput", "'cached_tokens': 0, ")) == []
    summary = (tmp_path / "out" / "report.md").read_text()
    assert "impossibly_fast_prefill" not in summary
