"""Helpers for golden-file tests: expected events are written by hand from the reference docs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).parent / "testdata" / "golden"


def load_expected(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assert_fields(
    actual: dict[str, Any], expected: dict[str, Any], exact: bool, where: str
) -> None:
    """Every expected key must match; with `exact`, no other key may be present."""
    for key, value in expected.items():
        assert key in actual, f"{where}: missing field {key!r} (got {sorted(actual)})"
        got = actual[key]
        if isinstance(value, float) and isinstance(got, int | float):
            assert abs(got - value) <= 1e-9 * max(1.0, abs(value)), f"{where}: {key}={got!r}"
        else:
            assert got == value, f"{where}: {key}={got!r}, expected {value!r}"
    if exact:
        extra = set(actual) - set(expected)
        assert not extra, f"{where}: unexpected fields {sorted(extra)}"
