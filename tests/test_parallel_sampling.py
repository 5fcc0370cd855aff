"""Parallel sampling (`n` > 1) in PD, end to end from SGLang's own log lines (audit P's excerpt,
`testdata/parallel_sampling`): every sample a leak answered is named by its rid, the warm-up
that nobody received is not, and a healthy fan-out room is judged clean with no late line."""

from __future__ import annotations

from pathlib import Path

from collector.forensics.driver import run_forensics

CASE = Path(__file__).parent / "testdata" / "parallel_sampling"
# From the generator's truth (audit P), not from kvwatch.
EXPOSED = {
    ("3564e508ab85958c782ba004b98e08ba", "decode-1", "3230683359945209673"),
    ("bcff989e77a686a2e56d52d39d541fb3", "decode-1", "3230683359945209673"),
    ("8b514aa4fe1c67922c43a56d16344cbb", "decode-1", "3230683359945209673"),
    ("1c1b895792ba9e373cbe4b61c5b386d7", "decode-1", "3230683359945209673"),
    ("8971a3eddbcc03252b9486957efb22c1", "decode-1", "3230683359945209673"),
    ("511c237239b4fd8420d2fef27722ac7c", "decode-1", "3230683359945209673"),
    ("item-ed98427768ee", "decode-0", "4571913980683283922"),
}
WARM_UP = "968b92097e94ab6d2523f2f319946583"  # decode-1's warm-up of the n=6 room
HEALTHY_ROOM = "8169805121437453169"


def test_each_exposed_sample_is_named_and_nothing_else(tmp_path: Path) -> None:
    result = run_forensics([str(CASE)], tmp_path / "out", write_parquet=False)
    summary = result.summary
    exposure = summary["exposure"]
    named = {(r["rid"], r["node"], r["bootstrap_room"]) for r in exposure["requests"]}
    assert named == EXPOSED
    assert exposure["first"] == "2026-11-11T08:30:14.734Z"
    findings = summary["findings"]
    assert not [f for f in findings if f["rid"] == WARM_UP]
    assert not [f for f in findings if f["bootstrap_room"] == HEALTHY_ROOM]
    assert summary["requests"]["late_lines"] == 0
    # Seven responses, to two client calls: the owners to tell are the calls'.
    report = result.outputs["markdown"].read_text()
    assert "7 client responses (answering 2 prompts: parallel sampling) probably" in report
