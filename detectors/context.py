"""What a detector may read besides the event in hand: the configuration timeline and the clock.

The pipeline owns one context and passes it to every detector call, so live monitoring and
forensics give detectors the same view: configuration *in force at a time*, and `now`, the
event-time watermark (the latest event time seen), never the wall clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collector.state.config_timeline import ConfigTimeline, NodeConfig
from collector.state.lost_transfers import LostTransfers
from collector.state.room_pairs import RoomPairs


@dataclass(slots=True)
class DetectionContext:
    """Shared, read-only for detectors: `timeline` is fed by the pipeline, `now` is event time."""

    timeline: ConfigTimeline = field(default_factory=ConfigTimeline)
    now: float | None = None
    # Which decode nodes' rooms met a prefill side read, fed by the pipeline with every request
    # it judges. Not kept in a saved state: a restarted sidecar counts again.
    pairs: RoomPairs = field(default_factory=RoomPairs)
    # Transfers decode failed because prefill went away, fed by the pipeline: a restart of that
    # prefill ends the race for them. Not kept in a saved state either: a restarted sidecar
    # counts them as failures, as before.
    lost: LostTransfers = field(default_factory=LostTransfers)

    def config_at(self, node: str, time: float | None) -> NodeConfig | None:
        return self.timeline.config_at(node, time if time is not None else self.now)

    def since(self, began: float | None) -> float | None:
        """When a condition of a generation stood from (`began`, its start or later), or `now`
        when that is not known or not reached yet. What an engine started with (its pool, its
        release, its checksum) stood from its start, though a `/server_info` saved after the
        logs (dated by its file) may tell it late: dated then, findings stood after the logs'
        end, at the time the files were copied (blind reviews 5a, 8c)."""
        if began is None or (self.now is not None and began > self.now):
            return self.now
        return began
