"""One file holding several engines' lines (`docker compose logs`, `kubectl logs --prefix`) is
read as one log per name leading the lines: the incident judged from it is the incident judged
from the per-node files."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.files import discover
from collector.forensics.driver import run_forensics
from collector.forensics.report import merged_logs_line
from collector.merged_logs import MAX_NAMES, line_source
from collector.parse import ParseStats, events_by_node
from simulator.offline import run_offline
from simulator.scenario import load_scenario

SCENARIOS = Path(__file__).parents[1] / "simulator" / "scenarios"
SCHEMA_PATH = Path(__file__).parents[1] / "collector" / "forensics" / "schema.json"
_PREFIX_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("decode-1    | [2026-09-06 00:00:01] Receive: obj=", ("decode-1", 14)),
        ("pd_prefill_1 | Traceback (most recent call last):", ("pd_prefill_1", 15)),
        ("\x1b[36mdecode-1  |\x1b[0m [2026-09-06 00:00:01 TP0] x", ("decode-1", 21)),
        ("prefill-1  |", ("prefill-1", 12)),  # an empty engine line
        ("[pod/sglang-decode-0/engine] [2026-09-06 00:00:01] x", ("sglang-decode-0/engine", 29)),
        ("[2026-09-06 00:00:01 TP0] Decode batch, #running-req: 1", None),
        ('  File "/sgl/scheduler.py", line 3, in run', None),
        ("[pod/] x", None),
        (
            '2026-09-06T00:00:01Z {app="x", pod="sglang-decode-0"}  [2026-09-06] x',
            ("sglang-decode-0", 55),
        ),
        ('2026-09-06T00:00:01Z {filename="/var/log/prefill-0.log"} [x', ("prefill-0", 57)),
        # Promtail reads a rotated file to its end: the same node as the live one, and as an
        # ECS record or a file on disk of that name (it was `prefill-0.log`, a node of its own).
        ('2026-09-06T00:00:01Z {filename="/var/log/prefill-0.log.1"} [x', ("prefill-0", 59)),
        ("2026-09-06T00:00:01Z {}  [2026-09-06 00:00:01] x", None),  # one stream: no name
        ('2026-09-06T00:00:01Z {"rid": "a1"}', None),  # a JSON record behind a stamp
        ("2026-09-06T00:00:01+0000 gpu-7 sglang-decode[222]: [2026-09-06", ("sglang-decode", 51)),
        ("Sep  6 00:00:01 gpu-7 /usr/bin/python3[7]: [2026-09-06", ("python3", 43)),
        ("| x", None),
        # Filebeat's ECS records (blind review 44 D2): the pod, else the host and its file,
        # else the file; a key spelt inside the message is escaped and never read.
        (
            '{"message": "[x] \\"host\\": {\\"name\\": \\"forged\\"}", '
            '"host": {"name": "gpu-7"}, "log": {"file": {"path": "/var/log/decode-0.log.1"}}}',
            ("gpu-7/decode-0", 0),
        ),
        ('{"message": "x", "log": {"file": {"path": "/logs/prefill-0.log"}}}', ("prefill-0", 0)),
        ('{"message": "x", "host": {"hostname": "gpu-7"}}', ("gpu-7", 0)),
        (
            '{"message": "x", "host": {"name": "h"}, '
            '"kubernetes": {"pod": {"name": "sglang-decode-0"}, "container": {"name": "engine"}}}',
            ("sglang-decode-0/engine", 0),
        ),
        ('{"message": "x", "host": {"name": ""}, "log": "text"}', None),
        ('{"message": "x", "host": {"name": "h"', None),  # cut off: no object
    ],
)
def test_the_name_leading_a_line_and_where_the_engine_line_starts(
    line: str, expected: tuple[str, int] | None
) -> None:
    assert line_source(line) == expected


def test_a_log_with_a_few_lines_that_look_led_by_a_name_is_one_log(tmp_path: Path) -> None:
    log = tmp_path / "decode-0.log"
    lines = [f"[2026-09-06 00:00:{i:02d} TP0] Decode batch, #running-req: 1" for i in range(30)]
    lines[5:7] = ["model | params", "GLM-5.3 | 32B"]  # a table the engine printed
    log.write_text("\n".join(lines) + "\n")
    assert [(f.node, f.merged_source) for f in discover([tmp_path])] == [("decode-0", None)]


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("incident")
    run_offline(load_scenario(SCENARIOS / "incident-replay-small.yaml"), folder)
    return folder


def _compose(node: str, line: str) -> str:
    return f"{node + '-1':<14}| {line}"


def _compose_timestamps(node: str, line: str) -> str:
    m = _PREFIX_TIME.match(line)
    stamp = f"{m.group(1)}T{m.group(2)}.250000000Z" if m else "2026-09-05T23:57:30.000000000Z"
    return f"{node + '-1':<14}| {stamp} {line}"


def _kubectl(node: str, line: str) -> str:
    return f"[pod/sglang-{node}/engine] {line}"


def _logcli(node: str, line: str) -> str:
    """Loki's `logcli query` over several streams."""
    return f'2026-09-05T23:57:30.000000000Z {{namespace="ml", pod="loki-{node}"}}  {line}'


def _ecs(node: str, line: str) -> str:
    """Filebeat's ECS record: the host, and the file it was read from."""
    m = _PREFIX_TIME.match(line)
    stamp = f"{m.group(1)}T{m.group(2)}.250Z" if m else "2026-09-05T23:57:30.000Z"
    return json.dumps(
        {
            "@timestamp": stamp,
            "message": line,
            "log": {"offset": 0, "file": {"path": f"/var/log/sglang/{node}.log"}},
            "host": {"os": {"name": "Debian"}, "name": f"gpu-{node}"},
            "agent": {"type": "filebeat"},
            "ecs": {"version": "8.0.0"},
        }
    )


def _merge(
    incident: Path,
    out: Path,
    lead: Callable[[str, str], str],
    *,
    by_time: bool,
) -> Path:
    """The scenario's logs as one gzipped file, each line led by its node's name: interleaved
    by time, or (as `docker compose logs` may print them) one node's history after another."""
    merged: list[tuple[str, int, str]] = []
    for log in sorted((incident / "logs").glob("*.log")):
        node = log.name.removesuffix(".log")
        last = ""
        for index, line in enumerate(log.read_text().splitlines()):
            m = _PREFIX_TIME.match(line)
            last = m.group(0) if m else last
            merged.append((last if by_time else node, index, lead(node, line)))
    merged.sort(key=lambda item: (item[0], item[1]) if not by_time else item[0])
    out.mkdir()
    with gzip.open(out / "all.log.1.gz", "wt") as handle:
        handle.writelines(line + "\n" for _, _, line in merged)
    return out


def _exposed(summary: dict[str, Any]) -> set[str]:
    return {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]}


@pytest.mark.parametrize(
    ("lead", "by_time", "named"),
    [
        # Compose's `decode-0-1` is the snapshots' `decode-0`; the pod is its own name.
        (_compose, False, "decode-0"),
        (_compose_timestamps, True, "decode-0"),
        # The pods too: `sglang-decode-0`'s last part is the snapshots' `decode-0`.
        (_kubectl, True, "decode-0"),
        (_logcli, True, "decode-0"),
        # The host `gpu-decode-0` read one file: the host, and the snapshots' `decode-0`.
        (_ecs, True, "decode-0"),
    ],
    ids=["compose-by-container", "compose-timestamps", "kubectl-prefix", "logcli", "ecs"],
)
def test_the_incident_in_one_merged_file_is_the_incident_in_per_node_files(
    tmp_path: Path,
    incident: Path,
    lead: Callable[[str, str], str],
    by_time: bool,
    named: str,
) -> None:
    folder = _merge(incident, tmp_path / "merged", lead, by_time=by_time)
    truth = json.loads((incident / "ground_truth.json").read_text())["exposed"]
    rooms = {str(r["bootstrap_room"]) for r in truth}
    assert len(rooms) >= 10
    inputs = [str(folder), str(incident / "snapshots")]
    summary = run_forensics(inputs, tmp_path / "out", write_parquet=False, workers=2).summary
    assert _exposed(summary) == rooms
    assert summary["exposure"]["first"] == min(r["time"] for r in truth)
    assert named in {r["node"] for r in summary["exposure"]["requests"]}
    # Read once per name, counted once: every line of the file, none twice.
    per_node = run_forensics(
        [str(incident / "logs"), str(incident / "snapshots")],
        tmp_path / "per-node",
        write_parquet=False,
    ).summary
    assert summary["input"]["lines"] == per_node["input"]["lines"]
    assert summary["input"]["events_by_kind"] == per_node["input"]["events_by_kind"]
    assert summary["input"]["dropped_by_reason"] == {}
    # Said, in the JSON (valid against the committed schema) and in the report's headline.
    names = {r["node"] for r in summary["exposure"]["requests"]} | {named}
    [(path, said)] = summary["input"]["merged_logs"].items()
    nodes = len(list((incident / "logs").glob("*.log")))
    assert path.endswith("all.log.1.gz") and len(said) == nodes and names <= set(said)
    jsonschema.validate(summary, json.loads(SCHEMA_PATH.read_text()))
    headline = merged_logs_line(summary)
    assert f"all.log.1.gz held the lines of {nodes} engines, read as {', '.join(said)}" in headline
    # Each event's source is its line in the merged file, numbered as the file is.
    finished = next(
        event
        for event in events_by_node(inputs, ParseStats())
        if event.kind == "request_finished" and event.node == named
    )
    path, _, number = finished.source.rpartition(":")
    with gzip.open(path, "rt") as handle:
        line = next(line for index, line in enumerate(handle, 1) if index == int(number))
    source = line_source(line)
    assert source is not None and named in source[0]
    assert "] Finish: " in line


def test_a_line_of_a_merged_file_led_by_no_name_is_counted_once(tmp_path: Path) -> None:
    log = tmp_path / "all.log"
    lines = [
        _compose(node, f"[2026-09-06 00:00:{i:02d} TP0] Decode batch, #running-req: 1")
        for i in range(10)
        for node in ("prefill-0", "decode-0")
    ]
    lines.insert(7, "    at a wrapped line with no name")
    log.write_text("\n".join(lines) + "\n")
    summary = run_forensics([str(log)], tmp_path / "out", write_parquet=False).summary
    assert summary["input"]["dropped_by_reason"] == {"merged_line_without_name": 1}
    assert summary["input"]["lines"] == 21
    assert summary["input"]["files"] == 1


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["", "decode-1  | ", "[pod/p-0/c] ", "\x1b[1m"]))
def test_reading_a_name_never_raises_and_never_reaches_past_the_line(lead: str, text: str) -> None:
    line = lead + text
    source = line_source(line)
    if source is not None:
        name, start = source
        assert name and name in line[:start] and 0 < start <= len(line)


_ENGINE_LINE = "[2026-09-06 00:00:{second:02d} TP0] Decode batch, #running-req: 1"


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _nodes(*paths: Path) -> list[tuple[str, str | None]]:
    return sorted((f.node, f.merged_source) for f in discover(list(paths)))


def test_one_compose_project_on_two_hosts_is_two_sets_of_nodes(tmp_path: Path) -> None:
    """Both hosts print `prefill-0-1`: read as one node, host b's history followed host a's.
    (Their lines differ, as two hosts' do: the same lines in two folders are copies of one
    file, `collector.repeated_lines`.)"""
    for offset, host in ((0, "host-a"), (30, "host-b")):
        _write(
            tmp_path / host / "all.log",
            [
                _compose(n, _ENGINE_LINE.format(second=offset + i))
                for i in range(5)
                for n in ("p", "d")
            ],
        )
    assert _nodes(tmp_path) == [
        ("host-a/d-1", "d-1"),
        ("host-a/p-1", "p-1"),
        ("host-b/d-1", "d-1"),
        ("host-b/p-1", "p-1"),
    ]


def test_the_containers_of_one_pod_are_nodes_of_their_own(tmp_path: Path) -> None:
    lines = [
        f"[pod/pd-0/{role}] {_ENGINE_LINE.format(second=i)}"
        for i in range(5)
        for role in ("prefill", "decode")
    ]
    lines += [f"[pod/router-0/router] {_ENGINE_LINE.format(second=9)}"]
    # A mesh's proxy beside the engine: the pod stays the engine's node.
    lines += [
        '[pod/d-1/istio-proxy] [2026-09-06T00:00:01.123Z] "GET /health HTTP/1.1" 200',
        "[pod/d-1/istio-proxy] 2026-09-06T00:00:01.123456Z\tinfo\tEnvoy proxy is ready",
        f"[pod/d-1/engine] 2026-09-06T00:00:02.5Z {_ENGINE_LINE.format(second=2)}",
    ]
    assert _nodes(_write(tmp_path / "pods.log", lines)) == [
        ("d-1", "d-1/engine"),
        ("d-1/istio-proxy", "d-1/istio-proxy"),
        ("pd-0/decode", "pd-0/decode"),
        ("pd-0/prefill", "pd-0/prefill"),
        ("router-0", "router-0/router"),
    ]


def test_a_file_saved_from_one_compose_service_keeps_the_node_its_name_says(
    tmp_path: Path,
) -> None:
    """`docker compose logs prefill-0 > prefill-0.log`: the node is `prefill-0`, not the
    container `prefill-0-1`, so the snapshots `prefill-0@….prom` meet its lines."""
    log = _write(
        tmp_path / "prefill-0.log",
        [_compose("prefill-0", _ENGINE_LINE.format(second=i)) for i in range(5)],
    )
    assert _nodes(log) == [("prefill-0", "prefill-0-1")]


@pytest.mark.parametrize(
    "head",
    [
        [f"param_{i} | {i}" for i in range(190)],  # a table the tool printed first
        [f"INFO     | {_ENGINE_LINE.format(second=i % 60)}" for i in range(190)],  # a level bar
    ],
    ids=["table", "level-bar"],
)
def test_a_log_whose_first_lines_only_look_led_by_names_is_one_log(
    tmp_path: Path, head: list[str]
) -> None:
    lines = head + [_ENGINE_LINE.format(second=i % 60) for i in range(100)]
    assert _nodes(_write(tmp_path / "decode-0.log", lines)) == [("decode-0", None)]


def test_a_merged_file_opening_with_megabyte_request_lines_is_told(tmp_path: Path) -> None:
    """A capture that starts mid-traffic at request-log level 3: the first lines are long."""
    long = _compose("decode-0", "[2026-09-06 00:00:00] Receive: obj=GenerateReqInput(text='")
    lines = [long + "x" * 300_000 + "')"] * 2
    lines += [_compose(n, _ENGINE_LINE.format(second=i)) for i in range(5) for n in ("p", "d")]
    assert [node for node, _ in _nodes(_write(tmp_path / "all.log", lines))] == [
        "d-1",
        "decode-0-1",
        "p-1",
    ]


def test_the_lines_of_names_past_the_limit_are_counted_drops(tmp_path: Path) -> None:
    pods = MAX_NAMES + 2
    lines = [f"[pod/p-{i}/c] {_ENGINE_LINE.format(second=i % 60)}" for i in range(pods)]
    log = _write(tmp_path / "pods.log", lines)
    assert len(discover([log])) == MAX_NAMES
    summary = run_forensics([str(log)], tmp_path / "out", write_parquet=False).summary
    assert summary["input"]["dropped_by_reason"] == {"merged_name_over_limit": 2}
    assert summary["input"]["lines"] == pods


def test_a_journal_of_two_units_is_read_per_program_one_units_is_one_log(tmp_path: Path) -> None:
    """`journalctl -u sglang-prefill -u sglang-decode -o short-iso`: the program is the node
    once two print an engine's lines; a single unit's journal stays the file's node (its tag is
    unwrapped with the line), as do two processes of one program (the pid changes at restart)."""

    def journal(programs: tuple[str, ...]) -> list[str]:
        return [
            f"2026-09-06T00:00:{i:02d}+0000 gpu-7 {program}: {_ENGINE_LINE.format(second=i)}"
            for i in range(10)
            for program in programs
        ]

    two = _write(
        tmp_path / "two" / "gpu-7.log", journal(("sglang-prefill[111]", "sglang-decode[222]"))
    )
    assert _nodes(two) == [("sglang-decode", "sglang-decode"), ("sglang-prefill", "sglang-prefill")]
    one = _write(tmp_path / "one" / "gpu-7.log", journal(("sglang-decode[222]",)))
    assert _nodes(one) == [("gpu-7", None)]
    pids = _write(tmp_path / "pids" / "gpu-7.log", journal(("python3[111]", "python3[222]")))
    assert _nodes(pids) == [("gpu-7", None)]
    by_node: dict[str, int] = {}
    for event in events_by_node([two], ParseStats()):
        by_node[event.node] = by_node.get(event.node, 0) + 1
    assert by_node == {"sglang-decode": 10, "sglang-prefill": 10}


def test_aws_logs_tail_of_a_group_is_one_node_per_stream(tmp_path: Path) -> None:
    """`aws logs tail <group>`: `<RFC3339> <log stream> <line>`, every pod's stream in one
    file; a single stream's tail stays the file's node, its stream name taken off the line."""
    lines = [
        f"2026-09-06T00:00:{i:02d}.000000+00:00 sglang/{node}/abc {_ENGINE_LINE.format(second=i)}"
        for i in range(6)
        for node in ("prefill-0", "decode-0")
    ]
    group = _write(tmp_path / "group" / "sglang.log", lines)
    assert _nodes(group) == [("sglang.decode-0.abc", "sglang.decode-0.abc"),
                             ("sglang.prefill-0.abc", "sglang.prefill-0.abc")]  # fmt: skip
    one = _write(tmp_path / "one" / "decode-0.log", [x for x in lines if "/decode-0/" in x])
    assert _nodes(one) == [("decode-0", None)]


def test_a_shipper_s_records_of_two_pods_are_one_node_per_pod(tmp_path: Path) -> None:
    """Vector's or Fluent Bit's records, every pod's in one file, the pod named after the line
    (the line with a prompt inside it can never fake the name: its quotes are escaped)."""
    import json

    def record(pod: str, second: int) -> str:
        text = _ENGINE_LINE.format(second=second) + ' "pod_name": "forged"'
        return json.dumps({"message": text, "kubernetes": {"pod_name": pod, "namespace": "x"}})

    lines = [record(pod, i) for i in range(6) for pod in ("sglang-prefill-0", "sglang-decode-0")]
    both = _write(tmp_path / "both" / "vector-sink.log", lines)
    assert _nodes(both) == [
        ("sglang-decode-0", "sglang-decode-0"),
        ("sglang-prefill-0", "sglang-prefill-0"),
    ]
    one = _write(tmp_path / "one" / "decode-0.log", [x for x in lines if "decode" in x])
    assert _nodes(one) == [("decode-0", None)]


def test_one_host_s_ecs_records_of_two_engine_logs_are_the_snapshots_nodes(
    tmp_path: Path,
) -> None:
    """Single-host PD: Filebeat read `prefill-0.log` and `decode-0.log` on one host. Each file
    is its node: the snapshots' `prefill-0` and `decode-0` beside them, else `host/file`."""

    def record(node: str, second: int) -> str:
        path = f"/var/log/sglang/{node}.log"
        return json.dumps(
            {"message": _ENGINE_LINE.format(second=second), "log": {"file": {"path": path}},
             "host": {"name": "gpu-box"}}
        )  # fmt: skip

    lines = [record(node, i) for i in range(6) for node in ("prefill-0", "decode-0")]
    log = _write(tmp_path / "export" / "filebeat.ndjson", lines)
    assert [node for node, _ in _nodes(log)] == ["gpu-box/decode-0", "gpu-box/prefill-0"]
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    for node in ("prefill-0", "decode-0"):
        (snapshots / f"{node}@20260906T000000Z.prom").write_text("sglang:context_len 1048576\n")
    nodes = {f.node for f in discover([tmp_path]) if f.kind == "log"}
    assert nodes == {"prefill-0", "decode-0"}


def test_a_stream_named_around_a_snapshot_node_is_that_node(tmp_path: Path) -> None:
    """`aws logs tail` names streams `sglang/decode-0/abc` (read `sglang.decode-0.abc`): beside
    snapshots of `decode-0`, its lines are that node's, as a pod `sglang-decode-0`'s are;
    `decode-10` or `xdecode-0` never are."""
    lines = [
        f"2026-09-06T00:00:{i:02d}.000000+00:00 sglang/{node}/abc {_ENGINE_LINE.format(second=i)}"
        for i in range(6)
        for node in ("prefill-0", "decode-0", "decode-10", "xdecode-1")
    ]
    _write(tmp_path / "group" / "sglang.log", lines)
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    for node in ("prefill-0", "decode-0", "decode-1"):
        (snapshots / f"{node}@20260906T000000Z.prom").write_text(
            "sglang:max_total_num_tokens 681280\nsglang:context_len 1048576\n"
        )
    nodes = {f.node for f in discover([tmp_path]) if f.kind == "log"}
    assert nodes == {"prefill-0", "decode-0", "sglang.decode-10.abc", "sglang.xdecode-1.abc"}
