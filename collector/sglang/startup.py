"""Startup lines: the effective server arguments and the capacity line.

These decide every later verdict (pool vs context, PD role, checksum on/off), and a restart prints
them again, so each occurrence is an event in the node's configuration timeline.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from collector.sglang.values import literal, number, parsed_expression
from collector.shown_text import engine_token

# server_args keys kvwatch keeps, and the event field each becomes. Everything else (api keys,
# paths with user names, ...) is deliberately dropped.
_SERVER_ARG_FIELDS: dict[str, str] = {
    "disaggregation_mode": "disaggregation_mode",
    "disaggregation_transfer_backend": "transfer_backend",
    "disaggregation_enable_kv_checksum": "kv_checksum",
    "kv_canary": "kv_canary",
    "context_length": "context_length",
    "tp_size": "tp_size",
    # Decode context parallelism and KV cache sharding change what the reported pool means
    # for one prompt (`collector.state.prompt_capacity`).
    "dcp_size": "dcp_size",
    "enable_kv_cache_sharding": "kv_cache_sharding",
    "dp_size": "dp_size",
    "pp_size": "pp_size",
    "ep_size": "ep_size",
    "model_path": "model",
    "served_model_name": "served_model_name",
    "page_size": "page_size",
    "max_total_tokens": "max_total_tokens",
    "chunked_prefill_size": "chunked_prefill_size",
    "max_prefill_tokens": "max_prefill_tokens",
    "max_running_requests": "max_running_requests",
    "mem_fraction_static": "mem_fraction_static",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "disaggregation_bootstrap_port": "bootstrap_port",
    "disaggregation_decode_enable_radix_cache": "decode_radix_cache",
    "disable_radix_cache": "disable_radix_cache",
    "allow_auto_truncate": "allow_auto_truncate",
    "enable_metrics": "enable_metrics",
    "enable_trace": "enable_trace",
    "log_requests": "log_requests",
    "log_requests_level": "log_requests_level",
    "host": "host",
    "port": "port",
    "enable_pd_role_switch": "pd_role_switch",
}
_KWARG_START = re.compile(r"(?:^|[(,]\s*)(\w+)=")
_SIMPLE_VALUE = re.compile(r"'([^'\\]*)'|\"([^\"\\]*)\"|(-?[\d.]+(?:e[-+]?\d+)?|None|True|False)")
# A key starts a word (`(?<!\w)`): unanchored, every position of a long word was a start that
# scanned to the word's end before failing, quadratic on one long line. A key found mid-word is
# the same word's tail, which matches exactly when the whole word does, and a match ends before
# `,`, a space or the end, so the anchor loses no match (tests/test_long_line_cost.py).
_CAPACITY_PAIR = re.compile(r"(?<!\w)(\w+)=([^,\s]+)")


def parse_server_args(message: str) -> dict[str, Any]:
    """`server_args=ServerArgs(k=v, ...)` (older) or `server_args={'k': v, ...}` (0.5.23)."""
    body = message[message.find("server_args=") + len("server_args=") :]
    raw = _literal_args(body)
    if raw is None:
        raw = _scan_args(body)
    fields: dict[str, Any] = {
        "disaggregation_mode": None,
        "transfer_backend": None,
        "kv_checksum": None,
        "kv_canary": None,
        "context_length": None,
        "tp_size": None,
        "model": None,
    }
    for key, field in _SERVER_ARG_FIELDS.items():
        if key in raw:
            fields[field] = raw[key]
    for field in ("disaggregation_mode", "transfer_backend", "kv_canary"):
        if isinstance(fields[field], str):
            fields[field] = engine_token(fields[field])
    served = fields.get("served_model_name")
    if isinstance(served, str) and served.strip():
        # The name the node serves under, as `/server_info` gives it: one key for both sources
        # of a node, and for the nodes of one deployment (`ConfigTimeline.advertised_context`).
        fields["model"] = served
    if fields["disaggregation_mode"] in ("null", ""):
        fields["disaggregation_mode"] = None
    # `--kv-canary none` is kept as stated: a restart that turns the canary off must say so,
    # not leave the last start's `log` carried forward (blind review 37: a storm after such a
    # restart, watched by no canary, read as an all-clear).
    fields["args_format"] = "dict" if body.startswith("{") else "dataclass"
    return fields


def _literal_args(body: str) -> dict[str, Any] | None:
    """Exact parse through the Python grammar; None when the text is not a complete literal."""
    try:
        if body.startswith("{"):
            value = literal(body)
            return value if isinstance(value, dict) else None
        tree = parsed_expression(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    call = tree.body
    if not isinstance(call, ast.Call):
        return None
    result: dict[str, Any] = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            continue
        try:
            result[keyword.arg] = literal(keyword.value)
        except (ValueError, SyntaxError, TypeError, RecursionError):
            continue
    return result


def _scan_args(body: str) -> dict[str, Any]:
    """Tolerant fallback for truncated or non-literal reprs: `key=value` or `'key': value`."""
    result: dict[str, Any] = {}
    for key in _SERVER_ARG_FIELDS:
        for pattern in (f"{key}=", f"'{key}': "):
            at = body.find(pattern)
            if at < 0:
                continue
            value = _SIMPLE_VALUE.match(body, at + len(pattern))
            if value:
                quoted = value.group(1) if value.group(1) is not None else value.group(2)
                result[key] = quoted if quoted is not None else number(value.group(3))
            break
    return result


def parse_capacity(message: str) -> dict[str, Any]:
    """`max_total_num_tokens=…, chunked_prefill_size=…, …, context_len=…, available_gpu_mem=…`.

    Searched anywhere in the message: interleaved process output glues it to other lines.
    """
    at = message.find("max_total_num_tokens=")
    fields: dict[str, Any] = {
        "max_total_num_tokens": None,
        "context_len": None,
        "chunked_prefill_size": None,
        "max_prefill_tokens": None,
        "max_running_requests": None,
    }
    # Sliced, not `findall(message, at)`: the anchor must not see the text before the needle,
    # which may end in a word character (`…xmax_total_num_tokens=` is read from `max_`).
    for key, value in _CAPACITY_PAIR.findall(message[at:] if at > 0 else message):
        fields[key] = number(value)
    return fields


_POOL_WARNING = re.compile(r"KV pool holds (\d+) tokens, fewer than --context-length (\d+)")
_KV_ALLOCATED = re.compile(r"#tokens: (\d+)")
_DTYPE = re.compile(r"dtype: ([\w.]+)")


def parse_pool_warning(message: str) -> dict[str, Any]:
    m = _POOL_WARNING.search(message)
    return {
        "pool_tokens": int(m.group(1)) if m else None,
        "context_len": int(m.group(2)) if m else None,
    }


def parse_kv_allocated(message: str) -> dict[str, Any]:
    tokens = _KV_ALLOCATED.search(message)
    dtype = _DTYPE.search(message)
    return {
        "tokens": int(tokens.group(1)) if tokens else None,
        "dtype": dtype.group(1) if dtype else None,
    }


# `CommonKVBootstrapServer started successfully on {host}:{port}` (prefill, PD): the host decode
# is told to fetch this node's KV from (`bootstrap_host` in its request records).
_BOOTSTRAP_SERVER = re.compile(r" on \[?([^\s\[\]]{1,255}?)\]?:(\d{1,5})\s*$")


def parse_bootstrap_server(message: str) -> dict[str, Any]:
    m = _BOOTSTRAP_SERVER.search(message[-300:])
    if m is None:
        return {"host": None, "port": None}
    return {"host": m.group(1), "port": int(m.group(2))}
