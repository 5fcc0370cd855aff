"""`ReqTimeStats(...)` lines: per-request stage durations on prefill, decode or unified servers.

Durations are printed as `{ms}ms`; they become seconds here, one unit across kvwatch. Older builds
wrote `prealloc_queue_duration(Xms) = alloc_wait(Xms) + bootstrap(Xms) + ...`, read the same way.
"""

from __future__ import annotations

import re
from typing import Any

from collector.sglang.values import duration_seconds, number

_PAIR = re.compile(
    r"(\w+)(?:=|\()(-?[\d.]+(?:e[-+]?\d+)?(?:ms|us|s)?|[^,()\s]+)(?: (GB/s|MB|GB|KB))?"
)
_UNIT_SUFFIX = {"GB/s": "_gb_s", "MB": "_mb", "GB": "_gb", "KB": "_kb"}


def parse_time_stats(message: str) -> dict[str, Any]:
    head_end = message.find("):")
    head = message[len("ReqTimeStats(") : head_end if head_end > 0 else len(message)]
    tail = message[head_end + 2 :] if head_end > 0 else ""
    fields: dict[str, Any] = {
        "rid": None,
        "bootstrap_room": None,
        "role": None,
        "input_len": None,
        "cached_input_len": None,
        "output_len": None,
    }
    for item in head.split(", "):
        key, sep, value = item.partition("=")
        if not sep:
            continue
        if key == "type":
            fields["role"] = value
        elif key in ("rid", "bootstrap_room"):
            fields[key] = value.strip("'") if value not in ("None", "") else None
        else:
            fields[key] = number(value)
    for key, value, unit in _PAIR.findall(tail):
        if unit:
            fields[key + _UNIT_SUFFIX[unit]] = number(value)
        elif key.endswith("_time"):
            fields[key] = number(value)
        elif value.endswith("s") or key.endswith("duration") or "_" not in key:
            seconds = duration_seconds(value)
            name = key if key.endswith("duration") else f"{key}_duration"
            fields[name] = seconds if seconds is not None else value
        else:
            fields[key] = number(value)
    return fields
