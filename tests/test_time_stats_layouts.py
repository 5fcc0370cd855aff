"""Time-stats lines read by a learnt layout give exactly what the plain rule gives."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.sglang.templates import Layouts, Slot
from collector.sglang.time_stats import parse_time_stats, read_time_stats
from collector.sglang.values import duration_seconds, number

_PAIR = re.compile(
    r"(\w+)(?:=|\()(-?[\d.]+(?:e[-+]?\d+)?(?:ms|us|s)?|[^,()\s]+)(?: (GB/s|MB|GB|KB))?"
)
_UNITS = {"GB/s": "_gb_s", "MB": "_mb", "GB": "_gb", "KB": "_kb"}


def plain(message: str) -> dict[str, Any]:
    """The rule in its plainest form: the rid up to the last of the engine's fields after it
    (it is the client's, written as it is), head `key=value` items, then `key=value`/`key(value)`
    pairs, durations in seconds."""
    head_end = message.rfind("):")
    head = message[len("ReqTimeStats(") : head_end if head_end > 0 else len(message)]
    tail = message[head_end + 2 :] if head_end > 0 else ""
    fields: dict[str, Any] = dict.fromkeys(
        ("rid", "bootstrap_room", "role", "input_len", "cached_input_len", "output_len")
    )
    after_rid = list(re.finditer(r", (?:bootstrap_room=[^,]*, )?input_len=[^,]*(?:,|$)", head))
    if head.startswith("rid=") and after_rid:
        rid = head[4 : after_rid[-1].start()]
        fields["rid"] = rid.strip("'") if rid not in ("None", "") else None
        head = head[after_rid[-1].start() + 2 :]
    for item in head.split(", "):
        key, sep, value = item.partition("=")
        if not sep:
            continue
        if key == "type":
            fields["role"] = value
        elif key == "rid":
            fields[key] = value.strip("'") if value not in ("None", "") else None
        elif key == "bootstrap_room":  # a uint64, or unknown
            fields[key] = value if re.fullmatch(r"[0-9]{1,20}", value) else None
        else:
            fields[key] = number(value)
    for key, value, unit in _PAIR.findall(tail):
        if unit:
            fields[key + _UNITS[unit]] = number(value)
        elif key.endswith("_time"):
            fields[key] = number(value)
        elif value.endswith("s") or key.endswith("duration") or "_" not in key:
            seconds = duration_seconds(value)
            name = key if key.endswith("duration") else f"{key}_duration"
            fields[name] = seconds if seconds is not None else value
        else:
            fields[key] = number(value)
    return fields


def typed(fields: dict[str, Any]) -> list[tuple[str, Any, type]]:
    return [(key, value, type(value)) for key, value in fields.items()]


IDS = st.sampled_from(["3eee1221f3bb", "42", "'4f1c'", "None", "", "a-b"])
NUMBERS = st.sampled_from(["2585", "0", "-3", "2.5", "1e3", "abc", "", "7.0"])
DURATIONS = st.sampled_from(
    ["1.20ms", "0.00ms", "2628.66ms", "12us", "3s", "-2.0ms", "1.5e-05ms", "None", "7", "x1ms"]
)
STAMPS = st.sampled_from(["1788652801.401", "1788652801", "None"])


@st.composite
def time_stats_line(draw: st.DrawFn) -> str:
    head = [f"rid={draw(IDS)}"]
    if draw(st.booleans()):
        head.append(f"bootstrap_room={draw(IDS)}")
    head += [f"{key}={draw(NUMBERS)}" for key in ("input_len", "cached_input_len", "output_len")]
    if draw(st.booleans()):
        head.append(f"attempts={draw(NUMBERS)}")
    role = draw(st.sampled_from(["prefill", "decode", "unified"]))
    head.append(f"type={role}")
    if draw(st.booleans()):  # older builds
        tail = (
            f"prealloc_queue_duration({draw(DURATIONS)}) = alloc_wait({draw(DURATIONS)}) + "
            f"bootstrap({draw(DURATIONS)}) + other({draw(DURATIONS)}); "
            f"transfer_duration={draw(DURATIONS)}, queue_duration={draw(DURATIONS)}"
        )
    else:
        tail = f"bootstrap_duration={draw(DURATIONS)}, queue_duration={draw(DURATIONS)}"
    tail += f", forward_duration={draw(DURATIONS)}, entry_time={draw(STAMPS)}"
    if role == "prefill" and draw(st.booleans()):
        tail += f", transfer_speed={draw(NUMBERS)} GB/s, transfer_total={draw(NUMBERS)} MB"
    return f"ReqTimeStats({', '.join(head)}): {tail}"


def read(layouts: Layouts, line: str) -> dict[str, Any]:
    """`parse_time_stats` with its own layouts, so each example starts from none."""
    fields = layouts.read(line)
    if fields is None:
        fields, slots = read_time_stats(line)
        layouts.learn(line, fields, slots)
    return fields


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(time_stats_line(), min_size=1, max_size=6))
def test_every_line_reads_as_the_plain_rule_whether_or_not_a_layout_fits(
    lines: list[str],
) -> None:
    layouts = Layouts()
    for line in lines + lines + lines:  # later passes read lines seen twice by a layout
        assert typed(read(layouts, line)) == typed(plain(line))
        assert typed(parse_time_stats(line)) == typed(plain(line))


def test_a_repeated_layout_is_read_by_its_pattern() -> None:
    layouts = Layouts()
    line = (
        "ReqTimeStats(rid=ab12, bootstrap_room=77, input_len=4096, cached_input_len=0, "
        "output_len=1, type=prefill): bootstrap_duration=1.20ms, queue_duration=0.31ms, "
        "forward_duration=392.60ms, entry_time=1787825521.402"
    )
    fields, slots = read_time_stats(line)
    assert all(isinstance(slot, Slot) for slot in slots)
    assert layouts.read(line) is None
    layouts.learn(line, fields, slots)
    assert layouts.read(line) is None  # compiled on the second sighting only
    layouts.learn(line, fields, slots)
    other = line.replace("4096", "912384").replace("392.60ms", "11402.31ms")
    read = layouts.read(other)
    assert read is not None and read == plain(other)
    assert (read["input_len"], read["forward_duration"]) == (912384, 11.40231)
    assert layouts.read(other.replace("type=prefill", "type=decode")) is None  # another layout


def test_a_layout_learnt_from_a_word_does_not_take_a_number_or_a_duration_later() -> None:
    """`alloc_wait(abc)` is kept as text; `alloc_wait(3s)` is a duration of 3 s. A layout learnt
    from the first must leave the second to the generic reader."""

    def line(alloc: str, attempts: str = "abc") -> str:
        return (
            f"ReqTimeStats(rid=42, input_len=2585, cached_input_len=0, output_len=7, "
            f"attempts={attempts}, type=decode): prealloc_queue_duration(1.20ms) = "
            f"alloc_wait({alloc}) + bootstrap(0.00ms) + other(7); transfer_duration=1.50ms, "
            f"queue_duration=3s, forward_duration=1.20ms, entry_time=None"
        )

    layouts = Layouts()
    for _ in range(2):  # a layout is compiled on its second sighting
        read(layouts, line("abc"))
    for alloc, attempts in (("3s", "abc"), ("12us", "abc"), ("abc", "1e3"), ("abc", "None")):
        later = line(alloc, attempts)
        assert typed(read(layouts, later)) == typed(plain(later)), (alloc, attempts)
