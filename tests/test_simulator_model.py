"""The simulator's model pieces: scenarios, the paged pool, the latency floor, prompts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.content import PromptError, parse_chat, render_reply
from simulator.engine import EngineProfile
from simulator.latency import LatencyModel
from simulator.pool import PagedKVPool, RadixCache
from simulator.scenario import (
    ScenarioError,
    apply_overrides,
    bundled_scenarios,
    load_scenario,
)


def test_bundled_scenarios_include_the_contracted_ones_and_all_load() -> None:
    names = set(bundled_scenarios())
    for base in ("incident-replay", "healthy-long-context", "abort-race-storm"):
        assert base in names and f"{base}-small" in names
    for name in names:
        assert load_scenario(name).name == name


def test_incident_replay_has_the_incident_numbers() -> None:
    sc = load_scenario("incident-replay")
    pre = sc.deployment.prefill
    assert (pre.version, pre.context_len, pre.max_total_num_tokens) == ("0.5.19", 1048576, 681280)
    assert (sc.end_epoch - sc.start_epoch) / 86400 >= 3
    restart = sc.restarts[0]
    assert restart.prefill["version"] == "0.5.22"
    assert restart.prefill["max_total_num_tokens"] >= 2_000_000
    assert restart.at.hour == 14 and (restart.back.hour, restart.back.minute) == (19, 40)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


BASE = """
name: t
start: 2026-01-01T00:00:00Z
end: 2026-01-01T01:00:00Z
deployment:
  prefill: {max_total_num_tokens: 1000, context_len: 2000, version: "0.5.19"}
  decode: {max_total_num_tokens: 1000, context_len: 2000}
traffic:
  rate_per_s: 1
  prompt_tokens: {median: 100}
  output_tokens: {median: 10}
"""


def test_unknown_key_is_refused_and_named(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE.replace("rate_per_s: 1", "rate_per_s: 1\n  ratee: 2"))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert "traffic.ratee" in str(err.value)


def test_feature_missing_from_version_is_refused_naming_the_key(tmp_path: Path) -> None:
    text = BASE.replace('version: "0.5.19"}', 'version: "0.5.19", kv_checksum: true}')
    with pytest.raises(ScenarioError) as err:
        load_scenario(_write(tmp_path, text))
    assert "deployment.prefill" in str(err.value) and "kv_checksum" in str(err.value)


def test_bad_restart_override_names_its_key(tmp_path: Path) -> None:
    text = BASE + (
        "restarts:\n  - at: 2026-01-01T00:10:00Z\n    back: 2026-01-01T00:20:00Z\n"
        "    prefill: {page_sise: 4}\n"
    )
    with pytest.raises(ScenarioError) as err:
        load_scenario(_write(tmp_path, text))
    assert "restarts.0.prefill" in str(err.value) and "page_sise" in str(err.value)


def test_overrides_revalidate() -> None:
    sc = apply_overrides(
        load_scenario("incident-replay-small"), {"deployment.prefill.version": "0.5.21"}
    )
    assert sc.deployment.prefill.profile.over_length == "refuse_before_bootstrap"
    with pytest.raises(ScenarioError):
        apply_overrides(sc, {"deployment.prefill.page_size": 0})


def test_versions_map_to_the_incident_behaviours() -> None:
    assert EngineProfile.for_version("0.5.19").over_length == "stub_leak"
    assert EngineProfile.for_version("0.5.20").over_length == "retire_after_bootstrap"
    assert EngineProfile.for_version("v0.5.23").over_length == "refuse_before_bootstrap"
    assert not EngineProfile.for_version("0.5.20").deferred_release_default
    assert EngineProfile.for_version("0.5.21").deferred_release_default
    assert EngineProfile.for_version("0.5.21").premature_drain_ack("mooncake")
    assert not EngineProfile.for_version("0.5.22").premature_drain_ack("mooncake")
    assert EngineProfile.for_version("0.5.22").premature_drain_ack("nixl")


def test_freed_pages_are_relet_without_wiping() -> None:
    pool = PagedKVPool(capacity_tokens=64 * 10, page_size=64)
    a = pool.alloc(4, owner=1)
    assert a is not None
    pool.write(a, 111)
    pool.free(a)
    b = pool.alloc(6, owner=2)
    assert b is not None
    assert list(b[:4]) == list(a)  # the lowest free pages: the ones just freed
    assert set(pool.content[b].tolist()) == {111, 0}  # stale content, never wiped
    assert pool.alloc(5, owner=3) is None  # only 4 pages left
    assert pool.free_pages == 4


def test_radix_cache_reuses_and_evicts_unused_entries() -> None:
    pool = PagedKVPool(capacity_tokens=64 * 8, page_size=64)
    cache = RadixCache(pool)
    doc = pool.alloc(4, owner=1)
    assert doc is not None
    entry = cache.insert(-1, doc)
    assert cache.match(-1) is entry
    entry.refs = 1
    assert cache.alloc(6, owner=2) is None  # cannot evict a prefix in use
    entry.refs = 0
    got = cache.alloc(6, owner=2)
    assert got is not None and cache.match(-1) is None


def test_honest_prefill_is_always_slower_than_the_physical_floor() -> None:
    sc = load_scenario("incident-replay")
    lat = LatencyModel.from_specs(sc.model, sc.hardware)
    for uncached, cached in ((1, 0), (4096, 0), (16384, 800000), (820000, 0)):
        assert lat.chunk_compute_s(uncached, cached) > lat.prefill_floor_s(uncached, cached)
    # the incident's tell: a one-token stub takes far less than a 800k-token prompt's floor
    assert lat.chunk_compute_s(1, 0) < lat.prefill_floor_s(800000, 0) / 1000
    # prefix-cache hits are legitimately fast
    assert lat.chunk_compute_s(5000, 800000) < lat.chunk_compute_s(805000, 0) / 10


def test_chat_prompt_directives_and_markers() -> None:
    spec = parse_chat(
        [
            {
                "role": "user",
                "content": "[[doc contract-7 5000]] Keep MARK-abc123 [[pad 100]] now [[reply 12]]",
            }
        ]
    )
    assert spec.doc_name == "contract-7" and spec.doc_tokens == 5000
    assert spec.markers == ("MARK-abc123",)
    assert spec.natural_output == 12
    # 4 template + 5000 doc + "Keep MARK-abc123" (2) + 100 pad + "now" (1) + 2 tail
    assert spec.tokens == 4 + 5000 + 2 + 100 + 1 + 2
    assert spec.prefix_tokens == 4 + 5000
    with pytest.raises(PromptError):
        parse_chat([])
    with pytest.raises(PromptError):
        parse_chat([{"role": "user", "content": "[[pad lots]]"}])


def test_reply_lists_the_markers_it_attended_over() -> None:
    reply = render_reply(["MARK-aaa", "MARK-bbb"], 40, seed=3)
    assert "MARK-aaa" in reply and "MARK-bbb" in reply
    assert len(reply.split()) <= 42
    assert "MARK-" not in render_reply([], 40, seed=3)


def test_pool_alloc_is_lowest_first_across_fragmentation() -> None:
    pool = PagedKVPool(capacity_tokens=64 * 5000, page_size=64)
    pages = [pool.alloc(10, owner=i) for i in range(100)]
    for i in range(0, 100, 2):
        got = pages[i]
        assert got is not None
        pool.free(got)
    again = pool.alloc(25, owner=999)
    assert again is not None
    expected = np.concatenate([np.arange(0, 10), np.arange(20, 30), np.arange(40, 45)])
    assert again.tolist() == expected.tolist()
