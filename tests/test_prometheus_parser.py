"""Prometheus exposition → metric events: goldens per label era, round trip, properties, speed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from collector.events import METRIC, Event, parse_iso_time
from collector.sglang.outcome import ParseOutcome
from collector.sglang.prometheus import MAX_CACHED_BLOCKS, SAMPLES_NOT_KEPT, parse_exposition
from collector.sglang.signals import (
    BUCKET,
    COUNT,
    SIGNALS,
    SUM,
    classify_metric,
    config_snapshot,
    config_snapshots,
)

GOLDEN = Path(__file__).parent / "testdata" / "golden" / "prometheus"
CASES = sorted(p.stem for p in GOLDEN.glob("*.prom"))


def _same(actual: Any, expected: Any) -> bool:
    """Deep equality where NaN equals NaN (NaN is a valid sample value)."""
    if isinstance(expected, float) and isinstance(actual, float):
        return (math.isnan(actual) and math.isnan(expected)) or actual == expected
    if isinstance(expected, dict) and isinstance(actual, dict):
        return actual.keys() == expected.keys() and all(
            _same(actual[k], expected[k]) for k in expected
        )
    if isinstance(expected, list) and isinstance(actual, list):
        return len(actual) == len(expected) and all(map(_same, actual, expected))
    return bool(actual == expected) and type(actual) is type(expected)


def test_every_golden_case_is_present() -> None:
    assert {
        "ref_sample_0_5_23",
        "era_2024_name_label",
        "era_2025_model_name",
        "era_0_5_1_ranks",
        "era_0_5_23_decode_dp",
        "reexported_underscore",
        "v1_loads_prometheus",
        "router_smg",
        "router_legacy",
        "openmetrics",
        "malformed",
    } <= set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    golden = json.loads((GOLDEN / f"{case}.json").read_text())
    text = (GOLDEN / f"{case}.prom").read_text()
    scrape_time = parse_iso_time(golden["time"])
    out = parse_exposition(text, node=golden["node"], source=golden["source"], time=scrape_time)
    expected = [
        {
            "kind": "metric",
            "node": golden["node"],
            "time": golden["time"],
            "source": golden["source"],
            **entry,
        }
        for entry in golden["events"]
    ]
    actual = [event.to_json_dict() for event in out.events]
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert _same(got, want), (got, want)
    assert out.dropped == golden["dropped"]
    assert out.stats == golden["stats"]


def test_bytes_crlf_and_invalid_utf8_lines_cost_only_themselves() -> None:
    data = (
        b"# TYPE sglang:context_len gauge\r\n"
        b'sglang:context_len{engine_type="decode",model_name="m"} 32768\r\n'
        b'sglang:kv_used_tokens{engine_type="decode",model_name="\xff\xfe"} 1\r\n'
        b'sglang:max_total_num_tokens{engine_type="decode",model_name="m"} 20480'  # no newline
    )
    out = parse_exposition(data, node="d", source="d.prom", time=None, line_numbers=True)
    assert [(e.fields["name"], e.fields["value"], e.source) for e in out.events] == [
        ("sglang:context_len", 32768.0, "d.prom:2"),
        ("sglang:max_total_num_tokens", 20480.0, "d.prom:4"),
    ]
    assert out.events[0].time is None
    assert out.dropped == {"not_utf8": 1}


def test_ranks_cover_every_rank_label() -> None:
    text = (
        'sglang:num_running_reqs{attn_cp_rank="2",dp_rank="6",moe_dp_rank="1",'
        'moe_ep_rank="6",pp_rank="3",tp_rank="6"} 1\n'
    )
    (event,) = parse_exposition(text, node="n", source="s", time=0.0).events
    assert event.ranks == {"attn_cp": 2, "dp": 6, "moe_dp": 1, "ep": 6, "pp": 3, "tp": 6}


# --- signals -------------------------------------------------------------------------------


def test_every_signal_metric_resolves_in_each_exposed_form() -> None:
    for spec in SIGNALS.values():
        for metric in spec.metrics:
            forms = [metric]
            if metric.startswith("sglang:"):
                forms.append("sglang_" + metric[len("sglang:") :])
            for name in forms:
                if spec.kind == "histogram":
                    for suffix, part in (("_bucket", BUCKET), ("_sum", SUM), ("_count", COUNT)):
                        assert classify_metric(name + suffix) == (spec.name, part), name
                elif spec.kind == "counter":
                    assert classify_metric(name) == (spec.name, "value"), name
                    bare = name.removesuffix("_total")
                    assert classify_metric(bare) == (spec.name, "value"), bare
                    assert classify_metric(bare + "_created") == (None, "created"), bare
                else:
                    assert classify_metric(name) == (spec.name, "value"), name


def test_signals_named_by_the_foundation_issue_exist() -> None:
    wanted = {
        "pool_tokens": "sglang:max_total_num_tokens",
        "context_len": "sglang:context_len",
        "deferred_release_total": "sglang:decode_deferred_kv_release_total",
        "deferred_release_held": "sglang:num_decode_deferred_kv_release_reqs",
        "transfer_failed_total": "sglang:num_transfer_failed_reqs_total",
        "bootstrap_failed_total": "sglang:num_bootstrap_failed_reqs_total",
        "prompt_tokens_total": "sglang:prompt_tokens_total",
        "cached_tokens_total": "sglang:cached_tokens_total",
        "generation_tokens_total": "sglang:generation_tokens_total",
        "num_requests_total": "sglang:num_requests_total",
        "aborted_requests_total": "sglang:num_aborted_requests_total",
        "http_responses_total": "sglang:http_responses_total",
        "kv_used_tokens": "sglang:kv_used_tokens",
        "num_running_reqs": "sglang:num_running_reqs",
        "num_queue_reqs": "sglang:num_queue_reqs",
        "token_usage": "sglang:token_usage",
        "router_bootstrap_failures_total": "smg_pd_bootstrap_failures_total",
        "router_kv_transfer_failures_total": "smg_pd_kv_transfer_failures_total",
        "max_prefill_tokens": "sglang:max_prefill_tokens",
        "max_running_requests": "sglang:max_running_requests",
    }
    for signal, metric in wanted.items():
        assert classify_metric(metric) == (signal, "value")
    histograms = {
        "deferred_release_seconds": "sglang:decode_deferred_kv_release_seconds",
        "ttft_seconds": "sglang:time_to_first_token_seconds",
        "e2e_latency_seconds": "sglang:e2e_request_latency_seconds",
        "uncached_prompt_tokens": "sglang:uncached_prompt_tokens_histogram",
        "router_pd_ttft_seconds": "smg_pd_ttft_seconds",
    }
    for signal, metric in histograms.items():
        assert classify_metric(metric + "_bucket") == (signal, "bucket")


def test_unknown_names_have_no_signal() -> None:
    assert classify_metric("sglang:gen_throughput_bucket") == (None, "value")
    assert classify_metric("sglang:num_requests_bucket") == (None, "value")
    assert classify_metric("process_cpu_seconds_total") == (None, "value")


def _golden_events(case: str) -> list[Event]:
    golden = json.loads((GOLDEN / f"{case}.json").read_text())
    text = (GOLDEN / f"{case}.prom").read_text()
    return parse_exposition(
        text, node=golden["node"], source=golden["source"], time=parse_iso_time(golden["time"])
    ).events


def test_config_snapshot_finds_the_incident_prefill_pool_below_context() -> None:
    snap = config_snapshot(_golden_events("era_0_5_1_ranks"))
    assert snap is not None
    assert (snap.node, snap.role, snap.model) == ("prefill-0", "prefill", "glm-5.3")
    assert (snap.pool_tokens, snap.context_len) == (681280, 1048576)
    assert snap.pool_below_context is True
    assert snap.pool_tokens_by_rank == {"pp=0,tp=0": 681280}
    assert snap.time == parse_iso_time("2026-10-26T07:33:20Z")


def test_config_snapshot_2024_gauges_and_loads_ranks() -> None:
    snap = config_snapshot(_golden_events("era_2024_name_label"))
    assert snap is not None
    assert snap.role is None
    assert (snap.pool_tokens, snap.context_len) == (217512, 131072)
    assert (snap.max_prefill_tokens, snap.max_running_requests) == (16384, 4097)
    assert snap.pool_below_context is False
    loads = config_snapshot(_golden_events("v1_loads_prometheus"))
    assert loads is not None
    assert loads.pool_tokens == 679936
    assert loads.pool_tokens_by_rank == {"dp=0": 681280, "dp=1": 679936}
    assert loads.context_len is None and loads.pool_below_context is None


def test_config_snapshots_split_by_node_and_ignore_nan() -> None:
    events = _golden_events("ref_sample_0_5_23") + _golden_events("era_0_5_1_ranks")
    nan_context = {"name": "x", "signal": "context_len", "value": math.nan}
    events.append(Event(METRIC, "decode-0", 5.0, "s", nan_context))
    snaps = config_snapshots(events)
    assert set(snaps) == {"decode-0", "prefill-0"}
    assert snaps["decode-0"].pool_tokens == 360072
    assert snaps["decode-0"].context_len is None
    assert snaps["decode-0"].role == "decode"
    assert config_snapshot(events) is None  # two nodes: ask for one
    router = config_snapshot(_golden_events("router_smg"))
    assert router is not None and router.role == "router"


# --- round trip through prometheus_client -----------------------------------------------------


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    pool = Gauge(
        "sglang:max_total_num_tokens",
        "pool",
        ["engine_type", "model_name", "tp_rank"],
        registry=registry,
    )
    pool.labels("prefill", "glm-5.3", "0").set(681280)
    pool.labels("prefill", 'we"ird\\name\nx', "1").set(float("nan"))
    usage = Gauge("sglang:token_usage", "usage", ["engine_type"], registry=registry)
    usage.labels("decode").set(float("inf"))
    usage.labels("prefill").set(-0.5)
    releases = Counter(
        "sglang:decode_deferred_kv_release",
        "releases",
        ["engine_type", "outcome"],
        registry=registry,
    )
    releases.labels("decode", "timeout").inc(3)
    releases.labels("decode", "drained").inc(120)
    ttft = Histogram(
        "sglang:time_to_first_token_seconds",
        "ttft",
        ["model_name"],
        buckets=[0.1, 1.0, 10.0],
        registry=registry,
    )
    for value in (0.05, 0.5, 5.0, 50.0):
        ttft.labels("glm-5.3").observe(value)
    Summary("kvwatch_probe_seconds", "probe", registry=registry).observe(0.25)
    Gauge("unlabelled_gauge", "plain", registry=registry).set(1e-9)
    return registry


Sample = tuple[str, dict[str, str], float]


def _sorted(samples: list[Sample]) -> list[Sample]:
    """Order-free comparison: the text format writes `_created` as separate families."""
    return sorted(samples, key=lambda s: (s[0], sorted(s[1].items())))


def _registry_samples(registry: CollectorRegistry) -> list[Sample]:
    return _sorted(
        [
            (sample.name, dict(sample.labels), sample.value)
            for family in registry.collect()
            for sample in family.samples
        ]
    )


def _parsed_samples(text: bytes) -> list[Sample]:
    out = parse_exposition(text, node="n", source="s", time=0.0)
    assert out.dropped == {}
    return _sorted([(e.fields["name"], e.fields["labels"], e.fields["value"]) for e in out.events])


def test_round_trip_text_format() -> None:
    registry = _registry()
    parsed = _parsed_samples(generate_latest(registry))
    expected = _registry_samples(registry)
    assert len(parsed) == len(expected)
    for got, want in zip(parsed, expected, strict=True):
        assert _same(list(got), list(want)), (got, want)


def test_round_trip_openmetrics() -> None:
    registry = _registry()
    parsed = _parsed_samples(generate_openmetrics(registry))  # type: ignore[no-untyped-call]
    # prometheus_client's OpenMetrics writer spells `sglang:` names `sglang_`.
    expected = _sorted(
        [
            (name.replace("sglang:", "sglang_"), labels, value)
            for name, labels, value in _registry_samples(registry)
        ]
    )
    assert len(parsed) == len(expected)
    for got, want in zip(parsed, expected, strict=True):
        assert _same(list(got), list(want)), (got, want)
    releases = [s for s in parsed if s[0] == "sglang_decode_deferred_kv_release_total"]
    assert [(s[1]["outcome"], s[2]) for s in releases] == [("drained", 120.0), ("timeout", 3.0)]


def test_round_trip_keeps_signal_and_part() -> None:
    out = parse_exposition(generate_latest(_registry()), node="n", source="s", time=0.0)
    parts = {(e.fields["name"], e.fields["part"], e.fields.get("signal")) for e in out.events}
    assert ("sglang:time_to_first_token_seconds_bucket", "bucket", "ttft_seconds") in parts
    assert ("sglang:time_to_first_token_seconds_created", "created", None) in parts
    assert ("sglang:decode_deferred_kv_release_total", "value", "deferred_release_total") in parts
    assert ("kvwatch_probe_seconds_count", "count", None) in parts


# --- properties ----------------------------------------------------------------------------


def _accounted(out: ParseOutcome) -> int:
    return (
        len(out.events)
        + out.dropped_total
        + out.stats.get("metadata", 0)
        + out.stats.get("comments", 0)
        + out.stats.get(SAMPLES_NOT_KEPT, 0)
    )


def _nonblank_text_lines(text: str) -> int:
    return sum(1 for line in text.replace("\r", "").split("\n") if line and not line.isspace())


def _nonblank_byte_lines(data: bytes) -> int:
    count = 0
    for raw in data.split(b"\n"):
        try:
            line = raw.decode("utf-8").replace("\r", "")
        except UnicodeDecodeError:
            count += 1
            continue
        count += bool(line) and not line.isspace()
    return count


_FRAGMENTS = st.sampled_from(
    [
        "sglang:max_total_num_tokens",
        "smg_pd_ttft_seconds_bucket",
        "{",
        "}",
        '"',
        "\\",
        "=",
        ",",
        " ",
        "\t",
        "\n",
        "#",
        "# TYPE ",
        "# HELP ",
        " gauge",
        " histogram",
        'le="+Inf"',
        'engine_type="decode"',
        "tp_rank=",
        "NaN",
        "+Inf",
        "1.5e3",
        "1_0",
        "1793000000000",
        "_total",
        "_created",
        "\r",
        "é",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_random_text_never_raises_and_every_line_is_accounted(text: str) -> None:
    out = parse_exposition(text, node="n", source="s", time=None)
    assert _accounted(out) == _nonblank_text_lines(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=40).map("".join))
def test_exposition_shaped_text_is_accounted(text: str) -> None:
    out = parse_exposition(text, node="n", source="s", time=1.0)
    assert _accounted(out) == _nonblank_text_lines(text)
    for event in out.events:
        assert isinstance(event.fields["value"], float)
        assert event.time is None or math.isfinite(event.time)
        json.dumps(event.to_json_dict())


@settings(max_examples=300, deadline=None)
@given(st.binary())
def test_random_bytes_never_raise_and_every_line_is_accounted(data: bytes) -> None:
    out = parse_exposition(data, node="n", source="s", time=None)
    assert _accounted(out) == _nonblank_byte_lines(data)


@settings(max_examples=200, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=40).map("".join), st.sampled_from(sorted(SIGNALS)))
def test_samples_not_kept_are_counted_and_the_kept_are_what_a_full_read_gives(
    text: str, wanted: str
) -> None:
    full = parse_exposition(text, node="n", source="s", time=1.0, line_numbers=True)
    kept = parse_exposition(
        text, node="n", source="s", time=1.0, line_numbers=True, keep=lambda s: s == wanted
    )
    expected = [e for e in full.events if e.fields.get("signal") == wanted]
    assert [e.to_json_dict() for e in kept.events] == [e.to_json_dict() for e in expected]
    assert kept.stats.get(SAMPLES_NOT_KEPT, 0) == len(full.events) - len(expected)
    assert kept.dropped == full.dropped
    assert _accounted(kept) == _accounted(full) == _nonblank_text_lines(text)


def test_a_scrape_of_more_distinct_series_than_the_caches_hold_reads_each_as_alone() -> None:
    # Past the cache bound every block and name is parsed afresh: the same events as when each
    # line is read in a scrape of its own, including malformed blocks after the bound.
    lines = ["# TYPE sglang:num_running_reqs gauge"]
    for i in range(MAX_CACHED_BLOCKS + 300):
        lines.append(
            f'sglang:num_running_reqs{{engine_type="decode",tp_rank="{i % 8}",x="{i}"}} {i}'
        )
        lines.append(f'family_{i}_total{{a="{i}"}} {i}')
        if i % 1000 == 999:
            lines.append(f'sglang:num_running_reqs{{tp_rank="{i}",,}} 1')
    whole = parse_exposition("\n".join(lines), node="n", source="s", time=5.0)
    alone = ParseOutcome.combine(
        parse_exposition(f"{lines[0]}\n{line}", node="n", source="s", time=5.0)
        for line in lines[1:]
    )
    assert [e.to_json_dict() for e in whole.events] == [e.to_json_dict() for e in alone.events]
    assert whole.dropped == alone.dropped == {"malformed_exposition": 4}


# --- the work a scrape costs (its speed is measured in bench/snapshot_bench.py) -------------


def _scrape(series: int) -> str:
    lines: list[str] = []
    families = series // 50
    for family in range(families):
        lines.append(f"# HELP sglang:family_{family} help")
        lines.append(f"# TYPE sglang:family_{family} histogram")
        for i in range(45):
            lines.append(
                f'sglang:family_{family}_bucket{{dp_rank="{i % 8}",engine_type="decode",'
                f'le="{i}.0",model_name="glm-5.3",moe_ep_rank="0",pp_rank="0",tp_rank="{i % 8}"}}'
                f" {i}.0"
            )
        for i in range(5):
            lines.append(
                f'sglang:family_{family}_sum{{dp_rank="{i}",engine_type="decode",'
                f'model_name="glm-5.3",moe_ep_rank="0",pp_rank="0",tp_rank="{i}"}} 1.5e3'
            )
    return "\n".join(lines) + "\n"


def test_an_engines_scrape_parses_each_label_block_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # An engine repeats a few label blocks over thousands of samples: each is parsed once.
    from collector.sglang import prometheus

    calls: list[str] = []
    real = prometheus._parse_block

    def counting(text: str):  # type: ignore[no-untyped-def]
        calls.append(text)
        return real(text)

    monkeypatch.setattr(prometheus, "_parse_block", counting)
    text = _scrape(5000)
    out = parse_exposition(text, node="n", source="s", time=0.0)
    assert len(out.events) == 5000 and out.dropped == {}
    blocks = {
        line[line.index("{") + 1 : line.rindex("}")] for line in text.split("\n") if "{" in line
    }
    assert sorted(calls) == sorted(blocks)
