"""Forensics on logs written by hand from SGLang's formats, not by the simulator."""

from __future__ import annotations

from pathlib import Path

from collector.forensics.driver import run_forensics

LOGS = Path(__file__).parent / "testdata" / "reference_incident"


def test_the_refused_then_served_response_is_exposed_with_both_halves(tmp_path: Path) -> None:
    summary = run_forensics([str(LOGS)], tmp_path, write_parquet=False).summary
    (exposed,) = summary["exposure"]["requests"]
    assert exposed == {
        "rid": "e5f4a3b2c1d0e9f8a7b6554433221100",  # the id decode answered with
        "bootstrap_room": "5523401987766512300",
        "node": "decode-0",
        "time": "2026-08-27T10:14:52.000Z",
        "prompt_tokens": 912384,
        "cached_tokens": 0,
        "prefill_node": "prefill-0",
        "prefill_rid": "b2e1d4f3c5a6b7988877665544332222",
        "evidence": ["over_length_answered", "rejected_then_served"],
    }
    assert summary["requests"]["total"] == 2  # the honest 4,096-token request is not exposed
    prefill = summary["nodes"]["prefill-0"]
    assert prefill["role"] == "prefill"
    assert (prefill["config"][0]["max_total_num_tokens"], prefill["config"][0]["context_len"]) == (
        681280,
        1048576,
    )
    critical = {f["detector"] for f in summary["findings"] if f["severity"] == "critical"}
    assert {"pool_below_context", "over_length_answered", "rejected_then_served"} <= critical
