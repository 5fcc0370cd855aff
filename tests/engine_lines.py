"""Start-up lines of a PD engine's log (reference §2.2), for tests that write their own logs."""

from __future__ import annotations


def server_args(day: str, role: str, *, time_stats: bool = False) -> str:
    """The `server_args=ServerArgs(...)` line of a GLM-5.3 node of `role`, at 00:00 on `day`."""
    stats = ", enable_request_time_stats_logging=True" if time_stats else ""
    return (
        f"[{day} 00:00:00] server_args=ServerArgs(model_path='zai-org/GLM-5.3', tp_size=8, "
        f"context_length=1048576, disaggregation_mode='{role}', "
        f"disaggregation_transfer_backend='mooncake', log_requests=True{stats})\n"
    )


def prefill_start(day: str, host: str, pool: int) -> str:
    """A prefill node's pool (against a 1,048,576-token context) and its bootstrap address."""
    return (
        f"[{day} 00:00:40 TP0] max_total_num_tokens={pool}, chunked_prefill_size=16384, "
        "max_prefill_tokens=16384, max_running_requests=64, context_len=1048576, "
        "available_gpu_mem=21.95 GB\n"
        f"[{day} 00:00:45] CommonKVBootstrapServer started successfully on {host}:8998\n"
    )
