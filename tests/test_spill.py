"""Parallel parsing with spill files gives exactly the serial timeline, filtered."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector import spill
from collector.parse import ParseStats, events_in_time_order
from collector.spill import KindFilter, parallel_events_in_time_order
from simulator.offline import run_offline
from simulator.scenario import load_scenario


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    run_offline(load_scenario("abort-race-storm-small"), out)
    return out


def _rows(events) -> list[tuple]:
    return [(e.kind, e.node, e.time, e.source, e.fields, e.ranks) for e in events]


def test_parallel_equals_serial_for_the_wanted_events(
    telemetry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spill, "PARALLEL_MIN_BYTES", 0)
    wanted = KindFilter(
        frozenset({"request_finished", "checksum_mismatch", "metric", "capacity"}),
        metric_signals=frozenset({"pool_tokens", "context_len"}),
    )
    paths = [telemetry / "logs", telemetry / "snapshots"]
    serial_stats = ParseStats()
    serial = [e for e in events_in_time_order(paths, serial_stats) if wanted(e)]
    parallel_stats = ParseStats()
    parallel = list(parallel_events_in_time_order(paths, parallel_stats, wanted, workers=2))
    # The same events in the same order, events of the same second from streams read by
    # different workers included: the judge sees one timeline however the streams were shared.
    assert _rows(parallel) == _rows(serial)
    for workers in (3, 5):
        assert _rows(
            parallel_events_in_time_order(paths, ParseStats(), wanted, workers=workers)
        ) == (_rows(serial))
    times = [e.time for e in parallel if e.time is not None]
    assert times == sorted(times)
    assert {e.kind for e in parallel} == {
        "request_finished",
        "checksum_mismatch",
        "metric",
        "capacity",
    }
    assert {e.fields["signal"] for e in parallel if e.kind == "metric"} == {
        "pool_tokens",
        "context_len",
    }
    # Everything was still read and counted, wanted or not.
    assert parallel_stats.events == serial_stats.events
    assert parallel_stats.lines == serial_stats.lines and parallel_stats.bytes == serial_stats.bytes


def test_batch_lines_read_by_the_lane_give_what_their_events_give(
    telemetry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forensics workers' stages fed batch lines as samples ship exactly what they ship
    when fed the lines' events: the same windows, hints and sides, in the same order."""
    from collector.forensics.driver import WorkerStages, _anomaly_window, _for_workers, consumed
    from collector.parse import streams_of
    from detectors.pipeline import DetectionPipeline, PipelineConfig

    config = _for_workers(PipelineConfig())
    wanted = consumed(DetectionPipeline(config), node_windows=True)
    streams = streams_of([telemetry / "logs"])

    def run() -> tuple[list[tuple], ParseStats]:
        stats = ParseStats()
        stages = WorkerStages(config.ledger, _anomaly_window(config))
        rows = [
            (e.kind, e.node, e.time, e.source, repr(e.fields), e.ranks)
            for e in spill._merged(streams, stats, wanted, stages, {})
        ]
        return rows, stats

    taken = []
    lane_call = spill.BatchLane.__call__

    def counting(self, *args):  # type: ignore[no-untyped-def]
        took = lane_call(self, *args)
        taken.append(took)
        return took

    monkeypatch.setattr(spill.BatchLane, "__call__", counting)
    with_lane, lane_stats = run()
    monkeypatch.setattr(spill, "batch_observer", lambda stage, wanted: None)
    without_lane, event_stats = run()
    assert sum(taken) > 0.9 * len(taken) > 1000  # the lane did take the batch lines
    assert with_lane == without_lane
    assert {row[0] for row in with_lane} >= {"node_window", "request_side"}
    assert lane_stats.events == event_stats.events and lane_stats.lines == event_stats.lines


def test_streams_are_pulled_a_chunk_at_a_time_in_their_order() -> None:
    pulled: list[int] = []

    def stream():
        for item in range(10):
            pulled.append(item)
            yield item

    seen = [(item, len(pulled)) for item in spill._in_chunks(stream(), 4)]
    assert [item for item, _ in seen] == list(range(10))
    # Never more than a chunk ahead of what was handed on.
    assert [ahead for _, ahead in seen] == [4, 4, 4, 4, 8, 8, 8, 8, 10, 10]
    assert list(spill._in_chunks(iter([]), 4)) == []


def test_chunked_streams_merge_exactly_as_one_event_at_a_time(
    telemetry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    streams = spill.streams_of([telemetry / "logs", telemetry / "snapshots"])
    wanted = KindFilter(frozenset({"request_finished", "deferred_release", "metric"}))
    default = spill.STREAM_CHUNK

    def merged(chunk: int) -> list[tuple]:
        monkeypatch.setattr(spill, "STREAM_CHUNK", chunk)
        return _rows(spill._merged(streams, ParseStats(), wanted, None, {}))

    one_at_a_time = merged(1)
    assert len(one_at_a_time) > 1000
    assert merged(7) == one_at_a_time
    assert merged(default) == one_at_a_time


def test_a_worker_stopped_by_ctrl_c_leaves_quietly(tmp_path: Path) -> None:
    """Ctrl-C reaches every process of the group: each parsing worker printed its own
    KeyboardInterrupt traceback under the judge's one-line exit (audit Q)."""
    import multiprocessing

    (tmp_path / "decode-0.log").write_text(
        "[2026-09-06 00:00:01 TP0] Decode batch, #running-req: 1, #token: 9\n"
    )
    streams = spill.streams_of([tmp_path])

    def interrupted(_: object) -> bool:
        raise KeyboardInterrupt

    receive, send = multiprocessing.Pipe(duplex=False)
    spill._worker(send, streams, list(range(len(streams))), interrupted, None, {})  # no raise
    with pytest.raises(EOFError):  # it sent nothing more and closed its end
        receive.recv_bytes()


_TERMINATED_RUN = r"""
import multiprocessing, os, signal, sys
from collector import cli, spill
from collector.parse import ParseStats
spill.PARALLEL_MIN_BYTES = 0
signal.signal(signal.SIGTERM, cli._terminated)
events = spill.parallel_events_in_time_order(
    [sys.argv[1]], ParseStats(), lambda event: True, workers=2
)
try:
    next(events)
    print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in events:
        pass
except cli.Terminated:
    events.close()
    sys.exit(143)
"""


def test_sigterm_stops_the_parsing_workers_too(tmp_path: Path) -> None:
    """SIGTERM ended the judge alone: its workers, blocked writing to pipes whose read ends
    they held themselves, waited for ever (audit Q)."""
    import subprocess
    import sys
    import time

    line = "[2026-09-06 00:00:{s:02d} TP0] Decode batch, #running-req: 1, #token: {n}\n"
    for node in ("decode-0", "decode-1"):
        (tmp_path / f"{node}.log").write_text(
            "".join(line.format(s=n % 60, n=n) for n in range(200_000))
        )
    done = subprocess.run(
        [sys.executable, "-c", _TERMINATED_RUN, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 143, done.stderr[-500:]
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _running(pid)]
        time.sleep(0.1)
    assert not alive
    assert "Traceback" not in done.stderr


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_what_the_lane_shipped_and_a_released_line_come_in_time_order(tmp_path: Path) -> None:
    """Blind review 31c: a refusal five minutes after a prefill's last request was held (a
    line ahead of its stream); the batch line beside it, read by the lane, let the side of that
    request go out, stamped at the end of its wait, but the held line and what it made the
    stages ship came first. The stream ran backwards and the side reached the ledger after its
    request was judged: LATE LINES on a quiet node."""
    from collector.forensics.driver import WorkerStages, _anomaly_window, _for_workers, consumed
    from collector.parse import streams_of
    from detectors.pipeline import DetectionPipeline, PipelineConfig
    from tests.engine_lines import finish_line, prefill_start, refusal_line, server_args

    day = "2026-08-24"
    batch = (
        "[{day} {at} TP0] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, "
        "token usage: 0.05, #running-req: 0, #queue-req: 0\n"
    )
    lines = [server_args(day, "prefill"), prefill_start(day, "10.1.0.11", 200_000)]
    lines += [batch.format(day=day, at=f"00:01:{s:02d}") for s in range(0, 60, 5)]
    lines.append(finish_line(f"{day} 00:02:00", "r1", 101, 9000, tokens=1))
    # The jump: a refusal line 400 s on, then batch lines at the same moment.
    lines.append(refusal_line(f"{day} 00:08:40", "r2", 300_000, 200_000))
    lines += [batch.format(day=day, at=f"00:08:{s:02d}") for s in (40, 41, 45)]
    lines.append(finish_line(f"{day} 00:08:50", "r3", 102, 9000, tokens=1))
    (tmp_path / "prefill-0.log").write_text("".join(lines))

    config = _for_workers(PipelineConfig())
    wanted = consumed(DetectionPipeline(config), node_windows=True)
    stages = WorkerStages(config.ledger, _anomaly_window(config))
    stats = ParseStats()
    events = list(spill._merged(streams_of([tmp_path]), stats, wanted, stages, {}))
    sides = [e for e in events if e.kind == "request_side"]
    assert [e.fields["side"].rid for e in sides] == ["r1", "r2", "r3"]
    times = [e.time for e in events if e.time is not None]
    assert times == sorted(times), [(e.kind, e.time) for e in events]
