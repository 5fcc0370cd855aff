"""Turning the textual values SGLang prints into numbers, booleans and normalised keys.

Shared by every message parser so that `#new-token: 158`, `token usage: 0.08`, `cuda graph: True`
and `cache hit rate: 12.5%` all come out typed the same way; `whole_number` and `finite_number`
do the same for values already decoded from JSON documents and OTLP attributes.
"""

from __future__ import annotations

import ast
import contextlib
import math
import re
import warnings
from collections.abc import Iterator
from typing import Any

_NON_ALNUM = re.compile(r"[^0-9a-z]+")
_key_cache: dict[str, str] = {}


@contextlib.contextmanager
def _silent_escapes() -> Iterator[None]:
    """Python's warnings of escapes it deprecates in a literal (`'\\d'` in a prompt or a stop
    string) left out: on stderr (a SyntaxWarning from 3.12) a responder would read one as
    kvwatch's own error, and under `-W error` the same text would fail to read. The value is
    what the engine printed either way."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", SyntaxWarning)
        yield


def literal(node_or_text: str | ast.AST) -> Any:
    """`ast.literal_eval` of what the engine printed, silent about its escapes."""
    with _silent_escapes():
        return ast.literal_eval(node_or_text)


def parsed_expression(text: str) -> ast.Expression:
    """`ast.parse(text, mode="eval")`, silent about its escapes."""
    with _silent_escapes():
        return ast.parse(text, mode="eval")


def normalise_key(raw: str) -> str:
    """`#new-token` → `new_token`, `gen throughput (token/s)` → `gen_throughput`,
    `est. read BW (GB/s per GPU)` → `est_read_bw_gb_s_per_gpu`.

    The throughput unit is dropped because every era printed tokens per second (and the key then
    matches the `sglang:gen_throughput` gauge); other units stay in the key on purpose, so that a
    quantity printed in a new unit never silently merges with the old one.
    """
    cached = _key_cache.get(raw)
    if cached is None:
        cached = _NON_ALNUM.sub("_", raw.replace("(token/s)", "").lower()).strip("_")
        if len(_key_cache) < 10_000:
            _key_cache[raw] = cached
    return cached


# Longer than any count or id SGLang prints (a bootstrap room has 19 digits): text, not a
# number. Python refuses to read an int of over 4,300 digits, and reading one takes quadratic time.
MAX_DIGITS = 64

# Python and JSON words for constants, as SGLang prints them.
WORDS: dict[str, Any] = {"True": True, "False": False, "None": None, "null": None}


def number(text: str) -> Any:
    """Parse an int, float, bool, None or percentage; anything else stays a stripped string."""
    if text.isascii() and text.isdigit():  # the common case, without exceptions or copies
        return int(text) if len(text) <= MAX_DIGITS else text
    text = text.strip()
    if not text:
        return text
    first = text[0]
    if first.isdigit() or first in "-+.":
        if len(text) > MAX_DIGITS:
            return text
        if "." not in text:  # int() refuses any text with a point: skip its exception
            try:
                return int(text)
            except ValueError:
                pass
        try:
            return float(text)
        except ValueError:
            pass
        if text.endswith("%"):
            try:
                return float(text[:-1]) / 100.0
            except ValueError:
                return text
        return text
    if text in WORDS:
        return WORDS[text]
    if text in ("nan", "NaN", "inf", "-inf"):
        return float(text)
    return text


def as_int(text: str | None) -> int | None:
    if text is None or len(text) > MAX_DIGITS:
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return int(float(text))
        except (ValueError, OverflowError):  # not a number, or 1e309
            return None


def as_float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def whole_number(value: Any, *, signed_text: bool = True) -> int | None:
    """A decoded JSON or OTLP value as an int, or None: bools, fractions and NaN are not counts.

    `signed_text=False` reads only unsigned digit strings (`"-1"` is None; the int -1 is not).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, str):
        text = value.strip()
        digits = text[1:] if signed_text and text.startswith("-") else text
        if text.isascii() and digits.isdigit():
            return int(text)
    return None


def finite_number(value: Any) -> float | None:
    """A decoded JSON or OTLP value (number or numeric string) as a finite float, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):  # JSON ints are unbounded
        return None
    return number if math.isfinite(number) else None


def duration_seconds(text: str) -> float | None:
    """`88.41ms` → 0.08841, `1.2s` → 1.2, `3.5` (taken as seconds) → 3.5."""
    text = text.strip()
    scale = 1.0
    if text.endswith("ms"):
        text, scale = text[:-2], 0.001
    elif text.endswith("us"):
        text, scale = text[:-2], 1e-6
    elif text.endswith("s"):
        text = text[:-1]
    try:
        return float(text) * scale
    except ValueError:
        return None
