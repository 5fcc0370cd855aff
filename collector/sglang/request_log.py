"""`--log-requests` records (text and JSON) reduced to metadata.

These lines carry the users' prompts and replies. kvwatch keeps only ids, token counts, finish
reasons and latencies: text never leaves this module. The text can also contain anything, including
strings that look like our keys (`rid='...'`, `'prompt_tokens': 1`), so values are taken from the
structural position where SGLang writes them, and when a key appears more than once the record is
read with a string-literal-aware parser instead of a search.

A record cut before its end (the last line of a log still being written, or of a copy or a
gzip cut short) says nothing: a room cut inside its digits or `'prompt_tokens': 18` for 185230
would be a request that never was, or a false count. A text record's structure is walked as
Python literal syntax (`obj=GenerateReqInput(...)`, `headers={...}`, `out={...}`, string
literals with their escapes); one that ends with any of them open gives no fields, and the file
reader counts it as a drop (`cut_record`). A `Finish:` whose `meta_info` fits a learnt layout
(which ends with the closers of `meta_info` and `out`) is complete without the walk, and a
`Receive:` whose text after its ids ends as a walked complete one did, too: the walk costs only
lines that do not look like their predecessors.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, NamedTuple

from collector.events import iso_time
from collector.sglang.envelope import peel
from collector.sglang.refusals import refusal_in
from collector.sglang.templates import DECIMAL, UNSIGNED, Converter, Layouts, Slot
from collector.sglang.values import WORDS, as_float, as_int, literal
from collector.shown_text import printable

_META_KEYS_INT = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens")
_META_KEYS_FLOAT = (
    "e2e_latency",
    "first_token_latency",
    "queue_time",
    "forward_entry_time",
    "prefill_finished_time",
    "request_received_ts",
    "response_sent_to_client_ts",
    "request_finished_ts",
    "inference_time",
    "prefill_launch_latency",
    "prefill_waiting_latency",
)
_META_SCALAR = re.compile(r"'(\w+)': (-?[\d.]+(?:e[-+]?\d+)?|None|True|False|'[0-9A-Za-z_.:-]*')")
_FINISH_REASON = re.compile(r"'finish_reason': (None|\{'type': '(\w+)')")
_STATUS_CODE = re.compile(r"'status_code': (\d+)")
# The client chooses the rid: Python's repr quotes one holding `'` with `"`, and writes what
# it cannot print as escapes (kept as written: the id as the log shows it).
_OBJ_RID = re.compile(r"""rid=(?:'((?:[^'\\\n]|\\.){1,1024})'|"((?:[^"\\\n]|\\.){1,1024})")""")
# The usual rid, without an escape: one run of a character class, where the pattern above pays
# an alternation per character (a microsecond a line). Where this one does not match, that one
# decides; where it does, that one matches the same span (the same run, greedily, then a quote).
_OBJ_RID_PLAIN = re.compile(r"""rid=(?:'([^'\\\n]{1,1024})'|"([^"\\\n]{1,1024})")""")
_OBJ_ROOM = re.compile(r"bootstrap_room=(\d+)")
_STREAM_FIELD: Final = ", stream="
_OBJ_HOST = re.compile(r"bootstrap_host='([^'\\\s]{1,255})'")
_OBJ_PORT = re.compile(r"bootstrap_port=(\d{1,5})\b")
_INT_KEYS = frozenset({*_META_KEYS_INT, "num_retractions"})
_FLOAT_KEYS = frozenset(_META_KEYS_FLOAT)
# One engine writes meta_info with the same keys in the same order finish after finish.
_meta_layouts = Layouts()
STRING_LITERAL = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
_BRACKET = re.compile(r"[()\[\]{}]")
_BRACE = re.compile(r"[{}]")
_META_KEY: Final = "'meta_info': {"
# A string literal that no `'key': value` fits in: an id, a key, a word.
_PLAIN_LITERAL = re.compile(r"'[0-9A-Za-z_.:-]*'|\"[0-9A-Za-z_.:-]*\"")
# Text after a `Receive:` line's ids that ended complete lines, by length (the latest of each
# length), so a line ending the same way needs no walk; compared in place, without a slice.
_complete_receive_tails: dict[int, str] = {}
_MAX_RECEIVE_TAILS = 64
# What marks an unparseable JSON line as a request record (the JSON log, the exported metrics
# record, or Docker's wrapping of a text record).
_JSON_RECORD_MARKS = (
    '"request.',
    '"meta_info"',
    '"rid"',
    "Finish: obj=",
    "Receive: obj=",
    "Receive OpenAI: obj=",
)

# Abort messages the engine writes itself, mapped to stable codes. Any other message is dropped:
# an error message can echo user input, and kvwatch must not store that.
_ABORT_CODES: tuple[tuple[str, str], ...] = (
    ("exceeds the maximum allowed length", "input_too_long"),
    ("exceeds the maximum number of tokens", "exceeds_max_tokens"),
    ("longer than the model's context length", "context_length"),
    ("maximum context length", "context_length"),
    ("running timeout", "running_timeout"),
    ("waiting timeout", "waiting_timeout"),
    ("bootstrap room", "no_bootstrap_room"),
    ("KVTransferError", "transfer_failed"),
    ("transfer failed", "transfer_failed"),
    ("Abort", "aborted"),
    ("abort", "aborted"),
)


# Aborts that prove a corrupt transfer, by the engine's own message (reference §2.9), which must
# open the message: found anywhere, they could be the user's words that another error echoes
# (`Invalid grammar request: ...('regex', '(KV checksum mismatch|...)')`).
_PROOF_CODES: tuple[tuple[str, str], ...] = (
    ("KV checksum mismatch", "checksum_mismatch"),
    ("Metadata corruption detected", "metadata_corruption"),
)


def abort_code(message: str | None) -> str | None:
    if not message:
        return None
    opening = message.lstrip(" '\"")
    for prefix, code in _PROOF_CODES:
        if opening.startswith(prefix):
            return code
    for needle, code in _ABORT_CODES:
        if needle in message:
            return code
    return "other"


def _obj_ids(text: str, end: int | None = None) -> tuple[str | None, str | None]:
    """rid and bootstrap_room from a `GenerateReqInput(...)` repr (`text[:end]`), safe against
    look-alike text."""
    rid, room, _, _ = _obj_ids_and_end(text, end)
    return rid, room


# Where decode was told to fetch a request's KV: the prefill's bootstrap host and port.
Address = tuple[str, int | None]


def _obj_ids_and_end(
    text: str, end: int | None = None
) -> tuple[str | None, str | None, Address | None, int]:
    """`_obj_ids`, the `bootstrap_host` and `bootstrap_port` written between them (the prefill
    node decode fetched from; looked for only after the rid, past the user text), and where the
    later of the ids ends in `text` (-1: neither found, or found in a copy with the user text
    blanked)."""
    scan = _obj_scan(text, end)
    return scan.rid, scan.room, scan.address, scan.end


class _ObjScan(NamedTuple):
    rid: str | None
    room: str | None
    address: Address | None
    end: int
    # The `stream=` flag (None: not found, or not a flag).
    streamed: bool | None


def _obj_scan(text: str, end: int | None = None) -> _ObjScan:
    """`_obj_ids_and_end`, and the `stream=` flag: the first after the rid (the fields between
    them are the engine's, never user text), so no more of the line is read for it.

    A client writes text into the repr: literals SGLang escapes (the prompt, a stop string),
    and the keys of its dicts (`custom_params`, `custom_labels`), which it writes unescaped, so
    a key can spell `bootstrap_room=<another room>` outside any literal, or an odd quote that
    turns the repr's literals inside out (audit AD: a planted room named each exposure twice,
    a planted fake host hid it). So: the rid written as the call's first argument is the
    request's whatever follows; a key found once is SGLang's own; a key found more than once
    is read where it stands outside every literal, and only when it stands there once and the
    literals close as a repr's do (else unknown: never another request's).
    """
    # str.find, not a regex search or a count: these lines carry kilobytes of prompt text, and
    # each key is found once and then looked for again only after that point. Bounded by `end`
    # rather than sliced: no copy of the kilobytes.
    if end is None:
        end = len(text)
    rid = None
    rid_end = -1
    rid_at = text.find("rid=", 0, end)
    if _first_argument(text, rid_at):
        m = _OBJ_RID_PLAIN.match(text, rid_at, end) or _OBJ_RID.match(text, rid_at, end)
        if m:
            rid = m.group(1) if m.group(1) is not None else m.group(2)
            rid_end = m.end()
    room_at = text.find("bootstrap_room=", 0, end)
    if (rid_end < 0 and rid_at >= 0 and text.find("rid=", rid_at + 4, end) >= 0) or (
        room_at >= 0 and text.find("bootstrap_room=", room_at + 15, end) >= 0
    ):
        return _obj_scan_blanked(text, end, rid, rid_end)
    ids_end = -1
    if rid_end < 0 and rid_at >= 0:
        m = _OBJ_RID_PLAIN.match(text, rid_at, end) or _OBJ_RID.match(text, rid_at, end)
        if m:
            rid = m.group(1) if m.group(1) is not None else m.group(2)
            rid_end = m.end()
    ids_end = rid_end
    room = None
    host = None
    if room_at >= 0:
        m = _OBJ_ROOM.match(text, room_at, end)
        if m:
            room = m.group(1)
            if rid_end >= 0 and room_at > rid_end:
                host = _address_before(text, rid_end, room_at)
            if m.end() > ids_end:
                ids_end = m.end()
    return _ObjScan(rid, room, host, ids_end, _streamed(text, rid_end, end))


def _first_argument(text: str, rid_at: int, start: int = 0) -> bool:
    """Whether the `rid=` at `rid_at` is the call's first argument (`…ReqInput(rid=`): right
    after the first bracket the message (`text[start:]`) opens, so nothing a client wrote
    comes before it. A prompt quoting `GenerateReqInput(rid='victim'` writes the same text
    inside its literal, after the call's own bracket (read as the first argument, it named
    the request `victim`)."""
    return (
        rid_at >= start + 6
        and text.startswith("Input(", rid_at - 6)
        and text.find("(", start, rid_at) == rid_at - 1
    )


def rid_literals(text: str, start: int = 0) -> list[str]:
    """The string literals, as written (quotes and escapes kept), that may hold the request's
    rid in a `GenerateReqInput(…)` repr (`text[start:]`), each of a batch's list of rids too.

    Found where `_obj_scan` finds the rid: the call's first argument (request-log levels 0 and
    1), else a `rid=` written once (level 2 and 3 write the prompt's `text=` first). Written
    more than once, each `rid=` outside the literals may be it (a prompt is a literal, so its
    `rid='…'` never is; a client's dict key can spell one outside them), and each `rid=` when a
    key's odd quote turned the literals inside out: which one is the request's is then
    unknown, and none may be passed over. No rid is cut to a length here (`_OBJ_RID` stops at
    1,024 characters)."""
    rid_at = text.find("rid=", start)
    if rid_at < 0:
        return []
    if _first_argument(text, rid_at, start) or text.find("rid=", rid_at + 4) < 0:
        places = [rid_at]
    else:
        blank = blank_literals(text[start:])
        places = [
            start + at for at in _all(text[start:] if _quoting_broken(blank) else blank, "rid=")
        ]
    literals: list[str] = []
    for at in places:
        at += 4
        quote = text[at : at + 1]
        if quote == "'" or quote == '"':
            # No backslash before the next such quote: it closes a literal without escapes
            # (most rids), found without the pattern's alternation per character.
            close = text.find(quote, at + 1)
            if close > 0 and text.find("\\", at + 1, close) < 0:
                literals.append(text[at : close + 1])
                continue
        m = STRING_LITERAL.match(text, at)
        if m is not None:
            literals.append(m.group(0))
        elif quote == "[":  # a batch: one rid for each of its requests
            m = STRING_LITERAL.match(text, at + 1)
            while m is not None:
                literals.append(m.group(0))
                if not text.startswith(", ", m.end()):
                    break
                m = STRING_LITERAL.match(text, m.end() + 2)
    return literals


def _obj_scan_blanked(text: str, end: int, rid: str | None, rid_end: int) -> _ObjScan:
    """`_obj_scan` of a repr that spells a key twice: each read outside the literals."""
    blank = blank_literals(text[:end])
    if _quoting_broken(blank):  # a literal no repr writes: a client's key's quote
        return _ObjScan(rid, None, None, -1, None)
    if rid_end < 0:
        rids = set()
        for at in _all(blank, "rid="):
            m = _OBJ_RID_PLAIN.match(text, at, end) or _OBJ_RID.match(text, at, end)
            if m:
                rids.add(m.group(1) if m.group(1) is not None else m.group(2))
                rid_end = m.end()
        rid = rids.pop() if len(rids) == 1 else None
        if rid is None:
            rid_end = -1
    rooms = {m.group(1): m.start() for m in _OBJ_ROOM.finditer(blank)}
    room = host = None
    if len(rooms) == 1:
        ((room, room_at),) = rooms.items()
        if rid_end >= 0 and room_at > rid_end:
            host = _address_before(text, rid_end, room_at, blank)
    return _ObjScan(rid, room, host, -1, _streamed(blank, rid_end, end))


_BLANKED_LITERAL = re.compile(r"'[^']*'|\"[^\"]*\"")
# What a repr writes after a literal (` ` before a level-2 cut's ` ... `).
_AFTER_LITERAL: Final = frozenset(",)]}: ")


def _quoting_broken(blank: str) -> bool:
    """Whether a literal (`blank_literals`) is followed by what no repr writes after one (a
    letter, a quote, `=`): the quoting is a client's, not the repr's."""
    for m in _BLANKED_LITERAL.finditer(blank):
        after = blank[m.end() : m.end() + 1]
        if after and after not in _AFTER_LITERAL:
            return True
    return False


def _all(text: str, key: str) -> list[int]:
    found = []
    at = text.find(key)
    while at >= 0:
        found.append(at)
        at = text.find(key, at + len(key))
    return found


def _address_before(
    text: str, after: int, room_at: int, blank: str | None = None
) -> Address | None:
    """The `bootstrap_host` and `bootstrap_port` written just before the room (SGLang writes
    host, port and room in a row; a host a client's key spells earlier is not the one)."""
    host_at = (blank or text).rfind("bootstrap_host=", after, room_at)
    if host_at < 0:
        return None
    h = _OBJ_HOST.match(text, host_at, room_at)
    if h is None:
        return None
    port_at = (blank or text).find("bootstrap_port=", h.end(), room_at)
    p = _OBJ_PORT.match(text, port_at, room_at) if port_at >= 0 else None
    return (h.group(1), int(p.group(1)) if p else None)


def _streamed(text: str, rid_end: int, end: int) -> bool | None:
    if rid_end < 0:
        return None
    at = text.find(_STREAM_FIELD, rid_end, end)
    if at < 0:
        return None
    value = text[at + len(_STREAM_FIELD) : at + len(_STREAM_FIELD) + 5]
    return True if value.startswith("True") else False if value == "False" else None


def _last_group(text: str) -> tuple[int, int] | None:
    """Where the last bracket group at the top level of `text` opens and where it ends (just
    past its closer), read as Python literal syntax: brackets inside string literals do not
    count, and a literal ends at its quote unless a backslash escapes it. None when the text
    ends inside a literal or with a bracket open; (-1, -1) when it has no group.

    Runs through the text with `str.find` from quote to quote (kilobytes of prompt are one
    literal, skipped by one find) and a regex only over the short stretches between literals.
    A closer without an opener is ignored: a cut line never has one, a complete line with an odd
    object repr still reads as before.

    >>> text = "obj=G(text='a (b', n={'k': [1]}), out={'x': 1}"
    >>> opened, closed = _last_group(text)
    >>> text[opened:closed], closed == len(text)
    ("{'x': 1}", True)
    >>> _last_group("obj=G(text='a (b', n={'k': [1]}), out={'x': 1") is None
    True
    >>> _last_group(r"G(text='it\\'s (a)', n=1)")
    (1, 24)
    >>> _last_group(r"G(text='it\\'s (a)") is None
    True
    """
    size = len(text)
    find = text.find
    search = _BRACKET.search
    depth = 0
    opened = closed = -1
    at = 0
    single = find("'")
    double = find('"')
    while True:
        if single < 0:
            single = size
        if double < 0:
            double = size
        quote_at = single if single < double else double
        while True:  # the brackets before the next literal
            m = search(text, at, quote_at)
            if m is None:
                break
            at = m.end()
            if text[at - 1] in "([{":
                if not depth:
                    opened = at - 1
                depth += 1
            elif depth:
                depth -= 1
                if not depth:
                    closed = at
        if quote_at == size:
            return None if depth else (opened, closed)
        quote = text[quote_at]
        end = quote_at
        while True:  # the literal's closing quote: one not escaped by an odd run of backslashes
            end = find(quote, end + 1)
            if end < 0:
                return None
            before = end - 1
            while text[before] == "\\":
                before -= 1
            if (end - 1 - before) % 2 == 0:
                break
        at = end + 1
        if single <= end:
            single = find("'", at)
        if double <= end:
            double = find('"', at)


def _text_record_complete(message: str, finish: bool) -> bool:
    """Whether a text `Receive:`/`Finish:` record ends where such a record ends: every literal
    and bracket closed, and the line ending with its last top-level group, which for a `Finish:`
    is `out={...}` (a `Receive:` ends with its `obj=...(...)` or its `headers={...}`)."""
    group = _last_group(message)
    if group is None:
        return False
    opened, closed = group
    if opened < 0 or (closed < len(message) and not message[closed:].isspace()):
        return False
    return not finish or message.startswith("out=", opened - 4)


def _finish_complete(message: str, meta_text: str | None) -> bool:
    """`_text_record_complete` for a `Finish:` line, or, where a client's dict key broke the
    repr's quoting before it (a key is written unescaped: an odd quote turns every literal
    after it inside out, and the line read as cut hid its answer), its one meta_info closing
    as a line ends: closed, then the `}` that closes `out` (what is left open at the end of a
    cut line is still open there)."""
    if _text_record_complete(message, finish=True):
        return True
    if meta_text is None or message.count(_META_KEY) != 1:
        return False
    ending = meta_text.rstrip()
    return ending.endswith("}") and _last_group(ending[:-1]) is not None


def _receive_walked(message: str, ids_end: int) -> bool:
    """`_text_record_complete` for a `Receive:` line whose text after its ids (`ids_end`, see
    `_obj_ids_and_end`) is not one that ended a walked complete line (a line ending as one did
    needs no walk: what follows its ids closes what was open there, as it did in that line);
    the text is remembered when the walk finds the line complete."""
    if not _text_record_complete(message, finish=False):
        return False
    if ids_end >= 0:
        tails = _complete_receive_tails
        if len(tails) >= _MAX_RECEIVE_TAILS:
            tails.clear()
        tails[len(message) - ids_end] = message[ids_end:]
    return True


# The drop reason of a request record cut before its end, wherever it is found.
CUT_REASON: Final = "truncated_request_line"


def cut_record(line: str) -> bool:
    """Whether `line`, a whole log line, is a request record (text `Receive:`/`Finish:` or
    JSON) cut before its end; see the module docstring. The file reader asks this of a last
    line that has no newline: kept when complete (hand-made files often end so), dropped and
    counted when cut."""
    message = peel(line).message
    if message.startswith("Finish: "):
        return not _text_record_complete(message, finish=True)
    if message.startswith(("Receive: ", "Receive OpenAI: ")):
        return not _text_record_complete(message, finish=False)
    if message.startswith("{") and not message.startswith(_TRACE_EXPORT):
        try:
            json.loads(message)
        except (ValueError, RecursionError):
            return any(mark in message for mark in _JSON_RECORD_MARKS)
    return False


def json_record(line: str, start: int) -> bool:
    """Whether `line[start:]` opens a JSON request record (`--log-requests-format json`),
    whole or cut: one another writer's line may split like a text one (blind review 54 D1)."""
    # Its `event` key as written unescaped: a runtime's or shipper's JSON record wrapping an
    # engine line (`{"log": "[2026-…] …"}`) escapes the quotes of a request record inside.
    return line.startswith("{", start) and (
        line.find('"event": "request.', start) > 0 or line.find('"event":"request.', start) > 0
    )


# A trace export's line (its spans' `"rid"` attributes are no request record): a cut one is
# the trace reader's to count (blind review 24: said as a cut request line).
_TRACE_EXPORT: Final = ('{"resourceSpans"', '{"resource_spans"')


def _meta_info_text(line: str) -> str | None:
    start = line.rfind(_META_KEY)
    if start < 0:
        return None
    if line.rfind(_META_KEY, 0, start) >= 0:
        # The key twice: the last may be text inside the engine's meta_info (a stop string
        # the answer matched, spelling a whole meta_info of its own). The engine's is the last
        # outside every string literal.
        start = blank_literals(line).rfind(_META_KEY)
        if start < 0:
            return None
    return line[start + len("'meta_info': ") :]


def blank_literals(text: str) -> str:
    """`text` with every string literal that could hold a `'key': value` of its own blanked
    in place (spaces, so every position stays where it was): keys are read where the engine
    wrote them, never inside a user's text.

    The user's text reaches meta_info: a stop string the answer matched is its
    `finish_reason`'s `matched`, and an abort's message may echo the request. Audit N: the
    stop string `'prompt_tokens': 990000` read as the prompt's length named an honest answer
    exposed.

    >>> print(blank_literals('''{'matched': "'prompt_tokens': 9", 'prompt_tokens': 35}'''))
    {'matched': "                  ", 'prompt_tokens': 35}
    """
    return STRING_LITERAL.sub(_blank_literal, text)


def _blank_literal(match: re.Match[str]) -> str:
    literal = match.group(0)
    if _PLAIN_LITERAL.fullmatch(literal):
        return literal  # an id, a key, a word: no structure fits in it
    return literal[0] + " " * (len(literal) - 2) + literal[-1]


class _MetaText(NamedTuple):
    """meta_info's dict as the line writes it, and the same with its literals blanked."""

    text: str
    blank: str


def _meta_dict_text(meta_text: str) -> _MetaText:
    """The dict alone, from meta_info's text to the end of the line (what follows the dict,
    `prompt_token_ids`, is not meta_info; a cut line's dict never closes: all of it)."""
    blank = blank_literals(meta_text)
    end = _closing_brace(blank)
    return _MetaText(meta_text, blank) if end < 0 else _MetaText(meta_text[:end], blank[:end])


def _meta_from_text(dict_text: _MetaText) -> dict[str, Any]:
    """The generic read of meta_info: its keys where the engine wrote them (in `blank`), their
    values as written."""
    meta, blank = dict_text
    pairs = [(m[1], meta[m.start(2) : m.end(2)]) for m in _META_SCALAR.finditer(blank)]
    result: dict[str, Any] = dict(pairs)
    if len(result) != len(pairs):  # a key twice: read the literal exactly
        parsed = _literal_dict(meta)
        if parsed is not None:
            return parsed
        result = {}
        for key, value in pairs:  # else the keys before the first repeat
            if key in result:
                break
            result[key] = value
    for key, value in result.items():
        if value[0] == "'":
            result[key] = value[1:-1]
        elif value in WORDS:
            result[key] = WORDS[value]
    reason = _FINISH_REASON.search(blank)
    if reason:
        if reason.group(1) == "None":
            result["finish_reason"] = None
        else:
            finish: dict[str, Any] = {"type": reason.group(2)}
            end = blank.find("}", reason.end())
            if end < 0:
                end = len(blank)
            status = _STATUS_CODE.search(blank, reason.end(), end)
            if status:
                finish["status_code"] = int(status.group(1))
            message_at = blank.find("'message': ", reason.end(), end)
            if message_at >= 0:
                finish["message"] = meta[message_at + 11 : min(message_at + 211, end)]
            result["finish_reason"] = finish
    return result


def _closing_brace(blank: str) -> int:
    """Just past the brace that closes the dict `blank` opens with (literals blanked), or -1."""
    depth = 0
    for m in _BRACE.finditer(blank):
        depth += 1 if m[0] == "{" else -1
        if not depth:
            return m.end()
    return -1


def _literal_dict(meta: str) -> dict[str, Any] | None:
    """Slow, exact path: evaluate the meta_info dict literal, trimming trailing closers."""
    text = meta.rstrip()
    for _ in range(4):
        try:
            value = literal(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            if not text.endswith("}"):
                return None
            text = text[:-1].rstrip()
            continue
        return value if isinstance(value, dict) else None
    return None


def _finished_fields(meta: dict[str, Any], obj_rid: str | None, room: str | None) -> dict[str, Any]:
    finish = meta.get("finish_reason")
    finish_type: str | None = None
    status_code: int | None = None
    message: str | None = None
    if isinstance(finish, dict):
        finish_type = str(finish.get("type")) if finish.get("type") is not None else None
        status_code = as_int(str(finish["status_code"])) if finish.get("status_code") else None
        raw_message = finish.get("message")
        message = str(raw_message) if raw_message is not None else None
    rid = meta.get("id") or obj_rid
    fields: dict[str, Any] = {
        "rid": printable(str(rid)) if rid is not None else None,
        "bootstrap_room": room,
        "prompt_tokens": None,
        "cached_tokens": None,
        "completion_tokens": None,
        "finish_type": finish_type,
        "status_code": status_code,
        "abort_reason": abort_code(message) if finish_type == "abort" else None,
        "e2e_latency": None,
        "first_token_latency": None,
    }
    if finish_type == "abort" and message:
        # The refusal an abort states, as numbers only (the message itself is never kept): the
        # prompt length ties the request to its node's refusal line when that names no rid.
        stated = refusal_in(message)
        if stated is not None and stated.get("input_tokens") is not None:
            fields["abort_input_tokens"] = stated["input_tokens"]
    get = meta.get
    for key in _META_KEYS_INT:
        value = get(key)
        if value is not None:
            fields[key] = as_int(value if type(value) is str else str(value))
    for key in _META_KEYS_FLOAT:
        value = get(key)
        if value is not None:
            fields[key] = as_float(value if type(value) is str else str(value))
    retractions = meta.get("num_retractions", meta.get("total_retractions"))
    if retractions is not None:
        fields["num_retractions"] = as_int(str(retractions))
    return fields


def parse_text_receive(message: str) -> dict[str, Any]:
    rid, room, address, ids_end = _obj_ids_and_end(message)
    tail = _complete_receive_tails.get(len(message) - ids_end) if ids_end >= 0 else None
    if (tail is None or not message.endswith(tail)) and not _receive_walked(message, ids_end):
        return {"rid": None, "bootstrap_room": None, "openai": False}  # cut: no ids
    fields: dict[str, Any] = {"rid": rid, "bootstrap_room": room, "openai": False}
    _note_address(fields, address)
    return fields


def parse_openai_receive(message: str) -> dict[str, Any]:
    """A `Receive OpenAI:` record names no request, and nothing is read from it.

    It is the HTTP body as the client sent it (a dict, not `GenerateReqInput`, logged before
    the request is made), and the `Receive:` line SGLang writes next names the request. Its
    `rid`, when the client set one, is scheduled under fresh rids when the call fans out (`n` >
    1, a list of prompts): read, it opened a request that never was (audit P2: late lines, and
    a false `rejected_then_served` warning). It spells no key as `rid=` or `bootstrap_room=`,
    so only the user's message could: read, a chat quoting a server log made its words a rid,
    written to the findings and the Parquet table."""
    return {"rid": None, "bootstrap_room": None, "openai": True}


def _note_address(fields: dict[str, Any], address: Address | None) -> None:
    if address is not None:
        fields["bootstrap_host"] = address[0]
        if address[1] is not None:
            fields["bootstrap_port"] = address[1]


def parse_text_finish(message: str) -> dict[str, Any]:
    return read_text_finish(message, _meta_layouts)


def read_text_finish(message: str, layouts: Layouts) -> dict[str, Any]:
    """A `Finish:` line's fields, its `meta_info` read by a layout in `layouts` when one fits
    (and learnt there when it does not). A line cut before its end gives no fields (all None):
    a layout ends where the line does, so only the generic reader has to check."""
    meta_text = _meta_info_text(message)
    fields = layouts.read(meta_text) if meta_text is not None else None
    if fields is None and not _finish_complete(message, meta_text):
        return _finished_fields({}, None, None)
    rid, room, address, streamed = _finish_ids(message)
    if meta_text is None:
        fields = _finished_fields({}, rid, room)
    else:
        if fields is None:
            fields, slots = read_meta_fields(meta_text)
            if slots is not None:
                layouts.learn(meta_text, fields, slots)
        if fields["rid"] is None:  # no id in meta_info: the request's own
            fields["rid"] = rid
        fields["bootstrap_room"] = room
    _note_address(fields, address)
    if streamed is not None:
        fields["streamed"] = streamed
    if message.startswith(_EMBEDDING_FINISH):
        fields["embedding"] = True
    return fields


def _finish_ids(message: str) -> tuple[str | None, str | None, Address | None, bool | None]:
    """A `Finish:` line's ids, from its `obj`: the text before `, out={`. The last one, as the
    prompt may spell it; where that gives no room, an earlier one, as the answer may spell it
    too (an answer echoing an SGLang line, `…bootstrap_room=42), out={…`, made the room
    unknown, and an exposure with it, rerun 7's R5)."""
    out_at = message.rfind(", out={")
    scan = _obj_scan(message, out_at if out_at > 0 else None)
    tries = 0
    while scan.room is None and out_at > 0 and tries < _MAX_OUT_TRIES:
        out_at = message.rfind(", out={", 0, out_at)
        if out_at <= 0:
            break
        earlier = _obj_scan(message, out_at)
        if earlier.room is not None:
            scan = earlier
        tries += 1
    return scan.rid, scan.room, scan.address, scan.streamed


_MAX_OUT_TRIES: Final = 8


# An embedding, reward or classification request's finish: SGLang writes no `cached_tokens`
# into its meta_info, however much of the prompt the prefix cache held (0.5.19 and 0.5.23
# `TokenizerManager._handle_batch_output` add it to generation outputs only).
_EMBEDDING_FINISH: Final = "Finish: obj=EmbeddingReqInput("


def read_meta_fields(meta_text: str) -> tuple[dict[str, Any], list[Slot] | None]:
    """The generic read of a `meta_info` dict (the fields of its finish line, rid from its `id`
    only, no room), and where its values sit for a layout (None: no layout, e.g. an abort,
    whose message can hold anything, or a key written twice)."""
    dict_text = _meta_dict_text(meta_text)
    meta = _meta_from_text(dict_text)
    return _finished_fields(meta, None, None), _meta_slots(dict_text, meta)


def _meta_slots(dict_text: _MetaText, meta: dict[str, Any]) -> list[Slot] | None:
    meta_text, blank = dict_text
    finish = meta.get("finish_reason")
    if isinstance(finish, dict) and ("status_code" in finish or "message" in finish):
        return None
    if "num_retractions" in meta and "total_retractions" in meta:
        return None
    slots: list[Slot] = []
    seen: set[str] = set()
    for m in _META_SCALAR.finditer(blank):
        key = m.group(1)
        if key in seen:
            return None  # read as a literal by the generic reader
        seen.add(key)
        start, end = m.span(2)
        quoted = meta_text[start] == "'"
        if quoted:
            start, end = start + 1, end - 1
        value = meta_text[start:end]
        if key == "type":
            continue  # the finish type: part of the layout
        if key == "id":
            if not quoted:
                return None  # `'id': None` and the like: the request's own rid is used
            slots.append(Slot(start, end, "rid", str))
            continue
        name = "num_retractions" if key == "total_retractions" else key
        if name in _INT_KEYS or name in _FLOAT_KEYS:
            convert = _meta_number(value, floating=name in _FLOAT_KEYS)
            if convert is None:
                return None  # None, True, False or text where a number belongs
            slots.append(Slot(start, end, name, convert))
        else:
            slots.append(Slot(start, end, key, None))  # read by nobody
    return slots


def _meta_number(value: str, *, floating: bool) -> Converter | None:
    """The conversion `as_float` (`floating`) or `as_int` makes of every value of this value's
    form, as a C call; None for other forms."""
    if UNSIGNED.fullmatch(value):
        return float if floating else int
    if DECIMAL.fullmatch(value):
        return float if floating else _int_of_decimal
    return None


def _int_of_decimal(value: str) -> int:
    return int(float(value))  # as `as_int` reads a decimal


def _exported_metrics_record(record: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """`--export-metrics-to-file` records: meta_info nested or flattened, plus request parameters.

    Only the metadata is read. `request_parameters` (a JSON string, which can hold the prompt)
    gives its ids alone: the room and the prefill host a PD request was sent with, the rid. The
    record has no time of its own but meta_info's `request_finished_ts`.
    """
    meta = record.get("meta_info")
    if meta is not None and not isinstance(meta, dict):
        return MALFORMED_RECORD, {}
    if not isinstance(meta, dict):
        meta = record if "prompt_tokens" in record and "id" in record else None
    if meta is None:
        return None
    params = _parameter_ids(record.get("request_parameters"))
    raw_room = record.get("bootstrap_room", meta.get("bootstrap_room"))
    if raw_room is None:
        raw_room = params.get("bootstrap_room")
    room = str(raw_room) if isinstance(raw_room, int) or str(raw_room).isdigit() else None
    rid = params.get("rid")
    fields = _finished_fields(meta, rid if isinstance(rid, str) else None, room)
    _note_address(fields, _address(params))
    stamp = record.get("timestamp") or record.get("time")
    if isinstance(stamp, str):
        fields["record_time"] = stamp
    else:
        finished = fields.get("request_finished_ts")
        if isinstance(finished, float) and 1e9 < finished < 1e11:
            fields["record_time"] = iso_time(finished)
    return "request_finished", fields


def _parameter_ids(params: object) -> dict[str, Any]:
    """The ids among an exported record's request parameters; never their text."""
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except (ValueError, RecursionError):
            return {}
    if not isinstance(params, dict):
        return {}
    keys = ("rid", "bootstrap_room", "bootstrap_host", "bootstrap_port")
    return {k: params[k] for k in keys if k in params}


def _address(record: dict[str, Any]) -> Address | None:
    """A JSON record's bootstrap host and port, when they are what the engine writes."""
    host, port = record.get("bootstrap_host"), record.get("bootstrap_port")
    if not isinstance(host, str) or not _OBJ_HOST.fullmatch(f"bootstrap_host='{host}'"):
        return None
    return host, port if isinstance(port, int) and 0 < port < 65536 else None


# The kind `parse_json_record` gives a finish record whose answer (`out.meta_info`) is not an
# object: counted as a drop by the line reader, never read as a finish.
MALFORMED_RECORD: Final = "malformed_request_record"


def parse_json_record(message: str) -> tuple[str, dict[str, Any]] | None:
    """A `--log-requests-format json` record → (kind, fields); None when it is not one;
    (`MALFORMED_RECORD`, {}) for a finish record without its answer's facts."""
    try:
        record = json.loads(message)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    event = record.get("event")
    if not isinstance(event, str) or not event.startswith("request."):
        return _exported_metrics_record(record)
    stamp = record.get("timestamp")
    extra: dict[str, Any] = {"record_time": stamp} if isinstance(stamp, str) else {}
    if event.endswith("openai"):  # the client's body: see `parse_openai_receive`
        return "request_received", {**parse_openai_receive(message), **extra}
    obj = record.get("obj")
    obj_dict = obj if isinstance(obj, dict) else {}
    raw_rid = record.get("rid") or obj_dict.get("rid")
    # A batch or parallel-sampling call's one record lists its rids (and rooms), which its
    # requests' own records name one by one: as one rid, it was a request that never was.
    rid = str(raw_rid) if isinstance(raw_rid, (str, int)) else None
    raw_room = obj_dict.get("bootstrap_room")
    room = str(raw_room) if isinstance(raw_room, int) else None
    if isinstance(raw_room, str) and raw_room.isdigit():
        room = raw_room
    _note_address(extra, _address(obj_dict))
    if event == "request.finished":
        out = record.get("out")
        meta = out.get("meta_info") if isinstance(out, dict) else None
        if not isinstance(meta, dict):
            # No answer's facts: read as a finish with every field null, it ended its request
            # as if answered with nothing (blind review 26: 37 exposures missed, an all-clear).
            return MALFORMED_RECORD, {}
        fields = _finished_fields(meta, rid, room)
        fields.update(extra)
        if isinstance(obj_dict.get("stream"), bool):
            fields["streamed"] = obj_dict["stream"]
        return "request_finished", fields
    fields = {
        "rid": printable(str(rid)) if rid is not None else None,
        "bootstrap_room": room,
        "openai": False,
    }
    fields.update(extra)
    return "request_received", fields
