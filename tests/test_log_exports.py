"""Logs saved from a cloud's log service as one JSON document are read as the logs they hold.

Before: `aws logs filter-log-events > decode-0.json` and `gcloud logging read --format=json >
decode-0.json` were each one unrecognised document (`unrecognised_document`, `not_json_object`)
and the incident in them gave 0 of 145 exposures.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from collector import log_exports
from collector.files import describe
from collector.forensics.driver import run_forensics
from collector.parse import ParseStats, events_by_node
from simulator.offline import run_offline
from simulator.scenario import load_scenario

SCENARIOS = Path(__file__).parents[1] / "simulator" / "scenarios"
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def _epoch(line: str, last: float) -> float:
    m = _STAMP.match(line)
    return calendar.timegm(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) if m else last


def _entries(log: Path) -> list[tuple[float, str]]:
    entries, last = [], 0.0
    for line in log.read_text().splitlines():
        last = _epoch(line, last)
        entries.append((last, line))
    return entries


def cloudwatch(entries: list[tuple[float, str]]) -> dict[str, Any]:
    return {
        "events": [
            {"logStreamName": "sglang/decode-0", "timestamp": int(t * 1000), "message": text,
             "ingestionTime": int(t * 1000) + 900, "eventId": str(i)}
            for i, (t, text) in enumerate(entries)
        ],
        "searchedLogStreams": [{"logStreamName": "sglang/decode-0", "searchedCompletely": True}],
    }  # fmt: skip


def cloud_logging(entries: list[tuple[float, str]]) -> list[dict[str, Any]]:
    return [  # newest first, as gcloud lists them
        {"insertId": f"{i:x}", "logName": "projects/p/logs/stderr", "severity": "ERROR",
         "textPayload": text, "resource": {"type": "k8s_container"},
         "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime(t))}
        for i, (t, text) in reversed(list(enumerate(entries)))
    ]  # fmt: skip


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("incident")
    run_offline(load_scenario(SCENARIOS / "incident-replay-small.yaml"), folder)
    return folder


@pytest.mark.parametrize("export", [cloudwatch, cloud_logging], ids=["cloudwatch", "gcloud"])
def test_the_incident_saved_from_a_log_service_is_the_incident(
    tmp_path: Path, incident: Path, export: Any
) -> None:
    saved = tmp_path / "saved"
    saved.mkdir()
    for log in (incident / "logs").glob("*.log"):
        (saved / f"{log.stem}.json").write_text(json.dumps(export(_entries(log)), indent=2))
    _judged_as_the_incident(saved, incident, tmp_path / "out")


def _judged_as_the_incident(saved: Path, incident: Path, out: Path) -> None:
    """Forensics over `saved` names the incident's exposures, no more, with nothing lost."""
    summary = run_forensics(
        [str(saved), str(incident / "snapshots")], out, write_parquet=False
    ).summary
    truth = {
        str(r["bootstrap_room"])
        for r in json.loads((incident / "ground_truth.json").read_text())["exposed"]
    }
    assert len(truth) >= 10
    assert {str(r["bootstrap_room"]) for r in summary["exposure"]["requests"]} == truth
    assert summary["requests"].get("late_lines", 0) == 0
    assert not summary["input"]["dropped_by_reason"]


def _lines(path: Path) -> tuple[list[tuple[str, float | None]], ParseStats]:
    stats = ParseStats()
    return [(e.kind, e.time) for e in events_by_node([str(path)], stats)], stats


BATCH = "[2026-09-06 00:00:{s:02d} TP0] Decode batch, #running-req: 1, #token: {s}"


def test_a_line_without_the_engine_s_prefix_takes_the_entry_s_time(tmp_path: Path) -> None:
    entries = [(1788652800.0 + s, BATCH.format(s=s)) for s in range(5)]
    bare = "Finish: obj=GenerateReqInput(rid='r1', bootstrap_room=7), out={'meta_info': {}}"
    entries.append((1788652806.5, bare))
    (tmp_path / "decode-0.json").write_text(json.dumps(cloud_logging(entries)))
    events, _ = _lines(tmp_path / "decode-0.json")
    assert [t for _, t in events] == sorted(t for _, t in events)
    assert events[-1] == ("request_finished", 1788652806.0)  # gcloud's time, to the second


def test_a_server_info_document_is_not_taken_for_a_log_export(tmp_path: Path) -> None:
    info = tmp_path / "decode-0.json"
    info.write_text('{"version": "0.5.23", "max_total_num_tokens": 681280}')
    described = describe(info)
    assert described is not None and described.kind == "json"
    listed = tmp_path / "prefill-0.json"
    listed.write_text('[{"model": "x"}]')
    assert describe(listed).kind == "json"  # type: ignore[union-attr]


def test_an_export_past_the_bound_is_a_counted_drop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = [(1788652800.0 + s, BATCH.format(s=s)) for s in range(50)]
    (tmp_path / "decode-0.json").write_text(json.dumps(cloudwatch(entries), indent=1))
    monkeypatch.setattr(log_exports, "MAX_EXPORT_BYTES", 1000)
    events, stats = _lines(tmp_path / "decode-0.json")
    assert events == [] and stats.dropped == {"log_export_too_large": 1}


def test_an_export_of_two_streams_is_read_as_two_nodes(tmp_path: Path, incident: Path) -> None:
    """A log group's export holds every pod's stream: each is its node, as its own export
    would be (read as one node, prefill and decode lines met in one stream)."""
    entries: list[dict[str, Any]] = []
    for node in ("prefill-0", "decode-0"):
        for event in cloudwatch(_entries(incident / "logs" / f"{node}.log"))["events"]:
            entries.append({**event, "logStreamName": f"sglang-{node}"})
    entries.sort(key=lambda e: e["timestamp"])
    group = tmp_path / "group"
    group.mkdir()
    (group / "sglang-group.json").write_text(json.dumps({"events": entries}))
    apart = tmp_path / "apart"
    apart.mkdir()
    for node in ("prefill-0", "decode-0"):
        (apart / f"{node}.json").write_text(
            json.dumps(cloudwatch(_entries(incident / "logs" / f"{node}.log")))
        )

    def judged(folder: Path) -> dict[str, Any]:
        return run_forensics(
            [str(folder), str(incident / "snapshots")], tmp_path / folder.name / "out",
            write_parquet=False,
        ).summary  # fmt: skip

    together, alone = judged(group), judged(apart)
    # each stream the snapshots' node its name ends in
    read_as = together["input"]["merged_logs"][str(group / "sglang-group.json")]
    assert sorted(read_as) == ["decode-0", "prefill-0"]
    assert {r["rid"] for r in together["exposure"]["requests"]} == {
        r["rid"] for r in alone["exposure"]["requests"]
    }
    assert len(alone["exposure"]["requests"]) > 0


def test_a_utf16_export_saved_by_powershell_is_read(tmp_path: Path) -> None:
    entries = [(1788652800.0 + s, BATCH.format(s=s)) for s in range(50)]
    text = json.dumps(cloudwatch(entries), indent=2)
    (tmp_path / "decode-0.json").write_bytes(text.encode("utf-16"))
    events, stats = _lines(tmp_path / "decode-0.json")
    assert len(events) == 50 and not stats.dropped


def test_an_export_too_large_to_read_is_said() -> None:
    """One count, a whole node's log: said whatever its share of the lines."""
    from collector.forensics.report import unread_line

    summary = {"input": {"lines": 10_000, "dropped_by_reason": {"log_export_too_large": 1}}}
    assert "log_export_too_large 1" in unread_line(summary)


def _loki_labels(node: str) -> dict[str, str]:
    return {"namespace": "glm", "pod": f"sglang-{node}", "container": "sglang"}


def logcli_jsonl(logs: dict[str, list[tuple[float, str]]]) -> str:
    """`logcli query --output=jsonl` over both pods: one record a line, newest first."""
    lines = [
        (t, at, node, text)
        for node, entries in logs.items()
        for at, (t, text) in enumerate(entries)
    ]
    return "".join(
        json.dumps({"labels": _loki_labels(node), "line": text,
                    "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime(t))})
        + "\n"
        for t, _, node, text in sorted(lines, reverse=True)
    )  # fmt: skip


def loki_api(logs: dict[str, list[tuple[float, str]]]) -> str:
    """Loki's `query_range` answer, saved: a stream per pod, its values newest first."""
    return json.dumps({"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": _loki_labels(node),
         "values": [[str(int(t) * 10**9), text] for t, text in reversed(entries)]}
        for node, entries in logs.items()
    ]}})  # fmt: skip


@pytest.mark.parametrize(
    ("export", "name"),
    [(logcli_jsonl, "loki.jsonl"), (loki_api, "loki-query.json")],
    ids=["logcli-jsonl", "query-api"],
)
def test_the_incident_saved_from_loki_is_the_incident(
    tmp_path: Path, incident: Path, export: Any, name: str
) -> None:
    """Blind review 15: `logcli --output=jsonl` beside plain logs was read as 54 unclassified
    lines, its two nodes and their exposures missing, exit 0; the query API's answer was one
    unrecognised document."""
    saved = tmp_path / "saved"
    saved.mkdir()
    logs = {node: _entries(incident / "logs" / f"{node}.log") for node in ("prefill-0", "decode-0")}
    (saved / name).write_text(export(logs))
    _judged_as_the_incident(saved, incident, tmp_path / "out")
