"""Lines of a PD engine's log (reference §2), for tests that write their own logs."""

from __future__ import annotations

from datetime import UTC, datetime


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


def finish_line(
    at: str,
    rid: str,
    room: object,
    prompt: int,
    *,
    tokens: int = 700,
    host: str = "10.1.0.11",
    e2e: float = 21.9,
    extra: str = "",
) -> str:
    """A PD request's `Finish:` line at `at` (`YYYY-MM-DD HH:MM:SS`), stopped after `tokens`
    tokens (one: prefill's `length` finish); `extra` goes on the end of its meta_info."""
    reason = "{'type': 'length', 'length': 1}" if tokens == 1 else "{'type': 'stop'}"
    return (
        f"[{at}] Finish: obj=GenerateReqInput(rid='{rid}', bootstrap_host='{host}', "
        f"bootstrap_port=8998, bootstrap_room={room}), out={{'meta_info': {{'id': '{rid}', "
        f"'finish_reason': {reason}, 'prompt_tokens': {prompt}, 'completion_tokens': {tokens}, "
        f"'cached_tokens': 0, 'e2e_latency': {e2e}{extra}}}}}\n"
    )


def exceeds_line(at: str, rid: str, prompt: int, pool: int) -> str:
    """A PD node's own capacity check refusing a `prompt`-token request over its `pool`
    (reference §2.8, "PD prefill pool too small")."""
    return f"[{at} TP0] Request {rid} exceeds the maximum number of tokens: {prompt} > {pool}\n"


def refusal_line(at: str, rid: str, prompt: int, pool: int) -> str:
    """A prefill's 0.5.19 refusal of a `prompt`-token request against a `pool`-token pool."""
    return (
        f"[{at} TP0] Input length ({prompt} tokens) exceeds the maximum allowed length "
        f"({pool - 6} tokens). Use a shorter input or enable --allow-auto-truncate., "
        f"self.rid='{rid}'\n"
    )


def stats_start(role: str, pool: int, day: str = "2026-09-01") -> str:
    """A GLM-5.3 PD node of `role` logging time stats, not request lines, with a `pool`-token
    pool against a 1,048,576-token context, started at 08:00 on `day`."""
    return (
        f"[{day} 08:00:00] server_args={{'model_path': 'zai-org/GLM-5.3', 'tp_size': 1, "
        f"'disaggregation_mode': '{role}', 'disaggregation_transfer_backend': 'mooncake', "
        "'context_length': 1048576, 'log_requests': True, 'log_requests_level': 0, "
        "'enable_request_time_stats_logging': True}\n"
        f"[{day} 08:00:42] max_total_num_tokens={pool}, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=128, context_len=1048576, "
        "available_gpu_mem=4.11 GB\n"
    )


def time_stats_line(
    at: str,
    rid: str,
    room: int,
    prompt: int,
    role: str,
    forward_ms: float,
    day: str = "2026-09-01",
) -> str:
    """A `ReqTimeStats(...)` line (reference §2.5) of a request that entered at `at` (HH:MM:SS);
    decode's transfer takes half its `forward_ms`."""
    entry = datetime.fromisoformat(f"{day}T{at}").replace(tzinfo=UTC).timestamp()
    tokens, tail = (
        (1, "transfer_speed=12.30 GB/s, transfer_total=300.00 MB")
        if role == "prefill"
        else (100, f"transfer_duration={forward_ms / 2:.2f}ms, queue_duration=0.52ms")
    )
    return (
        f"[{day} {at}] ReqTimeStats(rid={rid}, bootstrap_room={room}, input_len={prompt}, "
        f"cached_input_len=0, output_len={tokens}, attempts=0, type={role}): "
        f"bootstrap_duration=1.20ms, queue_duration=99.48ms, forward_duration={forward_ms:.2f}ms, "
        f"entry_time={entry:.3f}, {tail}\n"
    )
