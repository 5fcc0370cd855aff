"""Where a node's telemetry goes: the interface, plus an in-memory sink for tests.

The deployment model writes through a `TelemetrySink` and does not know whether it is running
live (append to files now) or offline (buffered, rotated, gzipped files for days of simulated
time). Both implementations live with their mode (`simulator.live`, `simulator.offline`).
"""

from __future__ import annotations

from typing import Any, Protocol


class TelemetrySink(Protocol):
    def write(self, node: str, t: float, text: str) -> None:
        """Append already formatted log text (one or more full lines) to `node`'s log."""

    def snapshot(self, node: str, t: float, exposition: bytes, info: dict[str, Any]) -> None:
        """Keep a `/metrics` exposition and the `/server_info` JSON taken at `t`."""

    def flush(self) -> None:
        """Make everything written so far visible to readers."""


class MemorySink:
    """Keeps everything in memory: for tests and for callers that want the lines directly."""

    def __init__(self) -> None:
        self.logs: dict[str, list[str]] = {}
        self.snapshots: list[tuple[str, float, bytes, dict[str, Any]]] = []

    def write(self, node: str, t: float, text: str) -> None:
        self.logs.setdefault(node, []).append(text)

    def snapshot(self, node: str, t: float, exposition: bytes, info: dict[str, Any]) -> None:
        self.snapshots.append((node, t, exposition, info))

    def flush(self) -> None:
        return None

    def lines(self, node: str) -> list[str]:
        return "".join(self.logs.get(node, [])).splitlines()
