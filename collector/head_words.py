"""The first words of an unclassified engine line, as far as they are safe to print.

`parse --stats` names the heads of engine lines no rule read, so that a new message family in an
engine release shows up by name. But an "engine line" is only a line that looks like one: a prompt
logged with a raw newline followed by a stamp reads the same, and its first words are a user's
(blind review 13e). So a word is printed only when the engine itself writes it — a word of the
classifier's own rule heads, or of a short list of the engine's log vocabulary — and any other
word as its shape (`Xxxxx`): enough to tell families apart, nothing a user wrote.
"""

from __future__ import annotations

import re
from typing import Final

from collector.sglang import logs

_HEAD_WORDS: Final = re.compile(r"[A-Za-z][A-Za-z_-]{0,23}(?: [A-Za-z][A-Za-z_-]{0,23})?")
_WORD: Final = re.compile(r"[A-Za-z][A-Za-z_-]*")
NON_TEXT: Final = "(non-text)"

# Words SGLang's scheduler, tokenizer manager, disaggregation and start-up lines lead with
# (`../shared/reference/sglang-telemetry.md` and the engines' own log vocabulary): generic enough
# that printing one tells nothing about a user.
_ENGINE_VOCABULARY: Final = frozenset(
    """
    abort aborted accepted allocated attention backend batch begin bootstrap buffer buffers cache
    capture captured check checksum chunked config connected connection context cuda data decode
    detected disaggregation disabled done enabled end engine error exception failed fetch finish
    finished flush gpu graph handshake health init initialized input invalid kv kvmanager length
    load loaded loading lora manager memory metadata model mooncake nixl not online output pool
    prefill prefix process queue ready receive received release request requests retract router
    scheduler server session skipped start started starting stats step sweep timeout token
    tokenizer tokenizermanager tokens transfer truncating update using warmup watchdog weight
    weights worker
    """.split()
)


def _rule_words() -> frozenset[str]:
    return frozenset(word.lower() for rule in logs.RULES for word in _WORD.findall(rule.head))


_SAFE: Final = _ENGINE_VOCABULARY | _rule_words()


def _shape(word: str) -> str:
    return "".join("X" if c.isupper() else "x" if c.isalpha() else c for c in word)


def safe_head(message: str) -> str:
    """At most the first two words of `message`, each either the engine's own or its shape."""
    head = _HEAD_WORDS.match(message)
    if head is None:
        return NON_TEXT
    return " ".join(
        word if word.lower() in _SAFE else _shape(word) for word in head.group(0).split(" ")
    )
