"""The detection pipeline: events in, findings out, one code path for live and forensics.

It owns the state (configuration timeline, request ledger) and the detectors, and for each
event: updates the timeline, hands the event to the ledger, emits the requests whose join wait
is over (judged by request detectors), closes due windows, then passes the configuration
change (if any) and the event itself to the detectors that asked for them. Event time drives
everything (`now` is the latest event time seen), so events must come in global time order;
small disorder (same second, clock skew between nodes of a few seconds) is absorbed by the
ledger's settle and join windows. Findings are deduplicated on `dedup_key` (bounded memory).

A driver does::

    pipeline = DetectionPipeline.from_config(yaml_dict)   # or DetectionPipeline()
    for event in events_in_time_order:
        for finding in pipeline.process(event):
            ...
    for finding in pipeline.finish():                     # end of input (forensics only)
        ...

Live, call `pipeline.advance(clock_now)` now and then so joins and windows close while the
engine is quiet, and persist `pipeline.to_state()` to resume after a restart.
"""

from __future__ import annotations

import math
import sys
import time as _time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from collector.events import Event
from collector.state.config_timeline import TIMELINE_KINDS, ConfigChange, ConfigTimeline
from collector.state.ledger import LedgerConfig, RequestLedger
from collector.state.request_record import RequestRecord
from detectors.base import Detector
from detectors.context import DetectionContext
from detectors.engine_version import refuses_for_good
from detectors.finding import Finding
from detectors.registry import REGISTRY, detector_from_state

Clock = Callable[[], float]


class PipelineConfig(BaseModel):
    """The `detection:` block of kvwatch's configuration."""

    model_config = ConfigDict(extra="forbid")

    # Request join windows and memory caps.
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)
    # Parameters per detector, by registry name; unlisted detectors run with defaults.
    detectors: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Registry names of detectors not to run.
    disabled: list[str] = Field(default_factory=list)
    # Dedup keys remembered; a key seen again is suppressed.
    dedup_capacity: int = Field(default=200_000, ge=0)
    # Raise detector errors instead of counting them (tests, `fit`).
    raise_errors: bool = False

    @model_validator(mode="after")
    def _known_detectors(self) -> PipelineConfig:
        for name in [*self.detectors, *self.disabled]:
            if name not in REGISTRY:
                known = ", ".join(sorted(REGISTRY))
                raise ValueError(f"detectors.{name}: unknown detector (known: {known})")
        for name, params in self.detectors.items():
            try:
                REGISTRY[name].config_class.model_validate(params)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ValueError(f"detectors.{name}.{where}: {first['msg']}") from None
        return self

    @classmethod
    def example(cls) -> dict[str, Any]:
        """Every detector's block with its defaults: a starting point for a YAML file."""
        return {
            "ledger": LedgerConfig().model_dump(mode="json"),
            "detectors": {name: det.example_config() for name, det in REGISTRY.items()},
            "disabled": [],
            "dedup_capacity": 200_000,
        }


@dataclass(slots=True)
class PipelineStats:
    events: int = 0
    events_without_time: int = 0
    events_behind_watermark: int = 0
    records: int = 0
    findings: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    # Per detector, where it first failed ("TypeError at detectors/x.py:12"): no message, which
    # may quote a value read from the input.
    error_sites: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def build_detectors(
    config: PipelineConfig, registry: Mapping[str, type[Detector[Any]]] = REGISTRY
) -> list[Detector[Any]]:
    return [
        cls(config.detectors.get(name, {}))
        for name, cls in registry.items()
        if name not in config.disabled
    ]


class DetectionPipeline:
    """State + detectors; see the module docstring for the driving loop.

    Parameters
    ----------
    config : PipelineConfig, optional
        Ledger windows, per-detector parameters, disabled detectors.
    detectors : sequence of Detector, optional
        Use these instances instead of building every registered detector from `config`.
    raise_errors : bool, optional
        Overrides `config.raise_errors`.
    clock : callable, optional
        Monotonic clock for per-detector processing time (injected for tests).
    on_record : callable, optional
        Called with each joined request and the findings it produced (after dedup), e.g. by
        forensics to keep per-request rows for its report.

    Examples
    --------
    >>> from detectors.examples import incident_events
    >>> pipe = DetectionPipeline()
    >>> findings = list(pipe.run(incident_events()))
    >>> sorted({(f.detector, f.severity) for f in findings if f.exposure})
    [('impossibly_fast_prefill', 'critical'), ('over_length_answered', 'critical'), \
('rejected_then_served', 'critical')]
    >>> sorted({f.bootstrap_room for f in findings if f.exposure})
    ['1001']
    """

    def __init__(
        self,
        config: PipelineConfig | None = None,
        *,
        detectors: Sequence[Detector[Any]] | None = None,
        registry: Mapping[str, type[Detector[Any]]] = REGISTRY,
        raise_errors: bool | None = None,
        clock: Clock = _time.perf_counter,
        on_record: Callable[[RequestRecord, list[Finding]], None] | None = None,
    ) -> None:
        self.config = config if config is not None else PipelineConfig()
        self.raise_errors = self.config.raise_errors if raise_errors is None else raise_errors
        self.detectors: list[Detector[Any]] = (
            list(detectors) if detectors is not None else build_detectors(self.config, registry)
        )
        self.timeline = ConfigTimeline()
        self.ledger = RequestLedger(
            self.config.ledger, role_of=self.timeline.role_at, refusal_final=self.refusal_final
        )
        self.context = DetectionContext(self.timeline)
        self.stats = PipelineStats()
        self._clock = clock
        self.on_record = on_record
        self._dedup: OrderedDict[str, None] = OrderedDict()
        self._passed: float | None = None
        self._route()

    def _route(self) -> None:
        # Per event kind, who wants it: the timeline, the ledger, which detectors. Most events
        # (metrics, batch lines, access lines) interest few consumers, and looking that up once
        # per kind keeps `process` from calling into ones that would return at once.
        self._by_kind: dict[str, tuple[Detector[Any], ...]] = {}
        for det in self.detectors:
            for kind in det.consumed_kinds:
                self._by_kind[kind] = (*self._by_kind.get(kind, ()), det)
        self._timeline_kinds = TIMELINE_KINDS
        self._ledger_kinds = self.ledger.accepted_kinds
        self._config_dets = [d for d in self.detectors if d.wants_config]
        self._request_dets = [d for d in self.detectors if d.wants_requests]
        self._windowed_dets = [d for d in self.detectors if d.windowed]
        self._windowed_due = [(d, d.due_at) for d in self._windowed_dets]

    @classmethod
    def from_config(
        cls, data: Mapping[str, Any] | PipelineConfig | None = None, **kwargs: Any
    ) -> DetectionPipeline:
        """Build from a parsed YAML/JSON mapping (validated; errors name the key)."""
        if data is None or isinstance(data, PipelineConfig):
            return cls(data, **kwargs)
        return cls(PipelineConfig.model_validate(dict(data)), **kwargs)

    def refusal_final(self, node: str, time: float | None) -> bool:
        """The node's release refuses an over-length prompt for good (decode answers nothing
        it refused): its refusals are no decode answer's (`RequestLedger._claim_refusal`)."""
        config = self.timeline.config_at(node, time)
        return refuses_for_good(config.version if config is not None else None)

    @property
    def now(self) -> float | None:
        return self.context.now

    # -- driving -------------------------------------------------------------------------------

    def process(self, event: Event) -> list[Finding]:
        """Feed one event (in time order); return the new findings it led to."""
        stats = self.stats
        stats.events += 1
        ctx = self.context
        time = event.time
        now = ctx.now
        if time is None:
            stats.events_without_time += 1
        elif now is None or time > now:
            ctx.now = now = time
        elif time < now:
            stats.events_behind_watermark += 1
        kind = event.kind
        change = self.timeline.update(event) if kind in self._timeline_kinds else None
        if kind in self._ledger_kinds:
            self.ledger.add(event)
        if kind == "transfer_failed":
            ctx.lost.note(event)
        out: list[Finding] = []
        # Joins and windows only close when event time moves (logs have one-second stamps, so
        # most events share the previous one's time).
        if now is not None and now != self._passed:
            self._pass_time(now, out)
        if change is not None:
            self._dispatch_config(change, out)
        dets = self._by_kind.get(kind)
        if dets is not None:
            for det in dets:
                self._call(det, det.observe, out, event, ctx)
        return out

    def advance(self, now: float) -> list[Finding]:
        """Event time (or, live, the clock) has reached `now` with no new event."""
        ctx = self.context
        if ctx.now is None or now > ctx.now:
            ctx.now = now
        out: list[Finding] = []
        self._pass_time(now, out)
        return out

    def finish(self) -> list[Finding]:
        """End of input: judge every request still held, close every window, and ask again
        what a detector held until the whole input was read (`OverLengthAnswered.held_`)."""
        out: list[Finding] = []
        for record in self.ledger.drain():
            self._dispatch_request(record, out)
        for det in self.detectors:
            self._call(det, det.flush, out, self.context, math.inf)
        return out

    def run(self, events: Iterable[Event]) -> Iterator[Finding]:
        """Process a finite stream, then `finish()`; yields findings as they arise."""
        for event in events:
            yield from self.process(event)
        yield from self.finish()

    # -- internals -----------------------------------------------------------------------------

    def _pass_time(self, now: float, out: list[Finding]) -> None:
        self._passed = now
        records = self.ledger.advance(now)
        if records:
            for record in records:
                self._dispatch_request(record, out)
        for det, due_at in self._windowed_due:
            if now >= due_at():
                self._call(det, det.flush, out, self.context, now)

    def _dispatch_request(self, record: RequestRecord, out: list[Finding]) -> None:
        # `_call` for each request detector, unrolled: this runs for every request.
        self.stats.records += 1
        before = len(out)
        ctx = self.context
        ctx.pairs.note(record)
        clock = self._clock
        seconds = self.stats.seconds
        for det in self._request_dets:
            started = clock()
            try:
                findings = det.observe_request(record, ctx)
            except Exception:
                if self._failed(det):
                    raise
                findings = []
            name = det.name
            seconds[name] = seconds.get(name, 0.0) + (clock() - started)
            if findings:
                self._keep(findings, out)
        if self.on_record is not None:
            self.on_record(record, out[before:])

    def _dispatch_config(self, change: ConfigChange, out: list[Finding]) -> None:
        for det in self._config_dets:
            self._call(det, det.observe_config, out, change, self.context)

    def _call(
        self,
        det: Detector[Any],
        method: Callable[..., list[Finding]],
        out: list[Finding],
        *args: Any,
    ) -> None:
        clock = self._clock
        started = clock()
        try:
            findings = method(*args)
        except Exception:
            if self._failed(det):
                raise
            findings = []
        seconds = self.stats.seconds
        seconds[det.name] = seconds.get(det.name, 0.0) + (clock() - started)
        if findings:
            self._keep(findings, out)

    def _failed(self, det: Detector[Any]) -> bool:
        """Count a detector's error (called in its `except`); True when it must be raised
        instead of swallowed. A swallowed error is said by whoever reports the run: findings
        the detector would have made are missing (`error_sites`)."""
        self.stats.errors[det.name] = self.stats.errors.get(det.name, 0) + 1
        if det.name not in self.stats.error_sites:
            self.stats.error_sites[det.name] = _error_site()
        return self.raise_errors

    def _keep(self, findings: list[Finding], out: list[Finding]) -> None:
        now = self.context.now
        for finding in findings:
            if self._first(finding.dedup_key):
                key = f"{finding.detector}:{finding.severity}"
                self.stats.findings[key] = self.stats.findings.get(key, 0) + 1
                # Stamped with the stream time it is raised at (`Finding.raised_at`).
                out.append(
                    finding if finding.raised_at is not None else replace(finding, raised_at=now)
                )
            else:
                self.stats.duplicates += 1

    def _first(self, key: str) -> bool:
        if key in self._dedup:
            self._dedup.move_to_end(key)
            return False
        if self.config.dedup_capacity:
            self._dedup[key] = None
            if len(self._dedup) > self.config.dedup_capacity:
                self._dedup.popitem(last=False)
        return True

    def revised(self, findings: list[Finding]) -> list[Finding]:
        """`findings` as their detectors restate them with all the input read (`Detector.revise`):
        for a report, once the stream has ended."""
        by_name = {det.name: det for det in self.detectors}
        revised = []
        for finding in findings:
            det = by_name.get(finding.detector)
            try:
                revised.append(det.revise(finding, self.context) if det is not None else finding)
            except Exception:
                if det is None or self._failed(det):
                    raise
                revised.append(finding)
        return revised

    # -- persistence ---------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """JSON-able snapshot: config, state, detectors' learned state, dedup memory."""
        return {
            "version": 1,
            "config": self.config.model_dump(mode="json"),
            "now": self.context.now,
            "timeline": self.timeline.to_state(),
            "ledger": self.ledger.to_state(),
            "detectors": [det.to_state() for det in self.detectors],
            "dedup": list(self._dedup),
            "stats": asdict(self.stats),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], **kwargs: Any) -> DetectionPipeline:
        config = PipelineConfig.model_validate(state["config"])
        detectors = [detector_from_state(raw) for raw in state["detectors"]]
        pipeline = cls(config, detectors=detectors, **kwargs)
        pipeline.timeline = ConfigTimeline.from_state(state["timeline"])
        pipeline.context = DetectionContext(pipeline.timeline, state.get("now"))
        pipeline.ledger = RequestLedger.from_state(
            state["ledger"],
            config.ledger,
            role_of=pipeline.timeline.role_at,
            refusal_final=pipeline.refusal_final,
        )
        pipeline._dedup = OrderedDict((key, None) for key in state.get("dedup", []))
        pipeline.stats = PipelineStats(**state.get("stats", {}))
        return pipeline


def _error_site() -> str:
    """The exception being handled, as its type and the line that raised it."""
    error = sys.exc_info()[1]
    if error is None:
        return "unknown error"
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return type(error).__name__
    last = frames[-1]
    path = Path(last.filename)
    shown = "/".join(path.parts[-2:])
    return f"{type(error).__name__} at {shown}:{last.lineno}"
