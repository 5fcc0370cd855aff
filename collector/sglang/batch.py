"""`Prefill batch` and `Decode batch` lines, read as key/value pairs.

The field list changes nearly every release (`#prealloc-req` became `#bootstrap-req`, `cache hit
rate` vanished, `#pending-token` appeared), so the line is read by structure: everything after the
head is `key: value` items separated by `, `. Unknown keys are kept, never fatal.

Batch lines are the most common engine line, and one engine prints the same keys in the same order
line after line. So the generic read also learns the line's *shape* (its keys, and whether each
value is an integer, a decimal or a boolean) as one compiled pattern; later lines of that shape
are read by one match and typed conversions, about three times faster. A line the shape does not
fit exactly (a new key, a value in another form) takes the generic read, which learns its shape
in turn. Both reads give the same fields (property-tested).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import call
from typing import Any

from collector.sglang.templates import DECIMAL
from collector.sglang.values import MAX_DIGITS, normalise_key, number

# `key: value` items; keys never hold `:` or `,`, values never hold `,`. One C-level findall
# instead of a Python loop of split/partition. A key starts the body or follows `,` or `:`
# (`(?<![^,:])`): unanchored, every position of a long run without either was a start that scanned
# to the run's end before failing, quadratic on one long line. A key found inside a run is its
# tail, which matches exactly when the whole run does, and a match ends at `,` or the end, so the
# anchor loses no item (tests/test_long_line_cost.py).
_ITEM = re.compile(r"(?<![^,:])([^,:]+): ([^,]*)")
# `key=value` words, for a body with no `key: value` item.
_KEY_EQ_ITEM = re.compile(r"(?<![\w#.-])([A-Za-z_#][\w#-]*)=([^\s,|;]+)")
_BOOLEANS = {"True": True, "False": False}
# Shapes remembered per first key: engines of a few eras in one folder, not more.
MAX_SHAPES = 8

Converter = Callable[[str], Any]
# What a `BatchSampler` gives: the line's keys, and the values of the keys picked.
BatchSample = tuple[tuple[str, ...], list[Any]]


class _Shape:
    __slots__ = ("pattern", "names", "converters", "parts")

    def __init__(
        self,
        pattern: re.Pattern[str],
        names: tuple[str, ...],
        converters: tuple[Converter, ...],
        parts: tuple[tuple[str, str], ...],
    ):
        self.pattern = pattern
        self.names = names
        self.converters = converters
        self.parts = parts  # (key as printed, pattern of its value's form), in line order


# By the line's first key (prefill and decode lines alternate in a merged stream), each list
# most recently used first.
_shapes: dict[str, list[_Shape]] = {}
# Layouts (keys, value forms) seen once, not yet compiled.
_seen_once: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()


def _value_form(value: str) -> tuple[str, Converter]:
    """The pattern a value of this form matches, and the conversion that `number` would make."""
    if value.isascii() and value.isdigit() and len(value) <= MAX_DIGITS:
        return "[0-9]{1,64}", int
    if DECIMAL.fullmatch(value):
        return r"-?[0-9]+\.[0-9]+", float
    if value in _BOOLEANS:
        return "True|False", _BOOLEANS.__getitem__
    return "[^,]*", number


def _learn(body: str, items: list[tuple[str, str]]) -> None:
    """Remember the shape of a line that is exactly its items (no stray text between them), once
    a second line of that shape is read: compiling one costs as much as fifty generic reads, so
    lines whose keys never repeat (garbled or drifting logs) must not pay it every time."""
    if not items or ",".join(f"{key}: {value}" for key, value in items) != body:
        return
    keys = tuple(key for key, _ in items)
    forms = tuple(_value_form(value) for _, value in items)
    layout = (keys, tuple(form for form, _ in forms))
    if layout not in _seen_once:
        if len(_seen_once) >= 1024:
            _seen_once.clear()
        _seen_once.add(layout)
        return
    _seen_once.discard(layout)
    names = []
    for key in keys:
        stripped = key.strip()
        if not stripped:
            return
        names.append(normalise_key(stripped))
    parts = tuple((key, form) for key, (form, _) in zip(keys, forms, strict=True))
    pattern = re.compile(",".join(f"{re.escape(key)}: ({form})" for key, form in parts))
    if len(_shapes) > 64:  # junk that looks like batch lines: start again
        _shapes.clear()
    shapes = _shapes.setdefault(_first_key(body), [])
    converters = tuple(convert for _, convert in forms)
    shapes.insert(0, _Shape(pattern, tuple(names), converters, parts))
    del shapes[MAX_SHAPES:]


def _first_key(body: str) -> str:
    return body[: body.find(":")]


def _read_by_shape(body: str, fields: dict[str, Any]) -> bool:
    shapes = _shapes.get(_first_key(body))
    if shapes is None:
        return False
    for index, shape in enumerate(shapes):
        m = shape.pattern.fullmatch(body)
        if m is not None:
            # `map(call, ...)` converts without a Python-level loop: 30% off the whole read.
            fields.update(zip(shape.names, map(call, shape.converters, m.groups()), strict=True))
            if index:
                shapes.insert(0, shapes.pop(index))
            return True
    return False


class _Sampling:
    """One learnt shape read for a few keys: its pattern captures only their values, by name, so
    one `group(*names)` call returns them in the order picked."""

    __slots__ = ("pattern", "names", "groups", "converters", "slots", "every_pick")

    def __init__(self, shape: _Shape, picks: tuple[str, ...]) -> None:
        # The last of repeated keys wins, as in the dict the full read builds.
        last = {name: index for index, name in enumerate(shape.names)}
        wanted = {last[key]: slot for slot, key in enumerate(picks) if key in last}
        items = []
        for index, (key, form) in enumerate(shape.parts):
            slot = wanted.get(index)
            value = f"(?P<p{slot}>{form})" if slot is not None else f"(?:{form})"
            items.append(f"{re.escape(key)}: {value}")
        # The full read strips leading `.` and `,` first; a first key never starts with either.
        self.pattern = re.compile("[.,]*+" + ",".join(items))
        self.names = shape.names
        self.slots = tuple(sorted(wanted.values()))
        self.groups = tuple(f"p{slot}" for slot in self.slots)
        by_slot = {slot: shape.converters[index] for index, slot in wanted.items()}
        self.converters = tuple(by_slot[slot] for slot in self.slots)
        # Two or more picks, every one on the line: `group` gives their values in pick order.
        self.every_pick = 1 < len(self.slots) == len(picks)


class BatchSampler:
    """Reads the values of a few keys (`picks`) from batch lines, by the learnt shapes, without
    building their fields or copying their text: for consumers that fold a few values of every
    batch line (the per-node windows), over half of all lines.

    `sampler(line, offset)` with `offset` just after the head (`Decode batch`) gives (every key,
    the picked values in `picks` order, None for a key the line lacks): exactly what
    `parse_batch_fields` gives those keys (property-tested). None when no learnt shape fits the
    line: `parse_batch_fields` then reads it, and learns its shape.
    """

    __slots__ = ("picks", "_recent")

    def __init__(self, picks: tuple[str, ...]) -> None:
        self.picks = picks
        self._recent: list[_Sampling] = []  # most recently used first

    def __call__(self, line: str, offset: int) -> BatchSample | None:
        recent = self._recent
        for index, sampling in enumerate(recent):
            m = sampling.pattern.fullmatch(line, offset)
            if m is not None:
                if index:
                    recent.insert(0, recent.pop(index))
                if sampling.every_pick:  # `_values`, in one call (most lines)
                    converted = map(call, sampling.converters, m.group(*sampling.groups))
                    return sampling.names, list(converted)
                return sampling.names, self._values(sampling, m)
        shape = _shape_of(line[offset:])
        if shape is None:
            return None
        sampling = _Sampling(shape, self.picks)
        m = sampling.pattern.fullmatch(line, offset)
        if m is None:  # cannot happen: the same shape, fewer groups
            return None
        recent.insert(0, sampling)
        del recent[2 * MAX_SHAPES :]
        return sampling.names, self._values(sampling, m)

    def _values(self, sampling: _Sampling, m: re.Match[str]) -> list[Any]:
        groups = sampling.groups
        if len(groups) > 1:
            values = list(map(call, sampling.converters, m.group(*groups)))
        elif groups:
            values = [sampling.converters[0](m.group(groups[0]))]
        else:
            values = []
        if len(values) == len(self.picks):
            return values
        padded: list[Any] = [None] * len(self.picks)
        for slot, value in zip(sampling.slots, values, strict=True):
            padded[slot] = value
        return padded


def _shape_of(body: str) -> _Shape | None:
    """The learnt shape the full read would use for this body, if any."""
    body = body.lstrip(".,")
    if body.startswith(" ["):
        return None  # an iteration number first: for the full read
    for shape in _shapes.get(_first_key(body), ()):
        if shape.pattern.fullmatch(body) is not None:
            return shape
    return None


def parse_batch_fields(body: str) -> dict[str, Any]:
    """Parse what follows `Prefill batch` / `Decode batch`: `[N], k: v, k: v` in any era."""
    fields: dict[str, Any] = {}
    body = _after_iteration(body, fields)
    if _read_by_shape(body, fields):
        return fields
    return _read_generic(body, fields, learn=True)


def _after_iteration(body: str, fields: dict[str, Any]) -> str:
    """The items of the line; `SGLANG_LOG_FORWARD_ITERS=1` prints the iteration before them."""
    body = body.lstrip(".,")
    if body.startswith(" ["):
        close = body.find("]")
        if close > 0:
            fields["iter"] = number(body[2:close])
            body = body[close + 1 :].lstrip(".,")
    return body


def _read_generic(body: str, fields: dict[str, Any], *, learn: bool) -> dict[str, Any]:
    items = _ITEM.findall(body)
    if not items:
        # No `key: value` item: a release that prints `key=value` words (the reference's
        # advice is to key on both; blind review 21: `new_seq=1 new_token=158` read as an
        # empty event).
        for key, value in _KEY_EQ_ITEM.findall(body):
            fields[normalise_key(key)] = number(value)
        return fields
    for key, value in items:
        key = key.strip()
        if key:
            fields[normalise_key(key)] = number(value)
    if learn:
        _learn(body, items)
    return fields


def parse_batch_fields_generic(body: str) -> dict[str, Any]:
    """The generic read alone, never a shape: the reference the shaped read is tested against."""
    fields: dict[str, Any] = {}
    return _read_generic(_after_iteration(body, fields), fields, learn=False)
