"""The contract every detector follows, so live monitoring and forensics run the same code.

Habits borrowed from scikit-learn and river:

* `__init__` only stores parameters: a typed pydantic config (`extra="forbid"`), given as a
  config object, a mapping, or keyword overrides. `get_params`, `set_params` and `clone` work
  on it; `default_config()` and `example_config()` document it.
* Learned state lives in attributes ending in `_`, created by `reset()` (lazily on first use)
  and nowhere else. `fit(events)` resets, learns from a replay of `events` and returns `self`.
  `to_state()` / `from_state()` carry parameters and learned state as JSON-able dicts, so a
  live sidecar can persist what it learned across restarts.
* **One sign convention: a higher score is more anomalous.** scikit-learn's `score_samples`
  is the opposite; detectors that wrap it flip the sign explicitly. The threshold that turns a
  score into a finding is a parameter. Scoring detectors put `score` and `threshold` in each
  finding's evidence.
* A detector is fed by the pipeline through four hooks, each returning findings:
  `observe(event, ctx)` for the event kinds it lists in `event_kinds`; `observe_config(change,
  ctx)` when a node's configuration changes (`wants_config`); `observe_request(record, ctx)`
  for each joined request (`wants_requests`); `flush(ctx, now)` as event time passes
  (`windowed`). Subclasses implement the `_on_*` versions.
* Each detector's docstring names the Prometheus alert its findings feed (`alert`, a
  `KVWatch...` name); the runbook of a finding is that alert.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Generic, Self, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from collector.events import Event
from collector.state.config_timeline import ConfigChange
from collector.state.request_record import RequestRecord, SideRecord
from detectors.context import DetectionContext
from detectors.finding import Finding, Severity
from detectors.windows import WindowClock


class DetectorConfig(BaseModel):
    """Base of every detector's parameters: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


C = TypeVar("C", bound=DetectorConfig)


class Detector(Generic[C]):
    """Base class; see the module docstring for the contract."""

    name: ClassVar[str] = ""
    alert: ClassVar[str] = ""
    config_class: ClassVar[type[DetectorConfig]] = DetectorConfig
    event_kinds: ClassVar[frozenset[str]] = frozenset()
    # For detectors that read `metric` events: the canonical signals they use (None: any).
    # Forensics ships only these samples to the judging process.
    metric_signals: ClassVar[frozenset[str] | None] = None
    wants_config: ClassVar[bool] = False
    wants_requests: ClassVar[bool] = False
    windowed: ClassVar[bool] = False

    @property
    def consumed_kinds(self) -> frozenset[str]:
        """The event kinds this instance reads (may depend on its configuration)."""
        return self.event_kinds

    def __init__(self, config: C | Mapping[str, Any] | None = None, **params: Any) -> None:
        if isinstance(config, DetectorConfig):
            data: dict[str, Any] = config.model_dump()
        else:
            data = dict(config or {})
        data.update(params)
        self.config: C = cast(C, self.config_class.model_validate(data))

    # -- parameters ----------------------------------------------------------------------------

    @classmethod
    def default_config(cls) -> DetectorConfig:
        return cls.config_class()

    @classmethod
    def example_config(cls) -> dict[str, Any]:
        """A YAML-ready example of this detector's block in the pipeline config."""
        return cls.config_class().model_dump(mode="json")

    @classmethod
    def _unit_test_params(cls) -> dict[str, Any]:
        """Parameters the contract suite instantiates the detector with (small, fast)."""
        return {}

    def get_params(self) -> dict[str, Any]:
        return self.config.model_dump(mode="json")

    def set_params(self, **params: Any) -> Self:
        data = self.get_params()
        data.update(params)
        self.config = cast(C, self.config_class.model_validate(data))
        return self

    def clone(self) -> Self:
        """A new, unfitted detector with the same parameters."""
        return type(self)(self.get_params())

    def __repr__(self) -> str:
        changed = {
            k: v
            for k, v in self.get_params().items()
            if v != self.config_class().model_dump(mode="json").get(k)
        }
        args = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        return f"{type(self).__name__}({args})"

    # -- learned state -------------------------------------------------------------------------

    def reset(self) -> Self:
        """Forget everything learned; create the trailing-underscore attributes afresh."""
        self.n_seen_ = 0
        self._init_learned()
        return self

    def _init_learned(self) -> None:
        """Create learned attributes (names end in `_`). Override when there are any."""

    @property
    def is_fitted(self) -> bool:
        return "n_seen_" in self.__dict__

    def _ensure(self) -> None:
        if "n_seen_" not in self.__dict__:
            self.reset()

    def fit(self, events: Iterable[Event]) -> Self:
        """Reset, then learn from a replay of `events` (findings are discarded)."""
        from detectors.pipeline import DetectionPipeline

        self.reset()
        pipeline = DetectionPipeline(detectors=[self], raise_errors=True)
        for _ in pipeline.run(events):
            pass
        return self

    def to_state(self) -> dict[str, Any]:
        self._ensure()
        return {
            "detector": self.name,
            "params": self.get_params(),
            "learned": {"n_seen_": self.n_seen_, **self._learned_state()},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Self:
        if state.get("detector") not in (None, cls.name):
            raise ValueError(f"state is for {state.get('detector')!r}, not {cls.name!r}")
        detector = cls(state.get("params") or {})
        detector.reset()
        learned = dict(state.get("learned") or {})
        detector.n_seen_ = int(learned.pop("n_seen_", 0))
        detector._load_learned(learned)
        return detector

    def _learned_state(self) -> dict[str, Any]:
        return {}

    def _load_learned(self, state: dict[str, Any]) -> None:
        del state

    # -- feeding (public, fixed) ---------------------------------------------------------------

    def observe(self, event: Event, ctx: DetectionContext) -> list[Finding]:
        if "n_seen_" not in self.__dict__:  # `_ensure`, inlined: called for most events
            self.reset()
        self.n_seen_ += 1
        return self._on_event(event, ctx)

    def observe_config(self, change: ConfigChange, ctx: DetectionContext) -> list[Finding]:
        self._ensure()
        return self._on_config(change, ctx)

    def observe_request(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        if "n_seen_" not in self.__dict__:  # `_ensure`, inlined: called for every request
            self.reset()
        self.n_seen_ += 1
        return self._on_request(record, ctx)

    def flush(self, ctx: DetectionContext, now: float) -> list[Finding]:
        """Event time has reached `now`: close what is due. `now=inf` closes everything."""
        self._ensure()
        return self._on_flush(ctx, now)

    def due_at(self) -> float:
        """Earliest event time at which `flush` has something to close.

        The pipeline skips `flush` until then. Windowed detectors keep their `WindowClock` in
        `clock_`, which this reads; others are never due.
        """
        clock = self.__dict__.get("clock_")
        if not isinstance(clock, WindowClock) or clock.start is None:
            return math.inf
        return clock.start + clock.width

    # -- feeding (hooks) -----------------------------------------------------------------------

    def _on_event(self, event: Event, ctx: DetectionContext) -> list[Finding]:
        return []

    def _on_config(self, change: ConfigChange, ctx: DetectionContext) -> list[Finding]:
        return []

    def _on_request(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        return []

    def _on_flush(self, ctx: DetectionContext, now: float) -> list[Finding]:
        return []

    def revise(self, finding: Finding, ctx: DetectionContext) -> Finding:
        """`finding` (one of this detector's) restated with what the whole input told by its
        end, for a report read afterwards; by default as it was. Only the words and evidence
        change: its severity and time say what was known when it was raised. One exception:
        a warning the whole input refutes is withdrawn, restated at info saying so (never an
        exposure: an answer a client got stays named)."""
        return finding

    # -- helpers -------------------------------------------------------------------------------

    def _finding(
        self,
        severity: Severity,
        *,
        time: float | None,
        node: str | None,
        summary: str,
        subject: str,
        evidence: Mapping[str, Any],
        rid: str | None = None,
        bootstrap_room: str | None = None,
        exposure: bool = False,
    ) -> Finding:
        """Build a finding; `subject` names what it is about (dedup is per detector+subject)."""
        return Finding(
            detector=self.name,
            severity=severity,
            time=time,
            node=node,
            summary=summary,
            runbook=self.alert,
            dedup_key=f"{self.name}:{subject}",
            evidence=copy.deepcopy(dict(evidence)),
            rid=rid,
            bootstrap_room=bootstrap_room,
            exposure=exposure,
        )

    def _event_finding(
        self,
        severity: Severity,
        event: Event,
        *,
        summary: str,
        subject: str,
        evidence: Mapping[str, Any],
        rid: str | None = None,
        bootstrap_room: str | None = None,
    ) -> Finding:
        """A finding about one log line or sample: at its time and node, its source (file:line)
        last in the evidence."""
        return self._finding(
            severity,
            time=event.time,
            node=event.node,
            summary=summary,
            subject=subject,
            evidence={**evidence, "source": event.source},
            rid=rid,
            bootstrap_room=bootstrap_room,
        )

    def _request_finding(
        self,
        severity: Severity,
        record: RequestRecord,
        serving: SideRecord,
        *,
        summary: str,
        evidence: Mapping[str, Any],
        exposure: bool,
    ) -> Finding:
        """A finding about one joined request that `serving` answered: when the client got the
        answer (to the microsecond when meta_info says, as the exposure block has it; else the
        log line's second), one per bootstrap room (outside PD, per node and rid; in a room of
        several requests, per rid)."""
        room = record.bootstrap_room
        sent = serving.sent_time
        return self._finding(
            severity,
            time=sent if sent is not None else record.time,
            node=serving.node,
            summary=summary,
            subject=(
                f"{serving.node}:{serving.rid}"
                if room is None
                else f"room:{room}:{serving.rid}"
                if record.fanout  # one of several requests in its room: a response of its own
                else f"room:{room}"
            ),
            evidence=evidence,
            rid=serving.rid,
            bootstrap_room=room,
            exposure=exposure,
        )


def answered(serving: SideRecord, what: str, *, finish: bool = True) -> str:
    """How the serving node answered `what`, for a finding's summary: with success, or by
    streaming tokens before the request ended in an abort (tokens sent stay sent)."""
    if serving.succeeded:
        said = f" ({serving.finish_type or 'no error'})" if finish else ""
        return f"answered {what} with success{said}"
    tokens = serving.completion_tokens or 0
    return f"streamed {tokens:,} tokens in answer to {what} before the request was aborted"
