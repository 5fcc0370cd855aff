"""`--log-requests` records (text and JSON) reduced to metadata.

These lines carry the users' prompts and replies. kvwatch keeps only ids, token counts, finish
reasons and latencies: text never leaves this module. The text can also contain anything, including
strings that look like our keys (`rid='...'`, `'prompt_tokens': 1`), so values are taken from the
structural position where SGLang writes them, and when a key appears more than once the record is
read with a string-literal-aware parser instead of a search.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from collector.sglang.templates import DECIMAL, UNSIGNED, Converter, Layouts, Slot
from collector.sglang.values import WORDS, as_float, as_int

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
_OBJ_RID = re.compile(r"rid='([^'\\]{1,200})'")
_OBJ_ROOM = re.compile(r"bootstrap_room=(\d+)")
_INT_KEYS = frozenset({*_META_KEYS_INT, "num_retractions"})
_FLOAT_KEYS = frozenset(_META_KEYS_FLOAT)
# One engine writes meta_info with the same keys in the same order finish after finish.
_meta_layouts = Layouts()
_STRING_LITERAL = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")

# Abort messages the engine writes itself, mapped to stable codes. Any other message is dropped:
# an error message can echo user input, and kvwatch must not store that.
_ABORT_CODES: tuple[tuple[str, str], ...] = (
    ("exceeds the maximum allowed length", "input_too_long"),
    ("exceeds the maximum number of tokens", "exceeds_max_tokens"),
    ("longer than the model's context length", "context_length"),
    ("maximum context length", "context_length"),
    ("KV checksum mismatch", "checksum_mismatch"),
    ("Metadata corruption", "metadata_corruption"),
    ("running timeout", "running_timeout"),
    ("waiting timeout", "waiting_timeout"),
    ("bootstrap room", "no_bootstrap_room"),
    ("KVTransferError", "transfer_failed"),
    ("transfer failed", "transfer_failed"),
    ("Abort", "aborted"),
    ("abort", "aborted"),
)


def abort_code(message: str | None) -> str | None:
    if not message:
        return None
    for needle, code in _ABORT_CODES:
        if needle in message:
            return code
    return "other"


def _obj_ids(text: str, end: int | None = None) -> tuple[str | None, str | None]:
    """rid and bootstrap_room from a `GenerateReqInput(...)` repr (`text[:end]`), safe against
    look-alike text."""
    # str.find, not a regex search or a count: these lines carry kilobytes of prompt text, and
    # each key is found once and then looked for again only after that point. Bounded by `end`
    # rather than sliced: no copy of the kilobytes.
    if end is None:
        end = len(text)
    rid_at = text.find("rid=", 0, end)
    room_at = text.find("bootstrap_room=", 0, end)
    if (rid_at >= 0 and text.find("rid=", rid_at + 4, end) >= 0) or (
        room_at >= 0 and text.find("bootstrap_room=", room_at + 15, end) >= 0
    ):
        text = _STRING_LITERAL.sub(_keep_short_literal, text[:end])
        end = len(text)
        rid_at = text.find("rid=")
        room_at = text.find("bootstrap_room=")
    rid = None
    if rid_at >= 0:
        # The first `rid='<id>'` from the first `rid=` on (`rid=None` or an empty literal there:
        # a later one is the one, as a search of the whole text would find).
        m = _OBJ_RID.search(text, rid_at, end)
        rid = m.group(1) if m else None
    room = None
    if room_at >= 0:
        m = _OBJ_ROOM.match(text, room_at, end)
        room = m.group(1) if m else None
    return rid, room


def _keep_short_literal(match: re.Match[str]) -> str:
    """Keep id-like literals (`'4f1c…'`), blank everything else (user text)."""
    literal = match.group(0)
    body = literal[1:-1]
    if len(body) <= 200 and body.replace("-", "").replace("_", "").isalnum():
        return literal
    return "''"


def _meta_info_text(line: str) -> str | None:
    start = line.rfind("'meta_info': {")
    if start < 0:
        return None
    return line[start + len("'meta_info': ") :]


def _meta_from_text(meta: str) -> dict[str, Any]:
    pairs = _META_SCALAR.findall(meta)
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
    reason = _FINISH_REASON.search(meta)
    if reason:
        if reason.group(1) == "None":
            result["finish_reason"] = None
        else:
            finish: dict[str, Any] = {"type": reason.group(2)}
            end = meta.find("}", reason.end())
            segment = meta[reason.end() : end if end > 0 else len(meta)]
            status = _STATUS_CODE.search(segment)
            if status:
                finish["status_code"] = int(status.group(1))
            message_at = segment.find("'message': ")
            if message_at >= 0:
                finish["message"] = segment[message_at + 11 : message_at + 211]
            result["finish_reason"] = finish
    return result


def _literal_dict(meta: str) -> dict[str, Any] | None:
    """Slow, exact path: evaluate the meta_info dict literal, trimming trailing closers."""
    text = meta.rstrip()
    for _ in range(4):
        try:
            value = ast.literal_eval(text)
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
        "rid": str(rid) if rid is not None else None,
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
    rid, room = _obj_ids(message)
    return {"rid": rid, "bootstrap_room": room, "openai": message.startswith("Receive OpenAI")}


def parse_text_finish(message: str) -> dict[str, Any]:
    return read_text_finish(message, _meta_layouts)


def read_text_finish(message: str, layouts: Layouts) -> dict[str, Any]:
    """A `Finish:` line's fields, its `meta_info` read by a layout in `layouts` when one fits
    (and learnt there when it does not)."""
    meta_text = _meta_info_text(message)
    out_at = message.rfind(", out={")
    rid, room = _obj_ids(message, out_at if out_at > 0 else None)
    if meta_text is None:
        return _finished_fields({}, rid, room)
    fields = layouts.read(meta_text)
    if fields is None:
        fields, slots = read_meta_fields(meta_text)
        if slots is not None:
            layouts.learn(meta_text, fields, slots)
    if fields["rid"] is None:  # no id in meta_info: the request's own
        fields["rid"] = rid
    fields["bootstrap_room"] = room
    return fields


def read_meta_fields(meta_text: str) -> tuple[dict[str, Any], list[Slot] | None]:
    """The generic read of a `meta_info` dict (the fields of its finish line, rid from its `id`
    only, no room), and where its values sit for a layout (None: no layout, e.g. an abort,
    whose message can hold anything, or a key written twice)."""
    meta = _meta_from_text(meta_text)
    return _finished_fields(meta, None, None), _meta_slots(meta_text, meta)


def _meta_slots(meta_text: str, meta: dict[str, Any]) -> list[Slot] | None:
    finish = meta.get("finish_reason")
    if isinstance(finish, dict) and ("status_code" in finish or "message" in finish):
        return None
    if "num_retractions" in meta and "total_retractions" in meta:
        return None
    slots: list[Slot] = []
    seen: set[str] = set()
    for m in _META_SCALAR.finditer(meta_text):
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

    Only the metadata is read; `request_parameters` (which can hold the prompt) is ignored.
    """
    meta = record.get("meta_info")
    if not isinstance(meta, dict):
        meta = record if "prompt_tokens" in record and "id" in record else None
    if meta is None:
        return None
    raw_room = record.get("bootstrap_room", meta.get("bootstrap_room"))
    room = str(raw_room) if isinstance(raw_room, int) or str(raw_room).isdigit() else None
    fields = _finished_fields(meta, None, room)
    stamp = record.get("timestamp") or record.get("time")
    if isinstance(stamp, str):
        fields["record_time"] = stamp
    return "request_finished", fields


def parse_json_record(message: str) -> tuple[str, dict[str, Any]] | None:
    """A `--log-requests-format json` record → (kind, fields); None when it is not one."""
    try:
        record = json.loads(message)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    event = record.get("event")
    if not isinstance(event, str) or not event.startswith("request."):
        return _exported_metrics_record(record)
    obj = record.get("obj")
    obj_dict = obj if isinstance(obj, dict) else {}
    rid = record.get("rid") or obj_dict.get("rid")
    raw_room = obj_dict.get("bootstrap_room")
    room = str(raw_room) if isinstance(raw_room, int) else None
    if isinstance(raw_room, str) and raw_room.isdigit():
        room = raw_room
    stamp = record.get("timestamp")
    extra = {"record_time": stamp} if isinstance(stamp, str) else {}
    if event == "request.finished":
        out = record.get("out")
        meta = out.get("meta_info") if isinstance(out, dict) else None
        fields = _finished_fields(meta if isinstance(meta, dict) else {}, rid, room)
        fields.update(extra)
        return "request_finished", fields
    fields = {
        "rid": str(rid) if rid is not None else None,
        "bootstrap_room": room,
        "openai": event.endswith("openai"),
    }
    fields.update(extra)
    return "request_received", fields
