"""What a saved log's name says: its node, its place among the node's files, and whether it is
one of several files read side by side or one after the other.

From an audit of how responders save logs, each of which lost exposures before:
`split -d` pieces (`.00`, `.01`) were taken for rotations and read backwards (0 of 145
exposures); `split` letter pieces (`.aa`) were nodes of their own; a process's stderr and stdout
saved apart (`decode-0.err`, `decode-0.out`) were read one after the other, so every request
line of the second was late (33 of 145 with time stats off); `kubectl logs --previous` saved
beside the current log, dashed dates and the kubelet's rotations were nodes of their own.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.files import describe, discover
from collector.forensics.driver import run_forensics
from collector.parse import ParseStats, events_by_node
from simulator.offline import run_offline
from simulator.scenario import scenario_from_dict

SCENARIOS = Path(__file__).parents[1] / "simulator" / "scenarios"


@pytest.mark.parametrize(
    ("names", "node"),
    [
        # oldest first, as a node's files are read
        (["decode-0.previous.log", "decode-0.log.2.gz", "decode-0.log.1", "decode-0.log"], None),
        (["decode-0-previous.log", "decode-0.log"], None),
        (["decode-0.log.previous", "decode-0.log"], None),
        (["decode-0-2026-09-09.log", "decode-0-2026-09-10.log", "decode-0.log"], None),
        (["0.log.20260906-120000.gz", "0.log.20260908-000000", "0.log"], "0"),
        (["decode-0.log-20260906", "decode-0.log-20260907.gz", "decode-0.log"], None),
    ],
)
def test_a_node_s_saved_files_sort_oldest_first(names: list[str], node: str | None) -> None:
    described = [describe(Path("/case") / name) for name in names]
    assert all(d is not None for d in described)
    assert {d.node for d in described if d} == {node or "decode-0"}
    orders = [d.order for d in described if d]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)


@pytest.mark.parametrize(
    ("name", "channel"),
    [
        ("decode-0.err", "stderr"),
        ("decode-0.out", "stdout"),
        ("decode-0.stderr.log", "stderr"),
        ("decode-0-stdout.log", "stdout"),
        ("decode-0.log", ""),
        # The process's two streams in its folder (blind review 54 D3: nodes `decode-0/stdout`
        # and `decode-0/stderr`, the pool never met the answers).
        ("decode-0/stdout.log", "stdout"),
        ("decode-0/logs/stderr.log.1", "stderr"),
        ("decode-0/stderr", "stderr"),
    ],
)
def test_a_channel_is_told_by_the_name_and_the_node_is_the_same(name: str, channel: str) -> None:
    described = describe(Path(name))
    assert described is not None
    assert (described.node, described.channel) == ("decode-0", channel)


def _line(i: int) -> str:
    return f"[2026-09-06 00:{i // 60 % 60:02d}:{i % 60:02d} TP0] Decode batch, #token: {i}"


def _kinds_and_times(*paths: Path) -> list[tuple[str, str, float | None]]:
    return [(e.node, e.kind, e.time) for e in events_by_node([str(p) for p in paths], ParseStats())]


@settings(max_examples=25, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=3000), min_size=1, max_size=14, unique=True),
    numeric=st.booleans(),
)
def test_split_pieces_read_as_the_log_they_were_cut_from(
    tmp_path_factory: pytest.TempPathFactory, cuts: list[int], numeric: bool
) -> None:
    """`split -b` cuts anywhere, inside lines too; `-d` numbers the pieces from `00`."""
    folder = tmp_path_factory.mktemp("split")
    whole = "".join(_line(i) + "\n" for i in range(60)).encode()
    (folder / "whole").mkdir()
    (folder / "whole" / "decode-0.log").write_bytes(whole)
    bounds = [0, *sorted(cut % len(whole) or 1 for cut in cuts), len(whole)]
    pieces = folder / "pieces"
    pieces.mkdir()
    for index, (start, end) in enumerate(zip(bounds, bounds[1:], strict=False)):
        suffix = f"{index:02d}" if numeric else "a" + "abcdefghijklmnop"[index]
        (pieces / f"decode-0.log.{suffix}").write_bytes(whole[start:end])
    assert [f.node for f in discover([pieces])] == ["decode-0"]
    assert _kinds_and_times(pieces) == _kinds_and_times(folder / "whole")


def _variant(**role_options: Any) -> Any:
    data = yaml.safe_load((SCENARIOS / "incident-replay-small.yaml").read_text())
    for role in ("prefill", "decode"):
        data["deployment"][role].update(role_options)
    return scenario_from_dict(data, "variant")


def _on_stdout(line: str) -> bool:
    head = line[:40]
    return "] Receive:" in head or "] Finish:" in head or "] INFO:     " in head


@pytest.mark.parametrize(
    ("stdout_name", "stderr_name"), [("{}.out", "{}.err"), ("{}/stdout.log", "{}/stderr.log")]
)
def test_stderr_and_stdout_saved_apart_are_read_side_by_side(
    tmp_path: Path, stdout_name: str, stderr_name: str
) -> None:
    """The engine's logging on stderr, the request logger's and uvicorn's access lines on
    stdout: saved apart, beside each other or in the node's folder, both are the node's, at
    the same time."""
    run_offline(_variant(request_time_stats=False), tmp_path / "sim")
    apart = tmp_path / "apart"
    for log in (tmp_path / "sim" / "logs").glob("*.log"):
        lines = log.read_text().splitlines(keepends=True)
        stdout = [line for line in lines if _on_stdout(line)]
        assert stdout
        err = [x for x in lines if not _on_stdout(x)]
        for name, kept in ((stdout_name, stdout), (stderr_name, err)):
            path = apart / name.format(log.stem)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(kept))
    summary = run_forensics(
        [str(apart), str(tmp_path / "sim" / "snapshots")], tmp_path / "out", write_parquet=False
    ).summary
    truth = {
        str(r["bootstrap_room"])
        for r in json.loads((tmp_path / "sim" / "ground_truth.json").read_text())["exposed"]
    }
    assert len(truth) >= 10
    assert {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]} == truth
    assert summary["requests"].get("late_lines", 0) == 0
    assert sorted(summary["nodes"]) == ["decode-0", "prefill-0"]


UID = "00000001-1a2b-4c3d-9e8f-0123456789ab"


def _touch(path: Path, text: str = "[2026-09-06 00:00:01 TP0] Decode batch, #token: 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_kubelet_s_logs_are_their_pod_s(tmp_path: Path) -> None:
    pods = tmp_path / "var" / "log" / "pods"
    _touch(pods / f"sglang_sglang-prefill-1_{UID}" / "sglang" / "0.log")
    _touch(pods / f"sglang_sglang-prefill-1_{UID}" / "sglang" / "0.log.20260906-120000.gz")
    _touch(pods / f"sglang_pd-0_{UID}" / "prefill" / "0.log")  # two engines in one pod
    _touch(pods / f"sglang_pd-0_{UID}" / "decode" / "0.log")
    containers = tmp_path / "var" / "log" / "containers"
    _touch(containers / f"sglang-decode-7f9c8d5b4-x2k9p_sglang_sglang-{'ab' * 32}.log")
    nodes = [(f.node, f.path.name) for f in discover([tmp_path])]  # each node's oldest first
    assert nodes == [
        ("pd-0/decode", "0.log"),
        ("pd-0/prefill", "0.log"),
        (
            "sglang-decode-7f9c8d5b4-x2k9p",
            f"sglang-decode-7f9c8d5b4-x2k9p_sglang_sglang-{'ab' * 32}.log",
        ),
        ("sglang-prefill-1", "0.log.20260906-120000.gz"),
        ("sglang-prefill-1", "0.log"),
    ]


def test_a_log_named_by_its_pod_is_the_snapshots_node_when_only_it_would_be(
    tmp_path: Path,
) -> None:
    _touch(tmp_path / "logs" / "sglang-prefill-1.log")
    _touch(tmp_path / "logs" / "a-decode-0.log")
    _touch(tmp_path / "logs" / "b-decode-0.log")  # which is decode-0? neither is said to be
    for node in ("prefill-1", "decode-0"):
        _touch(tmp_path / "snapshots" / f"{node}@20260906T000000Z.prom", "# none\n")
    logs = sorted(f.node for f in discover([tmp_path]) if f.kind == "log")
    assert logs == ["a-decode-0", "b-decode-0", "prefill-1"]


def test_one_nodes_log_in_a_folder_of_its_name_is_the_snapshots_node(tmp_path: Path) -> None:
    """`logs/decode-0/sglang.log` beside `snapshots/decode-0@….prom`: with no other folder
    holding a `sglang.log`, the file named the node `sglang`, apart from its snapshots, and
    decode-0's log was said not to have been read (blind review)."""
    _touch(tmp_path / "logs" / "decode-0" / "sglang.log")
    _touch(tmp_path / "logs" / "misc" / "sglang-router.log")  # a folder no snapshot names
    _touch(tmp_path / "snapshots" / "decode-0@20260906T000000Z.prom", "# none\n")
    logs = sorted(f.node for f in discover([tmp_path]) if f.kind == "log")
    assert logs == ["decode-0", "sglang-router"]


def test_documents_saved_under_the_endpoints_last_word_are_dated_snapshots(tmp_path: Path) -> None:
    """`decode-0@….loads.json` was a node of its own, `decode-0@….loads` (blind review)."""
    for name in ("decode-0@20260909T080500Z.loads.json", "decode-0@20260909T080500Z.models.json"):
        (described,) = discover([_touch(tmp_path / name, "{}")])
        assert (described.node, described.kind) == ("decode-0", "json"), name
        assert described.snapshot_time == 1_788_941_100.0, name
        (tmp_path / name).unlink()


def test_a_server_info_saved_by_hand_beside_dated_snapshots_is_the_same_node(
    tmp_path: Path,
) -> None:
    """Not two hosts `logs` and `snapshots`: taken so, every node's snapshots were one node."""
    _touch(tmp_path / "logs" / "prefill-0.log")
    _touch(tmp_path / "logs" / "prefill-0.server_info.json", "{}")
    for node in ("prefill-0", "decode-0"):
        _touch(tmp_path / "snapshots" / f"{node}@20260906T000000Z.server_info.json", "{}")
    assert sorted({f.node for f in discover([tmp_path])}) == ["decode-0", "prefill-0"]


def test_a_document_dated_only_by_its_file_time_does_not_stretch_what_the_logs_cover(
    tmp_path: Path,
) -> None:
    """A /server_info saved at the inquiry, months on: its file's time dates its
    configuration, not the end of the logs."""
    import os

    logs = tmp_path / "logs"
    _touch(logs / "decode-0.log", "".join(_line(i) + "\n" for i in range(30)))
    info = _touch(logs / "decode-0.server_info.json", '{"max_total_num_tokens": 681280}')
    months_later = 1796000000  # 2026-12-01
    os.utime(info, (months_later, months_later))
    summary = run_forensics([str(logs)], tmp_path / "out", write_parquet=False).summary
    assert summary["input"]["first_time"] == "2026-09-06T00:00:00.000Z"
    assert summary["input"]["last_time"].startswith("2026-09-06T00:00:")  # not 2026-12-01
    assert summary["nodes"]["decode-0"]["config"]  # the document still configures the node


# From a second audit of these shapes.


def test_a_pod_named_like_a_node_that_has_its_own_log_stays_apart(tmp_path: Path) -> None:
    """`canary-decode-0.log` beside `decode-0.log`: decode-0 has its log; the canary is not it."""
    _touch(tmp_path / "logs" / "decode-0.log")
    _touch(tmp_path / "logs" / "canary-decode-0.log")
    _touch(tmp_path / "snapshots" / "decode-0@20260906T000000Z.prom", "# none\n")
    assert sorted({f.node for f in discover([tmp_path]) if f.kind == "log"}) == [
        "canary-decode-0",
        "decode-0",
    ]


def test_a_container_s_restarts_are_read_in_order(tmp_path: Path) -> None:
    folder = tmp_path / "var" / "log" / "pods" / f"sglang_decode-0_{UID}" / "sglang"
    for name in ("1.log", "1.log.20260908-000000.gz", "0.log", "0.log.20260906-120000.gz"):
        _touch(folder / name)
    assert [f.path.name for f in discover([tmp_path])] == [
        "0.log.20260906-120000.gz",
        "0.log",
        "1.log.20260908-000000.gz",
        "1.log",
    ]


def test_a_pod_created_again_under_its_name_is_one_node_in_the_order_of_its_lives(
    tmp_path: Path,
) -> None:
    """Blind review 33 (D3): a StatefulSet's pod re-created at the fix has a kubelet folder per
    uid; each became a node named by namespace and uid. Two pods of one name whose logs run
    at once (two clusters) stay apart."""
    pods = tmp_path / "sts" / "var" / "log" / "pods"
    line = "[2026-09-08 {at} TP0] Decode batch, #token: 1\n"
    later, earlier = "0123abcd-0000-4000-8000-00000000000a", "fedc0000-0000-4000-8000-00000000000b"
    # The later life's uid sorts first: only the times tell the order.
    _touch(
        pods / f"sglang_sglang-prefill-0_{later}" / "sglang" / "0.log", line.format(at="13:35:00")
    )
    _touch(
        pods / f"sglang_sglang-prefill-0_{earlier}" / "sglang" / "0.log", line.format(at="11:57:30")
    )
    _touch(
        pods / f"sglang_sglang-prefill-0_{earlier}" / "sglang" / "1.log", line.format(at="12:40:00")
    )
    found = [
        (f.node, f.path.parent.parent.name[-1], f.path.name) for f in discover([tmp_path / "sts"])
    ]
    assert found == [
        ("sglang-prefill-0", "b", "0.log"),
        ("sglang-prefill-0", "b", "1.log"),
        ("sglang-prefill-0", "a", "0.log"),
    ]
    at_once = tmp_path / "at-once" / "var" / "log" / "pods"
    for uid in (later, earlier):
        lines = line.format(at="12:00:00") + line.format(at="13:00:00")
        _touch(at_once / f"sglang_sglang-prefill-0_{uid}" / "sglang" / "0.log", lines)
    assert len({f.node for f in discover([tmp_path / "at-once"])}) == 2


def test_split_past_89_pieces_and_a_missing_piece(tmp_path: Path) -> None:
    """`split -d` goes on at `.9000` after `.89`; a piece missing is said, never joined across."""
    whole = "".join(_line(i) + "\n" for i in range(400)).encode()
    size = len(whole) // 100 + 1
    suffixes = [f"{i:02d}" for i in range(90)] + [f"9{i:03d}" for i in range(10)]
    for index, suffix in enumerate(suffixes):
        (tmp_path / "all").mkdir(exist_ok=True)
        (tmp_path / "all" / f"decode-0.log.{suffix}").write_bytes(
            whole[index * size : (index + 1) * size]
        )
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "decode-0.log").write_bytes(whole)
    assert _kinds_and_times(tmp_path / "all") == _kinds_and_times(tmp_path / "one")
    (tmp_path / "all" / "decode-0.log.45").unlink()
    skipped: Counter[str] = Counter()
    found = discover([tmp_path / "all"], skipped)
    assert skipped["split_piece_missing"] == 1
    assert [len(f.pieces) for f in found] == [45, 54]


def _exposed_and_findings(summary: dict[str, Any]) -> tuple[set[str], Counter[tuple[str, str]]]:
    rooms = {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]}
    findings = Counter(
        (f["detector"], f["severity"]) for f in summary["findings"] if f["severity"] != "info"
    )
    return rooms, findings


@pytest.mark.parametrize("by_period", [False, True], ids=["logs", "logs-per-week"])
def test_two_clusters_saved_side_by_side_are_each_their_own_nodes(
    tmp_path: Path, by_period: bool
) -> None:
    """`cluster-a/{logs,snapshots}` beside `cluster-b/{logs,snapshots}`, each holding
    `prefill-0` and `decode-0` (or their logs split into `week1/` and `week2/`): four nodes,
    and the run finds what each cluster's own run finds. Before, each cluster's prefill and
    decode were one node named after its folder: 6,142 late request lines, 12 of 16
    over-length answers and every refused-then-served lost."""
    data = yaml.safe_load((SCENARIOS / "incident-replay-small.yaml").read_text())
    alone = {}
    for cluster, seed in (("cluster-a", 26), ("cluster-b", 27)):
        run_offline(
            scenario_from_dict({**data, "seed": seed}, cluster), tmp_path / "case" / cluster
        )
        (tmp_path / "case" / cluster / "ground_truth.json").unlink()
        alone[cluster] = _exposed_and_findings(
            run_forensics([str(tmp_path / "case" / cluster)], tmp_path / cluster).summary
        )
        if by_period:
            for log in list((tmp_path / "case" / cluster / "logs").iterdir()):
                lines = log.read_text().splitlines(keepends=True)
                for week, part in (
                    ("week1", lines[: len(lines) // 2]),
                    ("week2", lines[len(lines) // 2 :]),
                ):
                    (log.parent.parent / week).mkdir(exist_ok=True)
                    (log.parent.parent / week / log.name).write_text("".join(part))
                log.unlink()
    summary = run_forensics([str(tmp_path / "case")], tmp_path / "both").summary
    assert sorted(summary["nodes"]) == [
        "cluster-a/decode-0",
        "cluster-a/prefill-0",
        "cluster-b/decode-0",
        "cluster-b/prefill-0",
    ]
    rooms, findings = _exposed_and_findings(summary)
    assert rooms == alone["cluster-a"][0] | alone["cluster-b"][0] and len(rooms) > 20
    assert findings == alone["cluster-a"][1] + alone["cluster-b"][1]
    assert summary["requests"]["late_lines"] == 0


def test_a_host_folder_with_a_proxy_s_log_beside_the_engine_s_is_still_the_host(
    tmp_path: Path,
) -> None:
    """Only logs that speak SGLang make a folder hold several engines: a host's nginx log
    beside its `sglang.log` leaves the host folder the node, so it meets its snapshots."""
    for host in ("prefill-0", "decode-0"):
        folder = tmp_path / "hosts" / host
        folder.mkdir(parents=True)
        (folder / "sglang.log").write_text("".join(_line(i) + "\n" for i in range(5)))
        (folder / "nginx.log").write_text('10.0.0.1 - - [06/Sep/2026:00:00:01 +0000] "POST /"\n')
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    (snapshots / "decode-0@20260906T000000Z.prom").write_text("sglang:context_len 1048576\n")
    assert {f.node for f in discover([tmp_path])} == {"prefill-0", "decode-0"}


@pytest.mark.parametrize(
    ("gzipped", "snapshots_by_week"),
    [(False, False), (True, False), (False, True)],
    ids=["plain", "gzipped", "snapshots-by-week"],
)
def test_one_deployment_saved_in_a_folder_per_period_is_read_as_one(
    tmp_path: Path, gzipped: bool, snapshots_by_week: bool
) -> None:
    """`week1/` and `week2/`, each with every engine's log (rotated within the folder, plain or
    gzipped: a gzip log's end is read through) and the snapshots apart, or each week's with
    its logs, a third of them (the days the weeks share) in both: the engines are the
    snapshots' nodes, each read in time order across the folders, and the run finds what the
    unsplit logs give.
    Before, each period's engines were nodes of their own (`week1/decode-0`): 67 of the demo's
    145 over-length answers lost; snapshots shared by two weeks made nodes of each week's."""
    run_offline(_variant(), tmp_path / "whole")
    (tmp_path / "whole" / "ground_truth.json").unlink()
    case = tmp_path / "case"
    for log in (tmp_path / "whole" / "logs").iterdir():
        lines = log.read_text().splitlines(keepends=True)
        cuts = [0, len(lines) // 4, len(lines) // 2, 3 * len(lines) // 4, len(lines)]
        parts = ["week1/{}.1", "week1/{}", "week2/{}.1", "week2/{}"]
        for part, start, end in zip(parts, cuts, cuts[1:], strict=False):
            target = case / part.format(log.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            text = "".join(lines[start:end]).encode()
            if gzipped:
                target = target.with_name(target.name + ".gz")
                text = gzip.compress(text)
            target.write_bytes(text)
    snapshots = tmp_path / "whole" / "snapshots"
    if snapshots_by_week:
        saved = sorted(snapshots.iterdir(), key=lambda p: p.name.split("@")[1])
        # The weeks' snapshot folders share their middle third.
        first_end = saved[2 * len(saved) // 3].name.split("@")[1][:15]
        second_start = saved[len(saved) // 3].name.split("@")[1][:15]
        for snapshot in saved:
            moment = snapshot.name.split("@")[1][:15]
            for week, held in (("week1", moment <= first_end), ("week2", moment >= second_start)):
                if held:
                    (case / week / "snapshots").mkdir(exist_ok=True)
                    (case / week / "snapshots" / snapshot.name).write_bytes(snapshot.read_bytes())
    else:
        snapshots.rename(case / "snapshots")
        snapshots = case / "snapshots"
    whole = run_forensics([str(tmp_path / "whole" / "logs"), str(snapshots)], tmp_path / "a")
    split = run_forensics([str(case)], tmp_path / "b")
    assert (
        sorted(split.summary["nodes"])
        == sorted(whole.summary["nodes"])
        == ["decode-0", "prefill-0"]
    )
    assert _exposed_and_findings(split.summary) == _exposed_and_findings(whole.summary)
    assert split.summary["requests"]["total"] == whole.summary["requests"]["total"]
    assert split.summary["requests"]["late_lines"] == 0


def test_a_host_folder_with_a_copy_of_its_log_under_another_name_is_still_the_host(
    tmp_path: Path,
) -> None:
    """Every host folder holding `sglang.log` and the same lines as `server.log` (the process's
    output captured twice) is one engine's: the host folder stays the node."""
    for index, host in enumerate(("prefill-0", "decode-0")):
        folder = tmp_path / "hosts" / host
        folder.mkdir(parents=True)
        text = "".join(_line(i + 100 * index) + "\n" for i in range(60))
        (folder / "sglang.log").write_text(text)
        (folder / "server.log").write_text(text)
    assert {f.node for f in discover([tmp_path])} == {"prefill-0", "decode-0"}


def test_two_clusters_snapshots_of_the_same_moment_are_two_deployments(tmp_path: Path) -> None:
    # Both clusters saved at one moment under the same names: one node's snapshots of one
    # instant in two folders are no periods of it. Read so, cluster-b's config of the same
    # moment replaced cluster-a's failing one, and the audit passed.
    for cluster in ("cluster-a", "cluster-b"):
        for node in ("prefill-0", "decode-0"):
            folder = tmp_path / cluster / "snapshots"
            _touch(folder / f"{node}@20260901T080000Z.server_info.json", "{}")
            _touch(folder / f"{node}@20260901T080000Z.prom", f"# {cluster}\n")
            _touch(tmp_path / cluster / "logs" / f"{node}.log")
    nodes = {(f.node, f.kind) for f in discover([tmp_path])}
    assert {node for node, _ in nodes} == {
        f"{cluster}/{node}"
        for cluster in ("cluster-a", "cluster-b")
        for node in ("prefill-0", "decode-0")
    }
    assert len(nodes) == 12


def test_documents_named_after_their_endpoint_are_their_folder_s_node(tmp_path: Path) -> None:
    # `curl …/server_info > node-0/server_info.json`: the name is the endpoint's, the folder
    # the node's. Taken for names, two endpoints in each folder made `node-0/server_info` and
    # `node-0/v1_models` two nodes, each judged against the other folder's context.
    for node in ("node-0", "node-1"):
        _touch(tmp_path / node / "server_info.json", "{}")
        _touch(tmp_path / node / "v1_models.json", "{}")
        _touch(tmp_path / node / "get_server_info.json", "{}")
        _touch(tmp_path / node / "metrics.prom", "# none\n")
    _touch(tmp_path / "flat" / "prefill-0.get_server_info.json", "{}")
    assert sorted({f.node for f in discover([tmp_path])}) == ["node-0", "node-1", "prefill-0"]


def test_a_rollout_s_pods_are_the_snapshots_node_in_turn(tmp_path: Path) -> None:
    # A restart as a new pod (a new ReplicaSet hash): the old pod's log ends before the new
    # one's begins, so both are the snapshots' prefill-0, read oldest first. Two replicas that
    # ran at once are not one node.
    old, new = "sglang-prefill-0-7d9f8c6b5-f7hkr", "sglang-prefill-0-6c4b8f9d7-ql99q"
    _touch(tmp_path / "logs" / f"{new}.log", "\n".join(_line(i) for i in range(3000, 3100)))
    _touch(tmp_path / "logs" / f"{old}.log", "\n".join(_line(i) for i in range(0, 100)))
    a, b = "sglang-decode-0-5b7c9d4f8-qg8wb", "sglang-decode-0-5b7c9d4f8-zz9xk"
    _touch(tmp_path / "logs" / f"{a}.log", "\n".join(_line(i) for i in range(0, 100)))
    _touch(tmp_path / "logs" / f"{b}.log", "\n".join(_line(i) for i in range(50, 150)))
    for node in ("prefill-0", "decode-0"):
        _touch(tmp_path / "snapshots" / f"{node}@20260906T000000Z.prom", "# none\n")
    logs = [(f.node, f.path.stem) for f in discover([tmp_path]) if f.kind == "log"]
    assert logs == [("prefill-0", old), ("prefill-0", new), (a, a), (b, b)]


def test_docker_s_container_log_in_a_node_s_folder_is_the_folder_s(tmp_path: Path) -> None:
    # Docker's json-file log is named by the container's id: saved in a folder per node, the
    # folder names the node; in Docker's own layout the id is all there is.
    one, other = "4aa42002" * 8, "9bc17e55" * 8
    _touch(tmp_path / "decode-2" / f"{one}-json.log", '{"log": "x\\n"}\n')
    _touch(tmp_path / "containers" / other / f"{other}-json.log", '{"log": "x\\n"}\n')
    assert sorted(f.node for f in discover([tmp_path])) == [other[:12], "decode-2"]


def test_docker_s_own_container_folder_is_named_as_docker_named_the_container(
    tmp_path: Path,
) -> None:
    # `/var/lib/docker/containers` copied whole: each container's folder holds its log and
    # Docker's record of it, whose `Name` is what `docker ps` shows. The other files are
    # Docker's, not telemetry: read as logs they were nodes of their own, and as JSON
    # documents, unrecognised ones.
    cid = "4aa42002" * 8
    folder = tmp_path / "containers" / cid
    _touch(folder / f"{cid}-json.log", '{"log": "x\\n"}\n')
    _touch(folder / "config.v2.json", json.dumps({"ID": cid, "Name": "/sglang-decode-2"}))
    _touch(folder / "hostconfig.json", json.dumps({"NetworkMode": "host"}))
    for name in ("hostname", "hosts", "resolv.conf", "resolv.conf.hash"):
        _touch(folder / name, "127.0.0.1 localhost\n")
    assert [(f.node, f.path.name) for f in discover([tmp_path])] == [
        ("sglang-decode-2", f"{cid}-json.log")
    ]


@pytest.mark.parametrize("second_model", ["Qwen/Qwen3-32B", "zai-org/GLM-5.3"])
def test_folders_apart_in_time_are_one_deployment_only_if_they_serve_one_model(
    tmp_path: Path, second_model: str
) -> None:
    # An hour apart, the same names: one deployment's periods, unless the snapshots say the
    # two served different models (two clusters, saved at different times).
    for folder, stamp, model in (
        ("cluster-a", "20260901T080000Z", "Qwen/Qwen3-32B"),
        ("cluster-b", "20260901T090000Z", second_model),
    ):
        for node in ("prefill-0", "decode-0"):
            info = json.dumps({"served_model_name": model, "model_path": model})
            _touch(tmp_path / folder / f"{node}@{stamp}.server_info.json", info)
            scrape = f'sglang:max_total_num_tokens{{model_name="{model}"}} 1\n'
            _touch(tmp_path / folder / f"{node}@{stamp}.prom", scrape)
    nodes = sorted({f.node for f in discover([tmp_path])})
    if second_model == "Qwen/Qwen3-32B":
        assert nodes == ["decode-0", "prefill-0"]
    else:
        assert nodes == [
            "cluster-a/decode-0",
            "cluster-a/prefill-0",
            "cluster-b/decode-0",
            "cluster-b/prefill-0",
        ]


@pytest.mark.parametrize("dated_first", [True, False])
def test_numbered_and_dated_rotations_of_one_log_are_read_in_the_order_of_their_times(
    tmp_path: Path, dated_first: bool
) -> None:
    # logrotate's `dateext` turned on (or off) between rotations: `decode-0.log-20260906.gz`
    # and `decode-0.log.1` both precede the live file, and only their lines say which came
    # first. Read `.1` first, the older file's hour came after the newer's (the logs seemed
    # to begin at midnight, an exposure before it was lost).
    def hour(h: int) -> str:
        return f"[2026-09-06 {h:02d}:00:01 TP0] Decode batch, #token: 1\n"

    older, newer = (0, 1) if dated_first else (1, 0)
    dated = tmp_path / "decode-0.log-20260906.gz"
    dated.write_bytes(gzip.compress(hour(older).encode()))
    _touch(tmp_path / "decode-0.log.1", hour(newer))
    _touch(tmp_path / "decode-0.log", hour(2))
    _touch(tmp_path / "decode-0.log.2", "")  # no time: kept ahead of the rest
    read = [f.path.name for f in discover([tmp_path])]
    first, second = ("decode-0.log-20260906.gz", "decode-0.log.1")[:: 1 if dated_first else -1]
    assert read == ["decode-0.log.2", first, second, "decode-0.log"]


def test_an_empty_rotation_beside_a_copy_does_not_make_the_copy_another_node(
    tmp_path: Path,
) -> None:
    # Two bundles hold the same decode log; one also holds an empty `.1.gz` (a rotation left
    # empty). Taken for the oldest of its folder's files, it told no time and matched no
    # copy: the folders became nodes of their own (`a`, `b`), the copy unrecognised.
    text = "".join(_line(i) + "\n" for i in range(60))
    _touch(tmp_path / "a" / "decode-0.log", text)
    _touch(tmp_path / "a" / "prefill-0.log", "".join(_line(i + 100) + "\n" for i in range(60)))
    _touch(tmp_path / "b" / "decode-0.log", text)
    (tmp_path / "b" / "decode-0.log.1.gz").write_bytes(b"")
    assert sorted({f.node for f in discover([tmp_path])}) == ["decode-0", "prefill-0"]


def test_what_the_logs_cover_ends_at_their_last_line_even_a_batch_line(tmp_path: Path) -> None:
    """Batch lines reach the judge folded into windows (`window:<node>`): their time was taken
    for a document's file time and left out, and the logs seemed to end 20 minutes early."""
    reference = Path(__file__).parent / "testdata" / "reference_incident"
    logs = tmp_path / "logs"
    shutil.copytree(reference, logs)
    later = "".join(
        f"[2026-08-27 10:{minute}:00 TP0] Decode batch, #running-req: 1, #token: 9, "
        "token usage: 0.01, gen throughput (token/s): 40.00, #queue-req: 0\n"
        for minute in range(20, 35)
    )
    with open(logs / "decode-0.log", "a") as out:
        out.write(later)
    summary = run_forensics([str(logs)], tmp_path / "out", write_parquet=False).summary
    assert summary["input"]["first_time"] == "2026-08-27T09:00:02.000Z"
    assert summary["input"]["last_time"] == "2026-08-27T10:34:00.000Z"


def test_snapshots_of_a_node_saved_in_several_folders_are_that_node_s(tmp_path: Path) -> None:
    """One log of the name: its snapshots, wherever they were kept, are its node's. Blind
    review 19: a copy kept in `later/` became a node "later" (and the rest "snapshots") whose
    pool gap "was still in force when the logs end": the run said "Not over"."""
    _touch(tmp_path / "logs" / "prefill-0.log")
    _touch(tmp_path / "logs" / "decode-0.log")
    info = '{"version": "0.5.19", "max_total_num_tokens": 681280}'
    _touch(tmp_path / "snapshots" / "prefill-0@20260906T000000Z.server_info.json", info)
    _touch(tmp_path / "snapshots" / "decode-0@20260906T000000Z.server_info.json", info)
    _touch(tmp_path / "later" / "prefill-0@20260906T003000Z.server_info.json", info)
    assert {f.node for f in discover([tmp_path])} == {"prefill-0", "decode-0"}
    # Two logs of the name are two hosts: their snapshots follow their folders.
    _touch(tmp_path / "other" / "prefill-0.log")
    assert {f.node for f in discover([tmp_path]) if f.kind == "log"} != {"prefill-0"}
