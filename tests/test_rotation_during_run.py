"""A log rotated while forensics runs: the run reads the files discovery found, wherever the
rotation moved them, and says the ones it could not find again."""

from __future__ import annotations

import gzip
import os
from collections import Counter
from pathlib import Path

from collector.files import FILE_REPLACED
from collector.forensics.report import unread_files_line
from collector.parse import ParseStats, stream_events, streams_of
from collector.spill import KindFilter, _stream

DECODE = (
    "Decode batch, #running-req: {n}, #token: 10, token usage: 0.00, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0"
)


def _lines(minute: int, first: int, count: int) -> str:
    return "".join(
        f"[2026-11-02 10:{minute:02d}:{s:02d} TP0] " + DECODE.format(n=first + s) + "\n"
        for s in range(count)
    )


def _running(stats: ParseStats, events: list) -> list[int]:
    return sorted(int(e.fields["running_req"]) for e in events)


def _logs(folder: Path) -> None:
    (folder / "decode-0.log.1").write_text(_lines(1, 100, 30))  # requests 100..129
    (folder / "decode-0.log").write_text(_lines(2, 200, 30))  # 200..229


def _rotate(folder: Path) -> None:
    """logrotate's default (`create`): each file one number older, a new live file."""
    os.rename(folder / "decode-0.log.1", folder / "decode-0.log.2")
    os.rename(folder / "decode-0.log", folder / "decode-0.log.1")
    (folder / "decode-0.log").write_text(_lines(3, 300, 5))  # written after discovery


def test_a_rotation_after_discovery_reads_the_files_discovery_found(tmp_path: Path) -> None:
    _logs(tmp_path)
    streams = streams_of([tmp_path], Counter())
    _rotate(tmp_path)
    stats = ParseStats()
    events = [e for key, files in streams.items() for e in stream_events(key, files, stats)]
    # Read by their old names, the run would read 200.. twice as `.1` and the new file, and
    # lose 100..129 (now `.2`) without a word.
    assert _running(stats, events) == list(range(100, 130)) + list(range(200, 230))
    assert FILE_REPLACED not in stats.dropped


def test_a_file_rotated_away_and_compressed_is_counted_and_said(tmp_path: Path) -> None:
    _logs(tmp_path)
    streams = streams_of([tmp_path], Counter())
    # Rotated and compressed at once: the live file's inode is gone from the folder.
    live = tmp_path / "decode-0.log"
    (tmp_path / "decode-0.log.1").rename(tmp_path / "decode-0.log.2")
    (tmp_path / "decode-0.log.1.gz").write_bytes(gzip.compress(live.read_bytes()))
    live.unlink()
    live.write_text(_lines(3, 300, 5))
    stats = ParseStats()
    events = [e for key, files in streams.items() for e in stream_events(key, files, stats)]
    assert _running(stats, events) == list(range(100, 130))
    assert stats.dropped[FILE_REPLACED] == 1
    said = unread_files_line({"input": {"dropped_by_reason": dict(stats.dropped)}})
    assert said == (
        "1 file was rotated away during the run and could not be found again; "
        "what it holds is not in the verdicts."
    )


def test_the_parsing_workers_streams_find_the_moved_files_too(tmp_path: Path) -> None:
    _logs(tmp_path)
    streams = streams_of([tmp_path], Counter())
    _rotate(tmp_path)
    stats = ParseStats()
    wanted = KindFilter(frozenset({"decode_batch"}))
    events = [e for key, files in streams.items() for e in _stream(key, files, stats, wanted, None)]
    assert _running(stats, events) == list(range(100, 130)) + list(range(200, 230))


def test_a_file_whose_inode_changed_but_not_its_size_and_time_is_read(tmp_path: Path) -> None:
    """A FUSE mount without stable inodes gives a new one at each look: never a loss."""
    _logs(tmp_path)
    streams = streams_of([tmp_path], Counter())
    live = tmp_path / "decode-0.log"
    seen = live.stat()
    copy = tmp_path / "copy"
    copy.write_bytes(live.read_bytes())
    os.replace(copy, live)  # a new inode, the same bytes
    os.utime(live, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    stats = ParseStats()
    events = [e for key, files in streams.items() for e in stream_events(key, files, stats)]
    assert _running(stats, events) == list(range(100, 130)) + list(range(200, 230))
