"""Prefill pools of two sizes in force, and nothing naming which prefill a decode answer met.

A staggered upgrade (prefill-1 restarted with a 2,040,000-token pool at 02:00, prefill-0 still on
0.5.19 with 681,280) where prefill logs no request lines and decode logs its time stats alone,
which name no bootstrap host: audit KS's reproduction, with two more answers. Judged against the
largest pool in force, the answers prefill-0 gave from other requests' KV were said nowhere
(28 of 60 leaked answers silent).

* 01:00 (every pool small): over length, as before.
* 03:00: prefill-0 logged refusing a 900,000-token prompt by its rid alone; decode answered one
  of exactly that length in the same seconds: the refusal is the room's, an exposure.
* 04:00: an 800,000-token answer that no refusal names: the large pool took it or the small
  one leaked it, which the pools cannot tell; a warning, and the terminal says so. (Its 96 s
  wait for the KV looks computed; the leaks at 01:00 and 03:00 waited 31 ms.)
* 04:30: 600,000 tokens, within every pool: nothing.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import jsonschema

from collector.forensics.driver import SCHEMA_PATH, print_outcome, run_forensics
from detectors.over_length_answered import NO_PREFILL_NAMED

CASE = Path(__file__).parent / "testdata" / "staggered_prefill"


def test_a_staggered_upgrade_s_answers_are_exposed_by_refusal_or_said_possible(
    tmp_path: Path,
) -> None:
    result = run_forensics([str(CASE)], tmp_path / "out", workers=1)
    summary = result.summary
    jsonschema.validate(summary, json.loads(SCHEMA_PATH.read_text()))

    exposed = {r["rid"]: r for r in summary["exposure"]["requests"]}
    assert sorted(exposed) == [
        "bbbb1111bbbb1111bbbb1111bbbb1111",
        "cccc2222cccc2222cccc2222cccc2222",
    ]
    joined = exposed["cccc2222cccc2222cccc2222cccc2222"]
    assert (joined["prefill_node"], joined["prefill_rid"]) == (
        "prefill-0",
        "aaaa0000aaaa0000aaaa0000aaaa0000",
    )
    assert "rejected_then_served" in joined["evidence"]

    possible = [
        f
        for f in summary["findings"]
        if f["detector"] == "over_length_answered" and f["severity"] == "warning"
    ]
    assert [(f["rid"], f["evidence"]["pool_basis"]) for f in possible] == [
        ("dddd3333dddd3333dddd3333dddd3333", NO_PREFILL_NAMED)
    ]
    assert possible[0]["evidence"]["strictest_pool_node"] == "prefill-0"
    assert summary["requests"]["prefill_node_unknown"] == 1
    assert not [f for f in summary["findings"] if f["rid"] == "eeee4444eeee4444eeee4444eeee4444"]

    out = io.StringIO()
    print_outcome(result, out)
    assert "PREFILL UNKNOWN: 1 request decode answered" in out.getvalue()
    assert "room 3234567890123456789" in out.getvalue()


def test_a_small_prefill_on_a_fixed_release_leaves_no_doubt(tmp_path: Path) -> None:
    """From 0.5.20 the small node refuses for good and decode answers nothing it refused: an
    answer no line places came from the large pool, and nothing is said of it."""
    case = tmp_path / "case"
    shutil.copytree(CASE, case)
    (case / "prefill-0@20260829T003000Z.server_info.json").write_text(
        json.dumps(
            {
                "version": "0.5.23",
                "model_path": "zai-org/GLM-5.3",
                "served_model_name": "GLM-5.3",
                "disaggregation_mode": "prefill",
                "context_length": 1048576,
                "max_total_num_tokens": 681280,
            }
        )
    )
    summary = run_forensics([str(case)], tmp_path / "out", workers=1).summary
    assert summary["requests"]["prefill_node_unknown"] == 0
    assert not [f for f in summary["findings"] if f["rid"] == "dddd3333dddd3333dddd3333dddd3333"]
