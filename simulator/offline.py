"""Offline mode: days of a deployment's telemetry, written as fast as the disk allows.

The event queue runs flat out on simulated time. Each node's log is buffered in memory and
written in large chunks; files rotate by size the way a log shipper leaves them (`x.log`,
`x.log.1`, `x.log.2.gz`, ... higher numbers older; the newest rotated file stays plain, the
rest are gzipped by a background thread, since zlib releases the GIL). Metrics and
`/server_info` snapshots land hourly and at every restart and shutdown. File mtimes are set to
simulated time. The same seed gives byte-identical output.

Layout (a contract forensics reads):
  OUT/logs/<node>.log[.N[.gz]]
  OUT/snapshots/<node>@<YYYYmmddTHHMMSSZ>.prom and .server_info.json
  OUT/ground_truth.json
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from simulator.deployment import Deployment
from simulator.scenario import Scenario
from simulator.traffic import TrafficGenerator

FLUSH_BYTES = 4 * 1024 * 1024
DRAIN_S = 1800.0


def stamp(t: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(int(t)))


@dataclass(slots=True)
class _NodeLog:
    path: Path
    fh: IO[bytes]
    buf: list[str] = field(default_factory=list)
    buf_chars: int = 0
    file_bytes: int = 0
    rotations: int = 0
    last_t: float = 0.0
    pending: Future[None] | None = None


class RotatingLogWriter:
    """Per-node log files, buffered, rotated at `rotate_bytes`, older ones gzipped."""

    def __init__(self, folder: Path, *, rotate_bytes: int, gzip_level: int = 6) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.rotate_bytes = rotate_bytes
        self.gzip_level = gzip_level
        self.logs: dict[str, _NodeLog] = {}
        self.bytes_written = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gzip")

    def write(self, node: str, t: float, text: str) -> None:
        log = self.logs.get(node)
        if log is None:
            path = self.folder / f"{node}.log"
            log = self.logs[node] = _NodeLog(path=path, fh=open(path, "wb"))  # noqa: SIM115
        log.buf.append(text)
        log.buf_chars += len(text)
        log.last_t = t
        if log.buf_chars >= FLUSH_BYTES:
            self._flush(log)

    def _flush(self, log: _NodeLog, *, rotate: bool = True) -> None:
        if not log.buf:
            return
        data = "".join(log.buf).encode("utf-8")
        log.buf.clear()
        log.buf_chars = 0
        log.fh.write(data)
        log.file_bytes += len(data)
        self.bytes_written += len(data)
        if rotate and log.file_bytes >= self.rotate_bytes:
            self._rotate(log)

    def _rotate(self, log: _NodeLog) -> None:
        log.fh.close()
        os.utime(log.path, (log.last_t, log.last_t))
        if log.pending is not None:
            log.pending.result()
            log.pending = None
        base = str(log.path)
        for n in range(log.rotations, 1, -1):
            os.replace(f"{base}.{n}.gz", f"{base}.{n + 1}.gz")
        if log.rotations >= 1:
            raw = Path(f"{base}.2.raw")
            os.replace(f"{base}.1", raw)
            log.pending = self._pool.submit(_gzip_file, raw, Path(f"{base}.2.gz"), self.gzip_level)
        os.replace(base, f"{base}.1")
        log.rotations += 1
        log.fh = open(log.path, "wb")  # noqa: SIM115
        log.file_bytes = 0

    def flush(self) -> None:
        for log in self.logs.values():
            self._flush(log)
            log.fh.flush()

    def close(self) -> None:
        for log in self.logs.values():
            self._flush(log, rotate=False)
            log.fh.close()
            os.utime(log.path, (log.last_t, log.last_t))
        for log in self.logs.values():
            if log.pending is not None:
                log.pending.result()
        self._pool.shutdown(wait=True)


def _gzip_file(raw: Path, target: Path, level: int) -> None:
    mtime = raw.stat().st_mtime
    name = target.name[: -len(".gz")]
    with open(raw, "rb") as src, open(target, "wb") as dst:
        with gzip.GzipFile(
            filename=name, mode="wb", fileobj=dst, compresslevel=level, mtime=int(mtime)
        ) as gz:
            shutil.copyfileobj(src, gz, 8 * 1024 * 1024)
    os.utime(target, (mtime, mtime))
    raw.unlink()


class OfflineSink:
    """Telemetry to rotated log files and timestamped snapshot files."""

    def __init__(self, out: Path, scenario: Scenario) -> None:
        self.logs = RotatingLogWriter(
            out / "logs",
            rotate_bytes=scenario.logs.rotate_bytes,
            gzip_level=scenario.logs.gzip_level,
        )
        self.snap_dir = out / "snapshots"
        self.snap_dir.mkdir(parents=True, exist_ok=True)
        self.snapshot_files = 0

    def write(self, node: str, t: float, text: str) -> None:
        self.logs.write(node, t, text)

    def snapshot(self, node: str, t: float, exposition: bytes, info: dict[str, Any]) -> None:
        prom = self.snap_dir / f"{node}@{stamp(t)}.prom"
        prom.write_bytes(exposition)
        js = self.snap_dir / f"{node}@{stamp(t)}.server_info.json"
        js.write_text(json.dumps(info, indent=2) + "\n")
        for path in (prom, js):
            os.utime(path, (t, t))
        self.snapshot_files += 2

    def flush(self) -> None:
        self.logs.flush()

    def close(self) -> None:
        self.logs.close()


@dataclass(slots=True)
class OfflineResult:
    out: Path
    files: int
    bytes_on_disk: int
    log_bytes: int
    requests: int
    exposed: int
    caught: int
    seconds: float


def run_offline(
    scenario: Scenario, out: Path, *, seed: int | None = None, scale: float = 1.0
) -> OfflineResult:
    """Simulate the whole scenario and write its telemetry and ground truth under `out`."""
    began = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    sink = OfflineSink(out, scenario)
    dep = Deployment(scenario, sink, seed=seed)
    dep.boot()
    queue = dep.queue
    gen = TrafficGenerator(scenario, seed=dep.seed, scale=scale)
    try:
        for arrival in gen:
            queue.run_until(arrival.t)
            dep.route(arrival.t, arrival)
        queue.run_until(dep.end)
        for node in dep.nodes.values():
            if not node.down:
                dep.snapshot_node(node, dep.end)
        queue.run_until(dep.end + DRAIN_S)
    finally:
        sink.close()
    truth = dep.truth
    truth.write(out / "ground_truth.json")
    files = [p for p in out.rglob("*") if p.is_file()]
    return OfflineResult(
        out=out,
        files=len(files),
        bytes_on_disk=sum(p.stat().st_size for p in files),
        log_bytes=sink.logs.bytes_written,
        requests=truth.requests_total,
        exposed=len(truth.exposed),
        caught=len(truth.caught),
        seconds=time.perf_counter() - began,
    )
