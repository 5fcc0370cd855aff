"""What a saved snapshot states is read as a scrape means it, or counted as not read.

Blind review 19: a `/server_info` stating a pool of -5 tokens raised a critical "KV pool -5
tokens"; a `.prom` whose pool was 1e300, or stated twice (681,280 then 99,999,999), closed a
real pool gap and half the over-length findings, and none of it was counted. Blind review 21: a
`.prom` sample's own timestamp, and a saved `/v1/loads`'s `timestamp`, were dropped when the
file's name carried no time; a `.prom` sample's source named no line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collector.events import Event, parse_iso_time
from collector.parse import ParseStats, events_by_node
from collector.sglang.prometheus import DUPLICATE_SERIES, parse_exposition
from collector.sglang.server_info import parse_server_info
from collector.state.config_timeline import ConfigTimeline

T = 1_788_600_000.0
POOL = "sglang:max_total_num_tokens"
LABELS = '{engine_type="prefill",model_name="GLM-5.3",tp_rank="0"}'


@pytest.mark.parametrize("pool", [-5, 0, 10**13, "1e300"])
def test_a_pool_no_engine_states_is_unknown_and_counted(pool: object) -> None:
    timeline = ConfigTimeline()
    timeline.update(Event("capacity", "p0", T, "p.log:1", {"max_total_num_tokens": 681_280}))
    timeline.update(Event("server_info", "p0", T + 60, "p.json", {"max_total_num_tokens": pool}))
    timeline.update(
        Event("metric", "p0", T + 120, "p.prom:3", {"signal": "pool_tokens", "value": pool})
    )
    current = timeline.current("p0")
    assert current is not None and current.pool_tokens == 681_280
    assert len(timeline.history("p0")) == 1  # no restart read into it
    assert timeline.implausible_tokens == 2


def test_a_series_stated_twice_keeps_its_first_value_and_counts_the_repeat() -> None:
    text = f"{POOL}{LABELS} 681280\n{POOL}{LABELS} 99999999\n"
    outcome = parse_exposition(text, node="prefill-0", source="p.prom", time=T)
    assert [e.get("value") for e in outcome.events] == [681_280.0]
    assert outcome.dropped[DUPLICATE_SERIES] == 1
    # Other ranks, or the same series at another timestamp, are other samples.
    other = f"{POOL}{LABELS} 681280\n{POOL}{LABELS.replace('0', '1', 1)} 681280\n"
    assert len(parse_exposition(other, node="p", source="p.prom", time=T).events) == 2


def test_a_snapshot_dates_itself_when_its_name_does_not(tmp_path: Path) -> None:
    (tmp_path / "decode-3.prom").write_text(
        f"# TYPE {POOL} gauge\n{POOL}{LABELS} 681280 1793600000000\n"
    )
    loads = {"timestamp": "2026-11-02T10:00:05Z", "version": "0.5.23", "loads": []}
    (tmp_path / "decode-7.v1_loads.json").write_text(json.dumps(loads))
    events = {e.node: e for e in events_by_node([tmp_path], ParseStats())}
    assert events["decode-3"].time == 1_793_600_000.0
    assert events["decode-3"].source == f"{tmp_path / 'decode-3.prom'}:2"
    assert events["decode-7"].time == parse_iso_time("2026-11-02T10:00:05.000Z")


@pytest.mark.parametrize("garbled", [-5, 0, 10**300])
def test_a_garbled_top_level_pool_neither_hides_nor_joins_the_ranks_pool(garbled: int) -> None:
    # Blind review 58 D4: beside a rank's plausible pool, a top-level 1e300 went unsaid, and a
    # top-level -5 (the smaller) hid the rank's 681,280, leaving the pool unknown.
    doc = {
        "disaggregation_mode": "prefill",
        "max_total_num_tokens": garbled,
        "context_length": 1_048_576,
        "internal_states": [{"dp_rank": 0, "memory_usage": {"token_capacity": 681_280}}],
    }
    (event,) = parse_server_info(doc, node="p0", source="p.json", time=T).events
    assert event.fields["max_total_num_tokens"] == 681_280
    timeline = ConfigTimeline()
    timeline.update(event)
    current = timeline.current("p0")
    assert current is not None and current.pool_tokens == 681_280
    assert timeline.implausible_tokens == 1  # counted, as every figure no engine states is
