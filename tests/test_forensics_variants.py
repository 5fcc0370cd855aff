"""Exposure is found from the mechanism, whatever the deployment chose to log.

The incident replay is rerun with the logging options real deployments differ in (request logs
as JSON, request logs without text, no time-stats lines) and with logs whose start rotated away
and no snapshots beside them (no start-up lines, so no pool or context figures): the exposed
responses are still named, all of them and nothing else. A healthy long-context deployment
logging less raises nothing above info.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector.forensics.driver import run_forensics
from simulator.offline import run_offline
from simulator.scenario import load_scenario, scenario_from_dict

SCENARIOS = Path(__file__).parents[1] / "simulator" / "scenarios"


def _variant(scenario: str = "incident-replay-small", **role_options: Any) -> Any:
    data = yaml.safe_load((SCENARIOS / f"{scenario}.yaml").read_text())
    for role in ("prefill", "decode"):
        data["deployment"][role].update(role_options)
    return scenario_from_dict(data, "variant")


def _exposed(summary: dict[str, Any]) -> set[str]:
    return {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]}


def _truth(sim: Path, since: str = "") -> set[str]:
    truth = json.loads((sim / "ground_truth.json").read_text())
    return {str(r["bootstrap_room"]) for r in truth["exposed"] if r["time"] >= since}


@pytest.mark.parametrize(
    "options",
    [
        {"log_requests_format": "json"},
        {"log_requests_level": 0},
        {"request_time_stats": False},
    ],
    ids=["json-request-logs", "request-logs-without-text", "no-time-stats"],
)
def test_every_exposed_response_is_named_under_each_logging_choice(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    run_offline(_variant(**options), tmp_path / "sim")
    result = run_forensics(
        [str(tmp_path / "sim" / "logs"), str(tmp_path / "sim" / "snapshots")],
        tmp_path / "out",
        write_parquet=False,
    )
    truth = _truth(tmp_path / "sim")
    assert len(truth) >= 10
    assert _exposed(result.summary) == truth


@pytest.mark.parametrize(
    "options",
    [{"log_requests_level": 0}, {"request_time_stats": False}],
    ids=["request-logs-without-text", "no-time-stats"],
)
def test_a_healthy_long_context_deployment_raises_nothing_above_info_under_each_choice(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    run_offline(_variant("healthy-long-context-small", **options), tmp_path / "sim")
    result = run_forensics(
        [str(tmp_path / "sim" / "logs"), str(tmp_path / "sim" / "snapshots")],
        tmp_path / "out",
        write_parquet=False,
    )
    assert result.summary["requests"]["total"] > 100
    severities = result.summary["findings_by_severity"]
    assert (severities["critical"], severities["warning"]) == (0, 0)


def test_logs_whose_start_rotated_away_still_name_the_exposed_responses(tmp_path: Path) -> None:
    run_offline(load_scenario("incident-replay-small"), tmp_path / "sim")
    cut = "[2026-09-08 12:30"  # after start-up and the first exposures
    kept = tmp_path / "kept"
    kept.mkdir()
    for log in (tmp_path / "sim" / "logs").glob("*.log"):
        lines = log.read_text().splitlines(keepends=True)
        (kept / log.name).write_text("".join(line for line in lines if line >= cut))
    result = run_forensics([str(kept)], tmp_path / "out", write_parquet=False)
    truth = _truth(tmp_path / "sim", since="2026-09-08T12:30")
    assert 0 < len(truth) < len(_truth(tmp_path / "sim"))
    assert _exposed(result.summary) == truth
    # No start-up lines before the restart: the pool then is unknown, not the next process's.
    for node in result.summary["nodes"].values():
        first, restarted = node["config"]
        assert first["max_total_num_tokens"] is None
        assert (restarted["time"], restarted["max_total_num_tokens"]) == (
            "2026-09-08T13:35:00.000Z",
            2_040_000,
        )


def test_whole_prompts_logged_at_level_three_are_read_however_long(tmp_path: Path) -> None:
    # `--log-requests-level 3` logs every prompt whole, so an over-length prompt's request lines
    # run to megabytes (about 4 bytes a token); without time stats, decode's finish line is its
    # only account of the request. Lines that long are read, not skipped.
    run_offline(_variant(request_time_stats=False), tmp_path / "sim")
    truth = _truth(tmp_path / "sim")
    rids = {
        r["rid"]
        for r in json.loads((tmp_path / "sim" / "ground_truth.json").read_text())["exposed"]
    }
    whole_prompt = "text='" + "ledger quarter " * 200_000  # 3 MB
    logs = tmp_path / "sim" / "logs"
    for log in logs.glob("decode-*.log"):
        lines = log.read_text().splitlines(keepends=True)
        log.write_text(
            "".join(
                line.replace("text='", whole_prompt, 1)
                if "Finish: obj=" in line and any(rid in line for rid in rids)
                else line
                for line in lines
            )
        )
    result = run_forensics([str(logs), str(tmp_path / "sim" / "snapshots")], tmp_path / "out")
    assert len(truth) >= 10
    assert result.summary["input"]["dropped_by_reason"].get("line_too_long", 0) == 0
    assert _exposed(result.summary) == truth
