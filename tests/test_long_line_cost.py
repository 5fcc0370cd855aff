"""One long log line costs time linear in its length, and the regexes anchored for that read every
line exactly as before.

A fuzz audit found searches that tried every position of a long run as a match start and scanned
to the run's end before failing (`(\\w+)=` over `aaaa…`): a 40 KB line took 6-10 s, a 1 MB one
(then the longest the reader kept) about an hour. Each such regex now starts a match only where
a key can begin. `OLD_*` below are the patterns as they were, kept as the reference the new ones
must agree with on every line, real or generated.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.sglang import batch, pd, startup, time_stats
from collector.sglang.envelope import peel
from collector.sglang.logs import LineParser
from collector.sglang.values import as_int, number

OLD_CAPACITY_PAIR = re.compile(r"(\w+)=([^,\s]+)")
OLD_TIME_STATS_PAIR = re.compile(
    r"(\w+)(?:=|\()(-?[\d.]+(?:e[-+]?\d+)?(?:ms|us|s)?|[^,()\s]+)(?: (GB/s|MB|GB|KB))?"
)
OLD_BATCH_ITEM = re.compile(r"([^,:]+): ([^,]*)")
OLD_KEY_EQ = re.compile(r"(\w+)=(\S+)")
OLD_LOST = re.compile(r"\(bootstrap_addr: ([^)]*)\)(?:, (\d+) requests affected)?")


def old_parse_capacity(message: str) -> dict[str, Any]:
    """`startup.parse_capacity` as it was."""
    at = message.find("max_total_num_tokens=")
    fields: dict[str, Any] = {
        "max_total_num_tokens": None,
        "context_len": None,
        "chunked_prefill_size": None,
        "max_prefill_tokens": None,
        "max_running_requests": None,
    }
    for key, value in OLD_CAPACITY_PAIR.findall(message, at):
        fields[key] = number(value)
    return fields


def old_parse_lost_connection(message: str) -> dict[str, Any]:
    """`pd.parse_lost_connection` as it was."""
    m = OLD_LOST.search(message)
    return {
        "bootstrap_addr": m.group(1) if m else None,
        "affected": as_int(m.group(2)) if m and m.group(2) else None,
    }


def _groups(m: re.Match[str] | None) -> tuple[Any, ...] | None:
    return m.groups() if m is not None else None


# What stands before a key of the engine's: `, key=`, `(key=`, `key: value, key: value`.
_BEFORE_A_KEY = (", ", "(", "=")


def _key_starts(text: str) -> list[int]:
    """Offsets just after what stands before a key, and every 31st."""
    starts = {0, len(text), *range(0, len(text), 31)}
    for mark in _BEFORE_A_KEY:
        at = text.find(mark)
        while at >= 0:
            end = at + len(mark)
            starts.add(end)
            at = text.find(mark, end)
    return sorted(pos for pos in starts if pos <= len(text))


def assert_reads_as_before(text: str, every_start: bool = True) -> None:
    """Each changed regex (and the function around it) gives on `text` what the old one gave.

    With `every_start`, the two that are read from an offset are compared from every offset
    where a key may begin (after `, `, `(` or `=`) and every 31st:
    every offset of all 502 real lines took 205 s, near the test timeout on a slow machine.
    """
    starts = _key_starts(text) if every_start else sorted({0, len(text) // 2, len(text)})
    # startup: the capacity pairs, from wherever the needle may stand.
    assert repr(startup.parse_capacity(text)) == repr(old_parse_capacity(text)), text
    for pos in starts:
        new = startup._CAPACITY_PAIR.findall(text[pos:] if pos > 0 else text)
        assert new == OLD_CAPACITY_PAIR.findall(text, pos), (text, pos)
    # time_stats: the pairs after the head, with the spans the layouts learn.
    for pos in starts:
        new_pairs = [(m.groups(), m.span(2)) for m in time_stats._pairs(text, pos)]
        old_pairs = [(m.groups(), m.span(2)) for m in OLD_TIME_STATS_PAIR.finditer(text, pos)]
        assert new_pairs == old_pairs, (text, pos)
    # batch: the items of a body (always read whole).
    assert batch._ITEM.findall(text) == OLD_BATCH_ITEM.findall(text), text
    # pd: canary `key=value` words, the lost connection (the checksum mismatch is read by its
    # keys in any order since: `test_checksum_mismatch_keys`).
    assert pd._KEY_EQ.findall(text) == OLD_KEY_EQ.findall(text), text
    assert pd.parse_lost_connection(text) == old_parse_lost_connection(text), text


TESTDATA = Path(__file__).parent / "testdata"
REAL_LINES = sorted(
    {
        line
        for path in sorted(TESTDATA.rglob("*.log"))
        for line in path.read_text().splitlines()
        if line
    }
)


def _pieces_of(line: str) -> list[str]:
    """The line, its message, and its message from each word or item on: where parsers start."""
    message = peel(line).message
    texts = [line, message]
    for sep in (" ", ", ", ": ", "(", "#"):
        at = message.find(sep)
        while at >= 0:
            texts.append(message[at + len(sep) :])
            at = message.find(sep, at + 1)
    return texts


def test_real_lines_read_as_before() -> None:
    assert len(REAL_LINES) > 100
    for line in REAL_LINES:
        assert_reads_as_before(line)
        for piece in _pieces_of(line):
            assert_reads_as_before(piece, every_start=False)


# Where an anchor could go wrong: keys inside words, values ending inside words, repeated needles,
# whitespace other than a space.
EDGE_CASES = [
    "xmax_total_num_tokens=5, a=1",
    "-0=0 é=1 a=,b=1 x-y=2",
    "a=b=c =a=1 _=2",
    "a=5msx=1",
    "a=5ms_y(2), b(1.5e3us) c=abc(z=1) d=1 GB/s e=1.2.3s",
    "a:b, c: d",
    "a: b: c, d: e, : x,,: y, a:: b",
    "xreq=abc bootstrap_room=1",
    "req=req=a bootstrap_room=2 expected=0x1f got=0xZ",
    "xreq= req=a bootstrap_room=3",
    "req=a\u00a0req=b bootstrap_room=4",
    "req=a\u00a0bootstrap_room=5 req=b bootstrap_room=6",
    "(bootstrap_addr: (bootstrap_addr: a), 3 requests affected",
    "(bootstrap_addr: a (bootstrap_addr: b",
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_read_as_before(text: str) -> None:
    assert_reads_as_before(text)


# Fragments around which the anchors decide: word characters (ASCII and not), the separators
# each pattern starts after, values that end inside a word (`5ms` before `x`), and the literal
# parts of the patterns.
_FRAGMENTS = [
    *"ax_1059.-e'#%/",
    "é",
    "٣",  # a digit and a word character, not ASCII
    "=",
    "(",
    ")",
    ",",
    ", ",
    ":",
    ": ",
    " ",
    "  ",
    "\t",
    "\u00a0",  # whitespace to `\s`, not to `str.split(" ")`
    "5ms",
    "1.5e3",
    "us",
    "s",
    "GB/s",
    " GB/s",
    " MB",
    " GB",
    " KB",
    "req=",
    " bootstrap_room=",
    "bootstrap_room=",
    " expected=",
    " got=",
    "0x1f",
    "0xZ",
    "(bootstrap_addr: ",
    ", 12 requests affected",
    "max_total_num_tokens=",
    "context_len=",
    "#token: ",
    "True",
    "None",
]
# And few fragments at a time, those of one pattern, so that its parts meet in every order.
_FAMILIES = [
    ["a", "é", "_", "-", "1", "=", ",", " ", "\u00a0", "max_total_num_tokens="],  # `k=v` words
    ["a", "é", "1", ".", "e", "5ms", "=", "(", ")", ",", ", ", " ", " GB/s"],  # time stats
    ["a", "#", ":", ": ", ",", ", ", " "],  # batch items
    ["a", "req=", " bootstrap_room=", "1", " expected=", "0x1f", " got=", " ", "\u00a0"],
    ["a", "(bootstrap_addr: ", ")", ", 12 requests affected", " "],
]
generated = st.one_of(
    st.lists(st.sampled_from(_FRAGMENTS), max_size=40).map("".join),
    st.sampled_from(_FAMILIES).flatmap(
        lambda family: st.lists(st.sampled_from(family), max_size=16).map("".join)
    ),
)
spliced = st.builds(
    lambda line, cut, junk: line[:cut] + junk + line[cut + len(junk) :],
    st.sampled_from(REAL_LINES),
    st.integers(min_value=0, max_value=400),
    st.one_of(generated, st.text(max_size=12)),
)


@settings(max_examples=1500, deadline=None)
@given(st.one_of(generated, spliced, st.text(max_size=200)))
def test_generated_lines_read_as_before(text: str) -> None:
    assert_reads_as_before(text)


# --- cost ------------------------------------------------------------------------------------

_PREFIX = "[2026-09-08 11:58:42 TP0] "

# (event kind, line of `n` characters or so): the reproducers of the audit, and the other ways
# into the same regexes.
_SHAPES: dict[str, tuple[str, Callable[[int], str]]] = {
    "capacity": ("capacity", lambda n: f"{_PREFIX}max_total_num_tokens=1, " + "a" * n),
    "capacity_glued": (
        "capacity",
        lambda n: f"{_PREFIX}Memory pool end. max_total_num_tokens=1, " + "a" * n,
    ),
    "time_stats": (
        "request_time_stats",
        lambda n: f"{_PREFIX}ReqTimeStats(rid=x, type=prefill): " + "a" * n,
    ),
    "time_stats_after_value": (
        "request_time_stats",
        lambda n: f"{_PREFIX}ReqTimeStats(rid=x, type=prefill): a=5ms" + "a" * n,
    ),
    # A field first: a batch line with none is drift, counted unread (blind review 21).
    "decode_batch": (
        "decode_batch",
        lambda n: f"{_PREFIX}Decode batch, #running-req: 1, #" + "a" * n,
    ),
    "decode_batch_key_eq": ("decode_batch", lambda n: f"{_PREFIX}Decode batch " + "a" * n + "=1"),
    "prefill_batch": ("prefill_batch", lambda n: f"{_PREFIX}Prefill batch, a: 1, " + "a" * n),
    "kv_canary": ("kv_canary_violation", lambda n: f"{_PREFIX}kv_canary violation: " + "a" * n),
    "canary_stats": ("kv_canary_stats", lambda n: f"{_PREFIX}[canary] step=1 " + "a" * n),
    "checksum_mismatch": (
        "checksum_mismatch",
        lambda n: f"{_PREFIX}KV checksum mismatch " + "req=" * (n // 4),
    ),
    "lost_connection": (
        "lost_connection",
        lambda n: (
            f"{_PREFIX}Lost connection with prefill "
            + "(bootstrap_addr: " * (n // len("(bootstrap_addr: "))
        ),
    ),
}

SMALL, LARGE = 1_000, 32_000  # characters: 32 times longer
BOUND = 200  # times the cost of the short line
TRIES = 5
_unique = itertools.count()


def _cpu_seconds(line: str, kind: str, enough: float = 0.0) -> float:
    """The least CPU time this thread spent reading the line and its fields, of a few tries (no
    more once one took at most `enough`).

    Each try reads the line with an end of its own, never read before: a time-stats layout is
    learnt from a line seen twice, and would read the rest without the generic reader.
    """
    best = float("inf")
    for _ in range(TRIES):
        text = f"{line}{next(_unique)}"
        start = time.thread_time()
        bucket, event = LineParser("n").parse(text, "s")
        assert event is not None
        event.to_json_dict()  # the fields, where the regexes run
        best = min(best, time.thread_time() - start)
        assert bucket == kind
        if best <= enough:
            break
    return best


@pytest.mark.parametrize("shape", sorted(_SHAPES))
def test_a_long_pathological_line_costs_time_linear_in_its_length(shape: str) -> None:
    """Reading a line 32 times longer costs at most 200 times more, not the ~1000 times a scan
    quadratic in the length costs (the audit measured x3-4 per doubling).

    Regex work has no counter, so this compares the CPU time of the same read at two sizes in
    one process; no absolute time is asserted. It is meant to hold on a loaded 2-core machine:
    thread CPU time does not count the time the thread waits for a core, and the least of up to
    5 tries drops most of what other processes still add (cache misses). The bound leaves a
    margin of about 6 over the linear ratio (fixed costs make the real one lower, about 25) and
    of about 5 under the quadratic one. The lines are short enough that a quadratic regression
    fails in seconds (5 tries of ~5 s), not minutes.
    """
    kind, make = _SHAPES[shape]
    small, large = make(SMALL), make(LARGE)
    _cpu_seconds(small, kind)  # warm up: caches, compiled patterns
    short = _cpu_seconds(small, kind)
    long = _cpu_seconds(large, kind, enough=BOUND * short)
    ratio = long / max(short, 1e-7)
    assert ratio < BOUND, f"{shape}: {LARGE // SMALL} times the length cost {ratio:.0f} times more"
