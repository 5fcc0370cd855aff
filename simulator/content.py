"""What prompts carry and what replies say.

A prompt is described by a `PromptSpec`: its length in tokens, an optional shared document at its
start (the prefix the radix cache can reuse), the marker strings it carries (`MARK-<hex>`), and
how long the model's natural answer is. Live clients write prompts as chat text; a tiny
deterministic "tokenizer" counts words and understands three directives so that a test can ask
for a 900,000-token prompt without sending 900,000 words:

* `[[doc NAME N]]` at the very start of the first message: a shared document of N tokens
  (prefix-cacheable across requests that name the same document);
* `[[pad N]]` anywhere: N tokens of filler;
* `[[reply N]]` anywhere: the model's answer will be N tokens long (0 prompt tokens).

Replies are "generated" from the KV pages decode attends over: they list the markers found on
those pages (in content-id order, oldest first) and continue with filler. So a reply that read
another request's pages literally contains that request's marker.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Any

TEMPLATE_TOKENS_PER_MESSAGE = 4
TEMPLATE_TAIL_TOKENS = 2
LOG_TEXT_LIMIT = 2048
MAX_REPLY_MARKERS = 64

_MARKER = re.compile(r"MARK-[0-9A-Za-z]+")
_DIRECTIVE = re.compile(r"\[\[(doc|pad|reply)\s+([^\]]*)\]\]")

_WORDS = (
    "the of and to in is that for it as with was on be by this are from at or an have not "
    "which but all were when we there can been has more if will one would so what out about "
    "up into than them only other time could these two may first then do any like new some "
    "report ledger quarter margin invoice shipment contract revenue forecast region audit"
).split()


def _build_filler(n_words: int) -> str:
    state = 0x2545F4914F6CDD1D
    out: list[str] = []
    for _ in range(n_words):
        state = (state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        out.append(_WORDS[(state >> 33) % len(_WORDS)])
    return " ".join(out) + " "


FILLER = _build_filler(24000)
_FILLER_SPAN = len(FILLER) - 8 * LOG_TEXT_LIMIT


def filler(seed: int, n_chars: int) -> str:
    """`n_chars` of deterministic filler text, starting at a word picked by `seed`."""
    off = FILLER.find(" ", (seed * 2654435761) % _FILLER_SPAN) + 1
    if n_chars <= len(FILLER) - off:
        return FILLER[off : off + n_chars]
    reps = n_chars // len(FILLER) + 2
    return (FILLER[off:] + FILLER * reps)[:n_chars]


def marker_for(content_id: int, salt: int) -> str:
    """The marker a generated (offline) victim prompt carries: unique per content id."""
    x = ((content_id * 0x9E3779B97F4A7C15) ^ salt) & 0xFFFFFFFFFFFFFFFF
    return f"MARK-{x:016x}"


def find_markers(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_MARKER.findall(text)))


@dataclass(slots=True)
class PromptSpec:
    tokens: int
    natural_output: int
    doc_name: str = ""
    doc_tokens: int = 0
    markers: tuple[str, ...] = ()
    text_head: str = ""

    @property
    def prefix_tokens(self) -> int:
        """Tokens of the shareable prefix (template head + document); 0 without a document."""
        return TEMPLATE_TOKENS_PER_MESSAGE + self.doc_tokens if self.doc_name else 0


class PromptError(ValueError):
    """A chat request the simulated tokenizer cannot read (HTTP 400)."""


def _directive_int(value: str, what: str) -> int:
    try:
        n = int(value.replace("_", "").replace(",", ""))
    except ValueError:
        raise PromptError(f"{what} needs a whole number of tokens, got {value!r}") from None
    if n < 0:
        raise PromptError(f"{what} must not be negative")
    return n


def parse_chat(messages: list[dict[str, Any]]) -> PromptSpec:
    """Token count, shared document, markers and log text of an OpenAI chat prompt."""
    if not messages:
        raise PromptError("messages must not be empty")
    tokens = TEMPLATE_TAIL_TOKENS
    doc_name = ""
    doc_tokens = 0
    natural: int | None = None
    markers: list[str] = []
    head_parts: list[str] = []
    head_len = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise PromptError("each message must be an object")
        role = str(message.get("role", "user"))
        content = message.get("content", "")
        if isinstance(content, list):
            content = " ".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        text = str(content)
        tokens += TEMPLATE_TOKENS_PER_MESSAGE
        rendered: list[str] = [f"<|{role}|>\n"]
        pos = 0
        for match in _DIRECTIVE.finditer(text):
            plain = text[pos : match.start()]
            tokens += len(plain.split())
            rendered.append(plain)
            kind, arg = match.group(1), match.group(2).split()
            if kind == "doc":
                if len(arg) != 2:
                    raise PromptError("[[doc NAME N]] takes a name and a token count")
                n = _directive_int(arg[1], "[[doc]]")
                if index == 0 and not doc_name and not text[: match.start()].strip():
                    doc_name, doc_tokens = arg[0], n
                tokens += n
                rendered.append(f"[document {arg[0]}] " + filler(zlib.crc32(arg[0].encode()), 600))
            elif kind == "pad":
                n = _directive_int(arg[0] if arg else "", "[[pad]]")
                tokens += n
                rendered.append(filler(n, min(6 * n, LOG_TEXT_LIMIT)))
            else:
                natural = _directive_int(arg[0] if arg else "", "[[reply]]")
            pos = match.end()
        plain = text[pos:]
        tokens += len(plain.split())
        rendered.append(plain)
        markers.extend(find_markers(text))
        if head_len < LOG_TEXT_LIMIT:
            piece = "".join(rendered) + "\n"
            head_parts.append(piece)
            head_len += len(piece)
    head = ("".join(head_parts) + "<|assistant|>\n")[:LOG_TEXT_LIMIT]
    if natural is None:
        natural = 24 + zlib.crc32(head.encode()) % 232
    return PromptSpec(
        tokens=tokens,
        natural_output=max(1, natural),
        doc_name=doc_name,
        doc_tokens=doc_tokens,
        markers=tuple(dict.fromkeys(markers)),
        text_head=head,
    )


def generated_text_head(content_id: int, doc_name: str, markers: tuple[str, ...]) -> str:
    """Log text (first 2048 chars) of a prompt the offline traffic generator made up."""
    parts = ["<|user|>\n"]
    if doc_name:
        parts.append(f"[document {doc_name}] ")
        parts.append(filler(zlib.crc32(doc_name.encode()), 600))
    if markers:
        parts.append("Please keep this reference: " + " ".join(markers) + ". ")
    used = sum(len(p) for p in parts)
    parts.append(filler(content_id, max(0, LOG_TEXT_LIMIT - used)))
    return "".join(parts)[:LOG_TEXT_LIMIT]


def render_reply(markers: list[str], out_tokens: int, seed: int) -> str:
    """The answer a decode writes after attending over pages holding these markers."""
    listed = markers[:MAX_REPLY_MARKERS]
    lead = ""
    if listed:
        lead = "From the context: " + ", ".join(listed) + ". "
    words_left = max(0, out_tokens - len(lead.split()))
    words = filler(seed, 8 * words_left + 16).split()[:words_left]
    return lead + " ".join(words)
