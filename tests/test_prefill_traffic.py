"""A prefill node whose log ends early is said replaced only when the requests show it gone."""

from __future__ import annotations

from collector.state.prefill_traffic import PrefillTraffic
from collector.state.request_record import RequestRecord, SideRecord

LAST_LINE = 10_000.0  # the old prefill's last line
OLD, NEW = "prefill-old", "prefill-new"
ANNOUNCED = {"10.0.0.1": [(0.0, OLD)], "10.0.0.2": [(LAST_LINE + 600.0, NEW)]}


def went_to(decode: str, host: str, port: int | None, when: float) -> str | None:
    """The node that had announced `host` by `when` (the first announcement before any)."""
    owners = ANNOUNCED.get(host, [])
    earlier = [node for at, node in owners if at <= when]
    return earlier[-1] if earlier else (owners[0][1] if owners else None)


def answer(at: float, *, prefill: str | None = None, host: str | None = None) -> RequestRecord:
    """A PD request decode answered at `at`, with its prefill side read on `prefill`, else
    naming `host` as its bootstrap address."""
    sides = [
        SideRecord(
            node="decode-0",
            rid=f"d{at}",
            role="decode",
            first_time=at,
            last_time=at + 2,
            finished_time=at + 2,
            has_finish=True,
            bootstrap_host=host,
            bootstrap_port=8998 if host else None,
        )
    ]
    if prefill is not None:
        sides.append(SideRecord(node=prefill, rid=f"p{at}", role="prefill", first_time=at))
    return RequestRecord(key=f"r{at}", bootstrap_room=str(int(at)), sides=sides, complete=True)


def replaced(traffic: PrefillTraffic) -> tuple[list[str], float] | None:
    return traffic.replaced(OLD, LAST_LINE, [OLD, NEW], ["decode-0"], went_to)


def fed(*records: RequestRecord) -> PrefillTraffic:
    traffic = PrefillTraffic()
    for record in records:
        traffic.note(record)
    return traffic


def test_a_node_whose_requests_went_to_another_after_its_last_line_is_replaced() -> None:
    before = [answer(LAST_LINE - 60 * k, prefill=OLD) for k in range(1, 5)]
    after = [answer(LAST_LINE + 900 + 60 * k, prefill=NEW) for k in range(4)]
    found = replaced(fed(*before, *after))
    assert found == ([NEW], (LAST_LINE + 900) // 60 * 60)  # the first minute it took one
    # By the address decode's answers name, the prefill's own lines not read (no request logs).
    named = [answer(LAST_LINE + 900 + 60 * k, host="10.0.0.2") for k in range(4)]
    assert replaced(fed(*before, *named)) == ([NEW], (LAST_LINE + 900) // 60 * 60)


def test_answers_still_naming_the_node_after_its_last_line_say_its_logs_stopped_not_it() -> None:
    after = [answer(LAST_LINE + 900 + 60 * k, prefill=NEW) for k in range(4)]
    still_old = answer(LAST_LINE + 1800, host="10.0.0.1")
    assert replaced(fed(*after)) is not None
    assert replaced(fed(*after, still_old)) is None
    # An answer naming no prefill at all: nothing says where it went.
    unplaced = answer(LAST_LINE + 1800)
    assert replaced(fed(*after, unplaced)) is None


def test_too_little_traffic_after_the_last_line_says_nothing() -> None:
    after = [answer(LAST_LINE + 900 + 60 * k, prefill=NEW) for k in range(2)]
    assert replaced(fed(*after)) is None
    # Many requests in one minute count as one minute.
    burst = [answer(LAST_LINE + 900 + k, prefill=NEW) for k in range(30)]
    assert replaced(fed(*burst)) is None


def test_an_unannounced_address_counts_only_when_first_named_after_the_last_line() -> None:
    """A new pod whose start-up lines rotated away announced nothing; an address answers named
    all along may be the old node's own, spelt another way."""
    after = [answer(LAST_LINE + 900 + 60 * k, host="10.0.0.9") for k in range(4)]
    found = replaced(fed(*after))
    assert found is not None and found[0] == ["the prefill at 10.0.0.9"]
    all_along = [answer(LAST_LINE - 600, host="10.0.0.9"), *after]
    assert replaced(fed(*all_along)) is None


def test_an_address_is_resolved_at_the_time_in_its_minute_not_the_minute_start() -> None:
    """A pod announced at one address 16 s into a minute took that minute's requests after it
    (blind review 33, a rollout keeping the pod's address)."""
    announced = LAST_LINE + 616.0
    ANNOUNCED["10.0.0.1"].append((announced, NEW))
    try:
        after = [answer(announced + 4 + 60 * k, host="10.0.0.1") for k in range(4)]
        assert replaced(fed(*after)) is not None
    finally:
        ANNOUNCED["10.0.0.1"].pop()


def test_prefill_sides_without_an_answer_say_nothing_of_where_traffic_went() -> None:
    """Decode's request lines not logged: the records are prefill sides alone, and one prefill's
    log ending while another's goes on says nothing of whether it still served."""
    alone = [
        RequestRecord(
            key=f"r{k}",
            bootstrap_room=str(k),
            sides=[
                SideRecord(node=NEW, rid=f"p{k}", role="prefill", first_time=LAST_LINE + 900 * k)
            ],
            complete=True,
        )
        for k in range(1, 5)
    ]
    assert replaced(fed(*alone)) is None


def test_an_address_named_before_by_answers_with_a_prefill_side_is_not_new() -> None:
    """A prefill whose start-up lines rotated away announced nothing and logged only its
    refusals: its address was named before its last line by the answers joined to those, and
    the honest answers after it that name it are its own, not a new pod's."""
    joined = [answer(LAST_LINE - 60 * k, prefill=OLD, host="10.0.0.9") for k in range(1, 4)]
    after = [answer(LAST_LINE + 900 + 60 * k, host="10.0.0.9") for k in range(4)]
    assert replaced(fed(*joined, *after)) is None


def test_a_node_with_a_small_share_of_the_traffic_is_not_replaced_by_a_quiet_spell() -> None:
    """Blind review 57: 2,000 prefill nodes taking three requests a day each. A node's hours
    without a request, while the others took some, said it was gone; at its share of the
    deployment's traffic it would have taken none of them anyway."""
    peers = [f"prefill-{k}" for k in range(10)]
    before = [answer(LAST_LINE - 60 * k, prefill=OLD) for k in range(1, 3)]
    before += [answer(LAST_LINE - 60 * k - 3, prefill=p) for k in range(1, 5) for p in peers]
    after = [answer(LAST_LINE + 900 + 60 * k, prefill=peers[k]) for k in range(8)]
    traffic = fed(*before, *after)
    # 8 minutes taken by others; its share before was 2 of 42 busy minutes: 0.4 expected.
    assert traffic.replaced(OLD, LAST_LINE, [OLD, *peers], ["decode-0"], went_to) is None
    # The same minutes after, the node alone before: it took them all, so it is gone.
    alone = fed(*before[:2], *after)
    found = alone.replaced(OLD, LAST_LINE, [OLD, *peers], ["decode-0"], went_to)
    assert found is not None and found[0] == sorted(peers[:8])


def test_its_own_requests_read_after_the_line_it_was_dated_by_are_no_later_traffic() -> None:
    """Blind review 62 D3: the old prefill's time stats went on three minutes past the last
    line its end was dated by, up to a watchdog's crash; counted as requests it took after its
    end, they kept it from being replaced, and the status said its pool gap was still open."""
    before = [answer(LAST_LINE - 60 * k, prefill=OLD) for k in range(1, 5)]
    own_later = [answer(LAST_LINE + 180, prefill=OLD)]
    after = [answer(LAST_LINE + 900 + 60 * k, prefill=NEW) for k in range(4)]
    found = replaced(fed(*before, *own_later, *after))
    assert found == ([NEW], (LAST_LINE + 900) // 60 * 60)
    # Taking one more after the new node began: not replaced, whatever its last line said.
    assert replaced(fed(*before, *own_later, *after, answer(LAST_LINE + 1200, prefill=OLD))) is None
