"""A node's lines saved twice (a copy in another folder, `kubectl logs` saved again an hour
later, a browser's `decode-0 (1).log`) are read once, and the copy is the same node.

Before: a copy of the abort race's decode log in a second folder made two nodes named after
the folders (`logs`, `cp`), the snapshots' `decode-0` a third with no lines, 47 kv-canary
criticals instead of 28 and one transfer-failure storm lost; an export saved again later made
every repeated request line "late" and blamed a clock.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from collector import repeated_lines
from collector.files import discover
from collector.forensics.driver import run_forensics
from collector.forensics.report import repeated_lines_line
from collector.parse import ParseStats, events_by_node
from simulator.offline import run_offline
from simulator.scenario import load_scenario

SCENARIOS = Path(__file__).parents[1] / "simulator" / "scenarios"
SCHEMA_PATH = Path(__file__).parents[1] / "collector" / "forensics" / "schema.json"


def _line(second: int, what: str = "Decode batch, #running-req: 1, #token: 9") -> str:
    return f"[2026-09-06 00:{second // 60:02d}:{second % 60:02d} TP0] {what}"


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _write_gzip(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as handle:
        handle.write("".join(line + "\n" for line in lines))
    return path


def _events(*paths: Path) -> tuple[list[tuple[str, str, float | None]], ParseStats]:
    stats = ParseStats()
    events = [(e.node, e.kind, e.time) for e in events_by_node([str(p) for p in paths], stats)]
    return events, stats


def _batches(seconds: range, tag: str = "") -> list[str]:
    return [_line(s, f"Decode batch, #running-req: {s % 7}, #token: {s}{tag}") for s in seconds]


def test_an_export_saved_again_later_is_read_once(tmp_path: Path) -> None:
    whole = _batches(range(0, 600))
    _write(tmp_path / "one" / "decode-0.log", whole)
    expected, _ = _events(tmp_path / "one")

    _write(tmp_path / "two" / "decode-0.log", whole[:400])
    _write(tmp_path / "two" / "decode-0 (1).log", whole[150:])  # saved again an hour later
    events, stats = _events(tmp_path / "two")

    assert events == expected
    assert stats.lines == 850  # every line read is counted as read
    later = str(tmp_path / "two" / "decode-0 (1).log")
    assert stats.repeated_lines == {later: (250, str(tmp_path / "two" / "decode-0.log"))}


def test_a_copy_in_another_folder_is_the_same_node_read_once(tmp_path: Path) -> None:
    lines = _batches(range(0, 300))
    _write(tmp_path / "logs" / "decode-0.log", lines)
    (tmp_path / "backup").mkdir()
    with gzip.open(tmp_path / "backup" / "decode-0.log.gz", "wt") as handle:
        handle.write("".join(line + "\n" for line in lines))
    _write(tmp_path / "snapshots" / "decode-0@20260906T000000Z.prom", ["# empty"])

    assert {f.node for f in discover([tmp_path])} == {"decode-0"}
    events, stats = _events(tmp_path / "logs", tmp_path / "backup")
    alone, _ = _events(tmp_path / "logs")
    assert events == alone
    assert list(stats.repeated_lines.values())[0][0] == 300


def test_an_earlier_export_lying_inside_the_later_one_is_read_once(tmp_path: Path) -> None:
    lines = _batches(range(0, 400))
    _write(tmp_path / "a" / "decode-0.log", lines)
    _write(tmp_path / "b" / "decode-0.log", lines[100:200])  # `--since`, saved first
    events, stats = _events(tmp_path)
    alone, _ = _events(tmp_path / "a")
    assert events == alone
    assert [lines for lines, _ in stats.repeated_lines.values()] == [100]


def test_an_earlier_download_whose_lines_rotated_into_gzip_is_read_once(tmp_path: Path) -> None:
    """`decode-0 (1).log`, saved an hour before the log rotated: its lines now stand inside
    `decode-0.log.1.gz`, which the copy's start is looked for in too (audit KS: read as a
    second node, its deferred-release timeouts counted twice made a healthy case's warning)."""
    lines = _batches(range(0, 600))
    _write(tmp_path / "one" / "decode-0.log", lines)
    expected, _ = _events(tmp_path / "one")

    folder = tmp_path / "two"
    _write_gzip(folder / "decode-0.log.1.gz", lines[:400])
    _write(folder / "decode-0.log", lines[400:])
    _write(folder / "decode-0 (1).log", lines[100:300])
    assert {f.node for f in discover([folder])} == {"decode-0"}
    events, stats = _events(folder)
    assert events == expected
    assert stats.repeated_lines == {
        str(folder / "decode-0 (1).log"): (200, str(folder / "decode-0.log.1.gz"))
    }


def test_a_copy_spanning_two_rotated_files_is_read_once(tmp_path: Path) -> None:
    """Saved before two rotations, the copy begins in `.2.gz` and ends in `.1.gz`: its lines
    agree to the end of the first and on into the second (audit KS: the rest was read again,
    800 late lines, and a healthy bundle was NOT JUDGED)."""
    lines = _batches(range(0, 600))
    _write(tmp_path / "one" / "decode-0.log", lines)
    expected, _ = _events(tmp_path / "one")

    folder = tmp_path / "two"
    _write_gzip(folder / "decode-0.log.2.gz", lines[:200])
    _write_gzip(folder / "decode-0.log.1.gz", lines[200:400])
    _write(folder / "decode-0.log", lines[400:])
    _write(folder / "decode-0 (1).log", lines[100:300])
    events, stats = _events(folder)
    assert events == expected
    assert stats.repeated_lines == {
        str(folder / "decode-0 (1).log"): (200, str(folder / "decode-0.log.2.gz"))
    }


def test_a_start_found_only_where_a_gzip_file_is_cut_is_no_copy(tmp_path: Path) -> None:
    """A match that a cut compressed file stops at is no proof its last line was whole."""
    lines = _batches(range(0, 200))
    data = gzip.compress("".join(line + "\n" for line in lines[:100]).encode())
    block = lines[60:100]
    whole = tmp_path / "whole.gz"
    whole.write_bytes(data)
    assert not repeated_lines._holds([whole], block)  # passed over unless asked
    assert repeated_lines._holds([whole], block, read_compressed=True)
    cut = tmp_path / "cut.gz"
    cut.write_bytes(data[: len(data) - 12])  # the trailer and a little of the last block
    assert not repeated_lines._holds([cut], block, read_compressed=True)


def _kubectl(lines: list[str]) -> list[str]:
    """As `kubectl logs --timestamps` saves them: the runtime's stamp in front of each."""
    return [
        f"2026-09-06T00:{i // 60 % 60:02d}:{i % 60:02d}.000000000Z {line}"
        for i, line in enumerate(lines)
    ]


def test_a_kubectl_capture_under_the_pod_s_name_is_the_node_s_read_once(tmp_path: Path) -> None:
    """`kubectl logs --timestamps` of the pod saved beside the node's own log: its lines,
    unwrapped, are the node's (audit KS: a second node, each line counted twice)."""
    lines = _batches(range(0, 600))
    _write(tmp_path / "one" / "decode-0.log", lines)
    expected, _ = _events(tmp_path / "one")

    folder = tmp_path / "two"
    _write(folder / "decode-0.log", lines)
    capture = _write(folder / "sglang-decode-0-6b7d8f9c5-q8w2e.log", _kubectl(lines[200:400]))
    assert {f.node for f in discover([folder])} == {"decode-0"}
    events, stats = _events(folder)
    assert events == expected
    assert stats.repeated_lines == {str(capture): (200, str(folder / "decode-0.log"))}


def test_a_kubectl_capture_across_a_rotation_is_read_once_either_side(tmp_path: Path) -> None:
    """The capture begins in the node's gzip rotation and ends in its live log, which is read
    after it: the capture's rest is compared unwrapped with the live log's start."""
    lines = _batches(range(0, 600))
    _write(tmp_path / "one" / "decode-0.log", lines)
    expected, _ = _events(tmp_path / "one")

    folder = tmp_path / "two"
    _write_gzip(folder / "decode-0.log.1.gz", lines[:300])
    _write(folder / "decode-0.log", lines[300:])
    capture = _write(folder / "sglang-decode-0-6b7d8f9c5-q8w2e.log", _kubectl(lines[200:400]))
    assert {f.node for f in discover([folder])} == {"decode-0"}
    events, stats = _events(folder)
    assert events == expected
    assert stats.repeated_lines == {
        str(capture): (100, str(folder / "decode-0.log.1.gz")),
        str(folder / "decode-0.log"): (100, str(capture)),
    }


def test_a_runtime_s_wrapping_is_taken_off_one_for_one_only() -> None:
    line = "[2026-09-06 00:00:00 TP0] Decode batch, #running-req: 1"
    stamp = "2026-09-06T00:00:00.123456789Z"
    assert repeated_lines.unwrapped(f"{stamp} {line}") == line  # kubectl --timestamps
    assert repeated_lines.unwrapped(f"{stamp} stdout F {line}") == line  # containerd, whole
    # A piece of a split line is no line of the engine's: it equals none.
    piece = repeated_lines.unwrapped(f"{stamp} stderr P {line}")
    assert piece not in (line, f"{stamp} stderr P {line}", f"stderr P {line}")
    assert repeated_lines.unwrapped(line) == line


def test_a_pod_s_log_of_other_lines_stays_a_node_of_its_own(tmp_path: Path) -> None:
    _write(tmp_path / "decode-0.log", _batches(range(0, 300)))
    _write(tmp_path / "sglang-decode-0-6b7d8f9c5-q8w2e.log", _kubectl(_batches(range(300, 600))))
    assert {f.node for f in discover([tmp_path])} == {
        "decode-0",
        "sglang-decode-0-6b7d8f9c5-q8w2e",
    }


def test_two_captures_wrapped_alike_are_still_compared_as_written(tmp_path: Path) -> None:
    """Both saved through kubectl: their lines are alike as they stand."""
    lines = _kubectl(_batches(range(0, 600)))
    _write(tmp_path / "one" / "decode-0.log", lines)
    expected, _ = _events(tmp_path / "one")
    _write(tmp_path / "two" / "decode-0.log", lines[:400])
    _write(tmp_path / "two" / "decode-0 (1).log", lines[150:])
    events, stats = _events(tmp_path / "two")
    assert events == expected
    assert [n for n, _ in stats.repeated_lines.values()] == [250]


def test_two_hosts_logging_under_one_name_stay_two_nodes(tmp_path: Path) -> None:
    """Same file name, different lines: the folder-per-host layout, nothing skipped."""
    _write(tmp_path / "host-a" / "sglang.log", _batches(range(0, 100)))
    _write(tmp_path / "host-b" / "sglang.log", _batches(range(0, 100), tag="0"))
    events, stats = _events(tmp_path)
    assert Counter(node for node, _, _ in events) == {"host-a": 100, "host-b": 100}
    assert stats.repeated_lines == {}


def test_a_later_file_whose_first_line_recurs_but_then_differs_loses_nothing(
    tmp_path: Path,
) -> None:
    """The later file's first line stands in the earlier file, then the two part: a match of
    one line is no repeat, and every line of both is read."""
    earlier = _batches(range(0, 200))
    later = [earlier[120], *_batches(range(200, 300), tag="1")]
    _write(tmp_path / "decode-0.log.1", earlier)
    _write(tmp_path / "decode-0.log", later)
    events, stats = _events(tmp_path)
    assert len(events) == 301
    assert stats.repeated_lines == {}


def test_rotated_files_that_do_not_overlap_are_read_whole(tmp_path: Path) -> None:
    _write(tmp_path / "decode-0.log.2", _batches(range(0, 100)))
    _write(tmp_path / "decode-0.log.1", _batches(range(100, 200)))
    _write(tmp_path / "decode-0.log", _batches(range(200, 300)))
    events, stats = _events(tmp_path)
    assert [t for _, _, t in events] == sorted(t for _, _, t in events)
    assert len(events) == 300 and stats.repeated_lines == {}


@pytest.fixture(scope="module")
def abort_race(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("abort-race")
    run_offline(load_scenario(SCENARIOS / "abort-race-storm-small.yaml"), folder)
    return folder


def _findings(summary: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    return sorted(
        (f["detector"], f["severity"], f["node"], str(f["bootstrap_room"]), f["time"])
        for f in summary["findings"]
    )


def test_the_abort_race_with_its_decode_log_saved_twice_is_the_abort_race(
    tmp_path: Path, abort_race: Path
) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(abort_race / "logs" / "decode-0.log", copy / "decode-0.log")
    inputs = [abort_race / "logs", abort_race / "snapshots"]
    alone = run_forensics([str(p) for p in inputs], tmp_path / "alone", write_parquet=False)
    twice = run_forensics(
        [str(p) for p in [*inputs, copy]], tmp_path / "twice", write_parquet=False, workers=2
    ).summary
    assert _findings(twice) == _findings(alone.summary)
    canaries = [f for f in twice["findings"] if f["detector"] == "kv_canary_violation"]
    assert canaries and {f["node"] for f in canaries} == {"decode-0"}
    repeated = twice["input"]["repeated_lines"]
    assert list(repeated) == [str(copy / "decode-0.log")]
    assert "copy/decode-0.log began with" in repeated_lines_line(twice)
    assert alone.summary["input"]["repeated_lines"] == {}
    jsonschema.validate(twice, json.loads(SCHEMA_PATH.read_text()))


def test_a_line_logged_twice_across_a_rotation_is_read_twice(tmp_path: Path) -> None:
    """The same batch line in one second on both sides of a rotation is two lines, not a copy."""
    earlier = _batches(range(0, 100))
    _write(tmp_path / "decode-0.log.1", earlier)
    _write(tmp_path / "decode-0.log", [earlier[-1], *_batches(range(100, 200))])
    events, stats = _events(tmp_path)
    assert len(events) == 201 and stats.repeated_lines == {}


# From an adversarial audit of the first version: each case lost lines or merged hosts.


def test_forty_identical_lines_across_a_rotation_are_all_read(tmp_path: Path) -> None:
    """A keep-alive or batch line logged 40 times in one second, both sides of a rotation:
    alike, but no evidence of a copy (one distinct stamped line)."""
    same = _line(300, 'INFO:     10.0.0.2:35752 - "POST /generate HTTP/1.1" 200 OK')
    _write(tmp_path / "decode-0.log.1", [*_batches(range(0, 100)), *[same] * 40])
    _write(tmp_path / "decode-0.log", [same] * 40 + _batches(range(301, 400)))
    _, stats = _events(tmp_path)
    assert stats.repeated_lines == {} and stats.noise.get("repeated", 0) == 0
    assert stats.events["http_access"] == 80


def test_hosts_whose_logs_start_alike_stay_two_nodes(tmp_path: Path) -> None:
    """Two hosts started in the same second with the same arguments, one of them hung after
    its start-up lines: alike for as long as the shorter runs, never evidence of a copy."""
    start = [
        _line(0, "server_args=ServerArgs(model_path='m', tp_size=8)"),
        _line(1, "Load weight begin"),
    ]
    _write(tmp_path / "host-a" / "sglang.log", [*start, *_batches(range(2, 200))])
    _write(tmp_path / "host-b" / "sglang.log", [""] + start)
    events, stats = _events(tmp_path)
    alone, _ = _events(tmp_path / "host-a")
    assert Counter(node for node, _, _ in events)["host-a"] == len(alone)
    assert {node for node, _, _ in events} == {"host-a", "host-b"}
    assert stats.repeated_lines == {}


def test_a_copy_cut_mid_line_lies_inside_the_whole_log(tmp_path: Path) -> None:
    lines = _batches(range(0, 600))
    whole = "".join(line + "\n" for line in lines)
    _write(tmp_path / "logs" / "decode-0.log", lines)
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / "decode-0.log").write_text(whole[: len(whole) * 6 // 10])
    events, stats = _events(tmp_path)
    alone, _ = _events(tmp_path / "logs")
    assert [(k, t) for _, k, t in events] == [(k, t) for _, k, t in alone]
    assert [n for n, _ in stats.repeated_lines.values()] == [361]  # the cut line too


def test_logs_saved_alike_by_a_browser_are_each_their_host_s(tmp_path: Path) -> None:
    """`sglang.log`, `sglang (1).log`: eight pods' logs downloaded under one name."""
    _write(tmp_path / "sglang.log", _batches(range(0, 100)))
    _write(tmp_path / "sglang (1).log", _batches(range(0, 100), tag="7"))
    events, stats = _events(tmp_path)
    assert Counter(node for node, _, _ in events) == {"sglang": 100, "sglang (1)": 100}
    assert stats.repeated_lines == {}


def test_a_copy_beside_a_folder_per_host_layout_is_its_host_s(tmp_path: Path) -> None:
    a, b = _batches(range(0, 100)), _batches(range(0, 100), tag="5")
    _write(tmp_path / "host-a" / "sglang.log", a)
    _write(tmp_path / "host-b" / "sglang.log", b)
    _write(tmp_path / "backup" / "sglang.log", a)
    events, _ = _events(tmp_path)
    assert Counter(node for node, _, _ in events) == {"backup": 100, "host-b": 100}


def test_a_recurring_first_line_is_looked_at_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live file begins with a line the rotated one holds 5,000 times: each match that
    breaks at once reopens the live file, so the watch gives up after `MAX_STARTS`."""
    same = _line(300, "Decode transfer failed for request rank=0: peer closed")
    _write(tmp_path / "decode-0.log.1", [same, "  File 'conn.py', line 412"] * 5000)
    _write(tmp_path / "decode-0.log", [same, *_batches(range(301, 400))])
    import collector.files as files

    opened = Counter[str]()
    real = files.file_line_blocks

    def counting(tf: Any, *args: Any, **kwargs: Any) -> Any:
        opened[tf.path.name] += 1
        return real(tf, *args, **kwargs)

    monkeypatch.setattr(files, "file_line_blocks", counting)
    _, stats = _events(tmp_path)
    assert opened["decode-0.log"] <= repeated_lines.MAX_STARTS + 2
    assert stats.repeated_lines == {}


def test_an_empty_log_of_a_name_read_in_another_folder_is_no_node_and_no_crash(
    tmp_path: Path,
) -> None:
    """logrotate's `create` leaves the new log empty: `day2/decode-0.log` of no bytes beside
    `day1/decode-0.log` raised an IndexError in every command (blind review 19)."""
    (tmp_path / "day1").mkdir()
    (tmp_path / "day2").mkdir()
    (tmp_path / "day1" / "decode-0.log").write_text(
        "[2026-09-08 12:00:00 TP0] max_total_num_tokens=500000, chunked_prefill_size=16384, "
        "max_prefill_tokens=16384, max_running_requests=64, context_len=262144\n"
    )
    (tmp_path / "day2" / "decode-0.log").write_bytes(b"")
    assert repeated_lines.log_clusters([[tmp_path / "day1" / "decode-0.log"], []]) == [[0, 1]]
    assert repeated_lines.log_clusters([[], []]) == [[0, 1]]
    result = run_forensics([str(tmp_path)], tmp_path / "out", write_parquet=False, workers=1)
    assert list(result.summary["nodes"]) == ["decode-0"]


def test_a_block_a_shipper_sent_twice_in_place_is_read_once_not_late(tmp_path: Path) -> None:
    """Blind review 30b: a shipper re-sent blocks of a decode log in place (at-least-once
    delivery). Their request lines came after their requests were judged and were counted late,
    a clock blamed, and a healthy fleet's run was NOT JUDGED."""
    sim = tmp_path / "sim"
    run_offline(load_scenario("healthy-long-context-small"), sim)
    log = sim / "logs" / "decode-0.log"
    lines = log.read_text().splitlines(keepends=True)
    requests = [i for i, line in enumerate(lines) if "request.finished" in line]
    assert len(requests) > 40
    # The lines from the 10th request's to the 30th's, given again after the 35th's.
    start, end, after = requests[10], requests[30] + 1, requests[35] + 1
    log.write_text("".join(lines[:after] + lines[start:end] + lines[after:]))
    summary = run_forensics(
        [str(sim / "logs"), str(sim / "snapshots")], tmp_path / "out", write_parquet=False
    ).summary
    jsonschema.validate(summary, json.loads(SCHEMA_PATH.read_text()))
    assert summary["requests"]["late_lines"] == 0
    again = summary["requests"]["repeated_lines_by_node"]
    assert set(again) == {"decode-0"} and again["decode-0"] >= 20
    assert summary["verdict"]["outcome"] == "none_found"
    assert "came again inside their requests' time" in repeated_lines_line(summary)
