"""Log lines saved as one JSON document by a cloud's log service: read as the log they hold.

A responder on AWS saves `aws logs filter-log-events … > decode-0.json` (`{"events": [{"timestamp":
<ms>, "message": …}, …]}`); on Google Cloud, `gcloud logging read … --format=json >
decode-0.json` (a list of entries with `textPayload` and an RFC 3339 `timestamp`, newest
first). Taken for a saved `/server_info`, each was one unrecognised document and none of its
lines was read.

`log_export_format` tells such a file by its start; `export_lines` gives its lines oldest
first, each behind an SGLang prefix made from the entry's time when the line has none. The
document is read whole, so only up to `MAX_EXPORT_BYTES`; past that it is a counted drop
(`log_export_too_large`), never a partial read passed off as the whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from collector.line_order import head_bytes

if TYPE_CHECKING:
    from collector.files import ReadStats

MAX_EXPORT_BYTES: Final = 256 << 20
_CLOUDWATCH: Final = re.compile(rb'^(?:\xef\xbb\xbf)?\s*\{\s*"(?:events|nextToken)"\s*:')
_CLOUD_LOGGING: Final = re.compile(rb"^(?:\xef\xbb\xbf)?\s*\[\s*\{")
_CLOUD_LOGGING_KEYS: Final = (b'"textPayload"', b'"logName"', b'"insertId"')


def log_export_format(path: Path) -> str | None:
    """`cloudwatch` or `cloud_logging` when the file is such an export, else None."""
    read = head_bytes(path, 8192)
    if read is None:
        return None
    head = read[0]
    if _CLOUDWATCH.match(head):
        return "cloudwatch"
    if _CLOUD_LOGGING.match(head) and any(key in head for key in _CLOUD_LOGGING_KEYS):
        return "cloud_logging"
    return None


def export_lines(
    path: Path, cloud_export: str, stats: ReadStats
) -> Iterator[tuple[int, list[str]]]:
    """(entry number, [line]) for each entry's line, oldest first (see the module docstring)."""
    from collector.files import read_line_blocks
    from collector.sglang.runtime_wrappers import with_prefix

    parts: list[str] = []
    size = 0
    for _, lines in read_line_blocks(path, stats):
        for line in lines:
            size += len(line) + 1
            if size > MAX_EXPORT_BYTES:
                stats.drop("log_export_too_large")
                return
            parts.append(line)
    try:
        document = json.loads("\n".join(parts))
    except (ValueError, RecursionError):
        stats.drop("log_export_not_json")
        return
    del parts
    entries = _entries(document, cloud_export)
    if entries is None:
        stats.drop("log_export_unrecognised")
        return
    timed: list[tuple[float, int, str]] = []
    for number, entry in enumerate(entries, 1):
        found = _entry(entry, cloud_export)
        if found is None:
            stats.drop("log_export_entry_without_text")
            continue
        when, text = found
        timed.append((when if when is not None else float("-inf"), number, text))
    timed.sort()  # Cloud Logging lists the newest entry first
    for when, number, text in timed:
        for line in text.rstrip("\n").split("\n"):
            yield number, [with_prefix(line, when) if when != float("-inf") else line]


def _entries(document: Any, cloud_export: str) -> list[Any] | None:
    if cloud_export == "cloudwatch":
        events = document.get("events") if isinstance(document, dict) else None
        return events if isinstance(events, list) else None
    return document if isinstance(document, list) else None


def _entry(entry: Any, cloud_export: str) -> tuple[float | None, str] | None:
    from collector.sglang.runtime_wrappers import record_time

    if not isinstance(entry, dict):
        return None
    text = entry.get("message") if cloud_export == "cloudwatch" else entry.get("textPayload")
    if not isinstance(text, str):
        return None
    return record_time(entry), text
