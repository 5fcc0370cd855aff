"""`ReqTimeStats(...)` lines: per-request stage durations on prefill, decode or unified servers.

Durations are printed as `{ms}ms`; they become seconds here, one unit across kvwatch. Older builds
wrote `prealloc_queue_duration(Xms) = alloc_wait(Xms) + bootstrap(Xms) + ...`, read the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from collector.sglang.templates import DECIMAL, UNSIGNED, Converter, Layouts, Slot
from collector.sglang.values import duration_seconds, number

_PAIR_BODY = r"(\w+)(?:=|\()(-?[\d.]+(?:e[-+]?\d+)?(?:ms|us|s)?|[^,()\s]+)(?: (GB/s|MB|GB|KB))?"
# `_PAIR_HERE` reads a pair at one position; `_PAIR` finds the next one whose key starts a word.
# Unanchored, every position of a long word was a start that scanned to the word's end before
# failing: quadratic on one long line. See `_pairs` for why both give what the plain search did.
_PAIR_HERE = re.compile(_PAIR_BODY)
_PAIR = re.compile(r"(?<!\w)" + _PAIR_BODY)
_UNIT_SUFFIX = {"GB/s": "_gb_s", "MB": "_mb", "GB": "_gb", "KB": "_kb"}
# One engine prints the same time-stats layout request after request (one per role).
_layouts = Layouts()


def parse_time_stats(message: str) -> dict[str, Any]:
    fields = _layouts.read(message)
    if fields is None:
        fields, slots = read_time_stats(message)
        _layouts.learn(message, fields, slots)
    return fields


def read_time_stats(message: str) -> tuple[dict[str, Any], list[Slot]]:
    """The generic read: the fields, and where each value read from the line sits in it."""
    head_start = len("ReqTimeStats(")
    # The engine's fields end the head, and what follows them holds no `):`; the rid before
    # them is the client's, written as it is (a rid can hold `):` or `, input_len=5`).
    head_end = message.rfind("):")
    head_stop = head_end if head_end > 0 else len(message)
    at = head_start
    rid_end = _rid_end(message, head_start, head_stop)
    if rid_end is not None:
        at = rid_end + 2
    head = message[at:head_stop]
    fields: dict[str, Any] = {
        "rid": None,
        "bootstrap_room": None,
        "role": None,
        "input_len": None,
        "cached_input_len": None,
        "output_len": None,
    }
    slots: list[Slot] = []
    if rid_end is not None:
        fields["rid"] = _id(message[head_start + 4 : rid_end])
        slots.append(Slot(head_start + 4, rid_end, "rid", _id))
    for item in head.split(", "):
        key, sep, value = item.partition("=")
        start = at + len(key) + 1
        at += len(item) + 2
        if not sep:
            continue
        if key == "type":
            fields["role"] = value  # part of the layout: one per role
            continue
        convert = _id if key == "rid" else _room if key == "bootstrap_room" else _number(value)
        fields[key] = convert(value)
        slots.append(Slot(start, start + len(value), key, convert))
    if head_end > 0:
        for m in _pairs(message, head_end + 2):
            key, value, unit = m.groups()
            if unit:
                name, convert = key + _UNIT_SUFFIX[unit], _number(value)
            elif key.endswith("_time"):
                name, convert = key, _number(value)
            elif value.endswith("s") or key.endswith("duration") or "_" not in key:
                name = key if key.endswith("duration") else f"{key}_duration"
                convert = _seconds(value)
            else:
                name, convert = key, _number(value)
            fields[name] = convert(value)
            slots.append(Slot(*m.span(2), name, convert))
    return fields, slots


# What the engine writes right after the rid.
_AFTER_RID = re.compile(r", (?:bootstrap_room=[^,]*, )?input_len=[^,]*(?:,|$)")


def _rid_end(message: str, start: int, stop: int) -> int | None:
    """Where the rid of a head `rid=…` (at `start`) ends: before the last of the engine's
    fields that follow it, so that whatever the rid spells is the rid's."""
    if not message.startswith("rid=", start):
        return None
    end = None
    for m in _AFTER_RID.finditer(message, start, stop):
        end = m.start()
    return end


def _pairs(message: str, pos: int) -> Iterator[re.Match[str]]:
    """The matches `_PAIR_HERE.finditer(message, pos)` gives, in time linear in the line.

    A key found inside a word is that word's tail: it reaches the same end of the word, so it
    matches exactly when a key at the word's start would, and the plain search met that start
    first. So only word starts need trying, and the spot where the search (re)starts: a value
    such as `5ms` may end inside a word (`a=5msx=1` reads `a=5ms`, then `x=1`).
    """
    while True:
        m = _PAIR_HERE.match(message, pos) or _PAIR.search(message, pos)
        if m is None:
            return
        yield m
        pos = m.end()


# The conversion of a value, chosen by its form: plain `int` and `float` (and milliseconds)
# where they give exactly what `number` and `duration_seconds` would for every value of that
# form, so a learnt layout converts without a Python call per value.
_DURATION = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(ms|us|s)")


def _number(value: str) -> Converter:
    if UNSIGNED.fullmatch(value):
        return int
    if DECIMAL.fullmatch(value):
        return float
    return number


def _seconds(value: str) -> Converter:
    m = _DURATION.fullmatch(value)
    if m is None:
        return _seconds_or_text
    return {"ms": _milliseconds, "us": _microseconds, "s": _whole_seconds}[m.group(1)]


def _milliseconds(value: str) -> float:
    return float(value[:-2]) * 0.001  # as `duration_seconds`


def _microseconds(value: str) -> float:
    return float(value[:-2]) * 1e-6


def _whole_seconds(value: str) -> float:
    return float(value[:-1]) * 1.0


def _id(value: str) -> str | None:
    return value.strip("'") if value not in ("None", "") else None


def _room(value: str) -> str | None:
    """The engine prints a room as a uint64; anything else is a garbled line's, and joining
    sides on it could pair two unrelated requests."""
    return value if value.isascii() and value.isdigit() and len(value) <= 20 else None


def _seconds_or_text(value: str) -> Any:
    seconds = duration_seconds(value)
    return seconds if seconds is not None else value
