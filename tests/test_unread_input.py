"""Input kvwatch cannot use must never pass for input it judged.

From an audit of how responders save logs: a decode log saved by Windows PowerShell (UTF-16)
was 114,439 "binary" lines, and with the snapshots beside it the run said "no exposed
responses found" and exited 0; a support bundle (`.tgz`) was read as one gzip log of every
engine, a `.zip` passed over without a word; a case folder linking to the logs found no file.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from collector.files import discover
from collector.parse import ParseStats, events_by_node

DECODE = [
    "[2026-09-06 00:00:01 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.01",
    "[2026-09-06 00:00:02] Receive: obj=GenerateReqInput(rid='r1', bootstrap_room=7)",
]


def _kinds(*paths: Path) -> tuple[list[str], ParseStats]:
    stats = ParseStats()
    return [e.kind for e in events_by_node([str(p) for p in paths], stats)], stats


@pytest.mark.parametrize(
    ("encoding", "mark"),
    [
        ("utf-16", b""),
        ("utf-16-le", b""),
        ("utf-8", b"\xef\xbb\xbf"),
        ("utf-16-be", b"\xfe\xff"),
        ("utf-16-be", b""),
        ("utf-32", b""),
        ("utf-32-be", b""),
        ("utf-32-le", b""),
    ],
    ids=[
        "powershell-utf16",
        "utf16-without-mark",
        "utf8-with-mark",
        "utf16-big-endian",
        # Blind review 13e D1: every line was dropped as binary.
        "utf16-big-endian-without-mark",
        # Blind review 13e: named undecodable, not read.
        "utf32",
        "utf32-big-endian-without-mark",
        "utf32-without-mark",
    ],
)
@pytest.mark.parametrize("gzipped", [False, True])
def test_a_log_in_another_unicode_form_reads_as_the_same_lines(
    tmp_path: Path, encoding: str, mark: bytes, gzipped: bool
) -> None:
    plain = tmp_path / "plain" / "decode-0.log"
    plain.parent.mkdir()
    plain.write_text("".join(line + "\r\n" for line in DECODE * 20))
    expected, expected_stats = _kinds(plain)

    data = mark + "".join(line + "\r\n" for line in DECODE * 20).encode(encoding)
    other = tmp_path / "other" / ("decode-0.log.gz" if gzipped else "decode-0.log")
    other.parent.mkdir()
    other.write_bytes(gzip.compress(data) if gzipped else data)
    kinds, stats = _kinds(other)
    assert kinds == expected
    assert stats.dropped == expected_stats.dropped == {}
    assert stats.unclassified_engine == stats.unclassified_other == 0


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_log_ended_by_cr_alone_reads_as_the_same_lines(tmp_path: Path, gzipped: bool) -> None:
    """Blind review 13e D2: a log whose lines end in CR alone was one line, read as its last
    record (a progress bar's redraw), and forensics gave the all-clear."""
    plain = tmp_path / "plain" / "decode-0.log"
    plain.parent.mkdir()
    plain.write_text("".join(line + "\n" for line in DECODE * 20))
    expected, expected_stats = _kinds(plain)

    data = "".join(line + "\r" for line in DECODE * 20).encode()
    other = tmp_path / "other" / ("decode-0.log.gz" if gzipped else "decode-0.log")
    other.parent.mkdir()
    other.write_bytes(gzip.compress(data) if gzipped else data)
    kinds, stats = _kinds(other)
    assert kinds == expected and len(kinds) > 20
    assert stats.dropped == expected_stats.dropped == {}
    assert stats.unclassified_engine == stats.unclassified_other == 0


def test_archives_are_counted_and_never_read_as_logs(tmp_path: Path) -> None:
    bundle = io.BytesIO()
    with tarfile.open(fileobj=bundle, mode="w:gz") as tar:
        body = ("\n".join(DECODE) + "\n").encode()
        info = tarfile.TarInfo("logs/decode-0.log")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    for name in ("sglang-logs.tgz", "bundle.tar.gz", "bundle.tar", "bundle.zip"):
        (tmp_path / name).write_bytes(bundle.getvalue())
    skipped: Counter[str] = Counter()
    assert discover([tmp_path], skipped) == []
    assert skipped == {"archive_not_read": 4}


def test_a_folder_reached_through_a_link_is_walked_once(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere" / "logs"
    real.mkdir(parents=True)
    (real / "decode-0.log").write_text("\n".join(DECODE) + "\n")
    case = tmp_path / "case"
    case.mkdir()
    (case / "logs").symlink_to(real, target_is_directory=True)
    (case / "again").symlink_to(real, target_is_directory=True)  # a second way in
    (real / "up").symlink_to(case, target_is_directory=True)  # and a loop back up
    skipped: Counter[str] = Counter()
    found = discover([case], skipped)
    assert [f.path.name for f in found] == ["decode-0.log"]
    assert skipped["folder_reached_twice"] >= 1


def test_no_request_read_is_not_judged_even_with_snapshots_beside_it(tmp_path: Path) -> None:
    """The snapshots name nodes and their pools, but no request line was read: not an
    all-clear, whatever the reason the lines went unread."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "decode-0.log").write_bytes(
        "".join(f"\x01\x02{line}\x00\x00\x00\x00\n" * 2 for line in DECODE * 100).encode("utf-32")
    )
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    (snapshots / "decode-0@20260906T000000Z.prom").write_text(
        'sglang:max_total_num_tokens{engine_type="decode"} 681280\n'
        'sglang:context_len{engine_type="decode"} 1048576\n'
    )
    (tmp_path / "bundle.tgz").write_bytes(b"\x1f\x8b")
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", "--quiet", "--no-parquet"]
        + [str(logs), str(snapshots), str(tmp_path / "bundle.tgz"), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "NOT JUDGED" in done.stderr and "1 archive not read" in done.stderr
    assert "no exposed responses" not in done.stdout
    assert "UNREAD: " in done.stdout and "ARCHIVES: 1 archive was not read" in done.stdout


def test_an_archive_alone_is_said_to_be_unread(tmp_path: Path) -> None:
    (tmp_path / "sglang-logs.tgz").write_bytes(b"\x1f\x8b")
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", "--quiet", "--no-parquet"]
        + [str(tmp_path), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "no telemetry files found" in done.stderr and "1 not read: extract" in done.stderr


REFERENCE = Path(__file__).parent / "testdata" / "reference_incident"
EXPOSED_ROOM = "5523401987766512300"
EXPOSED_RIDS = ("e5f4a3b2c1d0e9f8a7b6554433221100", "b2e1d4f3c5a6b7988877665544332222")


def _without_request_lines(log: Path) -> str:
    """A node's log as SGLang writes it without `--log-requests`: start-up and batch lines."""
    kept = [
        line
        for line in log.read_text().splitlines(keepends=True)
        if "Receive:" not in line and "Finish:" not in line and "ReqTimeStats(" not in line
    ]
    return "".join(kept)


def _forensics(folder: Path, out: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", "--quiet", "--no-parquet"]
        + [str(folder), "--out", str(out), "--json", str(out / "f.json")],
        capture_output=True,
        text=True,
    )
    return done, json.loads((out / "f.json").read_text())


def _healthy_reference(folder: Path) -> None:
    """The reference incident without its exposed request: one honest PD request."""
    folder.mkdir()
    for log in REFERENCE.glob("*.log"):
        lines = log.read_text().splitlines(keepends=True)
        kept = [line for line in lines if not any(rid in line for rid in EXPOSED_RIDS)]
        kept = [line for line in kept if EXPOSED_ROOM not in line and "912384" not in line]
        (folder / log.name).write_text("".join(kept))


def test_a_decode_that_logged_no_request_turns_no_exposure_into_not_judged(
    tmp_path: Path,
) -> None:
    """One decode logged its requests, the other ran requests with request logging off: the
    first's all-clear is not the deployment's."""
    _healthy_reference(tmp_path / "case")
    control, control_summary = _forensics(tmp_path / "case", tmp_path / "control")
    assert control.returncode == 0, control.stderr
    assert control_summary["requests"]["total"] == 1
    assert "no exposed responses found (1 request judged on 2 nodes)\n" in control.stdout
    assert control_summary["requests"]["nodes_not_judged"] == []

    unlogged = _without_request_lines(REFERENCE / "decode-0.log")
    (tmp_path / "case" / "decode-1.log").write_text(unlogged)
    batches = unlogged.count("Decode batch")
    done, summary = _forensics(tmp_path / "case", tmp_path / "out")
    assert done.returncode == 2
    assert f"NOT JUDGED: decode-1 ran requests ({batches} batch lines)" in done.stderr
    assert "no exposed responses found in the requests judged" in done.stdout
    assert "NOT JUDGED NODES: decode-1 ran requests" in done.stdout
    assert summary["requests"]["nodes_not_judged"] == [
        {"node": "decode-1", "role": "decode", "batch_lines": batches}
    ]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "decode-1 ran requests" in report and "some nodes logged none of theirs" in report


def test_a_prefill_that_logged_no_request_is_said_but_decode_still_judges(tmp_path: Path) -> None:
    """A prefill never answers a client: without its request lines the decode side still
    judges each request, so the run is judged, and the missing side is said."""
    case = tmp_path / "case"
    case.mkdir()
    shutil.copy(REFERENCE / "decode-0.log", case / "decode-0.log")
    unlogged = _without_request_lines(REFERENCE / "prefill-0.log")
    (case / "prefill-0.log").write_text(unlogged)
    done, summary = _forensics(case, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert summary["exposure"]["count"] == 1  # over-length answered, from decode's lines
    # Its refusal line is read whatever the flags: said as read, not as missing.
    refusals = unlogged.count("exceeds the maximum allowed length")
    assert refusals == 1
    assert summary["requests"]["nodes_not_judged"] == [
        {
            "node": "prefill-0",
            "role": "prefill",
            "batch_lines": unlogged.count("Prefill batch"),
            "refusals": refusals,
        }
    ]
    assert "prefill-0 (prefill) ran requests" in done.stdout
    assert "logged only its 1 refusal, so prefill times are missing" in done.stdout
    assert "NOT JUDGED:" not in done.stderr


def test_exposures_found_stay_the_verdict_when_another_node_was_not_judged(
    tmp_path: Path,
) -> None:
    case = tmp_path / "case"
    shutil.copytree(REFERENCE, case)
    (case / "decode-1.log").write_text(_without_request_lines(REFERENCE / "decode-0.log"))
    done, summary = _forensics(case, tmp_path / "out")
    assert done.returncode == 0, done.stderr  # the default --fail-on: reports written
    assert summary["exposure"]["count"] == 1
    assert [row["node"] for row in summary["requests"]["nodes_not_judged"]] == ["decode-1"]


def test_requests_judged_from_exports_of_no_known_node_name_no_node_unjudged() -> None:
    """Request-metric exports kept apart from any host's folder hold some node's requests,
    which node unknown: a node with batch lines and no request line may be theirs."""
    from collector.files import EXPORT_NAME
    from collector.forensics.driver import nodes_not_judged

    stats = ParseStats()
    stats.node_events["decode-0"] = Counter({"decode_batch": 40})
    nodes = {"decode-0": {"role": "decode"}}
    assert nodes_not_judged(stats, nodes, set()) == [
        {"node": "decode-0", "role": "decode", "batch_lines": 40}
    ]
    assert nodes_not_judged(stats, nodes, {(EXPORT_NAME, "decode")}) == []


def test_a_decode_seen_only_in_its_snapshots_turns_no_exposure_into_not_judged(
    tmp_path: Path,
) -> None:
    """A decode whose log is missing from the case folder, its snapshots saved beside the
    others': nothing it served is in any verdict (audit B: 34 of 145 exposures went unsaid)."""
    _healthy_reference(tmp_path / "case")
    saved = Path(__file__).parent / "testdata" / "golden" / "server_info"
    snapshots = tmp_path / "case" / "snapshots"
    snapshots.mkdir()
    for node in ("decode-0", "decode-1"):  # decode-0's log is read; decode-1's is not
        shutil.copy(
            saved / "server_info_decode_0_5_23.json",
            snapshots / f"{node}@20260906T000000Z.server_info.json",
        )
    done, summary = _forensics(tmp_path / "case", tmp_path / "out")
    assert done.returncode == 2, done.stderr
    assert summary["requests"]["nodes_not_judged"] == [
        {"node": "decode-1", "role": "decode", "batch_lines": 0, "snapshots_only": True}
    ]
    assert "NOT JUDGED NODES: decode-1 seen only in snapshots: no log read was matched to it," in (
        done.stdout
    )
    assert "matched to no snapshot" not in done.stdout  # decode-0's log met its own


def test_a_decode_s_log_saved_under_another_name_is_said_as_perhaps_its_own(
    tmp_path: Path,
) -> None:
    """Blind review 33 (D8): logs in folders named by address beside snapshots named by node
    were all read, and the report said "no log of theirs was read". The logs read that met no
    snapshot are named, as what may be the node's."""
    _healthy_reference(tmp_path / "case")
    (tmp_path / "case" / "decode-0.log").rename(tmp_path / "case" / "10.0.2.11.log")
    saved = Path(__file__).parent / "testdata" / "golden" / "server_info"
    (tmp_path / "case" / "snapshots").mkdir()
    shutil.copy(
        saved / "server_info_decode_0_5_23.json",
        tmp_path / "case" / "snapshots" / "decode-0@20260906T000000Z.server_info.json",
    )
    done, summary = _forensics(tmp_path / "case", tmp_path / "out")
    (row,) = summary["requests"]["nodes_not_judged"]
    assert row["node"] == "decode-0" and row["logs_unmatched"] == ["10.0.2.11"]
    assert "no log read was matched to it, so no response it served was judged (the logs of " in (
        done.stdout
    )
    assert "10.0.2.11 were read and matched to no snapshot" in done.stdout


def test_a_log_search_exported_as_csv_is_counted_and_said(tmp_path: Path) -> None:
    """CloudWatch Logs Insights and Kibana export searches as CSV: a whole node's log may be
    one, passed over unnamed (`.csv` was skipped as kvwatch's own table of findings)."""
    case = tmp_path / "case"
    shutil.copytree(REFERENCE, case)
    (case / "decode-1.csv").write_text('"@timestamp","@message"\n"2026-09-06","x"\n')
    (case / "findings.csv").write_text("severity,detector\n")  # a report folder's own tables
    (case / "refused_without_decode.csv").write_text("time,prefill_node\n")
    done, summary = _forensics(case, tmp_path / "out")
    assert summary["input"]["dropped_by_reason"]["csv_not_read"] == 1
    assert f"CSV FILES: 1 CSV file was not read ({case / 'decode-1.csv'}):" in done.stdout


def test_a_trace_server_named_like_a_log_s_node_judges_that_node() -> None:
    """`--otlp-service-name decode-0` names the spans' server `decode-0@<host>`: requests judged
    from its spans are decode-0's, so decode-0 is judged and decode-1 (batch lines, no request
    named anywhere) is not. Spans of a server no log names may be any node's: none is said."""
    from collector.forensics.driver import nodes_not_judged
    from collector.parse import ParseStats

    stats = ParseStats()
    for node in ("decode-0", "decode-1"):
        stats.node_events[node] = Counter({"decode_batch": 40})
    nodes = {"decode-0@1a2b": {"role": "decode"}, "decode-1": {"role": "decode"}}
    named = nodes_not_judged(stats, nodes, {("decode-0@1a2b", "decode")}, {"decode-0@1a2b"})
    assert named == [{"node": "decode-1", "role": "decode", "batch_lines": 40}]
    assert (
        nodes_not_judged(stats, nodes, {("sglang-decode@1a2b", "decode")}, {"sglang-decode@1a2b"})
        == []
    )


def test_a_gzip_cut_short_is_said_however_few_lines_it_lost(tmp_path: Path) -> None:
    """A rotated decode log gzipped and cut (a shipper killed mid-copy) loses everything after
    the cut: one count, under the share of unusable lines that is said, while the run said
    "no exposed responses found" over an hour of answers it never read."""
    case = tmp_path / "case"
    _healthy_reference(case)
    decode = case / "decode-0.log"
    packed = gzip.compress(decode.read_bytes())
    (case / "decode-0.log.1.gz").write_bytes(packed[: len(packed) // 2])
    decode.write_text("")
    done, summary = _forensics(case, tmp_path / "out")
    assert summary["input"]["dropped_by_reason"]["truncated_gzip"] == 1
    cut = str(case / "decode-0.log.1.gz")
    assert summary["input"]["dropped_files"] == {"truncated_gzip": [cut]}
    assert f"UNREAD: files not read whole: truncated_gzip 1 ({cut}); " in done.stdout


def test_a_prefill_whose_pool_no_input_stated_is_said(tmp_path: Path) -> None:
    """Logs begun after start-up (and no snapshots): over-length answers are known by refusals
    and prefill times alone, and an all-clear over them must say so."""
    whole, _ = _forensics(REFERENCE, tmp_path / "whole")
    assert "POOL UNKNOWN" not in whole.stdout
    case = tmp_path / "case"
    _healthy_reference(case)
    prefill = case / "prefill-0.log"
    pool_lines = ("KV Cache is allocated", "max_total_num_tokens=", "KV pool holds")
    lines = prefill.read_text().splitlines(keepends=True)
    prefill.write_text("".join(line for line in lines if not any(p in line for p in pool_lines)))
    done, _ = _forensics(case, tmp_path / "out")
    assert "no exposed responses found" in done.stdout
    assert "POOL UNKNOWN: prefill-0: no KV pool stated" in done.stdout
    assert "no KV pool stated" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize(
    ("late", "request_lines", "not_judged"),
    [(7_686, 19_298, True), (150, 1_000, True), (99, 1_000, False), (150, 100_000, False)],
)
def test_many_request_lines_too_late_to_be_judged_are_no_all_clear(
    late: int, request_lines: int, not_judged: bool
) -> None:
    """A node's clock hours off the others': its request lines came after their requests were
    judged and were dropped, and the run said "no exposed responses found", exit 0. A few late
    lines (clocks seconds apart) leave the verdict standing."""
    from collector.forensics.report import too_late_line

    summary = {
        "requests": {"late_lines": late},
        "input": {"events_by_kind": {"request_finished": request_lines // 2,
                                     "request_received": request_lines - request_lines // 2}},
    }  # fmt: skip
    line = too_late_line(summary)
    assert bool(line) == not_judged
    if not_judged:
        assert line.startswith(f"{late:,} of {request_lines:,} request lines")


def test_a_tree_a_thousand_folders_deep_is_walked(tmp_path: Path) -> None:
    """Discovery and the progress bar's count walked by recursion: RecursionError at 1,100
    folders deep, a traceback instead of a verdict."""
    folders = [tmp_path / "case"]
    for _ in range(1100):  # one at a time: pathlib's mkdir(parents=True) recurses too
        folders.append(folders[-1] / "d")
    for folder in folders:
        folder.mkdir()
    log = folders[-1] / "decode-0.log"
    log.write_text("\n".join(DECODE) + "\n")
    try:
        assert [f.path for f in discover([folders[0]])] == [log]
        done = _forensics_cli(folders[0], tmp_path / "out")
        assert "Traceback" not in done.stderr and done.returncode in (0, 2)
    finally:  # removed bottom up: pytest's own clean-up (rmtree) recurses, and fails at 1,100
        log.unlink()
        for folder in reversed(folders):
            folder.rmdir()


def test_what_discovery_could_not_read_is_said(tmp_path: Path) -> None:
    """A folder nested past the system's path limit, a FIFO, a link to /proc/kmsg (it hung the
    run), a link to nowhere: each counted, and said, since a log in them is in no verdict."""
    case = tmp_path / "case"
    shutil.copytree(Path(__file__).parent / "testdata" / "reference_incident", case)
    os.mkfifo(case / "decode-1.log")
    (case / "kernel.log").symlink_to("/proc/kmsg")  # regular to stat, and a read never ends
    (case / "decode-2.log").symlink_to(tmp_path / "lost-mount" / "decode-2.log")
    _past_path_max(case, "decode-3.log")
    skipped: Counter[str] = Counter()
    assert {f.node for f in discover([case], skipped)} == {"prefill-0", "decode-0"}
    assert skipped == {"not_a_regular_file": 2, "broken_or_looping_link": 1, "unreadable_folder": 1}
    done = _forensics_cli(case, tmp_path / "out")
    (said,) = [line for line in done.stdout.splitlines() if line.startswith("PASSED OVER: ")]
    assert said.startswith(f"PASSED OVER: 1 folder could not be listed ({str(case)[:40]}")
    assert said.endswith(
        f"), 1 link leads nowhere or in a loop ({case / 'decode-2.log'}), 2 entries are not "
        f"files (FIFOs, sockets, devices or /proc files) ({case / 'decode-1.log'}, "
        f"{case / 'kernel.log'}); what they hold is not in the verdicts."
    )
    assert "Traceback" not in done.stderr


def _forensics_cli(case: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", str(case), "--out", str(out)]
        + ["--no-parquet", "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("where", ["out_is_a_file", "out_under_a_file", "json_is_a_folder"])
def test_an_output_that_cannot_be_written_is_a_clear_error_before_any_reading(
    tmp_path: Path, where: str
) -> None:
    """Audit Q: --out naming a file, a folder under a file, --json naming a folder: each ended
    in a traceback, after the whole input had been read."""
    case = Path(__file__).parent / "testdata" / "reference_incident"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out, json_args = tmp_path / "out", []
    if where == "out_is_a_file":
        out = blocker
    elif where == "out_under_a_file":
        out = blocker / "out"
    else:
        json_args = ["--json", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", str(case), "--out", str(out)]
        + ["--no-parquet", "--workers", "1", *json_args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-400:]
    flag = "--json" if json_args else "--out"
    assert done.stderr.startswith(f"kvwatch forensics: {flag} ")
    assert "cannot write" in done.stderr and done.stdout == ""


def test_outputs_that_fail_as_they_are_written_are_a_clear_error(tmp_path: Path) -> None:
    """/dev/full opens and fails every write: the error names the output, no traceback."""
    case = Path(__file__).parent / "testdata" / "reference_incident"
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "forensics", str(case), "--quiet"]
        + ["--out", str(tmp_path / "out"), "--no-parquet", "--json", "/dev/full"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-400:]
    assert "kvwatch forensics: could not write the outputs" in done.stderr


def test_no_exposure_found_beside_a_folder_that_could_not_be_read_is_not_judged(
    tmp_path: Path,
) -> None:
    """Audit Q: decode's log in a folder its reader could not list, and the run said "no
    exposed responses found", exit 0."""
    case = tmp_path / "case"
    case.mkdir()
    (case / "decode-0.log").write_text("\n".join(DECODE) + "\n")
    _past_path_max(case)
    done = _forensics_cli(case, tmp_path / "out")
    assert done.returncode == 2, (done.stdout, done.stderr)
    (said,) = [line for line in done.stdout.splitlines() if line.startswith("NOT JUDGED: ")]
    assert said.startswith(f"NOT JUDGED: 1 folder could not be listed ({str(tmp_path)[:40]}")
    assert said.endswith("); what it holds is not in the verdicts.")
    assert said in done.stderr
    assert "no exposed responses found" not in done.stdout


def _past_path_max(case: Path, log: str = "") -> None:
    """Folders 20 deep under `case`, names of 250 characters (5 kB, past PATH_MAX: no path
    reaches them), made through folder handles; `log` written at the bottom."""
    folder = os.open(case, os.O_RDONLY)
    try:
        for level in range(20):
            name = f"L{level:02d}" + "x" * 247
            os.mkdir(name, dir_fd=folder)
            inner = os.open(name, os.O_RDONLY, dir_fd=folder)
            os.close(folder)
            folder = inner
        if log:
            handle = os.open(log, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=folder)
            os.write(handle, ("\n".join(DECODE) + "\n").encode())
            os.close(handle)
    finally:
        os.close(folder)


def test_a_second_run_with_out_inside_the_logs_reads_the_logs_not_the_first_answer(
    tmp_path: Path,
) -> None:
    """Audit Q: `kvwatch forensics . --out report` run twice read the first run's
    `forensics.json` back as an unrecognised document (and `--json` can put it anywhere)."""
    case = tmp_path / "case"
    shutil.copytree(Path(__file__).parent / "testdata" / "reference_incident", case)
    first = _forensics_cli(case, case / "report")
    assert first.returncode == 0, first.stderr[-400:]
    summary = json.loads((case / "report" / "forensics.json").read_text())
    (case / "answer.json").write_text((case / "report" / "forensics.json").read_text())
    second = _forensics_cli(case, case / "report")
    assert second.returncode == 0, second.stderr[-400:]
    again = json.loads((case / "report" / "forensics.json").read_text())
    assert again["input"]["files"] == summary["input"]["files"] == 2
    assert again["input"]["lines"] == summary["input"]["lines"]
    assert again["input"]["dropped_by_reason"] == {}
    assert again["exposure"] == summary["exposure"]


@pytest.mark.parametrize(
    ("late_by_node", "zoneless", "named"),
    [
        ({"decode-0": 12}, ["decode-0", "prefill-0"], True),
        ({"decode-0": 12}, [], False),  # its zone was told: not a zone's doing
        ({}, ["decode-0"], False),  # nothing came late
        ({"decode-1": 3}, ["decode-0"], False),  # the late lines are another node's
    ],
)
def test_a_refusal_whose_decode_lines_came_hours_late_names_the_clock(
    late_by_node: dict[str, int], zoneless: list[str], named: bool
) -> None:
    """Blind review: decode hosts printing UTC+2 and no time stats. Every refused request's
    decode lines came two hours after it had been judged, and the run blamed decode logs left
    out. With late lines from a node whose stamps carry no zone, the clock is named too."""
    from collector.forensics.report import refused_without_decode_line, too_late_line

    summary = {
        "requests": {
            "refused_without_decode": {"count": 1, "rooms": ["42"]},
            "late_lines": sum(late_by_node.values()) * 100,
            "late_lines_by_node": late_by_node,
        },
        "input": {"log_zone_unknown": zoneless, "events_by_kind": {"request_received": 2_000}},
    }
    line = refused_without_decode_line(summary)
    assert line.startswith("1 request prefill refused") and line.endswith("other requests' KV.")
    clock = "12 request lines of decode-0 came after their requests had been judged"
    assert (clock in line) is named
    assert ("another time zone" in line) is named
    if late_by_node:
        assert (clock in too_late_line(summary)) is named


@pytest.mark.parametrize("lines", [12, 9])
def test_a_log_of_which_no_line_was_recognised_is_said_beside_logs_that_were(
    tmp_path: Path, lines: int
) -> None:
    """Blind review 15: a Loki export beside plain logs (a format read since) was 54
    unclassified lines, its nodes and their exposures missing, and nothing said it. A few
    stray lines (a note) are only counted."""
    case = tmp_path / "case"
    _healthy_reference(case)
    unknown = case / "decode-1.jsonl"
    unknown.write_text(
        "".join(
            json.dumps({"stream": "decode-1", "entry": f"line {i}"}) + "\n" for i in range(lines)
        )
    )
    done, summary = _forensics(case, tmp_path / "out")
    if lines < 10:
        assert "unrecognised" not in summary["input"]["dropped_by_reason"]
        return
    assert summary["input"]["dropped_by_reason"]["unrecognised"] == 1
    assert summary["input"]["dropped_files"] == {"unrecognised": [str(unknown)]}
    assert f"UNREAD: files not read whole: unrecognised 1 ({unknown}); " in done.stdout


def test_the_reports_input_section_counts_binary_lines_among_those_not_used(
    tmp_path: Path,
) -> None:
    """Blind review 19 (J2): the terminal's UNREAD line counted the binary lines; the reports'
    Input section said only "0 unclassified engine lines"."""
    logs = tmp_path / "logs"
    logs.mkdir()
    junk = b"\x00\x01\x02\x03\x00\x00\x00\x00\x00\x00\n" * 3
    (logs / "decode-0.log").write_bytes(("\n".join(DECODE) + "\n").encode() + junk)
    from collector.forensics.driver import run_forensics

    run_forensics([str(logs)], tmp_path / "out", write_parquet=False, workers=1)
    markdown = (tmp_path / "out" / "report.md").read_text()
    html = (tmp_path / "out" / "report.html").read_text()
    for text in (markdown, html):
        said = text.split("Read and not used: ", 1)[1]
        assert "binary 3" in said.split(")", 1)[0]


def test_a_request_line_cut_at_the_end_names_its_file(tmp_path: Path) -> None:
    """Blind review 30a: UNREAD said `truncated_request_line 2` beside a cut gzip and named
    only the gzip; the two logs whose last request line was cut went unnamed."""
    from collector.forensics.driver import run_forensics
    from tests.engine_lines import finish_line, server_args

    logs = tmp_path / "logs"
    logs.mkdir()
    whole = finish_line("2026-08-27 10:00:00", "a" * 32, 11, 4000)
    cut = finish_line("2026-08-27 10:00:05", "b" * 32, 12, 4000)
    (logs / "decode-0.log").write_text(server_args("2026-08-27", "decode") + whole + cut[:300])
    summary = run_forensics([str(logs)], tmp_path / "out", write_parquet=False).summary
    assert summary["input"]["dropped_by_reason"]["truncated_request_line"] == 1
    named = summary["input"]["dropped_files"]["truncated_request_line"]
    assert named == [str(logs / "decode-0.log")]


def test_a_log_mostly_of_binary_bytes_is_said_so_and_its_text_lines_are_read(
    tmp_path: Path,
) -> None:
    """Blind review 57: 50 MB of random bytes amid a log's lines made it "not read whole",
    though every line of text in it was read and every exposure in it named."""
    case = tmp_path / "case"
    shutil.copytree(REFERENCE, case)
    decode = case / "decode-0.log"
    lines = decode.read_bytes().splitlines(keepends=True)
    junk = random.Random(57).randbytes(1 << 20)
    decode.write_bytes(b"".join(lines[:4]) + junk + b"\n" + b"".join(lines[4:]))
    done, summary = _forensics(case, tmp_path / "out")
    assert summary["exposure"]["count"] == 1
    assert f"a file mostly not text, their text lines read: undecodable 1 ({decode})" in done.stdout
    assert "files not read whole" not in done.stdout
