"""A log written newest line first (logcli without `--forward`, Grafana's "Download logs") is read
from its end: the incident judged from it is the incident judged from the file as SGLang wrote it.
Read as it lies, it was two seconds of logs with no exposure."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from collector.files import discover
from collector.forensics.driver import run_forensics
from collector.forensics.report import newest_first_line
from collector.line_order import runs_backwards
from collector.parse import ParseStats, events_by_node
from simulator.offline import run_offline
from simulator.scenario import load_scenario

SCENARIOS = Path(__file__).parents[1] / "simulator" / "scenarios"
SCHEMA_PATH = Path(__file__).parents[1] / "collector" / "forensics" / "schema.json"


def _lines(seconds: list[int]) -> list[str]:
    return [
        f"[2026-09-06 00:{s // 60:02d}:{s % 60:02d} TP0] Decode batch, #token: 9" for s in seconds
    ]


@pytest.mark.parametrize(
    ("seconds", "backwards"),
    [
        (list(range(30)), False),
        (list(range(30, 0, -1)), True),
        # Ranks print a little out of order: an increase now and then is no reversal.
        ([30, 30, 29, 31, 28, 27, 27, 26, 25, 24, 23, 22, 21, 20, 19], True),
        ([0, 1, 0, 2, 1, 3, 2, 4, 3, 5, 4, 6, 5, 7, 6], False),
        (list(range(5, 0, -1)), False),  # too few lines to tell
        ([7] * 30, False),  # one second
    ],
)
def test_a_file_runs_backwards_when_its_timed_lines_do(seconds: list[int], backwards: bool) -> None:
    assert runs_backwards(_lines(seconds)) is backwards


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("incident")
    run_offline(load_scenario(SCENARIOS / "incident-replay-small.yaml"), folder)
    return folder


def _judged(inputs: list[Path], out: Path) -> dict[str, Any]:
    return run_forensics([str(p) for p in inputs], out, write_parquet=False, workers=2).summary


def test_the_incident_in_newest_first_files_is_the_incident(tmp_path: Path, incident: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for log in (incident / "logs").glob("*.log"):
        lines = log.read_text().splitlines(keepends=True)[::-1]
        if log.name.startswith("prefill"):  # and gzipped, as an export is kept
            with gzip.open(logs / (log.name + ".gz"), "wt") as handle:
                handle.writelines(lines)
        else:
            (logs / log.name).write_text("".join(lines))
    reversed_summary = _judged([logs, incident / "snapshots"], tmp_path / "reversed")
    summary = _judged([incident / "logs", incident / "snapshots"], tmp_path / "as-written")

    truth = {
        str(r["bootstrap_room"])
        for r in json.loads((incident / "ground_truth.json").read_text())["exposed"]
    }
    assert len(truth) >= 10
    rooms = {str(r["bootstrap_room"]) for r in reversed_summary["exposure"]["requests"]}
    assert rooms == truth

    def findings(s: dict[str, Any]) -> list[tuple[str, str, str | None, str]]:
        return sorted(
            (f["detector"], f["severity"], f["bootstrap_room"], f["time"]) for f in s["findings"]
        )

    assert findings(reversed_summary) == findings(summary)
    for key in ("lines", "events_by_kind", "dropped_by_reason", "first_time", "last_time"):
        assert reversed_summary["input"][key] == summary["input"][key], key
    assert reversed_summary["requests"].get("late_lines", 0) == 0
    said = reversed_summary["input"]["newest_first_logs"]
    assert sorted(Path(p).name for p in said) == sorted(p.name for p in logs.iterdir())
    assert summary["input"]["newest_first_logs"] == []
    assert "read from the end" in newest_first_line(reversed_summary)
    jsonschema.validate(reversed_summary, json.loads(SCHEMA_PATH.read_text()))


def test_a_newest_first_line_keeps_its_number_in_the_file(tmp_path: Path) -> None:
    log = tmp_path / "decode-0.log"
    log.write_text("\n".join(_lines(list(range(40, 0, -1)))) + "\n")
    assert [f.newest_first for f in discover([log])] == [True]
    events = list(events_by_node([log], ParseStats()))
    times = [e.time or 0.0 for e in events]
    assert times == sorted(times) and len(times) == 40
    # The oldest line (second 1) is the file's 40th.
    assert events[0].source.endswith("decode-0.log:40")
    assert events[-1].source.endswith("decode-0.log:1")


@pytest.mark.parametrize(
    "lead",
    ["[pod/{pod}/engine] ", '2026-09-06T00:00:00Z {{namespace="ml", pod="{pod}"}}  '],
    ids=["kubectl", "logcli"],
)
def test_a_merged_export_newest_first_is_read_per_name_oldest_first(
    tmp_path: Path, lead: str
) -> None:
    """logcli over several pods (its default): names lead the lines, and the newest come first."""
    lines = [
        lead.format(pod=pod) + line
        for line in _lines(list(range(30, 0, -1)))
        for pod in ("sglang-prefill-0", "sglang-decode-0")
    ]
    log = tmp_path / "export.log"
    log.write_text("\n".join(lines) + "\n")
    files = discover([log])
    assert sorted((f.node, f.newest_first) for f in files) == [
        ("sglang-decode-0", True),
        ("sglang-prefill-0", True),
    ]
    by_node: dict[str, list[float]] = {}
    for event in events_by_node([log], ParseStats()):
        by_node.setdefault(event.node, []).append(event.time or 0.0)
    assert all(times == sorted(times) and len(times) == 30 for times in by_node.values())


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_busy_second_at_the_newest_end_does_not_hide_the_order(tmp_path: Path) -> None:
    """The newest 400 KB printed within one second: the first 256 KiB span no time at all."""
    busy = [
        f"[2026-09-06 01:00:00 TP0] Decode batch, #token: {i} " + "x" * 200 for i in range(2000)
    ]
    log = _write(tmp_path / "decode-0.log", busy + _lines(list(range(3599, 0, -7))))
    assert [f.newest_first for f in discover([log])] == [True]


def test_two_newest_first_exports_appended_are_read_oldest_first(tmp_path: Path) -> None:
    older, newer = list(range(600, 0, -1)), list(range(3000, 2400, -1))
    log = _write(tmp_path / "decode-0.log", _lines(older) + _lines(newer))
    assert [f.newest_first for f in discover([log])] == [True]
    times = [e.time or 0.0 for e in events_by_node([log], ParseStats())]
    assert times == sorted(times) and len(times) == len(older) + len(newer)


def test_a_forward_log_with_an_older_block_first_is_read_as_it_lies(tmp_path: Path) -> None:
    """A backfilled block running back, longer than the start read, at the top of a log that
    otherwise runs forward: the end says which way the file runs."""
    padded = [line + " " + "x" * 120 for line in _lines(list(range(2400, 0, -1)))]
    log = _write(tmp_path / "decode-0.log", padded + _lines(list(range(2401, 3600))))
    assert [f.newest_first for f in discover([log])] == [False]


def test_a_newest_first_file_is_turned_round_without_writing_its_lines_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its lines hold prompts: read again by pieces (here of 4 KB: many), never spilled."""
    import tempfile

    from collector import line_order

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a newest-first file's lines written to a temporary file")

    for name in ("TemporaryFile", "NamedTemporaryFile", "SpooledTemporaryFile", "mkstemp"):
        monkeypatch.setattr(tempfile, name, refused)
    monkeypatch.setattr(line_order, "_PIECE_BYTES", 4096)
    older, newer = list(range(1200, 0, -1)), list(range(3500, 2300, -1))
    log = _write(tmp_path / "decode-0.log", _lines(older) + _lines(newer))
    events = list(events_by_node([log], ParseStats()))
    assert [e.time for e in events] == sorted(e.time or 0.0 for e in events)
    assert len(events) == len(older) + len(newer)
    numbers = [int(e.source.rpartition(":")[2]) for e in events]
    assert numbers == list(range(len(older), 0, -1)) + list(
        range(len(older) + len(newer), len(older), -1)
    )


def test_a_newest_first_gzip_past_the_memory_bound_is_a_counted_drop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collector import line_order

    log = tmp_path / "decode-0.log.gz"
    with gzip.open(log, "wt") as handle:
        handle.write("\n".join(_lines(list(range(600, 0, -1)))) + "\n")
    stats = ParseStats()
    assert len(list(events_by_node([log], stats))) == 600
    monkeypatch.setattr(line_order, "MAX_GZIP_TEXT", 10_000)
    stats = ParseStats()
    assert list(events_by_node([log], stats)) == []
    assert stats.dropped["newest_first_gzip_too_large"] == 1
