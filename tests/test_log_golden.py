"""Golden tests: each log family of the SGLang reference, parsed line by line.

The expected events in `testdata/golden/logs/*.expected.jsonl` were written by hand from
`shared/reference/sglang-telemetry.md`, one line of expectation per input line.
"""

from __future__ import annotations

import json

import pytest

from collector.events import RANK_KEYS, iso_time
from collector.files import ReadStats, read_lines
from collector.sglang.logs import LineParser
from tests.golden import GOLDEN, assert_fields, load_expected

FAMILIES = sorted(p.name.removesuffix(".log") for p in (GOLDEN / "logs").glob("*.log"))
# Strings planted in the golden inputs that must never come out of a parser.
SECRETS = ("SECRET", "sk-secret-do-not-keep", "the user wrote")


@pytest.mark.parametrize("family", FAMILIES)
def test_log_family_matches_hand_written_expectations(family: str) -> None:
    log = GOLDEN / "logs" / f"{family}.log"
    expected = {e["line"]: e for e in load_expected(GOLDEN / "logs" / f"{family}.expected.jsonl")}
    parser = LineParser("node-a")
    seen_lines = set()
    for number, line in read_lines(log, ReadStats()):
        seen_lines.add(number)
        bucket, event = parser.parse(line, f"{log.name}:{number}")
        want = expected.get(number)
        assert want is not None, f"{family}:{number} has no expectation (bucket {bucket})"
        where = f"{family}:{number}"
        if "bucket" in want:
            assert event is None and bucket == want["bucket"], f"{where}: got {bucket}"
            continue
        assert event is not None, f"{where}: expected {want['kind']}, got bucket {bucket}"
        assert event.kind == want["kind"], where
        assert iso_time(event.time) == want["time"], f"{where}: time {iso_time(event.time)}"
        assert event.node == "node-a"
        # A record that a client's rid broke over lines is read at its last, from its first.
        assert event.source == f"{log.name}:{want.get('source_line', number)}", where
        want_ranks = {k: want[k] for k in RANK_KEYS if k in want}
        assert event.ranks == want_ranks, f"{where}: ranks {event.ranks}"
        assert_fields(event.fields, want["fields"], bool(want.get("exact")), where)
        rendered = json.dumps(event.to_json_dict())
        for secret in SECRETS:
            assert secret not in rendered, f"{where}: leaked {secret!r}"
    missing_blank = {n for n in expected if n not in seen_lines}
    assert not missing_blank, f"{family}: expected lines never read: {sorted(missing_blank)}"


def test_every_family_has_a_golden_file() -> None:
    assert {
        "prefixes",
        "startup",
        "batches",
        "requests",
        "time_stats",
        "access",
        "refusals",
        "pd",
        "canary_noise",
        "forged_rids",
    } <= set(FAMILIES)


def test_golden_inputs_are_committed_verbatim() -> None:
    # A stray editor could strip the trailing spaces some SGLang releases print; keep them.
    assert (GOLDEN / "logs" / "batches.log").read_text().count(", \n") == 2
