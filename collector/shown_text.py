"""Text from the logs as kvwatch shows it: what a client or a file name chose, made inert.

A rid is the client's choice, and a node name a file's; both reach the terminal, the Markdown
report and the CSV. An escape sequence in one cleared the responder's screen and printed a fake
line; a newline in one broke the report's tables. Control characters are shown the way Python's
repr writes them (`\\x1b`, `\\n`), as SGLang's own text logs already show such a rid.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """`text` with every character that is not printable written as its escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def printable_lines(text: str) -> str:
    """`text` with each line `printable`, its newlines kept."""
    if text.isprintable():
        return text
    return "\n".join(printable(line) for line in text.split("\n"))


def clipped(text: str, limit: int = 64) -> str:
    """`text` cut to `limit` characters with an ellipsis: a client-chosen id of a kilobyte
    would take over a terminal line (the reports and the JSON keep it whole)."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
