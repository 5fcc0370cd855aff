"""Messages of one layout, read by one compiled match.

An engine prints a message family with the same keys in the same order line after line; only the
values change. A generic reader that reports where each value sits in a message (its span), the
field it becomes and the conversion it goes through lets the message's layout be learnt: the text
between the values, and each value's form. A later message of exactly that layout is read by one
`fullmatch` and the same conversions, two to three times faster. The forms are narrow (digits,
decimals, durations per unit, words), so a message that fits a layout is one the generic reader
would split the same way; the generic reader chooses each conversion by the value's form (plain
`int` or `float` where they give what its own rule gives), so it holds for every value the
layout accepts. Anything else takes the generic reader (property-tested equal).

A layout is compiled on its second sighting (compiling costs as much as dozens of generic reads,
and a log whose layouts never repeat must not pay it every line); a few are kept per family, most
recently used first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from operator import call
from typing import Any, Final, NamedTuple

Converter = Callable[[str], Any]

# The numeric forms, shared with the readers that choose a value's conversion by its form.
UNSIGNED: Final = re.compile(r"[0-9]{1,64}")  # no longer than `values.MAX_DIGITS`
DECIMAL: Final = re.compile(r"-?[0-9]+\.[0-9]+")
# Forms a value may take in a layout, narrowest first: a value of none of them is not learnt.
# Every value of a form must convert as the value the layout was learnt from did (the generic
# reader may choose its conversion by the value's form, never by anything narrower).
_FORMS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(form), form)
    for form in (
        UNSIGNED.pattern,
        DECIMAL.pattern,
        # One form per unit: a value's conversion may depend on it.
        r"-?[0-9]+(?:\.[0-9]+)?ms",
        r"-?[0-9]+(?:\.[0-9]+)?us",
        r"-?[0-9]+(?:\.[0-9]+)?s",
        # A word, but never one the generic reader would read as a number, a duration or a
        # constant (`12`, `1_000`, `1e3`, `3s`, `inf`, `None`): a layout learnt from `abc`
        # must not take `3s` later and keep it as text.
        r"(?!(?:[0-9_]+(?:[eE][+-]?[0-9_]+)?(?:ms|us|s)?|(?i:inf|infinity|nan)"
        r"|True|False|None|null)(?![A-Za-z0-9_]))[A-Za-z0-9_]+",
    )
)
# Layouts seen once, remembered to compile on the second sighting (bounded).
_MAX_SEEN = 1024


class Slot(NamedTuple):
    """Where a value sits in a message, the field it becomes, and its conversion (None: a value
    the fields do not depend on, matched by its form and otherwise ignored)."""

    start: int
    end: int
    name: str
    convert: Converter | None


class _Layout:
    __slots__ = ("pattern", "fields", "names", "converters")

    def __init__(
        self,
        pattern: re.Pattern[str],
        fields: dict[str, Any],
        names: tuple[str, ...],
        converters: tuple[Converter, ...],
    ) -> None:
        self.pattern = pattern
        self.fields = fields  # every field in the generic reader's order; slot values unset
        self.names = names
        self.converters = converters


class Layouts:
    """The learnt layouts of one message family (see the module docstring).

    Examples
    --------
    >>> layouts = Layouts()
    >>> text = "len=12, ms=3.5ms"
    >>> slots = [Slot(4, 6, "len", int), Slot(11, 16, "ms", lambda v: float(v[:-2]) / 1000)]
    >>> for _ in range(2):
    ...     layouts.learn(text, {"len": 12, "ms": 0.0035}, slots)
    >>> layouts.read("len=7, ms=1.25ms")
    {'len': 7, 'ms': 0.00125}
    >>> layouts.read("len=7, ms=n/a") is None
    True
    """

    __slots__ = ("max_layouts", "_layouts", "_seen")

    def __init__(self, max_layouts: int = 8) -> None:
        self.max_layouts = max_layouts
        self._layouts: list[_Layout] = []
        self._seen: set[tuple[str, ...]] = set()

    def read(self, text: str) -> dict[str, Any] | None:
        """The fields of `text` by a learnt layout, or None when no layout fits it exactly."""
        layouts = self._layouts
        for index, layout in enumerate(layouts):
            m = layout.pattern.fullmatch(text)
            if m is not None:
                fields = layout.fields.copy()
                values = map(call, layout.converters, m.groups())
                fields.update(zip(layout.names, values, strict=True))
                if index:
                    layouts.insert(0, layouts.pop(index))
                return fields
        return None

    def learn(self, text: str, fields: dict[str, Any], slots: Sequence[Slot]) -> None:
        """Remember the layout of `text`, which the generic reader read as `fields` with the
        values at `slots` (in order, not overlapping); compiled when seen a second time."""
        kept = [slot for slot in slots if slot.convert is not None]
        names = [slot.name for slot in kept]
        if len(set(names)) != len(names):
            return  # a field set twice: leave it to the generic reader
        pieces: list[str] = []
        at = 0
        for slot in slots:
            if slot.start < at or slot.end <= slot.start:
                return
            form = _form_of(text[slot.start : slot.end])
            if form is None:
                return
            pieces.append(re.escape(text[at : slot.start]))
            pieces.append(f"({form})" if slot.convert is not None else f"(?:{form})")
            at = slot.end
        pieces.append(re.escape(text[at:]))
        key = tuple(pieces)
        if key not in self._seen:
            if len(self._seen) >= _MAX_SEEN:
                self._seen.clear()
            self._seen.add(key)
            return
        self._seen.discard(key)
        unset = dict.fromkeys(names)
        layout = _Layout(
            re.compile("".join(pieces), re.DOTALL),
            {name: (None if name in unset else value) for name, value in fields.items()},
            tuple(names),
            tuple(slot.convert for slot in kept if slot.convert is not None),
        )
        self._layouts.insert(0, layout)
        del self._layouts[self.max_layouts :]


def _form_of(value: str) -> str | None:
    for pattern, form in _FORMS:
        if pattern.fullmatch(value):
            return form
    return None
