"""The contract every registered detector must keep (ids are `Class:check`).

Auto-discovered from the registry; each detector is built from `_unit_test_params()` and fed
the bundled fixture stream `detectors.examples.mixed_events()`.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import math
import re

import pytest
from pydantic import ValidationError

from collector.state.config_timeline import ConfigTimeline
from collector.state.ledger import RequestLedger
from detectors.base import Detector
from detectors.context import DetectionContext
from detectors.examples import mixed_events
from detectors.finding import SEVERITY_RANK, Finding
from detectors.pipeline import DetectionPipeline, PipelineConfig
from detectors.registry import REGISTRY, detector_from_state

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def make(cls: type[Detector]) -> Detector:
    return cls(**cls._unit_test_params())


def run(detectors: list[Detector], events) -> list[Finding]:
    return list(DetectionPipeline(detectors=detectors, raise_errors=True).run(events))


def as_json(findings: list[Finding]) -> list[dict]:
    return [f.to_json_dict() for f in findings]


@check
def params_round_trip(cls: type[Detector]) -> None:
    det = make(cls)
    params = det.get_params()
    assert json.loads(json.dumps(params)) == params
    assert cls(params).get_params() == params
    assert cls(**params).get_params() == params
    clone = det.clone()
    assert clone is not det and clone.get_params() == params and not clone.is_fitted
    assert det.set_params(**params) is det
    # Parameters are validated and unknown ones refused (extra="forbid").
    with pytest.raises(ValidationError):
        cls(not_a_parameter=1)


@check
def no_mutable_defaults(cls: type[Detector]) -> None:
    for parameter in inspect.signature(cls.__init__).parameters.values():
        assert not isinstance(parameter.default, list | dict | set)
    for name, info in cls.config_class.model_fields.items():
        assert not isinstance(info.default, list | dict | set), name
    assert cls.config_class.model_config.get("extra") == "forbid"
    assert cls.config_class.model_config.get("frozen") is True


@check
def docstring_names_its_alert(cls: type[Detector]) -> None:
    assert re.fullmatch(r"KVWatch[A-Z][A-Za-z]+", cls.alert)
    assert cls.__doc__ and cls.alert in " ".join(cls.__doc__.split())
    module = inspect.getmodule(cls)
    assert module is not None and module.__doc__ and cls.alert in module.__doc__
    assert REGISTRY[cls.name] is cls
    assert "Examples" in cls.__doc__  # numpydoc, run under --doctest-modules


@check
def same_seed_same_scores(cls: type[Detector]) -> None:
    first = as_json(run([make(cls)], mixed_events()))
    second = as_json(run([make(cls)], mixed_events()))
    assert first == second


@check
def state_survives_save_and_load(cls: type[Detector]) -> None:
    events = mixed_events()
    half = len(events) // 2
    straight = DetectionPipeline(detectors=[make(cls)], raise_errors=True)
    saved = DetectionPipeline(detectors=[make(cls)], raise_errors=True)
    for event in events[:half]:
        straight.process(event)
        saved.process(event)
    state = json.loads(json.dumps(saved.to_state()))
    resumed = DetectionPipeline.from_state(state, raise_errors=True)
    tail_a = [f for e in events[half:] for f in straight.process(e)] + straight.finish()
    tail_b = [f for e in events[half:] for f in resumed.process(e)] + resumed.finish()
    assert as_json(tail_a) == as_json(tail_b)
    # A detector's own state round-trips exactly.
    det = straight.detectors[0]
    again = detector_from_state(json.loads(json.dumps(det.to_state())))
    assert type(again) is cls
    assert json.dumps(again.to_state(), sort_keys=True) == json.dumps(
        det.to_state(), sort_keys=True
    )


@check
def inputs_are_not_mutated(cls: type[Detector]) -> None:
    events = mixed_events()
    before = copy.deepcopy(events)
    run([make(cls)], events)
    assert events == before
    # Joined records handed to request detectors are not mutated either.
    timeline = ConfigTimeline()
    ledger = RequestLedger(role_of=timeline.role_at)
    for event in events:
        timeline.update(event)
        ledger.add(event)
    det = make(cls)
    ctx = DetectionContext(timeline, events[-1].time)
    for record in ledger.drain():
        snapshot = copy.deepcopy(record)
        det.observe_request(record, ctx)
        assert dataclasses.asdict(record) == dataclasses.asdict(snapshot)


@check
def example_config_validates(cls: type[Detector]) -> None:
    example = cls.example_config()
    assert json.loads(json.dumps(example)) == example
    cls.config_class.model_validate(example)
    assert cls.default_config() == cls.config_class()
    PipelineConfig.model_validate({"detectors": {cls.name: example}})
    PipelineConfig.model_validate({"detectors": {cls.name: cls._unit_test_params()}})


@check
def lifecycle(cls: type[Detector]) -> None:
    det = make(cls)
    # Flushing (shutdown) before anything was seen is fine and says nothing.
    assert det.flush(DetectionContext(), math.inf) == []
    assert list(DetectionPipeline(detectors=[make(cls)]).run([])) == []
    fitted = make(cls)
    assert fitted.fit(mixed_events()) is fitted and fitted.is_fitted
    # A fitted detector keeps working on a new stream.
    run([fitted], mixed_events())
    assert make(cls).fit([]).is_fitted


@check
def findings_are_well_formed(cls: type[Detector]) -> None:
    findings = run([make(cls)], mixed_events())
    for finding in findings:
        assert finding.detector == cls.name and finding.runbook == cls.alert
        assert finding.severity in SEVERITY_RANK
        assert finding.dedup_key.startswith(f"{cls.name}:")
        assert finding.summary and "\n" not in finding.summary
        data = finding.to_json_dict()
        assert json.loads(json.dumps(data)) == data
        assert Finding.from_json_dict(data).to_json_dict() == data
        if "score" in finding.evidence:
            assert finding.evidence["score"] >= finding.evidence["threshold"]
        if finding.exposure:
            assert finding.severity == "critical"
            assert finding.rid is not None and finding.node is not None
            assert isinstance(finding.evidence.get("prompt_tokens"), int)
    keys = [f.dedup_key for f in findings]
    assert len(keys) == len(set(keys))


def test_registry_alert_names_are_unique():
    alerts = [cls.alert for cls in REGISTRY.values()]
    assert len(alerts) == len(set(alerts)) == len(REGISTRY)


def test_every_detector_fires_on_the_fixture_stream():
    """The fixture exercises each detector at least once, so the checks above are not vacuous."""
    silent = [name for name, cls in REGISTRY.items() if not run([make(cls)], mixed_events())]
    assert silent == []


@pytest.mark.parametrize(
    ("cls", "check_fn"),
    [(cls, fn) for cls in REGISTRY.values() for fn in CHECKS],
    ids=[f"{cls.__name__}:{fn.__name__}" for cls in REGISTRY.values() for fn in CHECKS],
)
def test_contract(cls: type[Detector], check_fn) -> None:
    check_fn(cls)
