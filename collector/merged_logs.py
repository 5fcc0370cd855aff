"""Log files that hold several engines' lines, each line led by the name of where it came from.

A responder on a single-host PD deployment saves `docker compose logs > all.log`: every line is
`<container>  | <line>` (the names padded to one width, `--timestamps` puts an RFC 3339 stamp
after the bar). On Kubernetes, `kubectl logs -l app=sglang --prefix` writes
`[pod/<pod>/<container>] <line>`; Loki's `logcli query`, `<RFC 3339> {pod="…"}  <line>`; a
journal of two units, `<stamp> host sglang-decode[222]: <line>`. Read as one node, such a file
mixes prefill's pool with decode's requests, and its lines start with no SGLang prefix at all:
nothing was judged.

So a log file whose first lines are nearly all led by such names, some of them leading an
engine's line, is read once per name, each time as that name's own log (other names' lines are
passed over), numbered as the file is, and counted once. Separate streams, not one: `docker
compose logs` prints each container's history as it reads it, so the names' lines need not be in
time order with each other, only within each name.

The node a name becomes: a pod (its container too when the file shows several of the pod's
containers: prefill and decode may share a pod); a compose container, or the node that the other
files name once compose's replica number is taken off (`prefill-0-1` is `prefill-0` when the
snapshots say `prefill-0@….prom`); and the file's own node before it when the same name stands in
merged files of different nodes (two hosts running one compose project).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from collector.line_order import head_lines
from collector.log_exports import export_sources
from collector.sglang.runtime_wrappers import (
    CLOUDWATCH_STREAM,
    LOKI_LABELS,
    MONTH,
    MONTH_INITIALS,
    RFC3339,
    STAMPED,
    SYSLOG_TAG,
)

if TYPE_CHECKING:
    from collector.files import ReadStats, TelemetryFile

# An ANSI colour (compose colours names on a terminal; a file saved through `script` keeps it).
_COLOUR = r"(?:\x1b\[[0-9;]*m)*"
# `decode-1  | `, `pd_decode_1   | ` (compose v1), the bar alone on an empty line.
_COMPOSE: Final = re.compile(
    _COLOUR
    + r"([A-Za-z0-9][A-Za-z0-9_.-]{0,127})"
    + _COLOUR
    + r" *"
    + _COLOUR
    + r"\|"
    + _COLOUR
    + r"(?: |$)"
)
# `[pod/sglang-decode-0/engine] `: the name is `sglang-decode-0/engine`.
_KUBECTL: Final = re.compile(r"\[pod/([A-Za-z0-9][A-Za-z0-9_.-]{0,252}/[A-Za-z0-9_.-]{1,63})\] ?")
# Loki's `logcli query` over several streams: `<RFC 3339> {pod="sglang-decode-0", …}  <line>`;
# the label naming the source, in this order of preference (else the labels themselves).
_LOGCLI: Final = re.compile(RFC3339 + r" (?=\{[A-Za-z_])")
# A shipper's JSON record naming its pod (Vector's `kubernetes.pod_name`, Fluent Bit's
# kubernetes filter's): the record is the line, unwrapped as it is read (`runtime_wrappers`).
_JSON_POD: Final = re.compile(r'"pod_name" ?: ?"([A-Za-z0-9][A-Za-z0-9_.-]{0,252})"')
_LABEL: Final = re.compile(r'([A-Za-z_]\w*)="((?:[^"\\]|\\.)*)"')
_SOURCE_LABELS: Final = (
    "pod",
    "container",
    "instance",
    "host",
    "hostname",
    "node",
    "filename",
    "job",
)
# A journal's or syslog's `<stamp> host prog[pid]: ` (`journalctl -u sglang-prefill -u
# sglang-decode`): the program names the source, once two programs print an engine's lines (one
# unit's journal is a log like any other, its tag unwrapped with the line).
_JOURNAL: Final = re.compile(
    f"(?:{RFC3339}|{MONTH}" + r" [ \d]\d \d\d:\d\d:\d\d(?:\.\d{1,6})?) " + SYSLOG_TAG
)
# Words a logging format puts before a bar (`INFO     | message`): levels, not sources.
_LEVELS: Final = frozenset(
    {"TRACE", "DEBUG", "INFO", "NOTICE", "WARN", "WARNING", "ERROR", "CRITICAL", "FATAL", "SUCCESS"}
)
# What an engine's line opens with, behind a name: SGLang's prefix, a runtime's RFC 3339 stamp
# (`--timestamps`), a JSON record, syslog's month. A table's `key | value` rows open with none.
_ENGINE_OPENING: Final = re.compile(
    r"\[\d|\d{4}-\d\d-\d\dT\d\d:\d\d|\{" + f"|{MONTH}" + r" [ \d]\d "
)
# SGLang's own prefix (a date and a time, or an old build's time alone), behind a runtime's
# stamp or not: what marks a pod's engine container among its others (a mesh proxy's access
# lines open with `[2026-09-06T00:00:01.123Z]`, its own lines with a stamp and a level).
_SGLANG_OPENING: Final = re.compile(
    f"(?:{RFC3339} )?" + r"\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d[ .\]]"
)
# A file is merged when this share of its first non-blank lines (at least `_MIN_LINES`, looked
# for in up to `_MAX_HEAD_BYTES`: request lines of long prompts run to megabytes) is led by a
# name; a real log's continuation lines and tracebacks never are.
_SNIFF_LINES: Final = 200
_HEAD_BYTES: Final = 64 << 10
_MAX_HEAD_BYTES: Final = 4 << 20
_MIN_LINES: Final = 3
_MIN_SHARE: Final = 0.9
# Names read from one file (each is a reading of the whole file): the lines of any name past
# these are counted drops (`merged_name_over_limit`), never silently lost.
MAX_NAMES: Final = 128
# Compose's replica number after a service's name (`prefill-0-1`, v1's `pd_prefill_1`).
_REPLICA: Final = re.compile(r"[-_]\d+$")


def line_source(line: str) -> tuple[str, int] | None:
    """(name, where the engine's line starts) for a line led by a compose or kubectl name."""
    first = line[:1]
    if first.isdigit():
        return _logcli_source(line) or _journal_source(line) or _cloudwatch_source(line)
    if first in MONTH_INITIALS and (journal := _journal_source(line)) is not None:
        return journal
    if first == "{":
        at = line.find('"pod_name"')  # inside a string it would be `\"pod_name\"`
        pod = _JSON_POD.match(line, at) if at >= 0 else None
        if pod is None:
            return _logcli_json_source(line) or _ecs_source(line)
        return pod.group(1), 0
    if first == "[":
        m = _KUBECTL.match(line)
    elif first.isalnum() or first == "\x1b":
        m = _COMPOSE.match(line)
        if m is not None and m.group(1).upper() in _LEVELS:
            return None
    else:
        return None
    return (m.group(1), m.end()) if m is not None else None


def _journal_source(line: str) -> tuple[str, int] | None:
    m = _JOURNAL.match(line)
    return (m.group("program").rsplit("/", 1)[-1], m.end()) if m is not None else None


def _cloudwatch_source(line: str) -> tuple[str, int] | None:
    stamp = STAMPED.match(line)  # `aws logs tail` of a log group: `<RFC3339> <stream> <line>`
    stream = CLOUDWATCH_STREAM.match(line, stamp.end()) if stamp is not None else None
    if stream is None:
        return None
    return line[stream.start() : stream.end() - 1].replace("/", "."), stream.end()


def _logcli_source(line: str) -> tuple[str, int] | None:
    stamp = _LOGCLI.match(line)
    labels = LOKI_LABELS.match(line, stamp.end()) if stamp is not None else None
    if labels is None:
        return None
    found = dict(_LABEL.findall(line, labels.start(), labels.end()))
    return source_of_labels(found, labels.end(), line[labels.start() : labels.end()].strip())


def source_of_labels(
    labels: dict[str, Any], start: int = 0, spelled: str = ""
) -> tuple[str, int] | None:
    """The name a Loki stream's labels give it (`_SOURCE_LABELS`, else the labels as
    `spelled`), with `start`."""
    key = next(
        (key for key in _SOURCE_LABELS if isinstance(labels.get(key), str) and labels[key]), None
    )
    if key is None:
        name = spelled
    elif key == "filename":  # a file's path names its node as a file of that name does
        name = _node_of_path(labels[key]) or Path(labels[key]).stem
    else:
        name = labels[key]
    name = name.replace("/", "_")  # `/` is kubectl's pod/container
    return (name, start) if name else None


# Loki's `logcli query --output=jsonl`: `{"labels": {"pod": "decode-1", …}, "line": …}`.
_JSON_LABELS: Final = re.compile(r'"labels" ?: ?\{([^{}]{0,4096})\}')
_JSON_LABEL: Final = re.compile(r'"([A-Za-z_]\w*)" ?: ?"((?:[^"\\]|\\.)*)"')


def _logcli_json_source(line: str) -> tuple[str, int] | None:
    """The stream a `logcli --output=jsonl` record names by its labels (`_SOURCE_LABELS`);
    the record is the line, unwrapped as it is read (`runtime_wrappers`)."""
    at = line.find('"labels"')
    labels = _JSON_LABELS.match(line, at) if at >= 0 else None
    if labels is None:
        return None
    return source_of_labels(dict(_JSON_LABEL.findall(labels.group(1))))


# Filebeat's and Elastic Agent's ECS records name their source in objects: `"host": {"name": …}`,
# `"log": {"file": {"path": …}}`, `"kubernetes": {"pod": {"name": …}, "container": {…}}`. A
# quote inside the message is escaped (`\"host\"`), so these are the record's own keys.
_ECS_OBJECT: Final = re.compile(r'"(host|log|kubernetes)" ?: ?(?=\{)')
_JSON_DECODER: Final = json.JSONDecoder()


def _ecs_source(line: str) -> tuple[str, int] | None:
    """The node an ECS record is of: its pod (with its container, as kubectl names it), else
    its host with the file it was read from (the host alone once the file shows no other of
    that host's files: `node_names`), else that file as a file of its name is named (blind
    review 44 D2: one Filebeat export of prefill and decode, read as one node, was an
    all-clear over 9 exposures)."""
    found: dict[str, dict[str, Any]] = {}
    for m in _ECS_OBJECT.finditer(line):
        if m.group(1) in found:
            continue
        try:
            value, _ = _JSON_DECODER.raw_decode(line, m.end())
        except ValueError:
            continue
        if isinstance(value, dict):
            found[m.group(1)] = value
    pod = _name_at(found, "kubernetes", "pod", "name")
    if pod is not None:
        container = _name_at(found, "kubernetes", "container", "name")
        return (f"{pod}/{container}" if container is not None else pod), 0
    host = _name_at(found, "host", "name") or _name_at(found, "host", "hostname")
    path = _text_at(found, "log", "file", "path")
    read_from = _node_of_path(path) if path is not None else None
    if host is not None:
        return (f"{host}/{read_from}" if read_from is not None else host), 0
    return (read_from, 0) if read_from is not None else None


def _name_at(objects: dict[str, dict[str, Any]], *keys: str) -> str | None:
    """`_text_at` as one part of a name (`/` is kubectl's pod/container)."""
    text = _text_at(objects, *keys)
    return text.replace("/", "_") if text is not None else None


def _text_at(objects: dict[str, dict[str, Any]], *keys: str) -> str | None:
    value: Any = objects
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, str) and value else None


@functools.lru_cache(maxsize=1024)
def _node_of_path(path: str) -> str | None:
    from collector.files import describe

    described = describe(Path(path.replace("\\", "/")))
    return described.node.replace("/", "_") if described is not None and described.node else None


def merged_names(tf: TelemetryFile) -> dict[str, bool] | None:
    """The names leading the lines of a merged log file, in order of first appearance (at most
    `MAX_NAMES`), each with whether it leads an engine's line; None for a file that is not
    merged (the usual case: only its head is read)."""
    from collector.files import ReadStats, read_line_blocks

    if tf.cloud_export:
        return export_sources(tf.path, tf.cloud_export)
    sniffed = [line for line in _head_lines(tf.path) if line.strip()][:_SNIFF_LINES]
    sources = [(line, line_source(line)) for line in sniffed]
    led = [(line, source) for line, source in sources if source is not None]
    if len(sniffed) < _MIN_LINES or len(led) < _MIN_SHARE * len(sniffed):
        return None
    if not any(_ENGINE_OPENING.match(line, source[1]) for line, source in led):
        return None
    if all(_JOURNAL.match(line) for line, _ in led) and (
        len({source[0] for line, source in led if _SGLANG_OPENING.match(line, source[1])}) < 2
    ):
        return None  # one unit's journal: its tag is unwrapped with the line
    if len({source[0] for _, source in led}) < 2 and all(
        line[:1] == "{" or _cloudwatch_source(line) for line, _ in led
    ):
        return None  # one stream's `aws logs tail`, one pod's records: the file's node
    names: dict[str, bool] = {}
    for _, lines in read_line_blocks(tf.path, ReadStats()):
        for line in lines:
            source = line_source(line)
            if source is None:
                continue
            name, start = source
            engine = names.get(name)
            if engine is None and len(names) >= MAX_NAMES:
                continue
            if not engine:
                names[name] = _SGLANG_OPENING.match(line, start) is not None
    return names or None


def _head_lines(path: Path) -> list[str]:
    """The whole lines at the start of a file: at least `_MIN_LINES` of them, in as little of
    it as holds them (up to `_MAX_HEAD_BYTES`)."""
    size = _HEAD_BYTES
    while True:
        lines = head_lines(path, size)
        if len(lines) >= _MIN_LINES or size >= _MAX_HEAD_BYTES:
            return lines
        size *= 4


def split_merged(files: list[TelemetryFile]) -> list[TelemetryFile]:
    """Each merged log file as one file per name leading its lines (see the module docstring);
    other files as they are. Only the first name's reading counts the file's bytes and lines."""
    merged = {
        index: names
        for index, tf in enumerate(files)
        if tf.kind == "log" and (names := merged_names(tf))
    }
    if not merged:
        return files
    known = {tf.node for index, tf in enumerate(files) if index not in merged}
    # The merged files' own nodes (`host-a`, `host-b`) each name appears under.
    under: dict[str, set[str]] = {}
    for index, names in merged.items():
        for name in names:
            under.setdefault(name, set()).add(files[index].node)
    out: list[TelemetryFile] = []
    for index, tf in enumerate(files):
        found = merged.get(index)
        if found is None:
            out.append(tf)
            continue
        nodes = node_names(found, known, tf.node)
        for position, name in enumerate(found):
            node = nodes[name] if len(under[name]) == 1 else f"{tf.node}/{nodes[name]}"
            out.append(
                replace(
                    tf,
                    node=node,
                    merged_source=name,
                    merged_names=tuple(found),
                    counted=position == 0,
                )
            )
    return out


def node_names(names: dict[str, bool], known: set[str], own: str = "") -> dict[str, str]:
    """The node each name of one merged file is read as (see the module docstring), given
    whether each leads an engine's line, the nodes the other files name (`known`) and the
    file's own node (`own`).

    A pod is its engine container's node, and its other containers (a mesh's proxy) are nodes
    of their own. A name becomes the node the other files name when that is the name without
    compose's replica number, or the name's last part (`sglang-decode-0` is the snapshots'
    `decode-0`), and no other name of the file would become it.

    >>> node_names({"p-0/engine": True, "p-0/istio-proxy": False}, set())
    {'p-0/engine': 'p-0', 'p-0/istio-proxy': 'p-0/istio-proxy'}
    >>> node_names({"d-0/prefill": True, "d-0/decode": True}, set())
    {'d-0/prefill': 'd-0/prefill', 'd-0/decode': 'd-0/decode'}
    >>> node_names({"prefill-0-1": True, "decode-0-1": True}, {"prefill-0", "decode-0"})
    {'prefill-0-1': 'prefill-0', 'decode-0-1': 'decode-0'}
    >>> node_names({"box/prefill-0": True, "box/decode-0": True}, {"prefill-0", "decode-0"})
    {'box/prefill-0': 'prefill-0', 'box/decode-0': 'decode-0'}
    >>> node_names({"sglang-decode-0/engine": True, "b-decode-0/x": True}, {"decode-0"})
    {'sglang-decode-0/engine': 'sglang-decode-0', 'b-decode-0/x': 'b-decode-0'}
    """
    # Per pod, its containers: those leading engine lines first.
    pods: dict[str, list[str]] = {}
    for name in sorted(names, key=lambda name: not names[name]):
        if "/" in name:
            pods.setdefault(name.split("/", 1)[0], []).append(name)
    first: dict[str, str] = {}
    for name in names:
        if "/" in name:
            pod = name.split("/", 1)[0]
            containers = pods[pod]
            alone = len(containers) == 1 or (
                containers[0] == name and not names[containers[1]] and names[name]
            )
            first[name] = pod if alone else name
        else:
            first[name] = name
    # A pod's or host's several sources stay `pod/source`, unless the source alone is a node
    # the other files name (one host's ECS records of `prefill-0.log` and `decode-0.log`,
    # beside snapshots of `prefill-0` and `decode-0`).
    adopted = {name: _adopted(node, known, own) for name, node in first.items()}
    claims = [node for node in adopted.values() if node is not None]
    return {
        name: node if node is not None and claims.count(node) == 1 else first[name]
        for name, node in adopted.items()
    }


def _adopted(node: str, known: set[str], own: str) -> str | None:
    """`known_as`, and for a pod's or host's source (`pod/source`) the source when it is a
    known node."""
    if "/" not in node:
        return known_as(node, known, own)
    source = node.split("/", 1)[1]
    return source if source in known else None


def known_as(node: str, known: set[str], own: str = "") -> str | None:
    """The node the other files (or the file's own name) give `node`, if exactly one."""
    if "/" in node or node in known:
        return None
    base = _REPLICA.sub("", node)
    if base in known or base == own:
        return base
    held = (_whole_parts(node) | _whole_parts(base)) & known
    return held.pop() if len(held) == 1 else None


def _whole_parts(name: str) -> set[str]:
    """Every run of `name` between its ends or separators: the names it holds whole (the pod
    `sglang-prefill-1` holds `prefill-1`, the stream `sglang.decode-0.abc123` holds `decode-0`
    but not `decode-1` or `decode-10`). A few dozen for a file's name, looked up in the known
    nodes instead of each node looked for in the name: a folder of 20,000 logs was 400 million
    searches."""
    cuts = [at for at, char in enumerate(name) if char in _NAME_SEPARATORS]
    starts = [0, *(at + 1 for at in cuts)]
    ends = [*cuts, len(name)]
    return {name[start:end] for start in starts for end in ends if end > start}


_NAME_SEPARATORS: Final = "-_."


def own_lines(
    blocks: Iterator[tuple[int, list[str]]],
    name: str,
    names: tuple[str, ...],
    stats: ReadStats,
    counting: bool,
) -> Iterator[tuple[int, list[str]]]:
    """The blocks of a merged file with `name`'s lines as the engine wrote them and every other
    line passed over (the reader's mark for a dropped line, so numbering stays the file's).

    The reading that counts (`counting`) also counts the lines no name it reads leads: a
    traceback's or a wrapped line's continuation (`merged_line_without_name`), and the lines
    of names past `MAX_NAMES` (`merged_name_over_limit`). The others look only for their own
    name's opening, a `startswith` before any pattern."""
    from collector.files import DROPPED

    read = frozenset(names)
    opening = f"[pod/{name}]" if "/" in name else name
    for first, lines in blocks:
        kept: list[str] = []
        for line in lines:
            first_char = line[:1]
            if (
                not counting
                and not line.startswith(opening)
                and first_char != "\x1b"
                and first_char != "{"  # a shipper's record, its pod inside
                and not first_char.isdigit()  # logcli's stamp, the name after it
                and first_char not in MONTH_INITIALS  # syslog's month
            ):
                kept.append(DROPPED)
                continue
            source = line_source(line)
            if source is None:
                if counting and line and line != DROPPED:
                    stats.drop("merged_line_without_name")
                kept.append(DROPPED)
            elif source[0] == name:
                kept.append(line[source[1] :])
            else:
                if counting and source[0] not in read:
                    stats.drop("merged_name_over_limit")
                kept.append(DROPPED)
        yield first, kept
