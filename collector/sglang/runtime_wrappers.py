"""Lines as container runtimes hand them over: the engine's line inside, whole again.

Kubernetes and Docker do not store what the engine printed, line for line. containerd's CRI
format puts `<RFC3339> <stream> <P|F> ` in front and splits a line longer than 16 KiB into
pieces marked `P`, the last one `F`; Docker's json-file driver writes `{"log": …, "stream": …,
"time": …}` records and splits the same way, only the last piece ending in a newline;
`kubectl logs --timestamps` puts `<RFC3339> ` in front; syslog puts `Sep  1 10:00:00 host
prog[pid]: ` (no year: the year of the file's last dated line, when there is one), and
`journalctl -o short-iso` or rsyslog's high-precision template `<RFC3339> host prog[pid]: `,
Loki's `logcli query` `<RFC3339> {labels} `, and `aws logs tail` `<RFC3339> <log stream> `.
Request logs with prompt text are the long lines, so an over-length prompt's `Receive`/`Finish`
arrive in pieces. And the request logger may print no time of its own (reference §2.5, §8), so the
runtime's time is the line's.

`RuntimeLines.unwrap` returns the engine's line, joined from its pieces and, when it carries no
SGLang prefix, given one from the runtime's time; `HELD` while pieces wait for their last;
None for a line no runtime wrapped.
"""

from __future__ import annotations

import json
import re
import time
from typing import Final

from collector.events import epoch_from_parts
from collector.sglang.envelope import CLOCK_PATTERN, DATE_PATTERN

# The engine's line is longer than this once joined: dropped, as the file reader drops one
# longer than its `MAX_LINE_BYTES` (the same bound; `collector.files` reads through this module,
# so it is not imported from there). A runtime splits a long line, such as a prompt logged whole,
# into pieces of 16 KiB.
MAX_JOINED_CHARS: Final = 64 << 20

# Only real dates and times (a garbled month has no epoch): the runtime's stamp, or no wrapper.
RFC3339: Final = DATE_PATTERN + "T" + CLOCK_PATTERN + r"(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)"
_CRI: Final = re.compile(RFC3339 + r" (stdout|stderr) ([PF]) ")
# s6-log's and multilog's `t` directive: the TAI64N label of the moment the logger wrote the
# line, `@` and 24 hex digits (2^62 plus TAI seconds, then nanoseconds). multilog counts TAI as
# UTC + 10 s; s6-log adds the leap seconds too (UTC + 37 s since 2017): read as UTC + 10 s, a
# label is at most 27 s late (`TAI64N_SLACK`).
_TAI64N: Final = re.compile(r"@(4[0-9a-f]{15})([0-9a-f]{8}) ")
_TAI64_EPOCH: Final = (1 << 62) + 10
TAI64N_SLACK: Final = 27.0
# A line behind an RFC 3339 stamp (`kubectl logs --timestamps`, and the start of others).
STAMPED: Final = re.compile(RFC3339 + r" ")
# After an RFC 3339 stamp, the host and program of `journalctl -o short-iso[-precise]` and of
# rsyslog's high-precision template (`2026-09-01T10:00:00+0000 gpu-7 python3[123]: `). A host
# is a name, never a word followed by a colon, so a request line (`Finish: obj=…`) is none.
SYSLOG_TAG: Final = r"[A-Za-z0-9][\w.-]* (?P<program>[\w.@/-]+)(?:\[\d+\])?: "
_SYSLOG_TAG: Final = re.compile(SYSLOG_TAG)
# After an RFC 3339 stamp, the log stream of `aws logs tail` (`sglang/decode-0/abc `): a name
# with a slash in it, not a path ending in a colon (a warning's `/x/y.py:12: `).
CLOUDWATCH_STREAM: Final = re.compile(r"[\w.#=-]+(?:/[\w.#=\[\]$-]+)+ ")
# After an RFC 3339 stamp, the stream labels of Loki's `logcli query` (`{pod="decode-0"}`, `{}`
# when every line shares them), padded to one width. A JSON record (`{"rid": …}`) is no labels.
LOKI_LABELS: Final = re.compile(r'\{(?:[A-Za-z_]\w*="(?:[^"\\]|\\.)*"(?:, )?)*\} +')
_MONTHS: Final = (
    "Jan",
    "Feb",
    "Mar",
    "Apr",
    "May",
    "Jun",
    "Jul",
    "Aug",
    "Sep",
    "Oct",
    "Nov",
    "Dec",
)
MONTH: Final = "(?:" + "|".join(_MONTHS) + ")"
# What a syslog line can start with: a month's first letter.
MONTH_INITIALS: Final = "".join(sorted({month[0] for month in _MONTHS}))
_SYSLOG: Final = re.compile(
    r"("
    + "|".join(_MONTHS)
    + r") ( [1-9]|0[1-9]|[12]\d|3[01]) "
    + CLOCK_PATTERN
    + r" \S+ [^\s:\[]+(?:\[\d+\])?: "
)
# A syslog time more than this before the last dated line is in the next year.
_HALF_YEAR: Final = 183 * 86400.0
# Dynamo-style wrappers re-render records as `<RFC3339>  INFO module: msg`: not a runtime's
# timestamp in front of the engine's line, and `peel` reads them.
_LEVEL_AFTER: Final = re.compile(r"\s*(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)\s")
# An SGLang prefix (`[2026-09-01 10:00:00 TP0]`, or the 2024 time of day `[10:00:00 TP0]`).
_ENGINE_PREFIX: Final = re.compile(r"\[(?:\d{4}-\d\d-\d\d[ T])?\d\d:\d\d:\d\d")


class _Held:
    """The marker for a piece kept until the rest of its line arrives."""

    def __repr__(self) -> str:
        return "HELD"


HELD: Final = _Held()


class RuntimeLines:
    """Unwraps one file's runtime-wrapped lines (see the module docstring); keeps the pieces of
    a split line per stream (stdout and stderr interleave) until the last piece.

    Examples
    --------
    >>> lines = RuntimeLines()
    >>> lines.unwrap("2026-09-01T10:00:00.5Z stdout P Finish: obj=GenerateReqInput(rid='a1'")
    HELD
    >>> lines.unwrap("2026-09-01T10:00:00.5Z stdout F ), out={}")
    "[2026-09-01 10:00:00.500000] Finish: obj=GenerateReqInput(rid='a1'), out={}"
    >>> lines.unwrap("2026-09-01T10:00:01Z [2026-09-01 10:00:01 TP0] Prefill batch, ...")
    '[2026-09-01 10:00:01 TP0] Prefill batch, ...'
    >>> lines.unwrap("[2026-09-01 10:00:01 TP0] Prefill batch, ...") is None
    True
    """

    __slots__ = ("_pieces", "_sizes", "_skipping", "dropped", "written", "labelled")

    def __init__(self) -> None:
        self._pieces: dict[str, list[str]] = {}
        self._sizes: dict[str, int] = {}
        self._skipping: set[str] = set()  # streams whose line grew too long: pieces discarded
        # Lines lost, by reason: joined past `MAX_JOINED_CHARS`, or pieces left at the end.
        self.dropped: dict[str, int] = {}
        # When the runtime wrote the last line unwrapped (UTC), if that line carried the
        # engine's own prefix: a clock the engine's zoneless stamp is read against (`log_clock`).
        self.written: float | None = None
        # Whether that time was a TAI64N label's (up to `TAI64N_SLACK` late).
        self.labelled = False

    def unwrap(
        self, line: str, last_time: float | None = None, zone: float = 0.0
    ) -> str | _Held | None:
        """The engine's line inside `line` (see the class); `last_time`, the time of the file's
        last dated line, gives a syslog header its year.

        A line without the engine's prefix gets one from the runtime's time. `zone` is how far
        the engine's stamps run ahead of UTC (`log_clock`): a runtime's stamp says its zone (UTC
        in the end), so it is written in the engine's, which the stream's clock takes off again
        (a `kubectl --timestamps` access line was read 8 h early from a +08:00 engine). A syslog
        header's time is the host's, as the engine's is: written as it is."""
        self.written = None
        self.labelled = False
        first = line[:1]
        if first.isdigit():
            m = _CRI.match(line)
            if m is not None:
                joined = self._join(m.group(9), line[m.end() :], m.group(10) == "F")
                if isinstance(joined, _Held):
                    return joined
                return self._stamped(joined, _epoch(m), zone)
            m = STAMPED.match(line)
            if m is not None and not _LEVEL_AFTER.match(line, m.end()):
                at = m.end()
                tag = (
                    _SYSLOG_TAG.match(line, at)
                    or LOKI_LABELS.match(line, at)
                    or CLOUDWATCH_STREAM.match(line, at)
                )
                return self._stamped(line[(tag or m).end() :], _epoch(m), zone)
        elif first == "{" and (line.startswith('{"log"') or _SHIPPER_TEXT.search(line, 0, 4096)):
            return self._record(line, zone)
        elif first == "@":
            m = _TAI64N.match(line)
            if m is not None:
                written = int(m[1], 16) - _TAI64_EPOCH + int(m[2], 16) / 1e9
                self.labelled = True
                return self._stamped(line[m.end() :], written, zone)
        elif last_time is not None and first in MONTH_INITIALS:
            m = _SYSLOG.match(line)
            if m is not None:
                return with_prefix(line[m.end() :], _syslog_epoch(m, last_time))
        return None

    def close(self) -> dict[str, int]:
        """End of the file: pieces whose last piece never came are lost lines."""
        for _ in self._pieces:
            self._count("unfinished_split_line")
        self._pieces.clear()
        self._sizes.clear()
        self._skipping.clear()
        return self.dropped

    def _record(self, line: str, zone: float) -> str | _Held | None:
        """A JSON record a runtime or shipper wrote the engine's line into: Docker's json-file
        (`log`, pieces ending without a newline), Fluent Bit (`log`, its CRI parser's `_p`
        marking pieces), Vector (`message`), journald's JSON (`MESSAGE`), Google Cloud Logging
        (`textPayload`), Loki's `logcli --output=jsonl` (`line`). SGLang's own JSON request
        records (`event`, `rid`) are not wrappers."""
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if not isinstance(record, dict) or ("event" in record and "rid" in record):
            return None
        key = next((k for k in _TEXT_KEYS if isinstance(record.get(k), str)), None)
        if key is None:
            if (
                "MESSAGE" in record
                and record["MESSAGE"] is None
                and "__REALTIME_TIMESTAMP" in record
            ):
                # journald's JSON without `--all` leaves out a field over 4,096 bytes: a
                # request line with its prompt. A lost line, said as one.
                self._count("journal_message_left_out")
                return HELD
            return None
        text: str = record[key]
        if "\x1b" in text:
            text = strip_terminal_codes(text)
        stream = record.get("stream")
        piece = record.get("_p")
        if isinstance(piece, str):
            complete = piece != "P"
        elif key == "log" and record.keys() <= _DOCKER_KEYS:
            complete = text.endswith("\n")
        else:
            complete = True
        joined = self._join(stream if isinstance(stream, str) else "", text, complete)
        if isinstance(joined, _Held):
            return joined
        joined = joined.rstrip("\r\n")
        when = record_time(record)
        return self._stamped(joined, when, zone) if when is not None else joined

    def _stamped(self, text: str, written: float, zone: float) -> str:
        """The engine's line the runtime wrote at `written` (UTC): as it is when it carries
        the engine's own prefix (and `written` is kept to read that prefix's zone by), else
        behind a prefix made from `written` in the engine's zone."""
        if text[:1] == "[" and _ENGINE_PREFIX.match(text):
            self.written = written
            return text
        return with_prefix(text, written + zone)

    def _join(self, stream: str, piece: str, last: bool) -> str | _Held:
        if stream in self._skipping:
            if last:
                self._skipping.discard(stream)
            return HELD
        held = self._pieces.get(stream)
        if held is None:
            if last:
                return piece
            held = self._pieces[stream] = []
            self._sizes[stream] = 0
        size = self._sizes[stream] + len(piece)
        if size > MAX_JOINED_CHARS:
            self._count("line_too_long")
            del self._pieces[stream], self._sizes[stream]
            if not last:
                self._skipping.add(stream)
            return HELD
        held.append(piece)
        self._sizes[stream] = size
        if not last:
            return HELD
        del self._pieces[stream], self._sizes[stream]
        return "".join(held)

    def _count(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1


# Where a shipper's JSON record keeps the engine's line, and its time.
# Loki's `logcli query --output=jsonl` keeps it in `line`, beside the stream's `labels`.
_TEXT_KEYS: Final = ("log", "message", "MESSAGE", "textPayload", "msg", "line")
# Looked for near the start only: a shipper's metadata comes first, a prompt may be long. A
# journald record whose message it left out (null) is one too.
_SHIPPER_TEXT: Final = re.compile(
    r'"(?:log|message|MESSAGE|textPayload|msg|line)" ?: ?"|"MESSAGE" ?: ?null'
)
_DOCKER_KEYS: Final = frozenset({"log", "stream", "time", "attrs"})
_TIME_KEYS: Final = ("time", "timestamp", "@timestamp", "date")


def record_time(record: dict[str, object]) -> float | None:
    """A record's time: an RFC 3339 string, epoch seconds or milliseconds (CloudWatch), or
    journald's microseconds."""
    for key in _TIME_KEYS:
        value = record.get(key)
        if isinstance(value, str):
            m = STAMPED.match(value + " ")
            if m is not None:
                return _epoch(m)
        elif isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return value / 1000 if value > 1e11 else float(value)
    micros = record.get("__REALTIME_TIMESTAMP")
    if isinstance(micros, str) and micros.isdigit():
        return int(micros) / 1e6
    return None


def _epoch(m: re.Match[str]) -> float:
    year, month, day, hour, minute, second, fraction, zone = m.groups()[:8]
    when = epoch_from_parts(int(year), int(month), int(day), int(hour), int(minute), int(second))
    if fraction:
        when += int(fraction[:6].ljust(6, "0")) / 1e6
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        when -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return when


def _syslog_epoch(m: re.Match[str], last_time: float) -> float:
    month, day, hour, minute, second = m.groups()
    parts = (_MONTHS.index(month) + 1, int(day), int(hour), int(minute), int(second))
    year = time.gmtime(last_time).tm_year
    when = epoch_from_parts(year, *parts)
    return epoch_from_parts(year + 1, *parts) if when < last_time - _HALF_YEAR else when


# A terminal's control sequence (CSI): colours (`\x1b[2m`), erasing the line (`\x1b[K`). An engine
# run on a terminal, or through `docker compose`, `script` or a coloured formatter, writes them
# into its log around the text; a prompt never carries one raw (request lines are reprs, JSON
# records escape it).
_TERMINAL_CODE: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip_terminal_codes(text: str) -> str:
    """`text` without terminal control sequences.

    Why: blind review 8b, a container's log whose lines were coloured (`… stdout F
    \x1b[2m[2026-09-06 06:56:08]\x1b[0m Finish: …`) had 704 of its 712 lines unread, and one
    line that was read made the run say "no exposed responses" with exit 0."""
    return _TERMINAL_CODE.sub("", text)


def with_prefix(text: str, when: float) -> str:
    """`text` as the engine's line: as it is when it has SGLang's prefix, else behind one
    made from the runtime's time (UTC, microseconds)."""
    if text[:1] == "[" and _ENGINE_PREFIX.match(text):
        return text
    whole = int(when)
    micros = round((when - whole) * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(whole))
    return f"[{stamp}.{micros:06d}] {text}" if micros else f"[{stamp}] {text}"
