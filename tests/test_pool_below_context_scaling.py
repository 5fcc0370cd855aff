"""PoolBelowContext over a fleet: the same findings as judging every node on every change (the
changed one at once, the others after the restart grace), at a cost that grows linearly with the
number of nodes (measured by counting, not timing)."""

from __future__ import annotations

import json
import random

import pytest

from collector.events import Event
from collector.state.config_timeline import ConfigChange, ConfigTimeline, NodeConfig
from detectors.context import DetectionContext
from detectors.finding import Finding
from detectors.pipeline import DetectionPipeline
from detectors.pool_below_context import PoolBelowContext

T = 1_788_500_000.0


def _advertised_by_scan(timeline: ConfigTimeline, time: float | None, model: str | None):
    values = [c.context_len for c in timeline.configs_at(time, model) if c.context_len is not None]
    return max(values) if values else None


class ReferencePoolBelowContext(PoolBelowContext):
    """The straightforward rule: on every configuration change the changed node judged at once
    and every other node after the grace (`restart_grace_seconds`), and every node on a first
    refusal, the advertised context found by a scan of the fleet (O(nodes^2) per run)."""

    def _on_config(self, change: ConfigChange, ctx: DetectionContext) -> list[Finding]:
        # Each node's advertised context as last looked at: a node whose moved is judged again
        # after the grace.
        seen = self.__dict__.setdefault("seen_advertised", {})
        others = set()
        for config in ctx.timeline.configs_at(ctx.now):
            advertised = _advertised_by_scan(ctx.timeline, ctx.now, config.model)
            if seen.get(config.node, -1) != advertised:
                seen[config.node] = advertised
                others.add(config.node)
        self.deferred_.pop(change.node, None)
        others.discard(change.node)
        if others:
            self._defer(others, ctx)
        return self._evaluate_nodes([change.node], ctx)

    def _advertised_to(
        self, config: NodeConfig, ctx: DetectionContext, at: float | None = None
    ) -> int | None:
        by_model = _advertised_by_scan(ctx.timeline, ctx.now, config.model)
        return self.deployment_context(config, ctx, by_model, at)

    def _note_refusal(self, node: str, ctx: DetectionContext) -> list[Finding]:
        first = node not in self.refusals_
        self.refusals_[node] = self.refusals_.get(node, 0) + 1
        return self._judge_every_node(ctx) if first else []

    def _judge_every_node(self, ctx: DetectionContext) -> list[Finding]:
        findings = []
        for config in ctx.timeline.configs_at(ctx.now):
            advertised = self._advertised_to(config, ctx)
            finding = self._evaluate(config, advertised, ctx)
            if finding is not None:
                findings.append(finding)
        return findings


class CountingPoolBelowContext(PoolBelowContext):
    """Counts node verdicts computed."""

    def _init_learned(self) -> None:
        super()._init_learned()
        self.evaluations = 0

    def _evaluate(self, config, advertised, ctx):  # type: ignore[no-untyped-def]
        self.evaluations += 1
        return super()._evaluate(config, advertised, ctx)


def ev(kind: str, node: str, t: float, ranks: dict[str, int] | None = None, **fields) -> Event:
    return Event(kind, node, t, f"{node}.log", dict(fields), dict(ranks or {}))


def random_fleet(seed: int, nodes: int = 30, steps: int = 700) -> list[Event]:
    """Startups, restarts with other pools and contexts, versions learned late, models learned
    late or never, metrics, facts from files read out of order, refusals."""
    rng = random.Random(seed)
    names = [f"node-{i:02d}" for i in range(nodes)]
    t = T
    events = []
    for _ in range(steps):
        t += rng.choice([0.0, 0.5, 1.0, 3.0, 45.0, 400.0])
        node = rng.choice(names)
        at = t - rng.choice([100.0, 5_000.0]) if rng.random() < 0.05 else t
        pick = rng.random()
        if pick < 0.2:
            fields: dict[str, object] = {"transfer_backend": "mooncake"}
            if rng.random() < 0.8:
                fields["disaggregation_mode"] = rng.choice(["prefill", "decode", None])
            if rng.random() < 0.7:
                fields["model"] = rng.choice(["m1", "m2", "m3"])
            if rng.random() < 0.3:
                fields["context_length"] = rng.choice([131_072, 1_048_576])
            events.append(ev("server_args", node, at, **fields))
        elif pick < 0.5:
            events.append(
                ev(
                    "capacity",
                    node,
                    at,
                    {"TP": rng.choice([0, 0, 0, 1])},
                    max_total_num_tokens=rng.choice([100_000, 200_000, 681_280, 2_040_000]),
                    context_len=rng.choice([131_072, 262_144, 1_048_576, 2_097_152]),
                )
            )
        elif pick < 0.62:
            fields = {"version": rng.choice(["0.5.19", "0.5.21", "0.5.19"])}
            if rng.random() < 0.3:
                fields["max_total_num_tokens"] = rng.choice([200_000, 681_280])
            events.append(ev("server_info", node, at, **fields))
        elif pick < 0.72:
            signal = rng.choice(["pool_tokens", "context_len"])
            value = rng.choice([200_000, 681_280, 1_048_576])
            role = rng.choice([None, "prefill", "decode"])
            events.append(ev("metric", node, at, signal=signal, value=value, role=role))
        elif pick < 0.77:
            events.append(
                ev("pool_below_context_warning", node, at, pool_tokens=100_000, context_len=262_144)
            )
        else:
            reason = rng.choice(["input_too_long", "context_length", "queue_full", None])
            events.append(ev("request_rejected", node, at, rid=f"r{len(events)}", reason=reason))
    return events


def findings_json(detector: PoolBelowContext, events: list[Event]) -> list[dict]:
    pipeline = DetectionPipeline(detectors=[detector], raise_errors=True)
    return [f.to_json_dict() for f in pipeline.run(events)]


@pytest.mark.parametrize("seed", range(12))
def test_findings_over_a_random_fleet_are_those_of_judging_every_node(seed: int) -> None:
    events = random_fleet(seed)
    expected = findings_json(ReferencePoolBelowContext(), events)
    assert findings_json(PoolBelowContext(), events) == expected
    # Not vacuous: escalations, restarts and both severities occur.
    assert {f["severity"] for f in expected} >= {"warning", "critical"}
    assert len(expected) > len({f["node"] for f in expected})


def test_a_restored_pipeline_keeps_the_same_findings() -> None:
    events = random_fleet(99)
    expected = findings_json(ReferencePoolBelowContext(), events)
    half = len(events) // 2
    first = DetectionPipeline(detectors=[PoolBelowContext()], raise_errors=True)
    got = [f.to_json_dict() for e in events[:half] for f in first.process(e)]
    state = json.loads(json.dumps(first.to_state()))
    resumed = DetectionPipeline.from_state(state, raise_errors=True)
    got += [f.to_json_dict() for e in events[half:] for f in resumed.process(e)]
    got += [f.to_json_dict() for f in resumed.finish()]
    assert got == expected


def test_a_detector_handed_only_some_changes_judges_every_node() -> None:
    """Fed outside a pipeline (changes skipped), it falls back to judging all nodes."""
    timeline = ConfigTimeline()
    detector = PoolBelowContext()
    ctx = DetectionContext(timeline)
    for i in range(3):
        ctx.now = T + i
        timeline.update(ev("capacity", f"n{i}", T + i, max_total_num_tokens=10, context_len=20))
    change = timeline.update(ev("capacity", "n3", T + 3, max_total_num_tokens=10, context_len=20))
    assert change is not None
    findings = detector.observe_config(change, ctx)
    assert [f.node for f in findings] == ["n0", "n1", "n2", "n3"]


# -- cost: counted, not timed -------------------------------------------------------------------


def capacity_fleet(nodes: int) -> list[Event]:
    """The audit's reproduction: one capacity line per node (kvwatch forensics on N files)."""
    return [
        ev("capacity", f"node-{i}", T, {"TP": 0}, max_total_num_tokens=100, context_len=200)
        for i in range(nodes)
    ]


def pd_fleet(nodes: int) -> list[Event]:
    """A PD deployment starting: server args, version, capacity per node; then one restart with
    a bigger pool and a longer context (raising the context every node is judged against), and
    refusals on a few prefill nodes."""
    events = []
    for i in range(nodes):
        node, role = f"node-{i}", "prefill" if i % 2 == 0 else "decode"
        events.append(ev("server_args", node, T + i, disaggregation_mode=role, model="m"))
        events.append(ev("server_info", node, T + i + 1, version="0.5.19"))
        events.append(
            ev(
                "capacity",
                node,
                T + i + 2,
                max_total_num_tokens=681_280 + i,
                context_len=1_048_576,
            )
        )
    events.append(ev("server_args", "node-0", T + nodes + 10, disaggregation_mode="prefill"))
    events.append(
        ev(
            "capacity",
            "node-0",
            T + nodes + 11,
            max_total_num_tokens=2_040_000,
            context_len=2_097_152,
        )
    )
    for i in range(0, nodes, max(nodes // 10, 1)):
        events.append(ev("request_rejected", f"node-{i}", T + nodes + 20, reason="input_too_long"))
    return events


def counting_scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A one-item list counting the fleet scans (`ConfigTimeline.configs_at`) from now on."""
    scans = [0]
    configs_at = ConfigTimeline.configs_at

    def counting(self, time, model=None):  # type: ignore[no-untyped-def]
        scans[0] += 1
        return configs_at(self, time, model)

    monkeypatch.setattr(ConfigTimeline, "configs_at", counting)
    return scans


def measure(make_events, nodes: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, int]:
    """(node verdicts, fleet scans, findings) for a fleet of `nodes`."""
    configs_at = ConfigTimeline.configs_at
    scans = counting_scans(monkeypatch)
    detector = CountingPoolBelowContext()
    findings = list(
        DetectionPipeline(detectors=[detector], raise_errors=True).run(make_events(nodes))
    )
    monkeypatch.setattr(ConfigTimeline, "configs_at", configs_at)
    return detector.evaluations, scans[0], len(findings)


@pytest.mark.parametrize("make_events", [capacity_fleet, pd_fleet])
def test_cost_grows_linearly_with_the_fleet(make_events, monkeypatch: pytest.MonkeyPatch) -> None:
    for nodes in (200, 800):
        evaluations, scans, findings = measure(make_events, nodes, monkeypatch)
        # Each configuration change judges its own node, and a change of the advertised
        # context the nodes of that model: here once (pd_fleet: twice); the whole fleet is
        # scanned once, by the first change, and once more for when the longer context began
        # (the gaps' time). Judging every node each time took nodes^2 / 2.
        assert evaluations <= len(make_events(nodes)) + nodes + 10
        assert scans <= 3
        assert findings >= nodes // 2


def test_the_reference_is_quadratic_so_the_count_measures_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class CountingReference(ReferencePoolBelowContext, CountingPoolBelowContext):
        pass

    scans = counting_scans(monkeypatch)
    detector = CountingReference()
    list(DetectionPipeline(detectors=[detector], raise_errors=True).run(capacity_fleet(100)))
    # Each change looks up every node's advertised context by a scan of the fleet.
    assert scans[0] >= 100 * 101 // 2
