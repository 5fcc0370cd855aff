"""Reading telemetry files the way fleets leave them: rotated, gzipped, damaged."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector import files
from collector.events import iso_time
from collector.files import (
    BLOCK_SIZE,
    GENERIC_FOLDERS,
    ReadStats,
    describe,
    discover,
    host_folder,
    line_aligned_ranges,
    read_line_blocks,
    read_lines,
)
from collector.forensics.driver import run_forensics
from collector.forensics.report import unread_line
from collector.parse import ParseStats, events_by_node, events_in_time_order, streams_of

DECODE = (
    "Decode batch, #running-req: {n}, #token: 10, token usage: 0.00, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0"
)


def _line(second: int, n: int, ranks: str = " TP0") -> str:
    return f"[2026-11-02 10:00:{second:02d}{ranks}] " + DECODE.format(n=n)


def test_rotated_siblings_are_one_node_read_oldest_first(tmp_path: Path) -> None:
    (tmp_path / "decode-0.log.2.gz").write_bytes(gzip.compress((_line(1, 1) + "\n").encode()))
    (tmp_path / "decode-0.log.1").write_text(_line(2, 2) + "\n")
    (tmp_path / "decode-0.log").write_text(_line(3, 3) + "\n")
    stats = ParseStats()
    events = list(events_by_node([tmp_path], stats))
    assert [e.node for e in events] == ["decode-0"] * 3
    assert [e.fields["running_req"] for e in events] == [1, 2, 3]
    assert stats.files == 3


def test_describe_names_nodes_and_kinds() -> None:
    cases = {
        "prefill-0.log": ("prefill-0", "log"),
        "prefill-0.log.12": ("prefill-0", "log"),
        "prefill-0.log.3.gz": ("prefill-0", "log"),
        "node1.example.com.log": ("node1.example.com", "log"),
        "decode-1@20260827T100000Z.prom": ("decode-1", "prom"),
        "decode-1@20260827T100000Z.server_info.json": ("decode-1", "json"),
        "host_0.log.2026-09-01": ("host_0", "log"),
        "sglang-request-metrics-20260827_10.log": ("sglang-request-metrics", "log"),
        # A dated scrape named by its endpoint is its folder's node (blind review 10a).
        "prefill-3/metrics-20260903.prom": ("prefill-3", "prom"),
    }
    for name, (node, kind) in cases.items():
        described = describe(Path(name))
        assert described is not None, name
        assert (described.node, described.kind) == (node, kind), name
    snapshot = describe(Path("decode-1@20260827T100000Z.prom"))
    assert snapshot is not None and iso_time(snapshot.snapshot_time) == "2026-08-27T10:00:00.000Z"
    assert describe(Path("report.html")) is None


def test_folder_per_host_layout_names_nodes_by_folder(tmp_path: Path) -> None:
    for host in ("prefill-0", "decode-0"):
        (tmp_path / host).mkdir()
        (tmp_path / host / "sglang.log").write_text(_line(1, 1) + "\n")
    nodes = sorted({f.node for f in discover([tmp_path])})
    assert nodes == ["decode-0", "prefill-0"]


def test_folders_named_alike_are_told_apart_by_what_differs(tmp_path: Path) -> None:
    for host in ("host-a", "host-b"):
        (tmp_path / host / "logs").mkdir(parents=True)
        (tmp_path / host / "logs" / "sglang.log").write_text(_line(1, 1) + "\n")
    for site, node in (("east", "n1"), ("west", "n1"), ("west", "n2")):
        (tmp_path / site / node).mkdir(parents=True, exist_ok=True)
        (tmp_path / site / node / "server.log").write_text(_line(1, 1) + "\n")
    nodes = sorted({f.node for f in discover([tmp_path])})
    assert nodes == ["east/n1", "host-a", "host-b", "west/n1", "west/n2"]


def test_truncated_gzip_keeps_what_was_readable_and_counts_the_damage(tmp_path: Path) -> None:
    body = "".join(_line(s % 60, s) + "\n" for s in range(2000)).encode()
    blob = gzip.compress(body)
    path = tmp_path / "x.log.1.gz"
    path.write_bytes(blob[: len(blob) // 2])
    read = ReadStats()
    lines = list(read_lines(path, read))
    assert read.dropped.get("truncated_gzip") == 1
    assert 0 < len(lines) < 2000


def test_crlf_partial_last_line_and_bad_bytes(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(
        (_line(1, 1) + "\r\n").encode()
        + b"[2026-11-02 10:00:02 TP0] Decode batch, #running-req: \xff\xfe7, #token: 1\r\n"
        + b"\x00\x01\x02\x03\x00\x00\x00\x00\x00\x00\n"
        + _line(3, 3).encode()  # no trailing newline: the writer was cut off
    )
    read = ReadStats()
    lines = list(read_lines(path, read))
    numbers = [n for n, _ in lines]
    texts = [t for _, t in lines]
    assert numbers == [1, 2, 4]  # binary junk dropped, line numbering kept
    assert not any(t.endswith("\r") for t in texts)
    assert read.dropped == {"non_utf8_line_repaired": 1, "binary": 1}
    stats = ParseStats()
    events = list(events_by_node([path], stats))
    assert stats.noise.get("blank", 0) == 0  # a dropped line is not also a blank one
    assert [e.fields["running_req"] for e in events][0] == 1
    assert events[-1].fields["running_req"] == 3
    assert read.lines == 4


def test_huge_line_is_skipped_without_being_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 1 << 20)  # the bound, small enough to write
    path = tmp_path / "x.log"
    with open(path, "wb") as handle:
        handle.write((_line(1, 1) + "\n").encode())
        handle.write(b"A" * (files.MAX_LINE_BYTES * 5) + b"\n")
        handle.write((_line(2, 2) + "\n").encode())
        handle.write(b"B" * (files.MAX_LINE_BYTES + 1))  # the last line, without its newline
    read = ReadStats()
    lines = list(read_lines(path, read))
    assert [n for n, _ in lines] == [1, 3]
    assert read.dropped == {"line_too_long": 2}
    # Said however few: each may be the one request line that names an exposure.
    summary = {"input": {"lines": 10_000, "dropped_by_reason": dict(read.dropped)}}
    assert "line_too_long 2" in unread_line(summary)


def test_a_line_of_megabytes_is_read_whole(tmp_path: Path) -> None:
    # A prompt logged whole (`--log-requests-level 3`) across many blocks of the reader.
    path = tmp_path / "x.log"
    long_line = _line(2, 2) + " " + "ledger " * (3 * BLOCK_SIZE // 7)
    path.write_text(f"{_line(1, 1)}\n{long_line}\n{_line(3, 3)}\n{long_line}")
    read = ReadStats()
    lines = list(read_lines(path, read))
    assert [(n, len(text)) for n, text in lines] == [
        (1, len(_line(1, 1))),
        (2, len(long_line)),
        (3, len(_line(3, 3))),
        (4, len(long_line)),
    ]
    assert lines[1][1] == long_line and not read.dropped
    assert line_aligned_ranges(path, BLOCK_SIZE)[0] == (0, len(_line(1, 1)) + len(long_line) + 2)


def test_nodes_merge_into_one_timeline(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(_line(1, 1) + "\n" + _line(5, 5) + "\n")
    (tmp_path / "b.log").write_text(
        _line(3, 3) + "\n" + "Decode batch, #running-req: 4\n" + _line(7, 7) + "\n"
    )
    events = list(events_in_time_order([tmp_path], ParseStats()))
    assert [e.fields["running_req"] for e in events] == [1, 3, 4, 5, 7]


def test_unreadable_file_is_counted_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_text(_line(1, 1) + "\n")
    os.chmod(path, 0)
    read = ReadStats()
    lines = list(read_lines(path, read))
    if os.geteuid() != 0:  # root reads anything; then the file is simply read
        assert lines == [] and read.dropped == {"unreadable_file": 1}
    else:
        assert len(lines) == 1


def test_one_node_seen_through_logs_and_snapshot_folders(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "snapshots").mkdir()
    (tmp_path / "logs" / "prefill-0.log").write_text(_line(1, 1) + "\n")
    (tmp_path / "snapshots" / "prefill-0@20261102T100002Z.prom").write_text(
        'sglang:max_total_num_tokens{engine_type="prefill",model_name="m"} 681280\n'
    )
    assert {f.node for f in discover([tmp_path])} == {"prefill-0"}


def test_snapshots_are_placed_by_their_time_in_the_timeline(tmp_path: Path) -> None:
    (tmp_path / "decode-0.log").write_text(_line(1, 1) + "\n" + _line(5, 5) + "\n")
    (tmp_path / "decode-0@20261102T100003Z.prom").write_text(
        'sglang:max_total_num_tokens{engine_type="decode",model_name="m"} 1000\n'
    )
    kinds = [e.kind for e in events_in_time_order([tmp_path], ParseStats())]
    assert kinds == ["decode_batch", "metric", "decode_batch"]


@pytest.mark.parametrize(
    ("name", "node", "saved"),
    [
        ("decode-0-metrics-20261102T101500Z.prom", "decode-0", "2026-11-02T10:15:00.000Z"),
        ("decode-0_20261102T101500.prom", "decode-0", "2026-11-02T10:15:00.000Z"),
        ("decode-0.metrics.2026-11-02T10-15-00Z.prom", "decode-0", "2026-11-02T10:15:00.000Z"),
        ("prefill-1_server_info_20261102_101500.json", "prefill-1", "2026-11-02T10:15:00.000Z"),
        ("decode-0-20261102T101500Z.prom.gz", "decode-0", "2026-11-02T10:15:00.000Z"),
    ],
)
def test_scrapes_saved_with_their_time_in_the_name_are_their_node_s(
    name: str, node: str, saved: str
) -> None:
    """Blind review 5a: `decode-0-metrics-<time>.prom` every 10 minutes made 124 nodes of one,
    the run NOT JUDGED and a storm in decode's counters missed."""
    found = describe(Path(name))
    assert found is not None and found.node == node
    assert iso_time(found.snapshot_time) == saved
    assert not files.dated_by_file_time(name)


def test_a_log_named_with_a_time_is_not_a_snapshot() -> None:
    found = describe(Path("decode-0-20261102T101500Z.log"))
    assert found is not None and found.snapshot_time is None
    assert files.dated_by_file_time("decode-0.prom")


def test_scrapes_saved_with_their_time_meet_their_node_s_log(tmp_path: Path) -> None:
    (tmp_path / "decode-0.log").write_text(_line(1, 1) + "\n" + _line(5, 5) + "\n")
    (tmp_path / "decode-0-metrics-20261102T100003Z.prom").write_text(
        'sglang:max_total_num_tokens{engine_type="decode",model_name="m"} 1000\n'
    )
    (tmp_path / "decode-0-metrics-20261102T100004Z.prom").write_text(
        'sglang:max_total_num_tokens{engine_type="decode",model_name="m"} 1000\n'
    )
    assert {f.node for f in discover([tmp_path])} == {"decode-0"}
    kinds = [e.kind for e in events_in_time_order([tmp_path], ParseStats())]
    assert kinds == ["decode_batch", "metric", "metric", "decode_batch"]


_pieces = st.sampled_from(
    [
        *(b"a", b"line", b"\n", b"\r\n", b"\xc3\xa9", b"\xe2\x82\xac", b"\xff", b"\x00"),
        *(b" ", b"\n\n", b"\x00" * 16, b"\x00" * 50),
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_pieces, max_size=80).map(b"".join),
    st.sampled_from([1, 2, 3, 5, 8, 64]),
    st.booleans(),
)
def test_blocks_give_the_lines_of_the_whole_file_wherever_blocks_cut(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, block: int, gzipped: bool
) -> None:
    """Lines are put together across block boundaries (even inside a multi-byte character):
    whatever the block size, the lines, their numbers and what was dropped are those of reading
    the file in one piece."""
    folder = tmp_path_factory.mktemp("blocks")
    path = folder / ("x.log.gz" if gzipped else "x.log")
    path.write_bytes(gzip.compress(data) if gzipped else data)

    def read(size: int) -> tuple[list[tuple[int, str]], ReadStats]:
        stats = ReadStats()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(files, "BLOCK_SIZE", size)
            rows = [
                (first + offset, line)
                for first, lines in files.read_line_blocks(path, stats)
                for offset, line in enumerate(lines)
            ]
        return rows, stats

    whole, whole_stats = read(1 << 20)
    cut, cut_stats = read(block)
    assert cut == whole
    assert (cut_stats.lines, cut_stats.bytes, cut_stats.dropped) == (
        whole_stats.lines,
        whole_stats.bytes,
        whole_stats.dropped,
    )
    # And reading in one piece is the plain rule: split on newlines, CRs at line ends dropped.
    text = data.decode("utf-8", "replace")
    expected = text.split("\n") if text else []
    if text.endswith("\n"):
        expected.pop()
    kept = [_after_nul_runs(line.removesuffix("\r")) for line in expected]
    assert [line for _, line in whole if line != files.DROPPED] == [
        line.replace("\x00", "") for line in kept if line is not None and not _mostly_junk(line)
    ]


def _after_nul_runs(line: str) -> str | None:
    """A line's text after its last run of 16 NULs or more (a hole, not junk in the line);
    None when nothing follows the run."""
    if "\x00" * 16 not in line:
        return line
    return line.rpartition("\x00" * 16)[2].lstrip("\x00") or None


def _mostly_junk(line: str) -> bool:
    return (line.count("\x00") + line.count("\ufffd")) * 4 > len(line)


def test_what_discovery_passes_over_is_counted_never_opened(tmp_path: Path) -> None:
    (tmp_path / "decode-0.log").write_text(_line(1, 1) + "\n")
    os.mkfifo(tmp_path / "prefill-5.log")  # opening it would block forever
    (tmp_path / "loop1.log").symlink_to(tmp_path / "loop2.log")
    (tmp_path / "loop2.log").symlink_to(tmp_path / "loop1.log")
    (tmp_path / "gone.log").symlink_to(tmp_path / "nowhere.log")
    skipped: Counter[str] = Counter()
    found = discover([tmp_path, tmp_path / "prefill-5.log"], skipped)
    assert [f.path.name for f in found] == ["decode-0.log"]
    assert skipped == {"not_a_regular_file": 2, "broken_or_looping_link": 3}


def test_a_file_cut_short_while_it_is_read_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "decode-0.log"
    path.write_text("".join(_line(s % 60, s) + "\n" for s in range(50_000)))
    read = ReadStats()
    lines = 0
    for _, block in read_line_blocks(path, read):
        if not lines:
            path.write_text("")  # copytruncate rotation, mid-read
        lines += len(block)
    assert 0 < lines < 50_000
    assert read.dropped["file_shrank"] == 1


def test_a_node_name_that_is_not_utf8_becomes_text() -> None:
    name = os.fsdecode(b"dec\xe9-7@20260827T100000Z.prom")
    described = describe(Path(name))
    assert described is not None and described.node == "dec\ufffd-7"
    assert json.dumps(described.node)  # and JSON, Parquet and the plots take it


@pytest.mark.parametrize("hole", [4096, 3 * BLOCK_SIZE + 17])
def test_a_copytruncate_hole_is_passed_over_and_the_line_after_it_kept(
    tmp_path: Path, hole: int
) -> None:
    """logrotate's `copytruncate` under a writer that does not append (`> server.log`): the
    writer goes on at its old offset, and the file begins with that many NUL bytes, then the
    next line. The hole is not text; the line after it was read as part of one huge or
    mostly-binary line and lost, and said as such."""
    body = "".join(_line(s, s) + "\n" for s in range(1, 6))
    path = tmp_path / "decode-0.log"
    with open(path, "wb") as out:
        out.seek(hole)  # sparse, as the file system leaves it
        out.write(body.encode())
    read = ReadStats()
    lines = [text for _, text in read_lines(path, read)]
    assert lines == body.splitlines()
    assert read.dropped == {"nul_run_skipped": 1}


def test_text_cut_by_a_run_of_nul_bytes_is_dropped_and_the_line_after_it_kept(
    tmp_path: Path,
) -> None:
    """A crash can leave a block of NULs where a line was being written: the line before the
    run is cut (dropped, counted), the one after it whole."""
    path = tmp_path / "decode-0.log"
    path.write_bytes(
        (_line(1, 1) + "\n" + _line(2, 2)[:30]).encode()
        + b"\x00" * 8192
        + (_line(3, 3) + "\n" + _line(4, 4) + "\n").encode()
    )
    read = ReadStats()
    lines = [(n, text) for n, text in read_lines(path, read)]
    assert lines == [(1, _line(1, 1)), (2, _line(3, 3)), (3, _line(4, 4))]
    assert read.dropped == {"nul_run_skipped": 1, "cut_by_nul_run": 1}


def test_a_line_cut_by_nul_bytes_is_said_a_hole_alone_is_not(tmp_path: Path) -> None:
    def said(dropped: dict[str, int]) -> str:
        return unread_line({"input": {"lines": 10_000, "dropped_by_reason": dropped}})

    assert said({"nul_run_skipped": 3}) == ""
    assert "cut_by_nul_run 1" in said({"nul_run_skipped": 1, "cut_by_nul_run": 1})


@pytest.mark.parametrize(
    "reason",
    [
        "not_json",
        "not_json_object",
        "duplicate_series",
        "implausible_token_count",
        "malformed_exposition",  # blind review 31b: a `.prom` of no readable line
    ],
)
def test_a_snapshot_not_read_or_a_figure_of_it_refused_is_said_however_few(reason: str) -> None:
    """Blind review 19: 12 cut `/server_info` files (and the unsafe-release findings they
    held) were counted in the JSON alone."""
    said = unread_line({"input": {"lines": 10_000, "dropped_by_reason": {reason: 1}}})
    assert f"{reason} 1" in said


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=12))
def test_blank_lines_are_counted_and_the_lines_between_keep_their_numbers(
    tmp_path_factory: pytest.TempPathFactory, gaps: list[int]
) -> None:
    """Blank lines are counted a block at a time and passed over without a look (a file of
    64 Mi newlines took 94 s, now 5 s): the lines between them keep their place."""
    folder = tmp_path_factory.mktemp("blank")
    text, expected_numbers, number = "", [], 0
    for second, gap in enumerate(gaps):
        text += "\n" * gap + _line(second % 60, second) + "\n"
        number += gap + 1
        expected_numbers.append(number)
    (folder / "decode-0.log").write_text(text)
    stats = ParseStats()
    events = list(events_by_node([folder], stats))
    assert [int(e.source.rsplit(":", 1)[1]) for e in events] == expected_numbers
    assert stats.noise.get("blank", 0) == sum(gaps)


def test_a_file_written_to_while_it_is_read_is_read_as_it_was_when_opened(tmp_path: Path) -> None:
    """Audit Q: a log a fast writer kept growing was read until the writer stopped. What was
    there at the open is read, and the line it then ended in, finished."""
    path = tmp_path / "decode-0.log"
    at_open = [_line(s % 60, s) for s in range(30_000)]
    path.write_text("\n".join(at_open) + "\n" + _line(0, 30_000)[:40])  # a line half written
    read = ReadStats()
    lines: list[str] = []
    for _, block in read_line_blocks(path, read):
        if not lines:
            with open(path, "a") as writer:  # the writer finishes its line, and goes on
                writer.write(_line(0, 30_000)[40:] + "\n")
                writer.write("".join(_line(s % 60, s) + "\n" for s in range(30_001, 60_000)))
        lines += block
    assert lines == [*at_open, _line(0, 30_000)]
    assert read.dropped == {}


def test_a_node_s_undated_documents_follow_its_logs_across_day_folders(tmp_path: Path) -> None:
    """`day1/prefill-0.log` and `day2/prefill-0.log` are one node's two periods; the
    `prefill-0.server_info.json` beside each was a node of its own per folder, said to have
    had no log read, its release never reaching the node (blind review 7)."""
    for day, second in (("day1", 1), ("day2", 30)):
        (tmp_path / day).mkdir()
        for node in ("prefill-0", "decode-0"):
            (tmp_path / day / f"{node}.log").write_text(_line(second, 1) + "\n")
            (tmp_path / day / f"{node}.server_info.json").write_text('{"version": "0.5.19"}')
    assert {f.node for f in discover([tmp_path])} == {"prefill-0", "decode-0"}


def _deployment_files(folder: Path, by_folder: bool) -> None:
    """One deployment's prefill and decode, each with its log, `/server_info` and scrape: in a
    folder per node (`prefill-0/sglang.log`), or named by file (`prefill-0.log`)."""
    for node in ("prefill-0", "decode-0"):
        if by_folder:
            (folder / node).mkdir(parents=True)
            log, info, scrape = (
                folder / node / n for n in ("sglang.log", "server_info.json", "metrics.prom")
            )
        else:
            folder.mkdir(parents=True, exist_ok=True)
            log, info, scrape = (folder / f"{node}{ext}" for ext in (".log", ".json", ".prom"))
        log.write_text(_line(1, 1) + "\n" + _line(50, 2) + "\n")
        info.write_text(json.dumps({"disaggregation_mode": node.split("-")[0]}))
        scrape.write_text('sglang:max_total_num_tokens{engine_type="x",model_name="m"} 681280\n')


@pytest.mark.parametrize("b_by_folder", [True, False])
def test_two_deployments_side_by_side_keep_their_nodes_apart(
    tmp_path: Path, b_by_folder: bool
) -> None:
    """Blind review 8a: `dep-a/prefill-0/sglang.log` beside `dep-b/prefill-0.log` became one
    node, whose lines fell out of order (21 exposures unseen); with both laid out by folder,
    each deployment's documents became one node named `dep-a`, apart from its logs."""
    _deployment_files(tmp_path / "dep-a", by_folder=True)
    _deployment_files(tmp_path / "dep-b", by_folder=b_by_folder)
    nodes: dict[str, set[str]] = {}
    for f in discover([tmp_path]):
        nodes.setdefault(f.node, set()).add(str(f.path.relative_to(tmp_path)))
    expected = {f"{dep}/{node}" for dep in ("dep-a", "dep-b") for node in ("prefill-0", "decode-0")}
    assert set(nodes) == expected
    for node, paths in nodes.items():
        assert len(paths) == 3, (node, paths)  # its log, `/server_info` and scrape
        assert all(p.startswith(node.split("/")[0]) for p in paths)
        assert all(node.split("/")[1] in p for p in paths)


@pytest.mark.parametrize("stamp", ["20260827T090500Z", "2026-08-27T09:05:00Z"])
def test_a_scrape_job_s_folder_per_round_dates_its_nodes_scrapes(
    tmp_path: Path, stamp: str
) -> None:
    """`snapshots/<UTC time>/<node>.prom`: read as a folder per host, each round's scrapes were
    nodes of their own (blind review 8c: 129 nodes, a pool warning each round)."""
    rounds = [stamp, stamp.replace("09", "21", 1) if "-" in stamp else "20260827T210500Z"]
    for folder in rounds:
        (tmp_path / "snapshots" / folder).mkdir(parents=True)
        for node in ("prefill-0", "decode-0"):
            (tmp_path / "snapshots" / folder / f"{node}.prom").write_text(
                'sglang:max_total_num_tokens{engine_type="x",model_name="m"} 681280\n'
            )
        (tmp_path / "snapshots" / folder / "server_info.json").write_text("{}")
    found = [f for f in discover([tmp_path]) if f.kind == "prom"]
    assert {f.node for f in found} == {"prefill-0", "decode-0"}
    times = sorted({iso_time(f.snapshot_time) for f in found})
    assert times == ["2026-08-27T09:05:00.000Z", "2026-08-27T21:05:00.000Z"]


def test_a_repaired_line_is_not_counted_twice_among_the_unread() -> None:
    """A line with bytes that are not UTF-8 is repaired and still read; unrecognised, it is
    counted as such. Counted as a drop too, more lines were said unused than were read (blind
    review 8c: "11,930 of 11,389")."""
    summary = {
        "input": {
            "lines": 11_389,
            "dropped_by_reason": {"binary": 1_883, "non_utf8_line_repaired": 1_502},
            "unclassified_other_lines": 7_661,
        }
    }
    said = unread_line(summary)
    assert "9,544 of 11,389 lines read could not be used" in said
    assert "repaired" not in said


def test_a_line_a_progress_bar_wrote_over_reads_as_the_terminal_showed_it(
    tmp_path: Path,
) -> None:
    """Blind review 8b: a capacity line behind a `tqdm` bar's carriage returns was not read."""
    capacity = (
        "[2026-11-02 10:00:05 TP0] max_total_num_tokens=681280, chunked_prefill_size=16384, "
        "max_prefill_tokens=16384, max_running_requests=64, context_len=1048576"
    )
    (tmp_path / "prefill-0.log").write_bytes(
        b"Capturing batches:  50%|#####     | 2/4\rCapturing batches: 100%|##########| 4/4\r"
        + capacity.encode()
        + b"\r\n"
        + (_line(6, 1) + "\r\n").encode()
    )
    events = list(events_by_node([tmp_path], ParseStats()))
    assert [e.kind for e in events] == ["capacity", "decode_batch"]
    assert events[0].fields["max_total_num_tokens"] == 681280


def test_a_junk_file_read_in_parts_is_named_undecodable_once(tmp_path: Path) -> None:
    """`parse --stats` reads a big plain file in line-aligned byte ranges, one per core: each
    part of a file of junk lines counted it `undecodable` again."""
    junk = tmp_path / "decode-0.log"
    junk.write_bytes((b"\x00\x80\x81\x82" * 20 + b"\n") * 200)
    size = junk.stat().st_size
    half = junk.read_bytes().index(b"\n", size // 2) + 1
    stats = files.ReadStats()
    for part in ((0, half), (half, size)):
        assert all(
            line == files.DROPPED
            for _, lines in files.read_line_blocks(junk, stats, part)
            for line in lines
        )
    assert stats.dropped[files.BINARY] == 200
    assert stats.dropped[files.UNDECODABLE] == 1
    assert stats.dropped_files[files.UNDECODABLE] == [str(junk)]


def _engine_log(second: int, salt: int, lines: int = 40) -> str:
    """An engine's batch lines from `second` on, told from any other engine's by `salt`."""
    return "".join(_line((second + i) % 60, salt * 1000 + i) + "\n" for i in range(lines))


def _as_saved(text: str, how: str) -> bytes:
    """An engine's log as a terminal, a launcher or a damaged copy left it."""
    if how in ("coloured", "coloured-gzip"):
        coloured = "".join(
            f"\x1b[32m{line[:26]}\x1b[0m{line[26:]}\x1b[K\n" for line in text.splitlines()
        ).encode()
        return gzip.compress(coloured) if how == "coloured-gzip" else coloured
    if how == "progress-bar":  # a bar redrawn before each line, as a terminal capture keeps it
        return "".join(
            f"Prefill:  42%|####      | 42/100\r{line}\n" for line in text.splitlines()
        ).encode()
    if how == "long-preamble":  # pip, a wrapper script: 80 KiB of lines no engine writes
        preamble = "".join(f"Requirement already satisfied: package-{i}\n" for i in range(2000))
        return preamble.encode() + text.encode()
    assert how == "junk-head"  # a block of junk where the file was damaged
    return (b"\x00\x81\xfe\x9c" * 250 + b"\n") * 80 + text.encode()


@pytest.mark.parametrize(
    "how", ["coloured", "coloured-gzip", "progress-bar", "long-preamble", "junk-head"]
)
def test_a_folder_of_several_engines_is_told_by_lines_read_as_the_parser_reads_them(
    tmp_path: Path, how: str
) -> None:
    """Two clusters' `logs/` folders, each holding a prefill's and a decode's log. Whether a
    folder holds several engines was told from the raw first 64 KiB: colour codes, a progress
    bar's carriage returns, or a preamble or junk longer than that hid the engines' lines, each
    cluster's folder was taken for one host, and its prefill and decode became one node."""
    for salt, cluster in enumerate(("cluster-a", "cluster-b")):
        (tmp_path / cluster / "logs").mkdir(parents=True)
        for offset, node in enumerate(("prefill-0", "decode-0")):
            text = _engine_log(0, 10 * salt + offset)
            name = f"{node}.log.1.gz" if how.endswith("gzip") else f"{node}.log"
            (tmp_path / cluster / "logs" / name).write_bytes(_as_saved(text, how))
    assert sorted({f.node for f in discover([tmp_path])}) == [
        "cluster-a/decode-0",
        "cluster-a/prefill-0",
        "cluster-b/decode-0",
        "cluster-b/prefill-0",
    ]


def test_whether_a_file_is_an_engine_log_reads_its_head_and_its_tail_only(tmp_path: Path) -> None:
    """Bounded: an engine's lines found only in the middle of a big file are not looked for."""
    filler = "".join(f"Requirement already satisfied: package-{i}\n" for i in range(4000))
    middle = tmp_path / "middle.log"
    middle.write_text(filler + _engine_log(0, 1) + filler)
    assert not files._speaks_sglang(middle)
    engine = _engine_log(0, 1)
    for where, text in (("head", engine + filler), ("tail", filler + engine)):
        path = tmp_path / f"{where}.log"
        path.write_text(text)
        assert files._speaks_sglang(path), where


def test_a_host_s_folder_is_found_past_generic_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert GENERIC_FOLDERS == {"logs", "log", "exports", "export", "metrics", "requests", "traces"}
    assert host_folder(Path("case/cluster-a/logs")) == Path("case/cluster-a")
    assert host_folder(Path("case/cluster-a/Logs/METRICS")) == Path("case/cluster-a")
    assert host_folder(Path("/var/log/sglang/decode-0")) == Path("/var/log/sglang/decode-0")
    assert host_folder(Path("case/logs/week1")) == Path("case/logs/week1")
    assert host_folder(Path(".")) == Path(".")  # nothing to skip: the folder as given
    # Given from inside the host's folder (`kvwatch forensics logs/ exports/`): the host is
    # where they lie.
    (tmp_path / "cluster-a" / "logs").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "cluster-a")
    assert host_folder(Path("logs")) == tmp_path / "cluster-a"


def _two_layouts(root: Path, layout: str) -> None:
    """Two deployments' prefill and decode, running at once: `cluster-a`'s in its `logs/`
    folder, `cluster-b`'s in another layout."""
    for salt, node in enumerate(("prefill-0", "decode-0")):
        (root / "cluster-a" / layout.split("+")[0]).mkdir(parents=True, exist_ok=True)
        (root / "cluster-a" / layout.split("+")[0] / f"{node}.log").write_text(_engine_log(0, salt))
        if layout.endswith("+flat"):
            other = root / "cluster-b" / f"{node}.log"
        else:  # a folder per host
            other = root / "cluster-b" / node / "sglang.log"
        other.parent.mkdir(parents=True, exist_ok=True)
        other.write_text(_engine_log(1, 10 + salt))


@pytest.mark.parametrize("layout", ["logs+flat", "Logs+flat", "logs+by-folder"])
def test_a_generic_folder_never_names_a_node(tmp_path: Path, layout: str) -> None:
    """`cluster-a/logs/decode-0.log` beside another deployment laid out otherwise was
    `logs/decode-0`: the folder that tells the deployments apart is `cluster-a`."""
    _two_layouts(tmp_path, layout)
    assert sorted({f.node for f in discover([tmp_path])}) == [
        "cluster-a/decode-0",
        "cluster-a/prefill-0",
        "cluster-b/decode-0",
        "cluster-b/prefill-0",
    ]


def _request_records(second: int, rid: str, count: int = 40) -> str:
    """`--log-requests-format json` finish records, ids and counts only (no prompt, no text)."""
    records = []
    for i in range(count):
        at = f"2026-11-02T10:00:{(second + i) % 60:02d}Z"
        meta = {"id": f"{rid}{i}", "prompt_tokens": 100 + i, "completion_tokens": 4}
        obj = {"rid": f"{rid}{i}", "bootstrap_room": 1000 + i}
        out = {"meta_info": {**meta, "cached_tokens": 0, "e2e_latency": 1.5}}
        record = {"timestamp": at, "event": "request.finished", "rid": f"{rid}{i}"}
        records.append(json.dumps({**record, "obj": obj, "out": out}) + "\n")
    return "".join(records)


@pytest.mark.parametrize("clusters", [["cluster-a"], ["cluster-a", "cluster-b"]])
@pytest.mark.parametrize("exported", [["prefill-0", "decode-0"], ["decode-0"]])
def test_a_request_log_export_in_a_host_s_generic_folder_is_its_log_s_node(
    tmp_path: Path, clusters: list[str], exported: list[str]
) -> None:
    """`cluster-a/exports/decode-0.jsonl` beside `cluster-a/logs/decode-0.log` was a node of its
    own, `exports/decode-0` (or `exports`), apart from the engine's log (`logs/decode-0`): the
    two folders are one host's."""
    for salt, cluster in enumerate(clusters):
        for offset, node in enumerate(("prefill-0", "decode-0")):
            (tmp_path / cluster / "logs").mkdir(parents=True, exist_ok=True)
            (tmp_path / cluster / "logs" / f"{node}.log").write_text(
                _engine_log(salt, 10 * salt + offset)
            )
            if node in exported:
                (tmp_path / cluster / "EXPORTS").mkdir(exist_ok=True)
                (tmp_path / cluster / "EXPORTS" / f"{node}.jsonl").write_text(
                    _request_records(salt, f"{cluster}-{node}-")
                )
    held: dict[str, set[str]] = {}
    for f in discover([tmp_path]):
        held.setdefault(f.node, set()).add(str(f.path.relative_to(tmp_path)))
    named = (
        (lambda cluster, node: f"{cluster}/{node}")
        if len(clusters) > 1
        else (lambda cluster, node: node)
    )
    # Read beside the log, merged with it by time, as a process's stdout beside its stderr.
    assert {f.channel for f in discover([tmp_path]) if f.path.suffix == ".jsonl"} == {"stdout"}
    assert held == {
        named(cluster, node): {f"{cluster}/logs/{node}.log"}
        | ({f"{cluster}/EXPORTS/{node}.jsonl"} if node in exported else set())
        for cluster in clusters
        for node in ("prefill-0", "decode-0")
    }


def test_an_export_given_beside_its_log_from_inside_the_host_s_folder_is_its_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kvwatch forensics logs/ exports/`, run in `cluster-a/`: the folders given are the
    host's, named by where they lie."""
    host = tmp_path / "cluster-a"
    for offset, node in enumerate(("prefill-0", "decode-0")):
        (host / "logs").mkdir(parents=True, exist_ok=True)
        (host / "logs" / f"{node}.log").write_text(_engine_log(0, offset))
        (host / "exports").mkdir(exist_ok=True)
        (host / "exports" / f"{node}.jsonl").write_text(_request_records(0, f"{node}-"))
    monkeypatch.chdir(host)
    assert sorted((f.node, str(f.path)) for f in discover(["logs", "exports"])) == [
        ("decode-0", "exports/decode-0.jsonl"),
        ("decode-0", "logs/decode-0.log"),
        ("prefill-0", "exports/prefill-0.jsonl"),
        ("prefill-0", "logs/prefill-0.log"),
    ]


def test_files_in_a_host_s_generic_folder_are_named_by_the_host(tmp_path: Path) -> None:
    """A document saved under its endpoint's name in `decode-0/metrics/` was the node
    `metrics`; one host's log in `decode-0/logs/sglang.log` beside `decode-0@….prom` was the
    node `sglang`, apart from its snapshots."""
    described = describe(Path("case/decode-0/metrics/server_info.json"))
    assert described is not None and described.node == "decode-0"
    (tmp_path / "decode-0" / "logs").mkdir(parents=True)
    (tmp_path / "decode-0" / "logs" / "sglang.log").write_text(_engine_log(0, 1))
    (tmp_path / "snapshots").mkdir()
    (tmp_path / "snapshots" / "decode-0@20261102T100000Z.prom").write_text("# none\n")
    assert {f.node for f in discover([tmp_path])} == {"decode-0"}


@pytest.mark.parametrize("kept_in_log", [False, True], ids=["moved", "kept"])
def test_a_deployment_whose_request_logs_were_exported_apart_is_read_as_one(
    tmp_path: Path, kept_in_log: bool
) -> None:
    """The incident replay with request logging as JSON records and time stats off, each
    engine's records saved as `exports/<node>.jsonl` beside `logs/<node>.log` (taken out of
    the log, or kept in it too): the nodes are the engines, each export read beside its log
    (read after it, its records were late: 0 of 16 exposures, NOT JUDGED), and the run finds
    what the unsplit logs give."""
    import yaml

    from simulator.offline import run_offline
    from simulator.scenario import scenario_from_dict

    scenarios = Path(__file__).parents[1] / "simulator" / "scenarios"
    data = yaml.safe_load((scenarios / "incident-replay-small.yaml").read_text())
    for role in ("prefill", "decode"):
        data["deployment"][role].update(
            log_requests_format="json", log_requests_level=1, request_time_stats=False
        )
    run_offline(scenario_from_dict(data, "exported"), tmp_path / "whole")
    truth = json.loads((tmp_path / "whole" / "ground_truth.json").read_text())
    (tmp_path / "whole" / "ground_truth.json").unlink()
    case = tmp_path / "case" / "cluster-a"
    (case / "logs").mkdir(parents=True)
    (case / "exports").mkdir()
    for log in (tmp_path / "whole" / "logs").glob("*.log"):
        lines = log.read_text().splitlines(keepends=True)
        records = [line for line in lines if line.startswith('{"timestamp"')]
        assert records
        (case / "exports" / f"{log.stem}.jsonl").write_text("".join(records))
        kept = lines if kept_in_log else [x for x in lines if x not in records]
        (case / "logs" / log.name).write_text("".join(kept))
    shutil.copytree(tmp_path / "whole" / "snapshots", case / "snapshots")
    assert set(streams_of([tmp_path / "case"])) == {
        (node, kind)
        for node in ("prefill-0", "decode-0")
        for kind in ("log", "log:stdout", "prom", "json")
    }
    whole = run_forensics([str(tmp_path / "whole")], tmp_path / "a", write_parquet=False).summary
    split = run_forensics([str(tmp_path / "case")], tmp_path / "b", write_parquet=False).summary
    assert sorted(split["nodes"]) == sorted(whole["nodes"]) == ["decode-0", "prefill-0"]
    rooms = {str(r["bootstrap_room"]) for r in split["exposure"]["requests"]}
    assert rooms == {str(r["bootstrap_room"]) for r in truth["exposed"]} and len(rooms) >= 10
    assert rooms == {str(r["bootstrap_room"]) for r in whole["exposure"]["requests"]}
    assert split["requests"]["total"] == whole["requests"]["total"]
    assert split["requests"].get("late_lines", 0) == 0
    findings = [(f["detector"], f["severity"], f.get("node")) for f in whole["findings"]]
    assert sorted(findings) == sorted(
        (f["detector"], f["severity"], f.get("node")) for f in split["findings"]
    )


def test_an_s6_log_folder_is_one_node_read_in_the_order_its_files_were_closed(
    tmp_path: Path,
) -> None:
    """Blind review 38 D7: s6-log's folder of a service (`current`, rotated files named for
    the TAI64N moment they were closed, its `lock` and `state`) was read as three nodes."""
    folder = tmp_path / "prefill-0"
    folder.mkdir()
    parts = {
        "@4000000068f1a2b30a1b2c3d.s": "[2026-10-17 08:00:00] first\n",
        "@4000000068f1b0c4000000ff.u": "[2026-10-17 09:00:00] second\n",
        "current": "[2026-10-17 10:00:00] third\n",
    }
    for name, text in parts.items():
        (folder / name).write_text(text)
    (folder / "lock").write_text("")
    (folder / "state").write_bytes(b"\x00" * 8)
    streams = streams_of([tmp_path])
    assert list(streams) == [("prefill-0", "log")]
    assert [tf.path.name for tf in streams[("prefill-0", "log")]] == list(parts)
