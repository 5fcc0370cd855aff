"""Decode logs whose requests overlap no prefill node's in time are said.

Why: blind review 18. A prefill log of the day before decode's: every decode answer was judged
by the prefill pool last logged, a day earlier, nothing of prefill's could be joined to them,
and the report read as if the logs covered both days without a word of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.forensics.driver import run_forensics
from tests.engine_lines import finish_line, prefill_start, server_args


def _pair(folder: Path, prefill_day: str, decode_day: str) -> None:
    folder.mkdir()
    (folder / "prefill-0.log").write_text(
        server_args(prefill_day, "prefill")
        + prefill_start(prefill_day, "10.1.0.11", 2_040_000)
        + "".join(
            finish_line(f"{prefill_day} 09:0{i}:00", f"p{i}", 7000 + i, 50_000, tokens=1)
            for i in range(3)
        )
    )
    (folder / "decode-0.log").write_text(
        server_args(decode_day, "decode")
        + "".join(
            finish_line(f"{decode_day} 09:0{i}:05", f"d{i}", 8000 + i, 50_000) for i in range(3)
        )
    )


@pytest.mark.parametrize(("prefill_day", "apart"), [("2026-09-02", True), ("2026-09-03", False)])
def test_decode_requests_no_prefill_request_overlaps_are_said(
    tmp_path: Path, prefill_day: str, apart: bool
) -> None:
    _pair(tmp_path / "logs", prefill_day, "2026-09-03")
    result = run_forensics([str(tmp_path / "logs")], tmp_path / "out", write_parquet=False)
    said = result.summary["input"]["decode_apart"]
    markdown = (tmp_path / "out" / "report.md").read_text()
    if not apart:
        assert said == [] and "overlap no prefill node's" not in markdown
        return
    assert [(row["node"], row["first"], row["last"]) for row in said] == [
        ("decode-0", "2026-09-03T09:00:05.000Z", "2026-09-03T09:02:05.000Z")
    ]
    assert said[0]["prefill"]["prefill-0"][1].startswith("2026-09-02")
    assert "decode-0's requests" in markdown and "overlap no prefill node's" in markdown


def _cut(folder: Path, decode_until_minute: int) -> None:
    """Prefill's requests every 5 minutes to 10:00; decode's answers to them, its log ending
    after `decode_until_minute`."""
    folder.mkdir()
    day = "2026-09-03"
    times = [(9 + m // 60, m % 60) for m in range(0, 61, 5)]
    (folder / "prefill-0.log").write_text(
        server_args(day, "prefill")
        + prefill_start(day, "10.1.0.11", 2_040_000)
        + "".join(
            finish_line(f"{day} {h:02d}:{m:02d}:00", f"p{i}", 7000 + i, 50_000, tokens=1)
            for i, (h, m) in enumerate(times)
        )
    )
    (folder / "decode-0.log").write_text(
        server_args(day, "decode")
        + "".join(
            finish_line(f"{day} {h:02d}:{m:02d}:05", f"d{i}", 7000 + i, 50_000)
            for i, (h, m) in enumerate(times)
            if (h - 9) * 60 + m <= decode_until_minute
        )
    )


@pytest.mark.parametrize(("decode_until", "early"), [(30, True), (50, False), (60, False)])
def test_a_decode_log_ending_well_before_prefill_s_is_said(
    tmp_path: Path, decode_until: int, early: bool
) -> None:
    """Blind review 34 (D6): a decode log cut 40 minutes before prefill's, most exposures and
    timeouts after its end, and nothing said that decode's lines had stopped."""
    _cut(tmp_path / "logs", decode_until)
    result = run_forensics([str(tmp_path / "logs")], tmp_path / "out", write_parquet=False)
    said = result.summary["input"]["decode_ended_early"]
    markdown = (tmp_path / "out" / "report.md").read_text()
    if not early:  # 10 minutes short of prefill's, or not at all: within a quiet stretch
        assert said == [] and "request lines end at" not in markdown
        return
    assert said == [
        {
            "node": "decode-0",
            "last": "2026-09-03T09:30:05.000Z",
            "prefill": {"prefill-0": "2026-09-03T10:00:00.000Z"},
            "prefill_nodes": 1,
        }
    ]
    assert "decode-0's request lines end at 2026-09-03T09:30:05.000Z" in markdown


def test_a_sparse_decode_node_s_quiet_hours_are_no_cut_log(tmp_path: Path) -> None:
    """Blind review 57 D3: with 2,000 decode nodes answering three requests a day each, every
    one was said to have ended early, since its last answer came hours before prefill's. A
    silence five times the node's own pace is what says a cut log; hours at that pace do not."""
    folder = tmp_path / "logs"
    folder.mkdir()
    day = "2026-09-03"
    hours = range(9, 22)  # a request an hour, 09:00 to 21:00, on one prefill node
    (folder / "prefill-0.log").write_text(
        server_args(day, "prefill")
        + prefill_start(day, "10.1.0.11", 2_040_000)
        + "".join(
            finish_line(f"{day} {h:02d}:00:00", f"p{h}", 7000 + h, 50_000, tokens=1) for h in hours
        )
    )
    for decode, answered in (("decode-0", (9, 13, 17)), ("decode-1", set(hours) - {9, 13, 17})):
        (folder / f"{decode}.log").write_text(
            server_args(day, "decode")
            + "".join(
                finish_line(f"{day} {h:02d}:00:05", f"d{h}", 7000 + h, 50_000)
                for h in sorted(answered)
            )
        )
    result = run_forensics([str(folder)], tmp_path / "out", write_parquet=False)
    # decode-0's last answer is 4 h before prefill's, at a pace of one every 4 h.
    assert result.summary["input"]["decode_ended_early"] == []


def test_a_cut_decode_log_names_three_prefill_nodes_and_counts_the_rest(tmp_path: Path) -> None:
    """Blind review 57 D3: each entry listed every prefill node, so the JSON grew with the
    square of the nodes (157 MB for 2,000 pairs)."""
    folder = tmp_path / "logs"
    folder.mkdir()
    day = "2026-09-03"
    minutes = range(0, 61, 5)
    for p in range(5):
        (folder / f"prefill-{p}.log").write_text(
            server_args(day, "prefill")
            + prefill_start(day, f"10.1.0.{11 + p}", 2_040_000)
            + "".join(
                finish_line(
                    f"{day} {9 + (m + p) // 60:02d}:{(m + p) % 60:02d}:00",
                    f"p{p}-{m}",
                    7000 + 100 * p + m,
                    50_000,
                    tokens=1,
                    host=f"10.1.0.{11 + p}",
                )
                for m in minutes
            )
        )
    (folder / "decode-0.log").write_text(
        server_args(day, "decode")
        + "".join(
            finish_line(f"{day} 09:{m + p:02d}:05", f"d{p}-{m}", 7000 + 100 * p + m, 50_000)
            for m in minutes
            if m <= 20
            for p in range(5)
        )
    )
    result = run_forensics([str(folder)], tmp_path / "out", write_parquet=False)
    (entry,) = result.summary["input"]["decode_ended_early"]
    assert entry["node"] == "decode-0" and entry["prefill_nodes"] == 5
    assert list(entry["prefill"]) == ["prefill-4", "prefill-3", "prefill-2"]
    assert entry["prefill"]["prefill-4"] == "2026-09-03T10:04:00.000Z"


def _at(minute: int, second: int) -> str:
    return f"2026-09-03 {9 + minute // 60:02d}:{minute % 60:02d}:{second:02d}"


@pytest.mark.parametrize("swapped", [True, False])
def test_a_decode_node_swapped_for_one_that_takes_its_traffic_is_no_cut_log(
    tmp_path: Path, swapped: bool
) -> None:
    """Blind review 62 D6: blue/green, the green decode node started at 09:55, the router moved
    to it at 10:00 and the blue one drained to 10:05; "DECODE ENDED EARLY" named the blue one,
    since its successor started before its end. The shares tell: prefill's requests after
    10:05 all have a decode answer. Beside it, two decode nodes sharing the traffic, one's
    log cut at 09:30: the other answers only its own half after, and the cut is said."""
    folder = tmp_path / "logs"
    folder.mkdir()
    day = "2026-09-03"
    minutes = range(121)  # a request a minute, 09:00 to 11:00
    (folder / "prefill-0.log").write_text(
        server_args(day, "prefill")
        + prefill_start(day, "10.1.0.11", 2_040_000)
        + "".join(finish_line(_at(m, 0), f"p{m}", 7000 + m, 50_000, tokens=1) for m in minutes)
    )
    if swapped:
        answered = {
            "decode-0": [m for m in minutes if m < 60] + [65],
            "decode-g0": [m for m in minutes if m >= 60 and m != 65],
        }
        started = {"decode-0": "00:00:00", "decode-g0": "09:55:00"}
    else:
        answered = {
            "decode-0": [m for m in minutes if m % 2 == 0 and m <= 30],
            "decode-1": [m for m in minutes if m % 2 == 1],
        }
        started = {"decode-0": "00:00:00", "decode-1": "00:00:00"}
    for node, answers in answered.items():
        (folder / f"{node}.log").write_text(
            server_args(day, "decode").replace("00:00:00", started[node])
            + "".join(finish_line(_at(m, 5), f"d{m}", 7000 + m, 50_000) for m in answers)
        )
    result = run_forensics([str(folder)], tmp_path / "out", write_parquet=False)
    early = result.summary["input"]["decode_ended_early"]
    if swapped:
        assert early == []
    else:
        assert [(row["node"], row["last"]) for row in early] == [
            ("decode-0", "2026-09-03T09:30:05.000Z")
        ]


@pytest.mark.parametrize("decode_1_read", [True, False])
def test_a_decode_node_s_logs_left_out_beside_the_others_is_no_all_clear(
    tmp_path: Path, decode_1_read: bool
) -> None:
    """Blind review 65 D4: two decode nodes, one's logs left out: 72 of 99 requests had only
    their prefill side, the abort race's victims among them, and the run said "no exposed
    responses found (99 requests judged on 2 nodes)", exit 0. Decode receives every PD request:
    prefill's requests no decode read logged, that many, say a decode node is missing."""
    folder = tmp_path / "logs"
    folder.mkdir()
    day = "2026-09-03"
    minutes = range(60)  # a request a minute, shared by the two decode nodes
    (folder / "prefill-0.log").write_text(
        server_args(day, "prefill")
        + prefill_start(day, "10.1.0.11", 2_040_000)
        + "".join(
            finish_line(f"{day} 09:{m:02d}:00", f"p{m}", 7000 + m, 20_000, tokens=1)
            for m in minutes
        )
    )
    for node in ("decode-0", "decode-1") if decode_1_read else ("decode-0",):
        mine = [m for m in minutes if m % 2 == int(node[-1])]
        (folder / f"{node}.log").write_text(
            server_args(day, "decode")
            + "".join(finish_line(f"{day} 09:{m:02d}:05", f"p{m}", 7000 + m, 20_000) for m in mine)
        )
    summary = run_forensics([str(folder)], tmp_path / "out", write_parquet=False).summary
    alone = summary["requests"]["prefill_alone"]
    if decode_1_read:
        assert alone["count"] == 0 and summary["verdict"]["outcome"] == "none_found"
        return
    assert (alone["count"], alone["of"]) == (30, 60)
    assert summary["verdict"]["outcome"] == "not_judged"
    assert (
        "30 requests prefill served (room 7001, room 7003, room 7005 and 27 more) have no "
        "decode side in the input, of 60 PD requests" in summary["verdict"]["said"]
    )
