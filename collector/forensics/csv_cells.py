"""CSV cells a spreadsheet opens as text, never as a formula.

A rid or a node's name is a client's or a file's choice, and a cell starting `=HYPERLINK(...)`
would run when a responder opens the CSV (OWASP's CSV injection guidance): such a cell gets a
leading apostrophe.
"""

from __future__ import annotations

from typing import Any, Final

# What a spreadsheet takes for a formula at a cell's start.
_FORMULA_STARTS: Final = ("=", "+", "-", "@", "\t", "\r")


def inert_cell(value: Any) -> Any:
    """`value` as a CSV cell: None empty, a string a spreadsheet would run quoted."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value
