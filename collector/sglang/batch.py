"""`Prefill batch` and `Decode batch` lines, read as key/value pairs.

The field list changes nearly every release (`#prealloc-req` became `#bootstrap-req`, `cache hit
rate` vanished, `#pending-token` appeared), so the line is read by structure: everything after the
head is `key: value` items separated by `, `. Unknown keys are kept, never fatal.
"""

from __future__ import annotations

from typing import Any

from collector.sglang.values import normalise_key, number


def parse_batch_fields(body: str) -> dict[str, Any]:
    """Parse what follows `Prefill batch` / `Decode batch`: `[N], k: v, k: v` in any era."""
    fields: dict[str, Any] = {}
    body = body.lstrip(".,")
    if body.startswith(" ["):  # SGLANG_LOG_FORWARD_ITERS=1 prints the iteration
        close = body.find("]")
        if close > 0:
            fields["iter"] = number(body[2:close])
            body = body[close + 1 :].lstrip(".,")
    for item in body.split(", "):
        key, sep, value = item.partition(": ")
        if not sep:
            continue
        key = key.strip()
        if key:
            fields[normalise_key(key)] = number(value)
    return fields
