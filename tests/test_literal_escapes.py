"""Text the engine printed with an escape Python deprecates (`'\\d'` in a chat template, a stop
string) reads the same whatever the warning filters, and puts nothing on stderr."""

from __future__ import annotations

import warnings

import pytest

from collector.sglang import values
from collector.sglang.request_log import read_meta_fields
from collector.sglang.startup import parse_server_args

SERVER_ARGS = (
    "server_args=ServerArgs(model_path='m', context_length=1048576, "
    "chat_template='\\d+', max_total_tokens=None)"
)
# `prompt_tokens` twice outside any literal: read as the whole dict literal, so the last wins.
META_TWICE = (
    "{'id': 'r1', 'finish_reason': {'type': 'stop', 'matched': '\\d'}, "
    "'prompt_tokens': 35, 'prompt_tokens': 900000, 'completion_tokens': 2}"
)


def _read_under(action: str, read):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter(action)
        value = read()
    return value, [str(w.message) for w in caught]


@pytest.mark.parametrize("action", ["always", "error"])
def test_server_args_with_a_deprecated_escape_read_silently(action: str) -> None:
    fields, caught = _read_under(action, lambda: parse_server_args(SERVER_ARGS))
    assert caught == []
    assert fields["context_length"] == 1048576
    assert fields["args_format"] == "dataclass"


@pytest.mark.parametrize("action", ["always", "error"])
def test_meta_info_read_as_a_literal_does_not_depend_on_warning_filters(action: str) -> None:
    (fields, _slots), caught = _read_under(action, lambda: read_meta_fields(META_TWICE))
    assert caught == []
    assert fields["prompt_tokens"] == 900000  # the literal's reading, not the fallback's


def test_literal_keeps_the_backslash() -> None:
    value, caught = _read_under("error", lambda: values.literal("'\\d'"))
    assert value == "\\d"
    assert caught == []
