"""`kvwatch audit` over snapshots: documents that could not be read, a router's scrape, and one
node's documents saved together (blind review 23).

The documents are written here in the reference formats (`sglang-telemetry.md` §1, §5): a DP=2
prefill node of 0.5.23 whose `/v1/loads` states rank 1's pool at 681,280 tokens, below the
1,048,576 context; `/server_info` and `/metrics` state rank 0's 2,040,000. The live audit takes
such answers together (smallest pool, largest context) and fails the node; read from files, each
document began a "restart" and the gap was judged an earlier configuration.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from collector.events import Event
from collector.state.config_timeline import ConfigTimeline
from tests.test_audit import DATA, lines, run

CONTEXT = 1_048_576
POOL = 2_040_000
GAP = 681_280
STAMP = "20261203T100000Z"
FAILS = "n  prefill  FAIL  pool 681,280 < context 1,048,576 (35% of the window cannot fit)"


def _server_info(pool: int, *, dp: int = 2) -> dict[str, Any]:
    return {
        "model_path": "zai-org/GLM-5.3",
        "served_model_name": "glm-5.3",
        "context_length": None,
        "disaggregation_mode": "prefill",
        "disaggregation_transfer_backend": "mooncake",
        "disaggregation_enable_kv_checksum": True,
        "tp_size": 1,
        "dp_size": dp,
        "status": "ready",
        "max_total_num_tokens": pool,
        "max_req_input_len": CONTEXT - 6,
        "version": "0.5.23",
        "internal_states": [
            {"disaggregation_mode": "prefill", "memory_usage": {"token_capacity": pool}}
        ]
        * dp,
    }


def _loads(pools: list[int], timestamp: str = "2026-12-03T10:00:00Z") -> dict[str, Any]:
    return {
        "timestamp": timestamp,
        "version": "0.5.23",
        "loads": [
            {"dp_rank": rank, "num_running_reqs": 1, "max_total_num_tokens": pool}
            for rank, pool in enumerate(pools)
        ],
        "disaggregation": {"mode": "prefill"},
    }


def _models(context: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": "glm-5.3", "object": "model", "max_model_len": context}],
    }


def _metrics(pool: int, context: int) -> str:
    labels = 'engine_type="prefill",model_name="glm-5.3",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    return (
        "# TYPE sglang:max_total_num_tokens gauge\n"
        f"sglang:max_total_num_tokens{{{labels}}} {float(pool)}\n"
        "# TYPE sglang:context_len gauge\n"
        f"sglang:context_len{{{labels}}} {float(context)}\n"
    )


def _save(
    directory: Path,
    *,
    info_pool: int = POOL,
    loads: list[int] | None = None,
    models: int = CONTEXT,
    metrics: tuple[int, int] = (POOL, CONTEXT),
    stamped: bool = True,
    timestamp: str = "2026-12-03T10:00:00Z",
) -> None:
    """One node's four documents as a saving script writes them: `n@STAMP.<endpoint>`, or
    (`stamped=False`) `n/<endpoint>` in the node's folder, dated by its files alone."""
    directory.mkdir(parents=True, exist_ok=True)
    documents = {
        "server_info.json": json.dumps(_server_info(info_pool)),
        "v1_loads.json": json.dumps(_loads(loads or [POOL, GAP], timestamp)),
        "v1_models.json": json.dumps(_models(models)),
        "prom": _metrics(*metrics),
    }
    for suffix, text in documents.items():
        if stamped:
            (directory / f"n@{STAMP}.{suffix}").write_text(text)
        else:
            name = "metrics.prom" if suffix == "prom" else suffix
            (directory / name).write_text(text)


def _save_decode(directory: Path) -> None:
    """The decode node `d` beside `n`, checksum on as `n`'s is: with no node of the other role
    audited, a checksum's verification is unknown (blind review 46 D3)."""
    info = _server_info(POOL, dp=1) | {"disaggregation_mode": "decode"}
    info["internal_states"] = [{"disaggregation_mode": "decode", "memory_usage": {}}]
    (directory / f"d@{STAMP}.server_info.json").write_text(json.dumps(info))


DECODE_PASSES = (
    "d  decode   PASS  pool 2,040,000 >= context 1,048,576; engine 0.5.23; KV checksum on "
    "(verification shows only in the logs: audit them too)"
)


# --- D2: one node's documents of one instant are one configuration ---------------------------


def test_a_dp_rank_below_the_context_fails_when_its_documents_were_saved_together(
    tmp_path: Path,
) -> None:
    """Was UNKNOWN: "engine version unknown since the restart at 2026-12-03 10:00:00 UTC" (no
    restart happened), the gap an earlier configuration; `--allow-unknown` exit 0."""
    _save(tmp_path)
    _save_decode(tmp_path)
    code, out, _ = run("--allow-unknown", str(tmp_path))
    assert (code, lines(out)) == (
        1,
        [FAILS, DECODE_PASSES, "verdict: FAIL - 1 of 2 nodes failed (n); do not roll out"],
    )
    assert "restart" not in out


def test_a_loads_dated_by_itself_is_of_the_instant_its_siblings_were_written_in(
    tmp_path: Path,
) -> None:
    """`/v1/loads` dates itself (10:00) and the files beside it, written with it at 18:23, are
    dated by their files: was PASS, exit 0, the gap an earlier configuration of unknown status
    that no line mentioned."""
    node = tmp_path / "n"
    _save(node, stamped=False)
    written = 1_796_322_189.0  # 2026-12-03 18:23:09 UTC, eight hours after the loads' stamp
    for path in node.iterdir():
        os.utime(path, (written, written))
    _save_decode(tmp_path)
    code, out, _ = run(str(tmp_path))
    assert (code, lines(out)[0]) == (1, FAILS)


def test_dp_ranks_whose_pools_differ_slightly_pass_from_files_as_live(tmp_path: Path) -> None:
    """Ranks of 2,040,000 and 2,039,872 tokens: was UNKNOWN (a restart, its release unknown)."""
    _save(tmp_path, loads=[POOL, 2_039_872])
    _save_decode(tmp_path)
    code, out, _ = run(str(tmp_path))
    assert code == 0
    assert lines(out)[0].startswith("n  prefill  PASS  pool 2,039,872 >= context 1,048,576;")
    assert lines(out)[-1] == "verdict: PASS - all 2 nodes passed"


def test_the_largest_context_the_documents_state_is_the_one_judged(tmp_path: Path) -> None:
    """`/v1/models` states 2,097,152, the scrape 1,048,576, the pool is 1,500,000: the live
    audit fails it; from files it was UNKNOWN ("pool unknown" after a "restart")."""
    _save(
        tmp_path,
        info_pool=1_500_000,
        loads=[1_500_000],
        models=2_097_152,
        metrics=(1_500_000, CONTEXT),
    )
    _save_decode(tmp_path)
    code, out, _ = run(str(tmp_path))
    assert (code, lines(out)[0]) == (
        1,
        # The engine's stated limit, from the 1,048,576 its scrape states, binds below the pool.
        "n  prefill  FAIL  max_req_input_len 1,048,570 + 6 (pool 1,500,000) < context 2,097,152 "
        "(50% of the window cannot fit)",
    )


def _info(node: str, time: float, **fields: Any) -> Event:
    record = {"endpoint": "server_info", "disaggregation_mode": "prefill", "role": "prefill"}
    return Event("server_info", node, time, f"{node}.json", {**record, **fields})


def test_figures_of_one_instant_are_merged_and_a_later_change_is_still_a_restart() -> None:
    timeline = ConfigTimeline()
    t = 1_796_292_000.0
    timeline.update(_info("n", t, max_total_num_tokens=POOL, version="0.5.23"))
    timeline.update(_info("n", t + 0.5, max_total_num_tokens=GAP, version="0.5.19"))
    timeline.update(_info("n", t + 1.0, context_len=CONTEXT))
    [config] = timeline.history("n")
    # The smallest pool and the older release stand, whatever order the documents came in.
    assert (config.pool_tokens, config.version, config.context_len) == (GAP, "0.5.19", CONTEXT)
    # An hour later another pool is a new process, as before.
    timeline.update(_info("n", t + 3600, max_total_num_tokens=POOL, version="0.5.23"))
    assert [c.pool_tokens for c in timeline.history("n")] == [GAP, POOL]
    assert timeline.current("n").version == "0.5.23"  # type: ignore[union-attr]


# --- D1: a snapshot that could not be read is named and fails the gate closed ----------------


def _healthy(tmp_path: Path) -> Path:
    case = tmp_path / "case"
    shutil.copytree(DATA / "healthy", case)
    return case


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (json.dumps(_server_info(GAP, dp=1))[:70], "not_json"),  # cut
        ("<html><head><title>Sign in</title></head><body><form></form></body></html>", "not_json"),
        (json.dumps({"status": "ok"}), "unrecognised_document"),
    ],
    ids=["cut", "login-page", "no-engine-document"],
)
def test_a_snapshot_that_could_not_be_read_fails_closed_and_is_named(
    tmp_path: Path, text: str, reason: str
) -> None:
    """Was "PASS - all 2 nodes passed", exit 0: the third node vanished without a line."""
    case = _healthy(tmp_path)
    path = case / f"prefill-1@{STAMP}.server_info.json"
    path.write_text(text)
    code, out, _ = run("--allow-unknown", str(case))
    assert code == 3
    assert lines(out)[-2] == (
        f"PASSED OVER: 1 snapshot could not be read ({reason}: {path}); what it states is not "
        "in the verdicts."
    )
    assert lines(out)[-1].startswith(
        "verdict: UNKNOWN - no check failed, but input could not be read (PASSED OVER)"
    )


def test_a_cut_document_beside_a_readable_one_fails_closed(tmp_path: Path) -> None:
    """A cut `/server_info` (of a pool below the context) beside a good `/v1/models`: was
    UNKNOWN, and `--allow-unknown` made it exit 0."""
    cut = tmp_path / f"prefill-0@{STAMP}.server_info.json"
    cut.write_text(json.dumps(_server_info(GAP, dp=1))[:90])
    (tmp_path / f"prefill-0@{STAMP}.v1_models.json").write_text(json.dumps(_models(CONTEXT)))
    code, out, _ = run("--allow-unknown", str(tmp_path))
    assert code == 3
    assert f"1 snapshot could not be read (not_json: {cut})" in lines(out)[-2]


def test_a_router_scrape_beside_the_engines_is_named_not_judged(tmp_path: Path) -> None:
    """A gateway's `smg_*` scrape is no engine's: said, and it does not hold the gate."""
    case = _healthy(tmp_path)
    (case / f"router-0@{STAMP}.prom").write_text(
        'smg_http_requests_total{method="GET",path="/v1/models"} 10\nsmg_worker_pool_size 2\n'
    )
    code, out, _ = run(str(case))
    assert code == 0
    assert lines(out)[-2] == (
        "PASSED OVER: router-0 is a router or gateway (smg_* or sgl_router_* metrics only), not "
        "an engine: not judged (the engines behind it are judged by their own files)."
    )
    assert lines(out)[-1] == "verdict: PASS - all 2 nodes passed"
