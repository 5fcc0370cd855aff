"""`Prefill batch` and `Decode batch` lines, read as key/value pairs.

The field list changes nearly every release (`#prealloc-req` became `#bootstrap-req`, `cache hit
rate` vanished, `#pending-token` appeared), so the line is read by structure: everything after the
head is `key: value` items separated by `, `. Unknown keys are kept, never fatal.
"""

from __future__ import annotations

import re
from typing import Any

from collector.sglang.values import normalise_key, number

# `key: value` items; keys never hold `:` or `,`, values never hold `,`. One C-level findall
# instead of a Python loop of split/partition: batch lines are the most common engine line.
_ITEM = re.compile(r"([^,:]+): ([^,]*)")


def parse_batch_fields(body: str) -> dict[str, Any]:
    """Parse what follows `Prefill batch` / `Decode batch`: `[N], k: v, k: v` in any era."""
    fields: dict[str, Any] = {}
    body = body.lstrip(".,")
    if body.startswith(" ["):  # SGLANG_LOG_FORWARD_ITERS=1 prints the iteration
        close = body.find("]")
        if close > 0:
            fields["iter"] = number(body[2:close])
            body = body[close + 1 :].lstrip(".,")
    for key, value in _ITEM.findall(body):
        key = key.strip()
        if key:
            fields[normalise_key(key)] = number(value)
    return fields
