"""`kvwatch simulate ...` (simulator.cli.main) end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main


def test_logs_command_writes_the_contract_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["logs", "--scenario", "healthy-long-context-small", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "healthy-long-context-small" in printed and "0 exposed" in printed
    assert (out / "logs" / "prefill-0.log").is_file()
    assert any((out / "snapshots").glob("decode-0@*.prom"))
    truth = json.loads((out / "ground_truth.json").read_text())
    assert f"{truth['requests_total']} requests" in printed


def test_scale_changes_the_amount_of_traffic(tmp_path: Path) -> None:
    args = ["logs", "--scenario", "healthy-long-context-small", "--seed", "3"]
    assert main([*args, "--out", str(tmp_path / "a"), "--scale", "0.5"]) == 0
    assert main([*args, "--out", str(tmp_path / "b"), "--scale", "1.0"]) == 0
    small = json.loads((tmp_path / "a" / "ground_truth.json").read_text())["requests_total"]
    full = json.loads((tmp_path / "b" / "ground_truth.json").read_text())["requests_total"]
    assert 0.35 * full < small < 0.65 * full


def test_unknown_scenario_is_a_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["logs", "--scenario", "no-such-thing", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown scenario" in err and "incident-replay" in err


def test_scenarios_command_lists_bundled_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    names = capsys.readouterr().out.split()
    assert "incident-replay" in names and "abort-race-storm-small" in names


def test_live_command_serves_and_drives_traffic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "live",
        "--scenario",
        "healthy-long-context-small",
        "--speed",
        "100",
        "--duration",
        "2",
        "--log-dir",
        str(tmp_path),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "/v1/chat/completions" in printed and "served " in printed
    decode = (tmp_path / "decode-0.log").read_text()
    assert "The server is fired up and ready to roll!" in decode
    assert '"request.finished"' in decode  # this scenario's decode logs requests as JSON
