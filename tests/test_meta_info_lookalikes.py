"""A `Finish:` line's numbers are read where the engine wrote them, never from the user's text.

The user's text reaches meta_info itself: a stop string the answer matched is its
`finish_reason`'s `matched`, written before `prompt_tokens`, and an abort's message may echo
the request. Where the exact read failed (`return_prompt_token_ids` appends a key after
meta_info; level 2 cuts a long logprob list with ` ... `), the first copy of each key won: the
user's. Audit N: a stop string `'prompt_tokens': 990000` named an honest 3,500-token answer
exposed, and one spelling `'first_token_latency': 0.0001` named an honest 800,000-token prefill
impossibly fast. The cases are its reproductions (0.5.19 formats).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.forensics.driver import run_forensics
from collector.sglang.request_log import parse_text_finish, read_text_finish
from collector.sglang.templates import Layouts

CASES = Path(__file__).parent / "testdata" / "meta_info_lookalike"


def _finish(meta: dict[str, Any], after: str = "", prompt: str = "hi", answer: str = "ok") -> str:
    """A `Finish:` message as SGLang writes it: reprs of the request and of its output."""
    out = repr({"text": answer, "meta_info": meta})
    return f"Finish: obj=GenerateReqInput(rid='a1', text={prompt!r}), out={out[:-1]}{after}}}"


def _meta(matched: Any, prompt_tokens: int = 3500) -> dict[str, Any]:
    return {
        "id": "a1",
        "finish_reason": {"type": "stop", "matched": matched},
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 120,
        "cached_tokens": 0,
        "e2e_latency": 3.5,
    }


AFTER = ", 'prompt_token_ids': [5, 36, 67]"
FAKE_META = "'meta_info': {'id': 'x', 'prompt_tokens': 990000, 'cached_tokens': 0}"


@pytest.mark.parametrize("after", ["", AFTER], ids=["alone", "prompt_token_ids_after"])
@pytest.mark.parametrize(
    "matched",
    [
        "'prompt_tokens': 990000",
        "'first_token_latency': 0.0001, 'cached_tokens': 999999",
        FAKE_META,
    ],
    ids=["a_key", "two_keys", "a_whole_meta_info"],
)
def test_a_stop_string_spelling_meta_info_keys_is_text(matched: str, after: str) -> None:
    fields = parse_text_finish(_finish(_meta(matched), after))
    assert (fields["prompt_tokens"], fields["cached_tokens"]) == (3500, 0)
    assert fields["completion_tokens"] == 120 and fields["first_token_latency"] is None
    assert fields["rid"] == "a1" and fields["finish_type"] == "stop"


def test_an_abort_message_echoing_keys_is_text_and_still_gives_its_code() -> None:
    meta = {
        "id": "a1",
        "finish_reason": {
            "type": "abort",
            "message": "Input length (912384 tokens) exceeds the maximum allowed length; "
            "you sent {'prompt_tokens': 1, 'status_code': 200}",
            "status_code": 400,
        },
        "prompt_tokens": 912384,
        "completion_tokens": 0,
        "cached_tokens": 0,
    }
    fields = parse_text_finish(_finish(meta, AFTER))
    assert fields["prompt_tokens"] == 912384
    assert (fields["status_code"], fields["abort_reason"]) == (400, "input_too_long")


def test_a_layout_learnt_beside_a_stop_string_reads_the_next_line_the_same() -> None:
    layouts = Layouts()
    for prompt_tokens in (3500, 3600):  # learnt, then compiled
        read_text_finish(_finish(_meta("'prompt_tokens': 9", prompt_tokens)), layouts)
    fields = read_text_finish(_finish(_meta("'prompt_tokens': 9", 4100)), layouts)
    assert fields["prompt_tokens"] == 4100


# Text that spells structure: quotes of both kinds, braces, keys, numbers and escapes.
_PIECES = st.sampled_from(
    ["'", '"', "{", "}", ", ", ": ", "'prompt_tokens'", "'cached_tokens': ", "'meta_info': {"]
    + ["990000", "0.0001", "\\", "abc", " ", "'id': 'zz'", "None", "]", "["]
)
_TEXT = st.lists(_PIECES, max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    matched=_TEXT,
    prompt=_TEXT,
    answer=_TEXT,
    prompt_tokens=st.integers(0, 2_000_000),
    cached=st.integers(0, 2_000_000),
    after=st.sampled_from(["", AFTER]),
)
def test_whatever_the_user_wrote_the_engine_numbers_are_read(
    matched: str, prompt: str, answer: str, prompt_tokens: int, cached: int, after: str
) -> None:
    meta = _meta(matched, prompt_tokens) | {"cached_tokens": cached}
    fields = parse_text_finish(_finish(meta, after, prompt, answer))
    assert (fields["prompt_tokens"], fields["cached_tokens"]) == (prompt_tokens, cached)
    assert (fields["completion_tokens"], fields["e2e_latency"]) == (120, 3.5)


@pytest.mark.parametrize("case", ["stop_string_prompt_tokens", "stop_string_first_token_latency"])
def test_audit_n_honest_answers_with_look_alike_stop_strings_are_not_accused(
    case: str, tmp_path: Path
) -> None:
    """`stop_string_prompt_tokens`: a 0.5.19 fleet whose prefill pool is below the context
    (its warnings stand), an honest 3,500-token prompt; `stop_string_first_token_latency`: a
    healthy fleet, an 800,000-token prompt prefilled in 26.7 s."""
    summary = run_forensics([str(CASES / case)], tmp_path / "out", workers=1).summary
    assert summary["exposure"]["requests"] == []
    assert [f for f in summary["findings"] if f["severity"] == "critical"] == []
    assert summary["requests"]["total"] == 1  # the probe alone (the other requests cut out)
