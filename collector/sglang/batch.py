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
from collector.sglang.values import normalise_key, number

# `key: value` items; keys never hold `:` or `,`, values never hold `,`. One C-level findall
# instead of a Python loop of split/partition.
_ITEM = re.compile(r"([^,:]+): ([^,]*)")
_BOOLEANS = {"True": True, "False": False}
# Shapes remembered per first key: engines of a few eras in one folder, not more.
MAX_SHAPES = 8

Converter = Callable[[str], Any]


class _Shape:
    __slots__ = ("pattern", "names", "converters")

    def __init__(
        self, pattern: re.Pattern[str], names: tuple[str, ...], converters: tuple[Converter, ...]
    ):
        self.pattern = pattern
        self.names = names
        self.converters = converters


# By the line's first key (prefill and decode lines alternate in a merged stream), each list
# most recently used first.
_shapes: dict[str, list[_Shape]] = {}
# Layouts (keys, value forms) seen once, not yet compiled.
_seen_once: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()


def _value_form(value: str) -> tuple[str, Converter]:
    """The pattern a value of this form matches, and the conversion that `number` would make."""
    if value.isascii() and value.isdigit():
        return "([0-9]+)", int
    if DECIMAL.fullmatch(value):
        return r"(-?[0-9]+\.[0-9]+)", float
    if value in _BOOLEANS:
        return "(True|False)", _BOOLEANS.__getitem__
    return "([^,]*)", number


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
    pattern = re.compile(
        ",".join(f"{re.escape(key)}: {form}" for key, (form, _) in zip(keys, forms, strict=True))
    )
    if len(_shapes) > 64:  # junk that looks like batch lines: start again
        _shapes.clear()
    shapes = _shapes.setdefault(_first_key(body), [])
    shapes.insert(0, _Shape(pattern, tuple(names), tuple(convert for _, convert in forms)))
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
