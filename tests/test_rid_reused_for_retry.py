"""A client's rid reused for a retry, in a new room, after both halves refused the request.

Prefill refuses the over-length prompt naming its rid alone (`self.rid='user-15'`), decode
refuses it too (its pool is as small) and aborts its stub with 400. The client retries with
the same rid and a shorter prompt, in a new room, answered honestly. The held refusal was
taken by the retry's first prefill line of that rid: the honest answer was named exposed, with
the refused prompt's length (blind review 6b: 10 of 10 such retries). A refusal is a side's only
when the prompt lengths the side states include the one refused, and when it was received no
later than the refusal: a `Receive:` states no length, and one stamped after the refusal is a
retry's (blind review 43 D1: on 0.5.22, retries 90% cached took the refusal by their receipt,
and 4 of 10 were named exposed with the refused prompt's length).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics

REFUSED_ROOM, RETRY_ROOM = "592209637882203059", "8616543752655812986"
START = (
    "[2026-11-02 09:00:00] server_args={{'model_path': 'zai-org/GLM-5.3', 'tp_size': 8, "
    "'context_length': None, 'disaggregation_mode': '{role}', "
    "'disaggregation_transfer_backend': 'mooncake', 'disaggregation_bootstrap_port': 8998, "
    "'enable_metrics': True, 'log_requests': True, 'enable_request_time_stats_logging': True}}\n"
    "[2026-11-02 09:01:35 TP0] max_total_num_tokens=681280, chunked_prefill_size=16384, "
    "max_prefill_tokens=32768, max_running_requests=64, context_len=1048576, "
    "available_gpu_mem=12.10 GB\n"
)
PREFILL = (
    "[2026-11-02 09:01:36] CommonKVBootstrapServer started successfully on 10.1.0.11:8998\n"
    "[2026-11-02 09:03:25 TP0] Input length (711536 tokens) exceeds the maximum allowed length "
    "(681274 tokens). Use a shorter input or enable --allow-auto-truncate., self.rid='user-15'\n"
    "{receipt}"
    "[2026-11-02 09:04:19 TP0] ReqTimeStats(rid=user-15, bootstrap_room={retry}, "
    "input_len=332623, cached_input_len=0, output_len=1, attempts=0, type=prefill): "
    "bootstrap_duration=1.10ms, queue_duration=171.45ms, forward_duration=49345.79ms, "
    "entry_time=1793610209.603\n"
    "[2026-11-02 09:08:25 TP0] Prefill bootstrap failed for request rank=0 req.rid='user-15' "
    "req.bootstrap_room={refused} with exception KVTransferError(bootstrap_room={refused}): "
    "Request {refused} timed out after 300.0s in KVPoll.Bootstrapping\n"
)
IDS = "rid='user-15', bootstrap_host='10.1.0.11', bootstrap_port=8998, bootstrap_room={room}"
DECODE = (
    "[2026-11-02 09:03:25 TP0] Request user-15 exceeds the maximum number of tokens: "
    "711536 > 681280\n"
    f"[2026-11-02 09:03:25] Finish: obj=GenerateReqInput({IDS}), out={{{{'meta_info': "
    "{{'id': 'user-15', 'finish_reason': {{'type': 'abort', 'message': 'Request user-15 "
    "exceeds the maximum number of tokens: 711536 > 681280', 'status_code': 400}}, "
    "'prompt_tokens': 1, 'completion_tokens': 0, 'cached_tokens': 0, 'e2e_latency': 0.03}}}}\n"
    "[2026-11-02 09:04:20 TP0] ReqTimeStats(rid=user-15, bootstrap_room={retry}, "
    "input_len=332623, cached_input_len=0, output_len=66, attempts=0, type=decode): "
    "bootstrap_duration=1.20ms, transfer_duration=76.52ms, queue_duration=0.52ms, "
    "forward_duration=1662.34ms, entry_time=1793610209.603\n"
    f"[2026-11-02 09:04:20] Finish: obj=GenerateReqInput({IDS.replace('{room}', '{retry}')}), "
    "out={{'meta_info': {{'id': 'user-15', 'finish_reason': {{'type': 'stop', "
    "'matched': 151329}}, 'prompt_tokens': 332623, 'completion_tokens': 66, "
    "'cached_tokens': 0, 'e2e_latency': 51.29, 'first_token_latency': 49.62}}}}\n"
)


RECEIPT = f"[2026-11-02 09:03:29] Receive: obj=GenerateReqInput({IDS})\n"


@pytest.mark.parametrize("retry_received", [False, True])
def test_a_retry_under_the_refused_request_s_rid_is_judged_on_its_own(
    tmp_path: Path, retry_received: bool
) -> None:
    case = tmp_path / "case"
    case.mkdir()
    rooms = {"refused": REFUSED_ROOM, "retry": RETRY_ROOM}
    receipt = RECEIPT.format(room=RETRY_ROOM) if retry_received else ""
    (case / "prefill-0.log").write_text(
        START.format(role="prefill") + PREFILL.format(receipt=receipt, **rooms)
    )
    (case / "decode-1.log").write_text(
        START.format(role="decode") + DECODE.format(room=REFUSED_ROOM, retry=RETRY_ROOM)
    )
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert summary["exposure"]["requests"] == []
    accused = [f for f in summary["findings"] if f["bootstrap_room"] == RETRY_ROOM]
    assert accused == []
