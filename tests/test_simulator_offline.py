"""Offline mode: layout, rotation, snapshots, ground truth, determinism, and parseability."""

from __future__ import annotations

import calendar
import gzip
import json
import os
import re
from pathlib import Path

import pytest

from simulator.offline import run_offline
from simulator.scenario import Scenario, apply_overrides, load_scenario

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
SNAP = re.compile(r"^(?P<node>[a-z]+-\d+)@(?P<t>\d{8}T\d{6}Z)\.(?P<ext>prom|server_info\.json)$")


def _small_rotating() -> Scenario:
    return apply_overrides(load_scenario("incident-replay-small"), {"logs.rotate_bytes": 6_000_000})


@pytest.fixture(scope="module")
def run_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("a")
    run_offline(_small_rotating(), out)
    return out


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _epoch(stamp: str) -> float:
    date, clock = stamp.split(" ")
    parts = [int(x) for x in date.split("-")] + [int(x) for x in clock.split(":")]
    return float(calendar.timegm((*parts, 0, 0, 0)))


def _read(path: Path) -> str:
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).decode()
    return path.read_text()


def test_same_seed_gives_byte_identical_output(run_a: Path, tmp_path: Path) -> None:
    run_offline(_small_rotating(), tmp_path / "b")
    a, b = _tree(run_a), _tree(tmp_path / "b")
    assert sorted(a) == sorted(b)
    assert [name for name in a if a[name] != b[name]] == []


def test_other_seed_gives_other_output(run_a: Path, tmp_path: Path) -> None:
    run_offline(_small_rotating(), tmp_path / "c", seed=99)
    assert (tmp_path / "c" / "logs" / "decode-0.log").read_bytes() != (
        run_a / "logs" / "decode-0.log"
    ).read_bytes()


def test_logs_rotate_like_a_shipper_leaves_them(run_a: Path) -> None:
    logs = run_a / "logs"
    names = sorted(p.name for p in logs.iterdir())
    assert all(re.fullmatch(r"(prefill|decode)-\d+\.log(\.1|\.\d+\.gz)?", n) for n in names), names
    rotated = sorted(
        (p for p in logs.iterdir() if p.name.startswith("decode-0.log.")),
        key=lambda p: int(p.name.split(".")[2]),
    )
    assert rotated[0].name == "decode-0.log.1" and len(rotated) >= 3
    assert all(p.name.endswith(".gz") for p in rotated[1:])
    # higher number = older: each file's first timestamp is later than the next one's
    chain = [logs / "decode-0.log", *rotated]
    firsts = [_epoch(STAMP.match(_read(p)).group(1)) for p in chain]  # type: ignore[union-attr]
    assert firsts == sorted(firsts, reverse=True)
    for path in chain:
        lasts = [m.group(1) for m in map(STAMP.match, _read(path).splitlines()[-50:]) if m]
        assert abs(os.stat(path).st_mtime - _epoch(lasts[-1])) <= 1.0


def test_snapshots_are_named_and_dated_by_simulated_time(run_a: Path) -> None:
    snaps = list((run_a / "snapshots").iterdir())
    assert snaps
    pools: dict[str, list[tuple[str, float]]] = {}
    for path in snaps:
        m = SNAP.match(path.name)
        assert m, path.name
        t = calendar.timegm(
            (
                int(m["t"][:4]),
                int(m["t"][4:6]),
                int(m["t"][6:8]),
                int(m["t"][9:11]),
                int(m["t"][11:13]),
                int(m["t"][13:15]),
                0,
                0,
                0,
            )
        )
        assert int(os.stat(path).st_mtime) == t
        if m["ext"] == "server_info.json" and m["node"] == "prefill-0":
            info = json.loads(path.read_text())
            pools.setdefault("info", []).append((m["t"], info["max_total_num_tokens"]))
            assert info["context_length"] == 1048576
        if m["ext"] == "prom" and m["node"] == "prefill-0":
            text = path.read_text()
            value = re.search(r"^sglang:max_total_num_tokens\{[^}]*\} (\S+)$", text, re.M)
            assert value is not None
            pools.setdefault("prom", []).append((m["t"], float(value.group(1))))
    for key in ("info", "prom"):
        series = [v for _, v in sorted(pools[key])]
        assert series[0] == 681280 and series[-1] == 2040000  # restarted with the bigger pool


def test_ground_truth_contract_and_privacy(run_a: Path) -> None:
    text = (run_a / "ground_truth.json").read_text()
    assert "MARK-" not in text
    truth = json.loads(text)
    for key in (
        "scenario",
        "seed",
        "start",
        "end",
        "requests_total",
        "exposed",
        "caught",
        "deferred_release_timeouts",
        "restarts",
        "phases",
    ):
        assert key in truth
    assert truth["scenario"] == "incident-replay-small"
    assert truth["start"] == "2026-09-08T12:00:00.000Z"
    assert {r["node"] for r in truth["restarts"]} == {"prefill-0", "decode-0"}
    assert all(r["version"] == "0.5.22" for r in truth["restarts"])
    assert [p["kind"] for p in truth["phases"]].count("over_length") == 2
    assert truth["exposed"], "the incident replay must expose something"
    for entry in truth["exposed"]:
        assert set(entry) == {
            "rid",
            "bootstrap_room",
            "node",
            "time",
            "prompt_tokens",
            "cause",
            "http_status",
            "foreign_marker_count",
        }
        assert entry["cause"] == "over_length_stub" and entry["http_status"] == 200
        assert entry["prompt_tokens"] > 681274
        assert entry["time"].endswith("Z") and entry["time"] < "2026-09-08T13:20"


def test_every_exposure_is_visible_in_the_logs(run_a: Path) -> None:
    """Refusal on prefill, then a 200 finish with the foreign markers on decode, same room."""
    truth = json.loads((run_a / "ground_truth.json").read_text())
    decode = "".join(_read(p) for p in sorted((run_a / "logs").glob("decode-0.log*")))
    prefill = "".join(_read(p) for p in sorted((run_a / "logs").glob("prefill-0.log*")))
    refused = set(re.findall(r"Input length \((\d+) tokens\) exceeds", prefill))
    finishes = {
        m.group(1): m.group(0)
        for m in re.finditer(r"Finish: obj=GenerateReqInput\(.*?rid='([0-9a-f]{32})'.*", decode)
    }
    for entry in truth["exposed"]:
        line = finishes[entry["rid"]]
        assert f"bootstrap_room={entry['bootstrap_room']}," in line
        assert f"'prompt_tokens': {entry['prompt_tokens']}," in line
        assert "'finish_reason': {'type': 'stop'" in line or "'type': 'length'" in line
        assert str(entry["prompt_tokens"]) in refused
        reply = line.split("out={'text': '", 1)[1]
        own = set(re.findall(r"MARK-[0-9a-f]{16}", line.split("out={", 1)[0]))
        foreign = set(re.findall(r"MARK-[0-9a-f]{16}", reply)) - own
        assert len(foreign) == entry["foreign_marker_count"]
    assert sum(e["foreign_marker_count"] for e in truth["exposed"]) > 0


def test_healthy_scenario_exposes_nothing(tmp_path: Path) -> None:
    result = run_offline(load_scenario("healthy-long-context-small"), tmp_path)
    truth = json.loads((tmp_path / "ground_truth.json").read_text())
    assert result.requests > 500
    assert truth["exposed"] == [] and truth["caught"] == []
    text = (tmp_path / "logs" / "prefill-0.log").read_text()
    assert "exceeds the maximum allowed length" not in text
    assert "'cached_tokens': " in text or '"cached_tokens": ' in text


def test_every_written_line_parses_with_kvwatch(run_a: Path, tmp_path: Path) -> None:
    parse = pytest.importorskip("collector.parse")
    run_offline(load_scenario("abort-race-storm-small"), tmp_path / "storm")
    run_offline(load_scenario("healthy-long-context-small"), tmp_path / "healthy")
    for root in (run_a, tmp_path / "storm", tmp_path / "healthy"):
        stats = parse.ParseStats()
        events = sum(1 for _ in parse.events_by_node([root / "logs", root / "snapshots"], stats))
        assert events > 1000
        assert stats.unclassified_engine == 0, dict(stats.unclassified_heads)
        assert stats.unclassified_other == 0
        assert sum(stats.dropped.values()) == 0, dict(stats.dropped)


def test_mismatched_layouts_skip_the_checksum_once_and_admit_unverified(tmp_path: Path) -> None:
    sc = apply_overrides(load_scenario("abort-race-storm-small"), {"deployment.decode.tp_size": 4})
    result = run_offline(sc, tmp_path)
    decode = "".join(_read(p) for p in (tmp_path / "logs").glob("decode-0.log*"))
    skipped = re.findall(
        r"KV checksum skipped: prefill layout signature 0x[0-9a-f]{8} differs from this "
        r"decode's 0x[0-9a-f]{8} \(TP width, PP stage, or page size\); its requests are "
        r"admitted unverified\.",
        decode,
    )
    # once per prefill signature per decode process (after the restart the checksum is off)
    assert len(skipped) == 1
    assert "KV checksum mismatch" not in decode
    truth = json.loads((tmp_path / "ground_truth.json").read_text())
    # Nothing is caught by the checksum (metadata-collision aborts are caught by another check).
    assert {e["cause"] for e in truth["caught"]} <= {"metadata_corruption"}
    assert result.exposed > 0
