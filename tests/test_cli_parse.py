"""`kvwatch parse` end to end, through the installed console script."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from collector.cli import main
from collector.parallel import count_events, plan
from tests.golden import GOLDEN

KVWATCH = [sys.executable, "-m", "collector.cli"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KVWATCH, *args], capture_output=True, text=True, timeout=120)


def test_jsonl_output_follows_the_event_contract(tmp_path: Path) -> None:
    done = _run("parse", str(GOLDEN / "logs" / "pd.log"), "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(events) == 24  # 25 lines, the glog line is noise
    for event in events:
        assert {"kind", "node", "time", "source"} <= set(event)
        assert event["node"] == "pd"
        assert event["source"].startswith(str(GOLDEN / "logs" / "pd.log") + ":")
    mismatch = next(e for e in events if e["kind"] == "checksum_mismatch")
    assert mismatch["bootstrap_room"] == "2170015846053279415"
    assert mismatch["dp"] == 1 and mismatch["tp"] == 1 and mismatch["ep"] == 1
    assert mismatch["time"] == "2026-11-02T10:16:40.000Z"


def test_stats_on_a_mixed_log_has_no_unclassified_documented_lines(tmp_path: Path) -> None:
    # Every golden family except the one that plants deliberately unknown lines.
    mixed = tmp_path / "mixed.log"
    with open(mixed, "w") as out:
        for path in sorted((GOLDEN / "logs").glob("*.log")):
            if path.name != "canary_noise.log":
                out.write(path.read_text())
    done = _run("parse", str(mixed), "--stats-json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["unclassified_engine_lines"] == 0
    assert stats["unclassified_other_lines"] == 0
    assert stats["events_by_kind"]["request_finished"] == 7
    assert stats["events_by_kind"]["transfer_failed"] == 7
    assert stats["lines"] == sum(
        len(p.read_text().splitlines())
        for p in (GOLDEN / "logs").glob("*.log")
        if p.name != "canary_noise.log"
    )


def test_stats_count_drift_as_unclassified_heads(tmp_path: Path) -> None:
    shutil.copy(GOLDEN / "logs" / "canary_noise.log", tmp_path / "n.log")
    done = _run("parse", str(tmp_path), "--stats-json", "--workers", "1")
    stats = json.loads(done.stdout)
    assert stats["unclassified_engine_lines"] == 1
    # Neither word is one the engine writes: printed as shapes, the family still told apart.
    assert stats["unclassified_heads"] == {"Xxxxxxx xxx": 1}
    assert stats["unclassified_other_lines"] == 1


def test_stats_heads_never_carry_a_users_words(tmp_path: Path) -> None:
    """A prompt logged with a raw newline and a stamp reads like an engine line (blind review
    13e): its first words are a user's, and `--stats` must not print them."""
    (tmp_path / "n.log").write_text(
        "[2026-11-02 10:19:04 TP0] Maria Schmidt, card 4111 1111 1111 1111\n"
        "[2026-11-02 10:19:05 TP0] Prefill session migrated to rank 3\n"
        "[2026-11-02 10:19:06 TP0] Ünïcode lead\n"
    )
    stats = json.loads(_run("parse", str(tmp_path), "--stats-json", "--workers", "1").stdout)
    assert stats["unclassified_engine_lines"] == 3
    assert stats["unclassified_heads"] == {
        "Xxxxx Xxxxxxx": 1,
        "Prefill session": 1,
        "(non-text)": 1,
    }
    done = _run("parse", str(tmp_path), "--stats", "--workers", "1")
    assert "Maria" not in done.stdout + done.stderr and "Schmidt" not in done.stdout + done.stderr


def test_parallel_and_serial_counts_agree(tmp_path: Path) -> None:
    # Not the family of rids holding newlines: their lines are known from a request line
    # before them, which a range read apart from the file's start has not read (`parse
    # --stats` only; forensics reads each stream whole, in order).
    body = "".join(
        p.read_text()
        for p in sorted((GOLDEN / "logs").glob("*.log"))
        if p.name != "forged_rids.log"
    )
    (tmp_path / "big.log").write_text(body * 300)
    (tmp_path / "old.log.1.gz").write_bytes(gzip.compress(body.encode()))
    serial = json.loads(_run("parse", str(tmp_path), "--stats-json", "--workers", "1").stdout)
    # Small chunks, so that the big file really is split between workers mid-file.
    parallel = count_events([tmp_path], workers=2, chunk_bytes=64 << 10).to_json_dict()
    assert len(plan([tmp_path], 64 << 10)) > 50
    for key in (
        "lines",
        "bytes",
        "events_by_kind",
        "noise_by_category",
        "unclassified_engine_lines",
    ):
        assert serial[key] == parallel[key], key


def test_no_files_is_a_clear_error(tmp_path: Path) -> None:
    done = _run("parse", str(tmp_path), "--stats")
    assert done.returncode == 2
    assert "no telemetry files" in done.stderr
    missing = _run("parse", str(tmp_path / "nope.log"), "--stats")
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr


def test_jsonl_is_strict_json_even_for_nan_samples(tmp_path: Path) -> None:
    (tmp_path / "decode-0.prom").write_text(
        "# TYPE sglang:fwd_occupancy gauge\n"
        'sglang:fwd_occupancy{engine_type="decode",model_name="m"} NaN\n'
        'sglang:max_total_num_tokens{engine_type="decode",model_name="m"} 360072.0\n'
    )
    done = _run("parse", str(tmp_path), "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    events = [
        json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c}"))
        for line in done.stdout.splitlines()
    ]
    by_name = {e["name"]: e for e in events}
    assert by_name["sglang:fwd_occupancy"]["value"] == "NaN"
    assert by_name["sglang:max_total_num_tokens"]["value"] == 360072.0
    assert by_name["sglang:max_total_num_tokens"]["signal"] == "pool_tokens"
    assert by_name["sglang:max_total_num_tokens"]["node"] == "decode-0"


def test_jsonl_is_strict_json_for_a_batch_line_s_nan_too(tmp_path: Path) -> None:
    """Blind review 19: `#token: nan` came out as `"token":NaN`, which strict readers refuse:
    no number, so unknown."""
    (tmp_path / "decode-0.log").write_text(
        "[2026-09-08 12:00:00 TP0] Decode batch, #running-req: 3, #token: nan, "
        "token usage: 0.10, cuda graph: True, gen throughput (token/s): inf, #queue-req: 0\n"
    )
    done = _run("parse", str(tmp_path), "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    (event,) = [
        json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c}"))
        for line in done.stdout.splitlines()
    ]
    assert (event["running_req"], event["token"], event["gen_throughput"]) == (3, None, None)


def test_simulate_help_and_a_bad_scenario_name_are_usage_answers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as shown:
        main(["simulate", "--help"])
    assert shown.value.code == 0 and "kvwatch simulate" in capsys.readouterr().out
    assert main(["eval", "--scenario", "no-such-scenario"]) == 2
    assert "unknown scenario 'no-such-scenario'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        main(["parse", "--no-such-flag", "x.log"])
    assert refused.value.code == 2
