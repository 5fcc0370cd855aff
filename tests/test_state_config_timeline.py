"""ConfigTimeline: generations per node, restarts, and queries by time."""

from __future__ import annotations

import calendar
import json
import random
from pathlib import Path

import pytest

from collector.events import Event
from collector.state.config_timeline import (
    TIMELINE_KINDS,
    ConfigChange,
    ConfigTimeline,
    batch_hint_strength,
    batch_role_hint,
)

T = float(calendar.timegm((2026, 8, 29, 10, 40, 0, 0, 0, 0)))


def ev(kind: str, node: str, t: float | None, ranks: dict[str, int] | None = None, **fields):
    return Event(kind, node, t, f"{node}.log", dict(fields), dict(ranks or {}))


def startup(tl: ConfigTimeline, node: str, t: float, pool: int, role: str = "prefill") -> None:
    tl.update(
        ev(
            "server_args",
            node,
            t,
            disaggregation_mode=role,
            transfer_backend="mooncake",
            kv_checksum=False,
            tp_size=8,
            context_length=None,
        )
    )
    tl.update(
        ev(
            "capacity",
            node,
            t + 45,
            max_total_num_tokens=pool,
            context_len=1_048_576,
            chunked_prefill_size=8192,
            max_prefill_tokens=16384,
            max_running_requests=128,
        )
    )


def test_restart_with_bigger_pool_changes_config_for_later_times_only():
    tl = ConfigTimeline()
    startup(tl, "p0", T, 681_280)
    change = tl.update(ev("server_args", "p0", T + 10_000, disaggregation_mode="prefill"))
    assert change is not None and change.restart
    assert change.config.generation == 1
    # Between the new server args and its capacity line the new pool is not known yet.
    assert tl.config_at("p0", T + 10_001).pool_tokens is None
    change = tl.update(
        ev("capacity", "p0", T + 10_050, max_total_num_tokens=2_040_000, context_len=1_048_576)
    )
    assert change is not None and not change.restart
    assert change.changed >= {"pool_tokens", "context_len"}
    assert tl.config_at("p0", T + 5_000).pool_tokens == 681_280
    assert tl.config_at("p0", T + 10_001).pool_tokens == 2_040_000
    assert tl.config_at("p0", T + 99_999).pool_tokens == 2_040_000
    # Before the first startup we assume the first generation was in force.
    assert tl.config_at("p0", T - 3600).pool_tokens == 681_280
    assert [g.generation for g in tl.history("p0")] == [0, 1]
    # Facts not restated are carried over (role, backend, tp size).
    assert tl.config_at("p0", T + 10_100).role == "prefill"
    assert tl.config_at("p0", T + 10_100).tp_size == 8
    assert tl.config_at("p0", T + 10_100).transfer_backend == "mooncake"


def test_capacity_lines_of_other_dp_ranks_are_not_restarts():
    tl = ConfigTimeline()
    tl.update(ev("server_args", "d0", T, disaggregation_mode="decode"))
    tl.update(
        ev(
            "capacity",
            "d0",
            T + 40,
            {"dp": 0, "tp": 0},
            max_total_num_tokens=360_072,
            context_len=163_840,
        )
    )
    change = tl.update(
        ev(
            "capacity",
            "d0",
            T + 40,
            {"dp": 1, "tp": 1},
            max_total_num_tokens=360_000,
            context_len=163_840,
        )
    )
    assert change is not None and not change.restart
    assert len(tl.history("d0")) == 1
    # The smallest rank pool is the one a request can overflow.
    assert tl.current("d0").pool_tokens == 360_000


def test_repeated_capacity_from_the_same_rank_is_a_restart_even_without_server_args():
    tl = ConfigTimeline()
    tl.update(ev("capacity", "u0", T, max_total_num_tokens=20_480, context_len=32_768))
    change = tl.update(
        ev("capacity", "u0", T + 900, max_total_num_tokens=40_960, context_len=32_768)
    )
    assert change is not None and change.restart
    assert tl.config_at("u0", T + 10).pool_tokens == 20_480
    assert tl.config_at("u0", T + 901).pool_tokens == 40_960


def test_same_second_disorder_of_startup_lines_is_one_generation():
    tl = ConfigTimeline()
    tl.update(ev("capacity", "p0", T, max_total_num_tokens=681_280, context_len=1_048_576))
    change = tl.update(ev("server_args", "p0", T, disaggregation_mode="prefill"))
    assert change is not None and not change.restart
    assert len(tl.history("p0")) == 1
    config = tl.current("p0")
    assert (config.role, config.pool_tokens) == ("prefill", 681_280)


def test_server_info_states_the_kv_canary_s_mode():
    """Blind review 65 D2: a snapshot stating `"kv_canary": "log"` left the mode unknown, and a
    storm's caveat said the canary was off."""
    tl = ConfigTimeline()
    tl.update(ev("server_info", "d0", T, disaggregation_mode="decode", kv_canary="log"))
    assert tl.config_at("d0", T + 1).kv_canary == "log"


def test_server_info_fills_version_and_a_changed_version_is_a_new_generation():
    tl = ConfigTimeline()
    startup(tl, "p0", T, 681_280)
    change = tl.update(
        ev(
            "server_info",
            "p0",
            T + 100,
            version="0.5.19",
            max_total_num_tokens=681_280,
            context_len=1_048_576,
            max_req_input_len=681_274,
            disaggregation_mode="prefill",
        )
    )
    assert change is not None and not change.restart and change.changed >= {"version"}
    assert tl.current("p0").max_req_input_len == 681_274
    # Same facts again: nothing changes.
    assert (
        tl.update(ev("server_info", "p0", T + 200, version="0.5.19", max_total_num_tokens=681_280))
        is None
    )
    change = tl.update(
        ev("server_info", "p0", T + 9_000, version="0.5.21", max_total_num_tokens=2_040_000)
    )
    assert change is not None and change.restart
    assert tl.config_at("p0", T + 150).version == "0.5.19"
    assert tl.config_at("p0", T + 9_500).version == "0.5.21"
    assert tl.config_at("p0", T + 9_500).pool_tokens == 2_040_000
    # A restart is when an engine is upgraded or rolled back, and SGLang never logs its version:
    # after one seen only through server args the version is unknown, the one before unchanged.
    tl.update(ev("server_args", "p0", T + 20_000, disaggregation_mode="prefill"))
    assert tl.config_at("p0", T + 20_001).version is None
    assert tl.config_at("p0", T + 9_500).version == "0.5.21"
    # A snapshot of the new process states it for the whole of it.
    tl.update(ev("server_info", "p0", T + 21_000, version="0.5.19"))
    assert tl.config_at("p0", T + 20_001).version == "0.5.19"


def test_a_dict_server_args_line_says_nothing_of_the_release():
    """The reference gives `server_args={...}` as 0.5.23's and `ServerArgs(...)` as older
    releases'; 0.5.19, the incident's engine, already prints the dict (audit U, against its
    source). Taken for a bound, it read the incident's prefill as fixed."""
    tl = ConfigTimeline()
    tl.update(ev("server_args", "p0", T, disaggregation_mode="prefill", args_format="dict"))
    assert tl.config_at("p0", T + 1).version is None


def test_metric_constants_set_pool_role_and_detect_a_changed_pool():
    tl = ConfigTimeline()
    tl.update(
        ev(
            "metric",
            "d0",
            T,
            name="sglang:max_total_num_tokens",
            labels={},
            value=360072.0,
            signal="pool_tokens",
            role="decode",
        )
    )
    tl.update(
        ev(
            "metric",
            "d0",
            T,
            name="sglang:context_len",
            labels={},
            value=163840.0,
            signal="context_len",
            role="decode",
        )
    )
    config = tl.current("d0")
    assert (config.role, config.pool_tokens, config.context_len) == ("decode", 360_072, 163_840)
    assert (
        tl.update(
            ev(
                "metric",
                "d0",
                T + 15,
                name="sglang:max_total_num_tokens",
                labels={},
                value=360072.0,
                signal="pool_tokens",
                role="decode",
            )
        )
        is None
    )
    change = tl.update(
        ev(
            "metric",
            "d0",
            T + 600,
            name="sglang:max_total_num_tokens",
            labels={},
            value=720144.0,
            signal="pool_tokens",
            role="decode",
        )
    )
    assert change is not None and change.restart
    assert tl.config_at("d0", T + 1).pool_tokens == 360_072
    assert tl.config_at("d0", T + 601).pool_tokens == 720_144


def test_pool_samples_of_dp_ranks_that_differ_are_one_generation_at_the_smallest():
    """Audit T: a DP-attention prefill whose ranks report 1.2M, 1.2M, 1.2M and 1.1M tokens in
    one scrape read as a restart at each change of rank, so the audit said "engine version
    unknown since the restart". Only a rank's own series changing is a restart."""

    def scrape(t: float, pools: list[int]) -> list[ConfigChange | None]:
        return [
            tl.update(
                ev(
                    "metric",
                    "p0",
                    t,
                    name="sglang:max_total_num_tokens",
                    labels={"engine_type": "prefill", "dp_rank": str(dp), "tp_rank": str(dp)},
                    value=float(pool),
                    signal="pool_tokens",
                    role="prefill",
                )
            )
            for dp, pool in enumerate(pools)
        ]

    tl = ConfigTimeline()
    uneven = [1_200_000, 1_200_000, 1_200_000, 1_100_000]
    scrape(T, uneven)
    scrape(T + 15, uneven)
    assert [c.pool_tokens for c in tl.history("p0")] == [1_100_000]
    # A sidecar restarted from its saved state goes on comparing each rank with its own.
    tl = ConfigTimeline.from_state(json.loads(json.dumps(tl.to_state())))
    scrape(T + 30, uneven)
    assert [c.pool_tokens for c in tl.history("p0")] == [1_100_000]
    # A rank's own pool changing is a new process: a restart, at the new figures.
    changes = scrape(T + 600, [2_000_000] * 4)
    assert changes[0] is not None and changes[0].restart
    assert not any(c is not None and c.restart for c in changes[1:])
    assert [c.pool_tokens for c in tl.history("p0")] == [1_100_000, 2_000_000]


def test_roles_from_batch_lines_time_stats_and_server_args():
    tl = ConfigTimeline()
    tl.update(
        ev(
            "decode_batch",
            "d0",
            T,
            running_req=48,
            token=212480,
            token_usage=0.59,
            pre_allocated_usage=0.07,
            prealloc_req=3,
            transfer_req=5,
            retracted_req=0,
        )
    )
    tl.update(
        ev(
            "prefill_batch",
            "p0",
            T,
            new_seq=1,
            new_token=158,
            cached_token=0,
            token_usage=0.08,
            running_req=31,
            queue_req=0,
            bootstrap_req=0,
            inflight_req=1,
        )
    )
    tl.update(
        ev(
            "prefill_batch",
            "u0",
            T,
            new_seq=1,
            new_token=158,
            cached_token=0,
            token_usage=0.08,
            running_req=31,
            queue_req=0,
        )
    )
    tl.update(ev("request_time_stats", "x0", T, rid="a", role="decode"))
    assert tl.role_at("d0") == "decode"
    assert tl.role_at("p0") == "prefill"
    assert tl.role_at("u0") == "unified"
    assert tl.role_at("x0") == "decode"
    # A guess from line shape never overrides a stated mode; a stated mode overrides a guess.
    tl.update(ev("server_args", "u0", T + 1, disaggregation_mode="prefill"))
    tl.update(ev("prefill_batch", "u0", T + 2, new_seq=1, new_token=9, queue_req=0))
    assert tl.role_at("u0", T + 3) == "prefill"
    tl.update(ev("server_args", "n0", T, disaggregation_mode=None))
    assert tl.role_at("n0") == "unified"


def test_deployment_views_advertised_context_and_prefill_pools_over_time():
    tl = ConfigTimeline()
    startup(tl, "p0", T, 681_280)
    startup(tl, "p1", T, 700_000)
    startup(tl, "d0", T, 2_000_000, role="decode")
    tl.update(ev("capacity", "d1", T + 50, max_total_num_tokens=900_000, context_len=131_072))
    assert tl.advertised_context(T + 100) == 1_048_576
    assert tl.prefill_pools_at(T + 100) == {"p0": 681_280, "p1": 700_000}
    assert tl.is_pd(T + 100)
    startup(tl, "p0", T + 5_000, 2_040_000)
    assert tl.prefill_pools_at(T + 100) == {"p0": 681_280, "p1": 700_000}
    assert tl.prefill_pools_at(T + 6_000) == {"p0": 2_040_000, "p1": 700_000}
    assert tl.nodes() == ["d0", "d1", "p0", "p1"]


def _views_by_scan(tl: ConfigTimeline, time: float | None, model: str | None):
    configs = list(tl.configs_at(time, model))
    contexts = [c.context_len for c in configs if c.context_len is not None]
    pools = {c.node: c.pool_tokens for c in configs if c.role == "prefill" and c.pool_tokens}
    largest = max(sorted(pools), key=lambda n: pools[n]) if pools else None
    return (
        max(contexts) if contexts else None,
        (largest, pools[largest]) if largest is not None else None,
        any(c.is_pd for c in tl.configs_at(time)),
    )


def test_deployment_views_kept_up_to_date_answer_as_a_scan_would():
    """advertised_context, largest_prefill_pool and is_pd answer from maxima kept as
    generations change; at any time and for any model they equal a scan of the fleet."""
    rng = random.Random(7)
    nodes = [f"n{i}" for i in range(12)]
    models = [None, "m1", "m2"]
    for trial in range(3):
        tl = ConfigTimeline()
        t = T
        times = [None, T - 1.0]
        for step in range(400):
            t += rng.choice([0.0, 1.0, 60.0, 900.0])
            at = t - 2_000.0 if rng.random() < 0.05 else t
            node = rng.choice(nodes)
            pick = rng.random()
            if pick < 0.3:
                fields = {"disaggregation_mode": rng.choice(["prefill", "decode", None])}
                if rng.random() < 0.7:
                    fields["model"] = rng.choice(["m1", "m2"])
                tl.update(ev("server_args", node, at, **fields))
            elif pick < 0.7:
                pool = rng.choice([100, 200, 300])
                context = rng.choice([150, 250, 350])
                tl.update(ev("capacity", node, at, max_total_num_tokens=pool, context_len=context))
            else:
                pool = rng.choice([100, 200, 300])
                tl.update(ev("server_info", node, at, max_total_num_tokens=pool, version="1"))
            if step % 37 == 0 and trial == 2:
                tl = ConfigTimeline.from_state(json.loads(json.dumps(tl.to_state())))
            times.append(t)
            for time in (t, t + 1.0, None, rng.choice(times)):
                model = rng.choice(models)
                kept = (
                    tl.advertised_context(time, model),
                    tl.largest_prefill_pool(time, model),
                    tl.is_pd(time),
                )
                assert kept == _views_by_scan(tl, time, model), (trial, step, time, model)
    assert not tl.current_at(T)  # the early times above were answered by the scan

    # A prefill node's model learned without a restart: it leaves the unknown-model deployment.
    tl = ConfigTimeline()
    tl.update(ev("metric", "p0", T, signal="pool_tokens", value=500, role="prefill"))
    assert tl.largest_prefill_pool(T, "m2") == ("p0", 500)
    tl.update(ev("server_args", "p0", T + 1, disaggregation_mode="prefill", model="m1"))
    assert len(tl.history("p0")) == 1
    assert tl.largest_prefill_pool(T + 1, "m2") is None
    assert tl.largest_prefill_pool(T + 1, "m1") == tl.largest_prefill_pool(T + 1) == ("p0", 500)


def test_state_round_trip_and_json_view():
    tl = ConfigTimeline()
    startup(tl, "p0", T, 681_280)
    startup(tl, "p0", T + 5_000, 2_040_000)
    restored = ConfigTimeline.from_state(json.loads(json.dumps(tl.to_state())))
    for t in (T, T + 100, T + 5_001, T + 6_000):
        assert restored.config_at("p0", t) == tl.config_at("p0", t)
    # Restart detection state survives too: the same rank's capacity again is a restart.
    change = restored.update(
        ev("capacity", "p0", T + 8_000, max_total_num_tokens=1, context_len=1_048_576)
    )
    assert change is not None and change.restart
    view = tl.to_json_dict()
    assert view["p0"]["role"] == "prefill"
    assert [g["max_total_num_tokens"] for g in view["p0"]["timeline"]] == [681_280, 2_040_000]
    assert view["p0"]["timeline"][0]["time"] == "2026-08-29T10:40:00.000Z"


def test_unrelated_events_change_nothing():
    tl = ConfigTimeline()
    assert tl.update(ev("request_finished", "d0", T, rid="a")) is None
    assert tl.update(ev("http_access", "d0", T, status=200)) is None
    assert tl.nodes() == []
    assert tl.config_at("zz", T) is None


def test_a_version_unknown_after_a_restart_is_filled_not_restarted():
    tl = ConfigTimeline()
    startup(tl, "p0", T, 681_280)
    tl.update(ev("server_info", "p0", T + 60, version="0.5.19", max_total_num_tokens=681_280))
    startup(tl, "p0", T + 5_000, 2_040_000)  # restart; logs do not say the version
    assert tl.config_at("p0", T + 5_100).version is None  # not the old one's
    change = tl.update(
        ev("server_info", "p0", T + 5_100, version="0.5.22", max_total_num_tokens=2_040_000)
    )
    assert change is not None and not change.restart and change.changed == {"version"}
    assert len(tl.history("p0")) == 2
    assert tl.config_at("p0", T + 5_001).version == "0.5.22"
    assert tl.config_at("p0", T + 100).version == "0.5.19"


def test_facts_older_than_the_current_generation_fill_the_past_without_restarting():
    tl = ConfigTimeline()
    # Snapshots read out of order: the newest /server_info first, then an old metric scrape.
    tl.update(
        ev(
            "server_info",
            "p0",
            T + 9_000,
            version="0.5.22",
            max_total_num_tokens=2_040_000,
            disaggregation_mode="prefill",
        )
    )
    change = tl.update(
        ev(
            "metric",
            "p0",
            T,
            name="sglang:max_total_num_tokens",
            labels={},
            value=681280.0,
            signal="pool_tokens",
            role="prefill",
        )
    )
    # Nothing known before T + 9000 to fill, and no phantom generation at the end.
    assert len(tl.history("p0")) == 1
    assert tl.current("p0").pool_tokens == 2_040_000
    assert change is None
    # With an older generation on record, the late fact fills what it did not know.
    tl2 = ConfigTimeline()
    tl2.update(ev("server_args", "p0", T, disaggregation_mode="prefill"))
    tl2.update(ev("server_args", "p0", T + 9_000, disaggregation_mode="prefill"))
    tl2.update(
        ev("capacity", "p0", T + 9_030, max_total_num_tokens=2_040_000, context_len=1_048_576)
    )
    change = tl2.update(
        ev(
            "server_info",
            "p0",
            T + 60,
            version="0.5.19",
            max_total_num_tokens=681_280,
            context_len=1_048_576,
        )
    )
    assert change is not None and not change.restart
    assert change.changed == {"version", "pool_tokens", "context_len"}
    assert tl2.config_at("p0", T + 100).pool_tokens == 681_280
    assert tl2.config_at("p0", T + 100).version == "0.5.19"
    assert tl2.config_at("p0", T + 9_100).pool_tokens == 2_040_000
    assert tl2.config_at("p0", T + 9_100).version is None
    assert len(tl2.history("p0")) == 2


def lazy_batch(kind: str, node: str, t: float, text: str, parsed: list[str]) -> Event:
    """A batch line whose fields are parsed on first access, noting each parse in `parsed`."""

    def parse(body: str) -> dict[str, object]:
        parsed.append(body)
        fields: dict[str, object] = {}
        for item in body.split(", "):
            key, _, value = item.partition(": ")
            fields[key.strip("#").replace("-", "_")] = int(value)
        return fields

    return Event.deferred(kind, node, t, f"{node}.log", parse, text)


def test_batch_lines_are_not_parsed_once_the_role_is_settled() -> None:
    tl = ConfigTimeline()
    parsed: list[str] = []
    tl.update(ev("server_args", "p0", T, disaggregation_mode="prefill"))
    for k in range(3):
        tl.update(lazy_batch("prefill_batch", "p0", T + k, "#new-seq: 1, #queue-req: 0", parsed))
    assert parsed == [] and tl.role_at("p0") == "prefill"
    # A shape guess (no PD keys: unified) is weak, so later lines are still read, and a PD
    # line then settles the role; after that nothing is read again.
    tl.update(lazy_batch("decode_batch", "d0", T, "#running-req: 4", parsed))
    tl.update(lazy_batch("decode_batch", "d0", T + 1, "#running-req: 4, #transfer-req: 2", parsed))
    tl.update(lazy_batch("decode_batch", "d0", T + 2, "#running-req: 5, #transfer-req: 1", parsed))
    assert parsed == ["#running-req: 4", "#running-req: 4, #transfer-req: 2"]
    assert tl.role_at("d0", T) == "decode"


def test_a_settled_role_still_follows_a_restart_that_states_another_mode() -> None:
    tl = ConfigTimeline()
    tl.update(ev("server_args", "n0", T, disaggregation_mode="prefill"))
    tl.update(ev("request_time_stats", "n0", T + 5, rid="a", role="prefill"))
    change = tl.update(ev("server_args", "n0", T + 9_000, disaggregation_mode="decode"))
    assert change is not None and change.restart
    assert tl.role_at("n0", T + 10) == "prefill"
    assert tl.role_at("n0", T + 9_001) == "decode"


def window(node: str, t: float | None, role_hint: str | None, events: int = 3) -> Event:
    """A worker's partial window (collector.state.node_windows) carrying its lines' role hint."""
    fields = {"window_start": T, "window_seconds": 300.0, "events": events}
    return Event(
        "node_window",
        node,
        t,
        f"window:{node}",
        {**fields, "counts": {}, "sums": {}, "queue_max": 0.0, "role_hint": role_hint},
    )


def test_batch_role_hints_by_hand() -> None:
    assert batch_role_hint("prefill_batch", {"new_seq", "bootstrap_req"}) == "prefill"
    assert batch_role_hint("prefill_batch", {"new_seq", "queue_req"}) == "unified"
    assert batch_role_hint("decode_batch", {"running_req", "transfer_req"}) == "decode"
    assert batch_role_hint("decode_batch", {"running_req", "token_usage"}) == "unified"
    assert batch_role_hint("request_finished", {"transfer_req"}) is None
    assert (
        batch_hint_strength(None) < batch_hint_strength("unified") < batch_hint_strength("decode")
    )
    assert batch_hint_strength("prefill") == batch_hint_strength("decode")
    assert {"node_window", "prefill_batch", "decode_batch"} <= TIMELINE_KINDS


def test_a_node_windows_role_hint_counts_like_a_batch_line() -> None:
    tl = ConfigTimeline()
    # The first hint of a node opens its first generation at the hint's time.
    change = tl.update(window("d0", T + 7, "unified", events=0))
    assert change is not None and change.restart and change.config.since == T + 7
    assert tl.role_at("d0") == "unified"
    # A PD hint is strong: it replaces the guess, and nothing replaces it afterwards.
    tl.update(window("d0", T + 300, "decode"))
    assert tl.role_at("d0") == "decode"
    assert tl.update(window("d0", T + 600, "unified")) is None
    assert tl.update(window("d0", T + 600, "prefill")) is None
    assert tl.role_at("d0") == "decode"
    # A stated mode is not overridden by a guess, and a window without lines hints nothing.
    tl.update(ev("server_args", "u0", T, disaggregation_mode="prefill"))
    assert tl.update(window("u0", T + 300, "unified")) is None
    assert tl.role_at("u0") == "prefill"
    assert tl.update(window("n0", T, None)) is None and "n0" not in tl
    assert tl.update(window("n0", T, "garbage")) is None and "n0" not in tl


def test_node_window_hints_and_batch_lines_give_the_same_generations() -> None:
    lines = ConfigTimeline()
    windows = ConfigTimeline()
    for tl, hint in ((lines, None), (windows, "node_window")):
        tl.update(ev("server_args", "p0", T, model="glm"))  # no mode: the role is not stated
        if hint is None:
            tl.update(ev("prefill_batch", "p0", T + 60, new_seq=1, queue_req=0))
            tl.update(ev("prefill_batch", "p0", T + 61, new_seq=1, bootstrap_req=2))
        else:
            tl.update(window("p0", T + 60, "unified", events=0))
            tl.update(window("p0", T + 61, "prefill", events=0))
            tl.update(window("p0", T + 299, "prefill"))
    assert windows.to_json_dict() == lines.to_json_dict()
    assert windows.role_at("p0", T + 100) == "prefill"


def test_start_up_lines_after_the_node_was_seen_running_are_a_new_process() -> None:
    # A log whose start rotated away: the node is first seen serving, then restarts.
    tl = ConfigTimeline()
    tl.update(ev("request_time_stats", "p0", T, role="prefill"))
    startup(tl, "p0", T + 3600, pool=2_040_000)
    assert tl.config_at("p0", T + 60).pool_tokens is None  # not the next process's pool
    assert tl.config_at("p0", T + 3700).pool_tokens == 2_040_000
    assert len(tl.history("p0")) == 2

    # Seen running through a /server_info snapshot: the restart does not overwrite its pool.
    tl = ConfigTimeline()
    tl.update(ev("server_info", "p0", T, max_total_num_tokens=681_280, version="0.5.19"))
    startup(tl, "p0", T + 3600, pool=2_040_000)
    assert tl.config_at("p0", T + 60).pool_tokens == 681_280
    assert tl.config_at("p0", T + 3700).pool_tokens == 2_040_000

    # A snapshot taken while the process was starting (clocks a few seconds apart) is not.
    tl = ConfigTimeline()
    tl.update(ev("server_info", "p0", T, version="0.5.22"))
    startup(tl, "p0", T + 5, pool=2_040_000)
    (only,) = tl.history("p0")
    assert (only.version, only.pool_tokens) == ("0.5.22", 2_040_000)

    # Restored from a saved state, the timeline still knows the generation was seen running.
    tl = ConfigTimeline()
    tl.update(ev("decode_batch", "d0", T, transfer_req=1))
    tl = ConfigTimeline.from_state(json.loads(json.dumps(tl.to_state())))
    startup(tl, "d0", T + 3600, pool=1_000_000, role="decode")
    assert len(tl.history("d0")) == 2


def test_a_saved_model_card_keeps_the_node_s_role_and_names_its_model(tmp_path: Path) -> None:
    """`/v1/models` says nothing of the disaggregation mode: saved beside a decode node's
    `/server_info`, it turned the node `unified` (every node of the demo, with a card each)."""
    from collector.parse import ParseStats, events_by_node

    stem = tmp_path / "decode-0@20261101T100000Z"
    info = {"disaggregation_mode": "decode", "max_total_num_tokens": 2_400_000}
    stem.with_name(stem.name + ".server_info.json").write_text(
        json.dumps({**info, "version": "0.5.23", "served_model_name": "glm"})
    )
    card = {"id": "glm", "object": "model", "max_model_len": 1_048_576}
    stem.with_name(stem.name + ".v1_models.json").write_text(
        json.dumps({"object": "list", "data": [card]})
    )
    timeline = ConfigTimeline()
    for event in events_by_node([str(tmp_path)], ParseStats()):
        timeline.update(event)
    config = timeline.current("decode-0")
    assert config is not None
    assert (config.role, config.model, config.context_len) == ("decode", "glm", 1_048_576)


def _timeline_of(lines: list[str]) -> ConfigTimeline:
    from collector.sglang.logs import LineParser

    parser = LineParser("prefill-0")
    tl = ConfigTimeline()
    for number, line in enumerate(lines, 1):
        _, event = parser.parse(line, f"prefill-0.log:{number}")
        if event is not None:
            tl.update(event)
    return tl


ARGS_0519 = (
    "[2026-09-06 00:00:01] server_args={'model_path': 'zai-org/GLM-5.3', 'context_length': "
    "1048576, 'disaggregation_mode': 'prefill', 'tp_size': 8}"
)


def test_the_pool_is_read_from_the_kv_allocation_when_no_capacity_line_is():
    """Audit U: 0.5.19's post-capture resize logs an upper bound, then the resized pool; with
    the scheduler's capacity line not read (a log cut between them), the pool was unknown."""
    tl = _timeline_of(
        [
            ARGS_0519,
            "[2026-09-06 00:00:59 TP0] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: "
            "2400000, KV size: 26.88 GB",
            "[2026-09-06 00:00:59 TP0] Post-capture KV sizing: full_layer_tokens=681280, "
            "swa_layer_tokens=0",
            "[2026-09-06 00:00:59 TP0] Post-capture KV sizing: KV cache allocated. dtype: "
            "torch.bfloat16, #tokens: 681280, KV size: 7.63 GB, avail mem=3.02 GB",
        ]
    )
    config = tl.config_at("prefill-0", T + 10**6)
    assert config is not None
    assert (config.pool_tokens, config.context_len) == (681_280, 1_048_576)


def test_a_hybrid_model_s_pool_is_its_full_pool_and_the_capacity_line_still_rules():
    tl = _timeline_of(
        [
            ARGS_0519,
            "[2026-09-06 00:00:58 TP0] Full KV Cache is allocated. dtype: torch.bfloat16, "
            "#tokens: 681280, K size: 3.81 GB, V size: 3.81 GB",
            "[2026-09-06 00:00:58 TP0] SWA KV Cache is allocated. dtype: torch.bfloat16, "
            "#tokens: 4000000, K size: 1.00 GB, V size: 1.00 GB",
        ]
    )
    assert tl.config_at("prefill-0", T + 10**6).pool_tokens == 681_280  # type: ignore[union-attr]
    tl = _timeline_of(
        [
            ARGS_0519,
            "[2026-09-06 00:00:58 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: "
            "681344, K size: 3.81 GB, V size: 3.81 GB",
            "[2026-09-06 00:01:00 TP0] max_total_num_tokens=681280, chunked_prefill_size=16384, "
            "max_prefill_tokens=16384, max_running_requests=64, context_len=1048576",
        ]
    )
    history = [c.pool_tokens for c in tl.history("prefill-0")]
    assert history == [681_280]  # the capacity line's, in the same start-up


def test_a_dcp_size_no_deployment_has_is_not_taken():
    """A garbled `dcp_size` multiplied into the pool would hide a real gap (or make one)."""
    for garbled, kept in ((2, 2), (0, None), (-3, None), (10**9, None), ("4", 4)):
        tl = ConfigTimeline()
        tl.update(ev("server_args", "p0", T, disaggregation_mode="prefill", dcp_size=garbled))
        tl.update(ev("capacity", "p0", T + 60, max_total_num_tokens=681_280, context_len=2**20))
        config = tl.config_at("p0", T + 61)
        assert config is not None and config.dcp_size == kept, garbled
        assert config.pool_below_context is (kept is None)


def test_a_capacity_line_whose_pool_cannot_be_read_changes_nothing():
    """`max_total_num_tokens=nan`, or a line cut before its number: taken for a restart, it
    wiped the pool and release the node ran with, and the exposures' pool evidence with them
    (blind review 7)."""
    tl = ConfigTimeline()
    startup(tl, "p0", T, 681_280)
    before = tl.config_at("p0", T + 100)
    for pool in (float("nan"), None, -1):
        tl.update(ev("capacity", "p0", T + 600, max_total_num_tokens=pool, context_len=1_048_576))
    assert len(tl.history("p0")) == 1
    assert tl.config_at("p0", T + 700) == before
    assert before is not None and before.pool_tokens == 681_280


def _restarted(started: float) -> ConfigTimeline:
    """p0 on 0.5.19 and a 681,280 pool at T; a snapshot at T + 3,600 of 0.5.22 and a 2.04M pool,
    stating the engine started at `started`."""
    tl = ConfigTimeline()
    tl.update(ev("server_info", "p0", T, version="0.5.19", max_total_num_tokens=681_280))
    change = tl.update(
        ev(
            "server_info",
            "p0",
            T + 3_600,
            version="0.5.22",
            max_total_num_tokens=2_040_000,
            started_at=started,
        )
    )
    assert change is not None and change.restart
    return tl


def test_a_restart_a_snapshot_shows_is_dated_by_the_startup_time_it_states():
    """Blind review 30a: prefill's logs missing, its snapshot saved ten minutes after a restart
    to a 2.04M pool; dated by the file, an honest answer in those minutes was judged by the old
    pool and called exposed. `/server_info` states when the engine started."""
    tl = _restarted(T + 3_000)
    assert tl.config_at("p0", T + 2_999).pool_tokens == 681_280
    assert tl.config_at("p0", T + 3_001).pool_tokens == 2_040_000
    assert tl.config_at("p0", T + 3_001).version == "0.5.22"
    # A start before the generation it would end, or after the snapshot, says nothing of when.
    for started in (T - 60, T + 9_000):
        tl = _restarted(started)
        assert tl.config_at("p0", T + 3_001).pool_tokens == 681_280
        assert tl.config_at("p0", T + 3_600).pool_tokens == 2_040_000


def test_a_node_known_first_from_a_snapshot_has_its_configuration_since_its_start():
    """Blind review 63 J2: a prefill known only from its `/server_info`, saved three minutes
    after the engine started, had its pool gap dated at the file. One process has one pool:
    the configuration held from `startup_time`; a start after the snapshot says nothing."""
    for started, since in ((T - 180.0, T - 180.0), (T + 60.0, T)):
        tl = ConfigTimeline()
        tl.update(ev("server_info", "p0", T, max_total_num_tokens=681_280, started_at=started))
        assert [c.since for c in tl.history("p0")] == [since]


@pytest.mark.parametrize("served", [True, False])
def test_a_snapshot_s_startup_after_the_node_served_is_a_restart_whatever_changed(
    served: bool,
) -> None:
    """Blind review 62 D2: a restart onto a capped context, its start-up lines missing, the pool
    unchanged; its snapshot (context 655,360, started at T + 7,200) was taken for the whole log,
    the gap before it unsaid. The node served from T + 100: that process started before."""
    tl = ConfigTimeline()
    startup(tl, "p0", T, 681_280)
    if served:
        tl.update(ev("prefill_batch", "p0", T + 100, new_seq=1, new_token=8_192, cached_token=0))
    tl.update(
        ev(
            "server_info",
            "p0",
            T + 9_000,
            max_total_num_tokens=681_280,
            context_len=655_360,
            started_at=T + 7_200.0,
        )
    )
    contexts = [(c.since, c.context_len) for c in tl.history("p0")]
    if served:
        assert contexts == [(T, 1_048_576), (T + 7_200.0, 655_360)]
    else:  # never seen serving: the snapshot may be of the process the start-up lines began
        assert contexts == [(T, 655_360)]


def test_a_snapshot_s_startup_is_no_restart_of_a_log_begun_mid_run() -> None:
    """No start-up line ties the log's clock to `startup_time`'s UTC: read in the wrong zone,
    a log begun mid-run puts the same process's start hours after its first line."""
    tl = ConfigTimeline()
    tl.update(ev("prefill_batch", "p0", T, new_seq=1, new_token=8_192, cached_token=0))
    tl.update(ev("prefill_batch", "p0", T + 100, new_seq=1, new_token=8_192, cached_token=0))
    tl.update(
        ev(
            "server_info",
            "p0",
            T + 30_000,
            max_total_num_tokens=681_280,
            context_len=1_048_576,
            started_at=T + 18_000.0,  # five hours in: the host's zone, not a restart
        )
    )
    assert [c.pool_tokens for c in tl.history("p0")] == [681_280]


def test_a_restart_that_turns_the_canary_off_says_so():
    """Blind review 37: `kv_canary='none'` was read as unstated and the `log` of the start
    before carried forward, so a storm after the restart read as watched, and as all clear."""
    tl = _timeline_of(
        [
            "[2026-09-30 00:00:00] server_args=ServerArgs(model_path='zai-org/GLM-5.3', "
            "disaggregation_mode='decode', kv_canary='log')",
            "[2026-09-30 03:12:00] server_args={'model_path': 'zai-org/GLM-5.3', "
            "'disaggregation_mode': 'decode', 'kv_canary': 'none'}",
        ]
    )
    assert [c.kv_canary for c in tl.history("prefill-0")] == ["log", "none"]
