"""Prefill/decode disaggregation lines (reference §2.9): transfer failures, checksum, deferred
release, metadata corruption, lost connections, kv-canary.

Each parser takes a message already known to start with its head and returns the event fields.
Reasons inside `KVTransferError(...)` are mapped to stable codes so detectors can count storms by
cause without matching free text.
"""

from __future__ import annotations

import re
from typing import Any

from collector.sglang.templates import UNSIGNED
from collector.sglang.values import as_int
from collector.shown_text import engine_token

_FAILED = re.compile(
    r"rank=(\d+) (?:decode_req\.)?req\.rid='?([^'\s]*)'? (?:decode_req\.)?req\.bootstrap_room=(\d+)"
)
_EXCEPTION = re.compile(r" with exception (.*)$", re.S)
_KV_ERROR = re.compile(r"KVTransferError\(bootstrap_room=(\d+)\):\s*(.*)$", re.S)
_TIMED_OUT = re.compile(r"timed out after ([\d.]+)s in KVPoll\.(\w+)")

_REASONS: tuple[tuple[str, str], ...] = (
    ("KVPoll.Bootstrapping", "bootstrap_timeout"),
    ("KVPoll.WaitingForInput", "waiting_timeout"),
    ("Aborted by AbortReq", "aborted"),
    ("Lost connection", "lost_connection"),
    ("from another rank", "peer_rank"),
    ("might be dead", "prefill_unreachable"),
    ("timed out", "timeout"),
)


def reason_code(text: str) -> str:
    for needle, code in _REASONS:
        if needle in text:
            return code
    return "other" if text else "unspecified"


def parse_transfer_failed(message: str, side: str, stage: str) -> dict[str, Any]:
    m = _FAILED.search(message)
    fields: dict[str, Any] = {
        "rid": m.group(2) if m else None,
        "bootstrap_room": m.group(3) if m else None,
        "side": side,
        "stage": stage,
        "rank": int(m.group(1)) if m else None,
        "reason": "unspecified",
    }
    exc = _EXCEPTION.search(message)
    if exc:
        text = exc.group(1).strip()
        err = _KV_ERROR.search(text)
        detail = err.group(2) if err else text
        fields["reason"] = reason_code(detail)
        if fields["reason"] == "lost_connection":
            # Which prefill went away: a restart of it ends the race for this transfer
            # (`collector.state.lost_transfers`).
            fields["bootstrap_addr"] = parse_lost_connection(detail)["bootstrap_addr"]
        timed = _TIMED_OUT.search(detail)
        if timed:
            fields["timeout_seconds"] = float(timed.group(1))
            fields["poll_state"] = timed.group(2)
        fields["exception"] = text.split("(", 1)[0].split(":", 1)[0][:80]
    return fields


# The mismatch line's facts, each read by its key wherever it stands (the reference: key on
# `key=value` tokens, not positions): a build or a wrapper that orders them otherwise, or
# writes the hashes without `0x`, must still name the room.
_MISMATCH_TOKEN = re.compile(r"(?<![^\s(,\[{])(req|bootstrap_room|expected|got)=([^\s,;)\]}]+)")
_HASH = re.compile(r"(?:0[xX])?[0-9a-fA-F]{1,64}")
_SKIPPED = re.compile(
    r"signature (0x[0-9a-fA-F]+|\S+) differs from this decode's (0x[0-9a-fA-F]+|\S+)"
)


def parse_checksum_mismatch(message: str) -> dict[str, Any]:
    """A `KV checksum mismatch` line's rid, room and hashes, by their keys in any order (the
    first of each key counts; a value not of its form is unknown, never a wrong room)."""
    values: dict[str, str] = {}
    for m in _MISMATCH_TOKEN.finditer(message):
        values.setdefault(m.group(1), m.group(2))
    rid = values.get("req")
    if rid is not None:
        rid = rid.strip("'\"") or None
    room = values.get("bootstrap_room", "").strip("'\"")
    return {
        "rid": rid,
        "bootstrap_room": room if UNSIGNED.fullmatch(room) else None,
        "expected": _hash(values.get("expected")),
        "got": _hash(values.get("got")),
        "peer_rank": "on a peer rank" in message,
    }


def _hash(value: str | None) -> str | None:
    return value if value is not None and _HASH.fullmatch(value) else None


def parse_checksum_skipped(message: str) -> dict[str, Any]:
    m = _SKIPPED.search(message)
    return {
        "prefill_signature": engine_token(m.group(1)) if m else None,
        "decode_signature": engine_token(m.group(2).rstrip(";,")) if m else None,
    }


_CORRUPTION = re.compile(
    r"Request (\S+) \(bootstrap_room=(\d+)\) received metadata from bootstrap_room=(\d+)"
    r"(?:\. Metadata buffer index: (\d+))?"
)


def parse_metadata_corruption(message: str) -> dict[str, Any]:
    m = _CORRUPTION.search(message)
    return {
        "rid": m.group(1) if m else None,
        "bootstrap_room": m.group(2) if m else None,
        "actual_room": m.group(3) if m else None,
        "buffer_index": as_int(m.group(4)) if m and m.group(4) else None,
    }


_DEFERRED_TIMEOUT = re.compile(r"for room (\d+) timed out after ([\d.]+)s")
_DEFERRED_FAILED = re.compile(r"for room (\d+)")


def parse_deferred_release(message: str) -> dict[str, Any]:
    m = _DEFERRED_TIMEOUT.search(message)
    if m:
        return {"bootstrap_room": m.group(1), "outcome": "timeout", "seconds": float(m.group(2))}
    failed = _DEFERRED_FAILED.search(message)
    return {
        "bootstrap_room": failed.group(1) if failed else None,
        "outcome": "error",
        "seconds": None,
    }


_LOST = re.compile(r"\(bootstrap_addr: ([^)]*)\)(?:, (\d+) requests affected)?")


def parse_lost_connection(message: str) -> dict[str, Any]:
    # At the first `(bootstrap_addr: ` only, which is what a search finds: a later one matches
    # only with a `)` after it, which the first then has too. The search tried every one, each
    # scanning to the end of a line without `)`: quadratic on one long line.
    at = message.find("(bootstrap_addr: ")
    m = _LOST.match(message, at) if at >= 0 else None
    return {
        "bootstrap_addr": m.group(1) if m else None,
        "affected": as_int(m.group(2)) if m and m.group(2) else None,
    }


# A key starts a word (`(?<!\w)`): unanchored, every position of a long word was a start that
# scanned to the word's end before failing, quadratic on one long line. A key found mid-word is
# the same word's tail, which matches exactly when the whole word does, and a match ends at a
# space or the end, so the anchor loses no match (tests/test_long_line_cost.py).
_KEY_EQ = re.compile(r"(?<!\w)(\w+)=(\S+)")


def parse_kv_canary(message: str) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "launch_tag": None,
        "fail_reason": None,
        "slot_idx": None,
        "position": None,
    }
    for key, value in _KEY_EQ.findall(message):
        if key in ("slot_idx", "position", "stored_token", "expected_token"):
            fields[key] = as_int(value)
        else:
            fields[key] = engine_token(value)
    return fields


def parse_canary_stats(message: str) -> dict[str, Any]:
    return {key: as_int(value) for key, value in _KEY_EQ.findall(message) if key != "last_step"}


_ROOM_ANYWHERE = re.compile(r"(?:bootstrap_room[= ]|room )(\d+)")


def parse_transfer_warning(message: str, code: str) -> dict[str, Any]:
    room = _ROOM_ANYWHERE.search(message)
    return {"warning": code, "bootstrap_room": room.group(1) if room else None}
