"""Refusals: the scheduler or tokenizer declined a request (reference §2.8).

In the incident these lines were the first tell: a refusal on prefill for a request that decode
then answered. The rid is kept so the ledger can join the refusal to the request's bootstrap room.
"""

from __future__ import annotations

import re
from typing import Any

_INPUT_TOO_LONG = re.compile(
    r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\)"
)
# The rid as `{self.rid=}` writes it: Python's repr, quoted with `"` when it holds a `'`, escapes
# kept as written (as the `Receive:` line's rid is read). Read where the engine put it, right
# after `self.rid=`: a client's rid that quotes another (`x rid='victim' y`) made the refusal
# that other request's, and its honest answer was named exposed (audit AD).
_SELF_RID = re.compile(r"""rid=(?:'((?:[^'\\\n]|\\.)*)'|"((?:[^"\\\n]|\\.)*)")""")
_EXCEEDS = re.compile(r"Request (\S+) exceeds the maximum number of tokens: (\d+) > (\d+)")
_SWA = re.compile(
    r"Request (\S+) requires too many SWA KV tokens for decode preallocation: (\d+) > (\d+)"
)
_BUDGET = re.compile(r"Request (\S+) exceeds the unified FULL/SWA KV byte budget")
_CONTEXT = re.compile(
    r"The input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)"
)
_REQUESTED = re.compile(
    r"maximum context length of (\d+) tokens\. You requested a total of (\d+) tokens: (\d+) tokens"
)
_TRUNCATED = re.compile(r"len\(req\.origin_input_ids\)=(\d+), max_req_input_len=(\d+)")


def _rejected(
    rid: str | None, inputs: str | None, limit: str | None, reason: str
) -> dict[str, Any]:
    return {
        "rid": rid,
        "input_tokens": int(inputs) if inputs else None,
        "limit_tokens": int(limit) if limit else None,
        "reason": reason,
    }


def _quoted_rid(message: str, key: str, start: int = 0) -> str | None:
    """The rid written as `{key}'…'` (or `"…"`), at the first `key` from `start` on."""
    at = message.find(key, start)
    if at < 0:
        return None
    m = _SELF_RID.match(message, at + len(key) - len("rid="))
    if m is None:
        return None
    return m.group(1) if m.group(1) is not None else m.group(2)


def parse_input_too_long(message: str) -> dict[str, Any]:
    m = _INPUT_TOO_LONG.search(message)
    return _rejected(
        _quoted_rid(message, "self.rid=", m.end() if m else 0),
        m.group(1) if m else None,
        m.group(2) if m else None,
        "input_too_long",
    )


def parse_request_exceeds(message: str) -> dict[str, Any]:
    m = _EXCEEDS.search(message)
    if m:
        return _rejected(m.group(1), m.group(2), m.group(3), "exceeds_max_tokens")
    m = _SWA.search(message)
    if m:
        return _rejected(m.group(1), m.group(2), m.group(3), "exceeds_swa_tokens")
    m = _BUDGET.search(message)
    return _rejected(m.group(1) if m else None, None, None, "exceeds_kv_byte_budget")


def parse_context_length(message: str) -> dict[str, Any]:
    m = _CONTEXT.search(message)
    if m:
        return _rejected(None, m.group(1), m.group(2), "context_length")
    m = _REQUESTED.search(message)
    return _rejected(
        None, m.group(3) if m else None, m.group(1) if m else None, "context_length_with_output"
    )


def parse_no_bootstrap_room(message: str) -> dict[str, Any]:
    return _rejected(_quoted_rid(message, "req.rid="), None, None, "no_bootstrap_room")


def parse_auto_truncated(message: str) -> dict[str, Any]:
    """The scheduler's truncation (`--allow-auto-truncate`): its limit is the engine's own prompt
    limit, `max_req_input_len`, which the configuration timeline keeps. On a PD prefill node it
    is a leak: prefill computes the prompt cut to the limit, decode answers over the whole one
    (audit W, 0.5.21 `scheduler` against `disaggregation/decode`)."""
    m = _TRUNCATED.search(message)
    return {
        "input_tokens": int(m.group(1)) if m else None,
        "limit_tokens": int(m.group(2)) if m else None,
        "limit_kind": "max_req_input_len",
    }


# With `--allow-auto-truncate` the tokenizer's context checks warn and serve instead of refusing:
# the same sentences, ending "Truncating the input." or "Truncating max_new_tokens." (0.5.19,
# `tokenizer_manager._validate_one_request`; audit U).
_TRUNCATING_INPUT = re.compile(
    r"The input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)\. "
    r"Truncating the input\."
)
_TRUNCATING_OUTPUT = re.compile(
    r"Requested token count \((\d+) input \+ \d+ new\) exceeds the model's context length "
    r"\((\d+) tokens\)\. Truncating max_new_tokens\."
)


def is_context_truncation(message: str) -> bool:
    """Whether a context-length sentence is the warning that truncates and serves."""
    return "Truncating" in message and (
        _TRUNCATING_INPUT.search(message) is not None
        or _TRUNCATING_OUTPUT.search(message) is not None
    )


def parse_context_truncated(message: str) -> dict[str, Any]:
    m = _TRUNCATING_INPUT.search(message) or _TRUNCATING_OUTPUT.search(message)
    return {
        "input_tokens": int(m.group(1)) if m else None,
        "limit_tokens": int(m.group(2)) if m else None,
        "limit_kind": "context_length",
    }


def refusal_in(message: str) -> dict[str, Any] | None:
    """The refusal an error message states (a span's abort `reason`, say), as a refusal line's
    fields without its rid; None when the message states none. Only the engine's own sentence,
    opening the message, counts: found further in, it may be the user's words that another
    error echoes. Only its numbers are kept."""
    opening = message.lstrip(" '\"")
    if _INPUT_TOO_LONG.match(opening):
        fields = parse_input_too_long(opening)
    elif _CONTEXT.match(opening):
        fields = parse_context_length(opening)
    else:
        return None
    fields.pop("rid", None)
    return fields
