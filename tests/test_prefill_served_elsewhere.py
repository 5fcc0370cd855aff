"""A decode node served by a prefill node whose logs are not in the input.

Two deployments of one model saved side by side, one without its prefill's logs: a decode answer
with no prefill side read was judged against the largest prefill pool of its model, the other
deployment's, and 51 honest long answers were named exposed (blind review 8a v46). The prefill
read logs every request's room and meets the other decode's; none of this decode's rooms ever
meets it, so its prefill is one not read: its long answers are warnings, never exposures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collector.forensics.driver import run_forensics
from tests.engine_lines import finish_line, prefill_start, refusal_line, server_args

DAY = "2026-08-27"
POOL = 681_280
A_HOST, B_HOST = "prefill-a.gpu.internal", "prefill-b.gpu.internal"


def _rid(room: int) -> str:
    return f"{room:032x}"


def _finish(
    hour: int, minute: int, room: int, prompt: int, tokens: int, kind: str, host: str
) -> str:
    e2e = 40.0 if kind == "honest-long" else 2.0
    at = f"{DAY} {hour:02d}:{minute:02d}:30"
    return finish_line(at, _rid(room), room, prompt, tokens=tokens, host=host, e2e=e2e)


def _refusal(hour: int, minute: int, room: int, prompt: int) -> str:
    return refusal_line(f"{DAY} {hour:02d}:{minute:02d}:29", _rid(room), prompt, POOL)


def _case(root: Path, b_host: str) -> tuple[set[str], set[str]]:
    """dep-a: prefill and decode, two exposed answers among honest ones; dep-b: decode only,
    its first answer and two more honest 800k-token prompts its own prefill took."""
    # Hosts by name, as DNS gives them: decode's host names no address to rule nodes out by.
    a_prefill = [server_args(DAY, "prefill"), prefill_start(DAY, A_HOST, POOL)]
    a_decode = [server_args(DAY, "decode")]
    b_decode = [server_args(DAY, "decode")]
    exposed, b_long = set(), set()
    for n in range(12):
        hour, room = 1 + n, 1000 + n
        if n in (4, 9):
            a_prefill.append(_refusal(hour, 0, room, 790_000 + n))
            a_decode.append(_finish(hour, 0, room, 790_000 + n, 300, "exposed", A_HOST))
            exposed.add(str(room))
        else:
            a_prefill.append(_finish(hour, 0, room, 20_000 + n, 1, "stub", A_HOST))
            a_decode.append(_finish(hour, 0, room, 20_000 + n, 300, "honest", A_HOST))
        b_room = 2000 + n
        long = n in (0, 6, 10)
        b_decode.append(
            _finish(
                hour,
                30,
                b_room,
                800_000 + n if long else 20_000 + n,
                300,
                "honest-long" if long else "honest",
                b_host,
            )
        )
        if long:
            b_long.add(str(b_room))
    for folder, node, lines in (
        ("dep-a", "prefill-0", a_prefill),
        ("dep-a", "decode-0", a_decode),
        ("dep-b", "decode-0", b_decode),
    ):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / f"{node}.log").write_text("".join(lines))
    return exposed, b_long


@pytest.mark.parametrize("b_host", [A_HOST, B_HOST])
def test_a_decode_none_of_whose_rooms_met_the_prefill_read_is_served_elsewhere(
    tmp_path: Path, b_host: str
) -> None:
    """`b_host`: the address dep-b's decode reaches its own prefill at; two clusters may reach
    theirs at the same one (then the rooms alone tell), or at one no answer met dep-a's at."""
    exposed, b_long = _case(tmp_path / "case", b_host)
    summary: dict[str, Any] = run_forensics([str(tmp_path / "case")], tmp_path / "out").summary
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == exposed
    warned = {
        f["bootstrap_room"]: f
        for f in summary["findings"]
        if f["detector"] == "over_length_answered" and f["bootstrap_room"] in b_long
    }
    assert set(warned) == b_long  # the first of them too, before the node was told apart
    assert all(f["severity"] == "warning" and not f["exposure"] for f in warned.values())
    basis = "prefill node not read" if b_host == A_HOST else "prefill host not read"
    assert all(f["evidence"]["pool_basis"] == basis for f in warned.values())


def test_a_prefill_that_logs_only_its_refusals_serves_every_decode_node(tmp_path: Path) -> None:
    """Refusal lines name a rid, never a room: a prefill logging nothing else meets no decode
    node's rooms, and one decode node whose answers met its refusals says nothing of another's
    (blind review 8c E12: an exposure judged a warning, "served by a prefill not read")."""
    # The prefill announces the address it listens on, which decode's host never names.
    prefill = [server_args(DAY, "prefill"), prefill_start(DAY, "0.0.0.0", POOL)]
    joined, apart = [server_args(DAY, "decode")], [server_args(DAY, "decode")]
    exposed = set()
    for n in range(8):
        hour = 1 + n
        prefill.append(_refusal(hour, 0, 1000 + n, 790_000 + n))
        joined.append(_finish(hour, 0, 1000 + n, 790_000 + n, 300, "exposed", "10.0.0.11"))
        # Its request lines kept in a file of their own: no refusal joins its rid.
        apart.append(_finish(hour, 30, 2000 + n, 20_000 + n, 300, "honest", "10.0.0.11"))
        if n in (5, 7):
            apart.append(_finish(hour, 40, 3000 + n, 800_000 + n, 300, "exposed", "10.0.0.11"))
        exposed |= {str(1000 + n)} | ({str(3000 + n)} if n in (5, 7) else set())
    case = tmp_path / "case"
    case.mkdir()
    for node, lines in (("prefill-0", prefill), ("decode-0", joined), ("decode-1", apart)):
        (case / f"{node}.log").write_text("".join(lines))
    summary: dict[str, Any] = run_forensics([str(case)], tmp_path / "out").summary
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == exposed


def test_answers_naming_a_host_the_prefill_read_is_not_reached_at_are_not_judged_by_it(
    tmp_path: Path,
) -> None:
    """One decode, served by two prefill nodes, one's logs missing; both announce `0.0.0.0`.
    The answers that met prefill-0's request lines name 10.0.0.11: those naming 10.0.0.12
    went elsewhere, and prefill-0's pool says nothing of them (blind review 10b h56: 4 honest
    answers named exposed)."""
    prefill = [server_args(DAY, "prefill"), prefill_start(DAY, "0.0.0.0", POOL)]
    decode = [server_args(DAY, "decode")]
    exposed, elsewhere = set(), set()
    for n in range(10):
        hour, room = 1 + n, 1000 + n
        if n in (3, 7):
            prefill.append(_refusal(hour, 0, room, 790_000 + n))
            decode.append(_finish(hour, 0, room, 790_000 + n, 300, "exposed", "10.0.0.11"))
            exposed.add(str(room))
        else:
            prefill.append(_finish(hour, 0, room, 20_000 + n, 1, "stub", "10.0.0.11"))
            decode.append(_finish(hour, 0, room, 20_000 + n, 300, "honest", "10.0.0.11"))
        if n in (5, 8):  # a 900k prompt prefilled on the node whose logs are missing
            decode.append(_finish(hour, 30, 2000 + n, 900_000, 300, "honest-long", "10.0.0.12"))
            elsewhere.add(str(2000 + n))
    case = tmp_path / "case"
    case.mkdir()
    for node, lines in (("prefill-0", prefill), ("decode-0", decode)):
        (case / f"{node}.log").write_text("".join(lines))
    summary: dict[str, Any] = run_forensics([str(case)], tmp_path / "out").summary
    assert {r["bootstrap_room"] for r in summary["exposure"]["requests"]} == exposed
    warned = [
        f
        for f in summary["findings"]
        if f["bootstrap_room"] in elsewhere and f["detector"] == "over_length_answered"
    ]
    assert {f["bootstrap_room"] for f in warned} == elsewhere
    assert all(f["severity"] == "warning" and not f["exposure"] for f in warned)
    assert summary["requests"]["prefill_host_unread"] == len(elsewhere)
