"""Property tests: no input makes the log parsers raise, and every line is accounted for."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.events import Event
from collector.parse import ParseStats, events_by_node
from collector.sglang import request_log
from collector.sglang.logs import _HEADS, RULES, LineParser
from collector.spill import BatchLane, ChainedStages
from collector.state.node_windows import NodeWindowAggregator
from collector.state.request_sides import RequestSideAssembler
from tests.golden import GOLDEN

REAL_LINES = [
    line
    for path in sorted((GOLDEN / "logs").glob("*.log"))
    for line in path.read_text().splitlines()
    if line
]

# Lines that look like SGLang's but with parts cut or swapped: the drift a parser meets.
mutated_lines = st.builds(
    lambda line, cut, junk: line[:cut] + junk + line[cut + len(junk) :],
    st.sampled_from(REAL_LINES),
    st.integers(min_value=0, max_value=400),
    st.text(max_size=12),
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=300), mutated_lines))
def test_line_parser_never_raises_and_fields_always_materialise(line: str) -> None:
    bucket, event = LineParser("n").parse(line, "x:1")
    assert isinstance(bucket, str) and bucket
    if event is not None:
        assert event.kind == bucket
        event.to_json_dict()  # forces the deferred field extraction


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(mutated_lines, st.sampled_from(REAL_LINES)), max_size=30))
def test_batch_lines_handed_to_the_stages_never_raise(lines: list[str]) -> None:
    """The forensics workers' lane (batch lines read straight into the node windows and the
    side assembler) meets the same drift as the parser, and must never raise either."""
    stages = ChainedStages([NodeWindowAggregator(60.0), RequestSideAssembler()])
    outbox: list[Event] = []
    parser = LineParser("n", BatchLane("n", stages.observe_batch, outbox))
    for number, line in enumerate(lines):
        bucket, event = parser.parse(line, f"x:{number}")
        assert isinstance(bucket, str) and bucket
        if event is not None:
            outbox += stages.observe(event)
    outbox += stages.flush()
    assert all(isinstance(shipped, Event) for shipped in outbox)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=4000), st.booleans(), st.integers(min_value=0, max_value=4000))
def test_files_of_random_bytes_never_raise(
    tmp_path: Path, blob: bytes, zipped: bool, cut: int
) -> None:
    path = tmp_path / ("junk.log.gz" if zipped else "junk.log")
    data = gzip.compress(blob)[:cut] if zipped else blob
    path.write_bytes(data)
    stats = ParseStats()
    for event in events_by_node([path], stats):
        event.to_json_dict()
    assert stats.files == 1


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(st.sampled_from(REAL_LINES), mutated_lines, st.text(max_size=80)),
        min_size=1,
        max_size=40,
    ),
    st.booleans(),
)
def test_every_line_lands_in_exactly_one_bucket(
    tmp_path: Path, lines: list[str], final_newline: bool
) -> None:
    """Also when the file ends without its newline: a request record cut short is dropped
    (`truncated_request_line`), any other line is read as it is."""
    lines = [line.replace("\r", " ").replace("\n", " ") for line in lines]
    text = "\n".join(lines) + ("\n" if final_newline or not lines[-1] else "")
    path = tmp_path / "mix.log"
    path.write_text(text, encoding="utf-8", errors="replace")
    stats = ParseStats()
    list(events_by_node([path], stats))
    accounted = (
        sum(stats.events.values())
        + sum(stats.noise.values())
        + stats.unclassified_engine
        + stats.unclassified_other
        + stats.dropped.get("binary", 0)
        + stats.dropped.get("line_too_long", 0)
        + stats.dropped.get("truncated_request_line", 0)
    )
    assert accounted == stats.lines == len(lines)
    # Only request records cut short are dropped so, wherever they stand (blind review 19).
    cut = sum(1 for line in lines if request_log.cut_record(line.rstrip()))
    assert stats.dropped.get("truncated_request_line", 0) <= cut


_HEAD_ALTERNATION = re.compile(
    "|".join(f"(?P<r{i}>{re.escape(rule.head)})" for i, rule in enumerate(RULES))
)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.sampled_from([rule.head for rule in RULES]).flatmap(
            lambda head: st.builds(
                lambda cut, tail: head[:cut] + tail, st.integers(0, 40), st.text(max_size=20)
            )
        ),
        st.text(max_size=40),
    ),
    st.text(max_size=5),
)
def test_the_head_index_picks_the_rule_one_alternation_of_all_heads_picks(
    message: str, before: str
) -> None:
    """The index stands in for the alternation of every rule's head: first rule in order wins."""
    hit = _HEADS.match(before + message, len(before))
    m = _HEAD_ALTERNATION.match(before + message, len(before))
    if m is None:
        assert hit is None
    else:
        assert hit is not None
        rule, _, end = hit
        assert rule is RULES[int((m.lastgroup or "r-1")[1:])] and end == m.end()
