"""Input kvwatch cannot use must never pass for input it judged.

From an audit of how responders save logs: a decode log saved by Windows PowerShell (UTF-16)
was 114,439 "binary" lines, and with the snapshots beside it the run said "no exposed
responses found" and exited 0; a support bundle (`.tgz`) was read as one gzip log of every
engine, a `.zip` passed over without a word; a case folder linking to the logs found no file.
"""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

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
    [("utf-16", b""), ("utf-16-le", b""), ("utf-8", b"\xef\xbb\xbf"), ("utf-16-be", b"\xfe\xff")],
    ids=["powershell-utf16", "utf16-without-mark", "utf8-with-mark", "utf16-big-endian"],
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
