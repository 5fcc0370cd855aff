"""Two PD deployments of one model read together are two: each node's pool is judged against
the context its own deployment serves, the nodes its requests' rooms joined it to.

Why: blind review 20. A healthy deployment (context 262,144, pools 500k and 600k) read beside a
leaking one (context 1,048,576) got two `pool_below_context` warnings, "KV pool 500,000 tokens <
context 1,048,576", the other deployment's context, although no request ever crossed between
them; a third deployment's critical stated the other's gap (748,576 tokens instead of 224,288).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from collector.forensics.driver import run_forensics
from simulator.offline import run_offline
from simulator.scenario import scenario_from_dict
from tests.engine_lines import finish_line

SCENARIOS = Path(__file__).parents[1] / "simulator" / "scenarios"

DAY = "2026-10-22"


def _start(role: str, context: int, pool: int, checksum: bool | None = None) -> str:
    """A GLM-5.3 node's start-up lines (server args as the 0.5.x dict, then its pool)."""
    said = "" if checksum is None else f"'disaggregation_enable_kv_checksum': {checksum}, "
    return (
        f"[{DAY} 08:00:00] server_args={{'model_path': 'zai-org/GLM-5.3-FP8', 'tp_size': 8, "
        f"'context_length': {context}, 'disaggregation_mode': '{role}', {said}"
        "'disaggregation_transfer_backend': 'mooncake', 'log_requests': True}\n"
        f"[{DAY} 08:02:11 TP0] max_total_num_tokens={pool}, chunked_prefill_size=16384, "
        f"max_prefill_tokens=32768, max_running_requests=64, context_len={context}, "
        "available_gpu_mem=52.29 GB\n"
    )


def _traffic(
    name: str, rooms: range, prompt: int, host: str, first_minute: int = 5
) -> tuple[str, str]:
    """(prefill's, decode's) `Finish:` lines of honest requests, one a minute from 08:05 (or
    `first_minute` past 08:00)."""
    prefill, decode = [], []
    for i, room in enumerate(rooms):
        minute = first_minute + i
        at = f"{DAY} {8 + minute // 60:02d}:{minute % 60:02d}:00"
        rid = f"{name}{room:030x}"
        prefill.append(finish_line(at, rid, room, prompt, tokens=1, host=host, e2e=9.0))
        decode.append(finish_line(at, rid, room, prompt, host=host, e2e=30.0))
    return "".join(prefill), "".join(decode)


def _deployment(
    logs: Path,
    name: str,
    context: int,
    pools: tuple[int, int],
    rooms: range,
    *,
    first_minute: int = 5,
    checksum: bool | None = None,
    decode_logs: bool = True,
) -> None:
    prefill, decode = _traffic(name, rooms, 120_000, f"10.{len(name)}.0.11", first_minute)
    start = _start("prefill", context, pools[0], checksum)
    (logs / f"{name}-prefill-0.log").write_text(start + prefill)
    if decode_logs:
        start = _start("decode", context, pools[1], checksum)
        (logs / f"{name}-decode-0.log").write_text(start + decode)


def _pool_findings(logs: Path, out: Path) -> list[tuple[str, str, int]]:
    result = run_forensics([str(logs)], out, write_parquet=False, workers=1)
    return sorted(
        (f["node"], f["severity"], f["evidence"]["context_len"])
        for f in result.summary["findings"]
        if f["detector"] == "pool_below_context"
    )


def test_a_healthy_deployment_is_not_judged_by_the_other_s_context(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _deployment(logs, "east", 262_144, (500_000, 600_000), range(1000, 1030))
    _deployment(logs, "west", 1_048_576, (681_280, 1_200_000), range(5000, 5030))
    found = _pool_findings(logs, tmp_path / "out")
    assert found and {node for node, _, _ in found} == {"west-prefill-0"}
    assert {context for _, _, context in found} == {1_048_576}


def test_a_tier_idle_for_half_an_hour_beside_a_longer_one_is_not_paged(tmp_path: Path) -> None:
    """Blind review 42 D2: a 524,288-token tier of the model (pools 681,280 and 700,000, each
    over its own context) beside its 1,048,576-token tier, idle its first 30 minutes: past the
    wait for a room (`link_wait_seconds`) its nodes were warned against the other tier's
    context. Its pool holds its own context and nothing joined it to them: said as info."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _deployment(logs, "long", 1_048_576, (2_040_000, 2_100_000), range(5000, 5060))
    _deployment(logs, "std", 524_288, (681_280, 700_000), range(1000, 1020), first_minute=35)
    found = _pool_findings(logs, tmp_path / "out")
    assert found and {severity for _, severity, _ in found} == {"info"}
    assert {node for node, _, _ in found} <= {"std-prefill-0", "std-decode-0"}


def test_a_tier_whose_decode_logs_are_missing_is_not_paged_for_the_other_s_context(
    tmp_path: Path,
) -> None:
    """Blind review 42 (H18): the same tiers, the short one's decode logs not handed over, so no
    room ever joins its prefill to any decode."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _deployment(logs, "long", 1_048_576, (2_040_000, 2_100_000), range(5000, 5060))
    _deployment(logs, "std", 524_288, (681_280, 700_000), range(1000, 1030), decode_logs=False)
    assert [severity for _, severity, _ in _pool_findings(logs, tmp_path / "out")] == ["info"]


def test_a_prefill_stating_a_short_context_is_still_judged_by_the_decode_it_serves(
    tmp_path: Path,
) -> None:
    """The other side of the rule above: a room joins it to a decode of the longer context."""
    logs = tmp_path / "logs"
    logs.mkdir()
    prefill, decode = _traffic("pair", range(7000, 7030), 120_000, "10.1.0.11")
    (logs / "prefill-0.log").write_text(_start("prefill", 524_288, 681_280) + prefill)
    (logs / "decode-0.log").write_text(_start("decode", 1_048_576, 2_100_000) + decode)
    assert _pool_findings(logs, tmp_path / "out") == [("prefill-0", "warning", 1_048_576)]


@pytest.mark.parametrize(
    ("joined", "std_decode_checksum"), [(True, False), (False, False), (True, True)]
)
def test_tiers_each_consistent_in_their_checksum_are_no_one_sided_pair(
    tmp_path: Path, joined: bool, std_decode_checksum: bool
) -> None:
    """Blind review 42 D3: the long tier with the KV checksum on both sides, the short one off
    on both, warned as one deployment "enabled on ... but not on ...". Told apart by the rooms
    that joined each pair or, with no room read yet, by the context each tier states; a tier
    with it on one side only is still warned of."""
    logs = tmp_path / "logs"
    logs.mkdir()
    rooms = (range(5000, 5060), range(1000, 1060)) if joined else (range(0), range(0))
    _deployment(logs, "long", 1_048_576, (2_040_000, 2_100_000), rooms[0], checksum=True)
    _deployment(logs, "std", 524_288, (681_280, 700_000), rooms[1], checksum=False)
    if std_decode_checksum:
        decode = logs / "std-decode-0.log"
        decode.write_text(decode.read_text().replace("checksum': False", "checksum': True"))
    result = run_forensics([str(logs)], tmp_path / "out", write_parquet=False, workers=1)
    warned = [
        f["summary"]
        for f in result.summary["findings"]
        if f["detector"] == "checksum_unverified" and f["severity"] != "info"
    ]
    if std_decode_checksum:
        assert len(warned) == 1 and "not on std-prefill-0" in warned[0]
        assert "long-" not in warned[0]
    else:
        assert warned == []


def test_a_prefill_is_judged_by_the_context_of_the_decode_it_serves(tmp_path: Path) -> None:
    """Its own context fits its pool; the decode node its requests' rooms reach serves four
    times it: the prompts between are refused by prefill and reach decode all the same."""
    logs = tmp_path / "logs"
    logs.mkdir()
    prefill, decode = _traffic("pair", range(7000, 7030), 120_000, "10.1.0.11")
    (logs / "prefill-0.log").write_text(_start("prefill", 262_144, 500_000) + prefill)
    (logs / "decode-0.log").write_text(_start("decode", 1_048_576, 1_200_000) + decode)
    result = run_forensics([str(logs)], tmp_path / "out", write_parquet=False, workers=1)
    (finding,) = [f for f in result.summary["findings"] if f["detector"] == "pool_below_context"]
    assert (finding["node"], finding["evidence"]["context_len"]) == ("prefill-0", 1_048_576)
    # Raised once a room joined the two, not after the wait for one (`link_wait_seconds`).
    assert finding["raised_at"] < f"{DAY}T08:10:00"


def test_a_unified_server_beside_a_pd_pair_is_judged_by_its_own_pool(tmp_path: Path) -> None:
    """Blind review 20: a unified server (pool 1.2M) answering 900k-token prompts honestly,
    slowly, was said to have answered them "although the prefill pool in force was 681,280
    tokens": the PD prefill node's beside it, which never saw them."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _deployment(logs, "west", 1_048_576, (681_280, 1_200_000), range(5000, 5003))
    answers = "".join(
        f"[{DAY} 09:{minute:02d}:00] Finish: obj=GenerateReqInput(rid='u{minute:031x}'), "
        f"out={{'meta_info': {{'id': 'u{minute:031x}', 'finish_reason': {{'type': 'stop'}}, "
        "'prompt_tokens': 900000, 'completion_tokens': 700, 'cached_tokens': 0, "
        "'e2e_latency': 412.5}}\n"
        for minute in range(10, 20)
    )
    (logs / "unified-0.log").write_text(_start("null", 1_048_576, 1_200_000) + answers)
    result = run_forensics([str(logs)], tmp_path / "out", write_parquet=False, workers=1)
    on_unified = [f for f in result.summary["findings"] if f["node"] == "unified-0"]
    assert [f["detector"] for f in on_unified if f["severity"] != "info"] == []
    assert result.summary["nodes"]["unified-0"]["role"] == "unified"


def test_a_gap_opened_by_the_decode_s_restart_is_dated_from_it(tmp_path: Path) -> None:
    """Blind review 22: a prefill (pool 200,000) fit its deployment's 131,072 context until its
    decode restarted at 09:00 with 262,144; its gap was dated 08:00, its own start, an hour
    before the gap existed, and a responder would search the wrong window."""
    logs = tmp_path / "logs"
    logs.mkdir()
    prefill, decode = _traffic("pair", range(7000, 7030), 60_000, "10.1.0.11")
    restarted = _start("decode", 262_144, 900_000).replace(f"{DAY} 08:0", f"{DAY} 09:0")
    after, _ = _traffic("late", range(9000, 9010), 60_000, "10.1.0.11")
    after = after.replace(f"{DAY} 08:", f"{DAY} 09:")
    (logs / "prefill-0.log").write_text(_start("prefill", 131_072, 200_000) + prefill + after)
    (logs / "decode-0.log").write_text(_start("decode", 131_072, 600_000) + decode + restarted)
    result = run_forensics([str(logs)], tmp_path / "out", write_parquet=False, workers=1)
    (finding,) = [f for f in result.summary["findings"] if f["detector"] == "pool_below_context"]
    assert finding["evidence"]["context_len"] == 262_144
    assert finding["time"] == f"{DAY}T09:00:00.000Z"


def _cluster(case: Path, name: str, minutes: int, pool: int, seed: int) -> set[str]:
    """The small incident replay's deployment as cluster `name`, its hosts `minutes` off UTC
    (their time stats tell it), its prefill pool `pool`: the exposed rooms it answered."""
    data = yaml.safe_load((SCENARIOS / "incident-replay-small.yaml").read_text())
    for role in ("prefill", "decode"):
        data["deployment"][role].update(
            log_utc_offset_minutes=minutes, request_time_stats=True, enable_metrics=True
        )
    data["deployment"]["prefill"]["max_total_num_tokens"] = pool
    sim = case.parent / f"sim-{name}"
    run_offline(scenario_from_dict(data, name), sim, seed=seed)
    shutil.copytree(sim / "logs", case / name)
    truth = json.loads((sim / "ground_truth.json").read_text())["exposed"]
    return {str(exposed["bootstrap_room"]) for exposed in truth}


def test_clusters_of_one_model_in_other_zones_ran_at_once_not_one_after_the_other(
    tmp_path: Path,
) -> None:
    """Blind review 29a: the same pod names under `cluster-a/` (UTC-04:00, leaking) and
    `cluster-b/` (UTC+02:00, a pool that holds the context), the same hours. In local time their
    logs kept apart, so they were read as one deployment's two periods: four nodes, and eight of
    cluster-b's honest answers were called exposed against cluster-a's pool."""
    case = tmp_path / "case"
    leaked = _cluster(case, "cluster-a", -240, 681_280, seed=1)
    honest = _cluster(case, "cluster-b", 120, 2_040_000, seed=2)
    assert leaked and not honest
    summary = run_forensics([str(case)], tmp_path / "out", write_parquet=False).summary
    assert set(summary["nodes"]) == {
        f"{cluster}/{node}"
        for cluster in ("cluster-a", "cluster-b")
        for node in ("prefill-0", "decode-0")
    }
    assert {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]} == leaked
