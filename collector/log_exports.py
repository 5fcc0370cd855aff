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

# Read whole and parsed as JSON (ten times its size as objects): bounded as other documents.
MAX_EXPORT_BYTES: Final = 64 << 20
_CLOUDWATCH: Final = re.compile(rb'^(?:\xef\xbb\xbf)?\s*\{\s*"(?:events|nextToken)"\s*:')
_CLOUD_LOGGING: Final = re.compile(rb"^(?:\xef\xbb\xbf)?\s*\[\s*\{")
_CLOUD_LOGGING_KEYS: Final = (b'"textPayload"', b'"logName"', b'"insertId"')
# Loki's HTTP API (`/loki/api/v1/query_range`, saved with curl or from Grafana's inspector):
# `{"status": …, "data": {"resultType": "streams", "result": [{"stream": {labels}, "values":
# [["<ns>", "<line>"], …]}, …]}}`.
_LOKI: Final = re.compile(rb'^(?:\xef\xbb\xbf)?\s*\{\s*"(?:status|data)"\s*:')
_LOKI_STREAMS: Final = re.compile(rb'"resultType"\s*:\s*"streams"')


def log_export_format(path: Path) -> str | None:
    """`cloudwatch`, `cloud_logging` or `loki` when the file is such an export, else None."""
    read = head_bytes(path, 8192)
    if read is None:
        return None
    head = read[0]
    if _CLOUDWATCH.match(head):
        return "cloudwatch"
    if _CLOUD_LOGGING.match(head) and any(key in head for key in _CLOUD_LOGGING_KEYS):
        return "cloud_logging"
    if _LOKI.match(head) and _LOKI_STREAMS.search(head):
        return "loki"
    return None


def export_sources(path: Path, cloud_export: str) -> dict[str, bool] | None:
    """The log streams (CloudWatch) or pods (Cloud Logging) an export holds entries of, when
    more than one: then it is read once per source, as that node's log (`merged_logs`)."""
    from collector.files import ReadStats

    entries = _document_entries(path, cloud_export, ReadStats())
    if entries is None:
        return None
    names = {name: True for entry in entries if (name := _source(entry, cloud_export))}
    return names if len(names) > 1 else None


def export_lines(
    path: Path, cloud_export: str, stats: ReadStats, source: str | None = None
) -> Iterator[tuple[int, list[str]]]:
    """(entry number, [line]) for each entry's line, oldest first (see the module docstring);
    with `source`, of that source's entries only."""
    from collector.sglang.runtime_wrappers import with_prefix

    entries = _document_entries(path, cloud_export, stats)
    if entries is None:
        return
    timed: list[tuple[float, int, str]] = []
    for number, entry in enumerate(entries, 1):
        if source is not None and _source(entry, cloud_export) != source:
            continue
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


def _document_entries(path: Path, cloud_export: str, stats: ReadStats) -> list[Any] | None:
    """The document's entries; read as text, not as lines (a compact export is one line)."""
    from collector.files import read_text_blocks

    parts: list[bytes] = []
    size = 0
    for block in read_text_blocks(path, stats):
        size += len(block)
        if size > MAX_EXPORT_BYTES:
            stats.drop("log_export_too_large")
            return None
        stats.lines += block.count(b"\n")
        parts.append(block)
    try:
        document = json.loads(b"".join(parts).decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        stats.drop("log_export_not_json")
        return None
    entries = _entries(document, cloud_export)
    if entries is None:
        stats.drop("log_export_unrecognised")
    return entries


# A CloudWatch stream the kubelet's file names (`…<pod>_<namespace>_<container>-<id>…`).
_CONTAINER_STREAM: Final = re.compile(
    r"([a-z0-9][a-z0-9.-]*)_[a-z0-9][a-z0-9-]*_[a-z0-9-]+-[0-9a-f]{64}"
)


def _source(entry: Any, cloud_export: str) -> str | None:
    """The node an entry is of: its CloudWatch log stream (the pod, when the stream is named
    by the kubelet's file), or its Cloud Logging pod (else its log's name)."""
    if not isinstance(entry, dict):
        return None
    if cloud_export == "loki":
        from collector.merged_logs import source_of_labels

        labels = entry.get("stream")
        found = source_of_labels(labels) if isinstance(labels, dict) else None
        return found[0] if found is not None else None
    if cloud_export == "cloudwatch":
        stream = entry.get("logStreamName")
        if not isinstance(stream, str) or not stream:
            return None
        pod = _CONTAINER_STREAM.search(stream)
        return pod.group(1) if pod else stream.replace("/", ".")
    resource = entry.get("resource")
    labels = resource.get("labels") if isinstance(resource, dict) else None
    pod = labels.get("pod_name") if isinstance(labels, dict) else None
    if isinstance(pod, str) and pod:
        return pod
    name = entry.get("logName")
    return name.rsplit("/", 1)[-1] if isinstance(name, str) and name else None


def _entries(document: Any, cloud_export: str) -> list[Any] | None:
    if cloud_export == "loki":
        data = document.get("data") if isinstance(document, dict) else None
        streams = data.get("result") if isinstance(data, dict) else None
        if not isinstance(streams, list):
            return None
        return [  # one entry a line, holding its stream's labels
            {"stream": stream.get("stream"), "value": value}
            for stream in streams
            if isinstance(stream, dict) and isinstance(stream.get("values"), list)
            for value in stream["values"]
        ]
    if cloud_export == "cloudwatch":
        events = document.get("events") if isinstance(document, dict) else None
        return events if isinstance(events, list) else None
    return document if isinstance(document, list) else None


def _entry(entry: Any, cloud_export: str) -> tuple[float | None, str] | None:
    from collector.sglang.runtime_wrappers import record_time

    if not isinstance(entry, dict):
        return None
    if cloud_export == "loki":
        value = entry.get("value")
        if not (isinstance(value, list) and len(value) >= 2 and isinstance(value[1], str)):
            return None
        nanos = value[0]
        when = int(nanos) / 1e9 if isinstance(nanos, str) and nanos.isdigit() else None
        return when, value[1]
    text = entry.get("message") if cloud_export == "cloudwatch" else entry.get("textPayload")
    if not isinstance(text, str):
        return None
    return record_time(entry), text
