"""Event detectors: KV checksum mismatch, metadata corruption, KV canary violation."""

from __future__ import annotations

import pytest

from collector.events import Event
from detectors.checksum_mismatch import ChecksumMismatch
from detectors.kv_canary_violation import KVCanaryViolation
from detectors.metadata_corruption import MetadataCorruption
from detectors.pipeline import DetectionPipeline

T = 1_793_614_600.0


def ev(kind: str, node: str, t: float, **fields) -> Event:
    return Event(kind, node, t, f"{node}.log:1", dict(fields))


def test_every_checksum_mismatch_is_critical_and_names_its_room():
    # the peer-rank variant carries no hashes
    peer = ev(
        "checksum_mismatch",
        "decode-1",
        T + 1,
        rid="8d3f",
        bootstrap_room="42",
        expected=None,
        got=None,
        peer_rank=True,
    )
    events = [
        # sglang-telemetry.md §2.9 constructed sample
        ev(
            "checksum_mismatch",
            "decode-1",
            T,
            rid="7c2e9d0b5a4f4c1e",
            bootstrap_room="2170015846053279415",
            expected="0x5e1a03c7",
            got="0x5e1a03c6",
        ),
        peer,
        # the same room reported again by another rank: one finding
        peer,
    ]
    findings = list(DetectionPipeline(detectors=[ChecksumMismatch()]).run(events))
    assert [(f.severity, f.bootstrap_room, f.rid) for f in findings] == [
        ("critical", "2170015846053279415", "7c2e9d0b5a4f4c1e"),
        ("critical", "42", "8d3f"),
    ]
    assert "2170015846053279415" in findings[0].summary
    assert findings[0].evidence["expected"] == "0x5e1a03c7"
    assert "peer rank" in findings[1].summary
    assert not any(f.exposure for f in findings)  # decode aborted the request (HTTP 500)


def test_a_peer_ranks_line_first_still_gives_the_finding_the_hashes():
    # Ranks log in any order within the second: the one finding must carry the hashes.
    peer = ev("checksum_mismatch", "decode-1", T, rid="8d3f", bootstrap_room="42", peer_rank=True)
    hashes = ev(
        "checksum_mismatch",
        "decode-1",
        T + 1,
        rid="8d3f",
        bootstrap_room="42",
        expected="0x5e1a03c7",
        got="0x5e1a03c6",
    )
    later = ev(
        "checksum_mismatch", "decode-1", T + 60, rid="9e", bootstrap_room="43", peer_rank=True
    )
    pipeline = DetectionPipeline(detectors=[ChecksumMismatch()])
    assert pipeline.process(peer) == []  # waits for its rank with the hashes
    (finding,) = pipeline.process(hashes)
    assert finding.evidence["expected"] == "0x5e1a03c7" and finding.time == T
    assert "expected 0x5e1a03c7" in finding.summary
    # A lone peer line is reported once its wait is over (here: when time moves past it)...
    assert pipeline.process(later) == []
    (lone,) = pipeline.advance(T + 63)
    assert (lone.bootstrap_room, lone.time) == ("43", T + 60) and "peer rank" in lone.summary
    # ...or at the end of the input, and a restart in between loses nothing.
    waiting = DetectionPipeline(detectors=[ChecksumMismatch()])
    waiting.process(peer)
    restored = DetectionPipeline.from_state(waiting.to_state())
    (kept,) = restored.finish()
    assert (kept.bootstrap_room, kept.time, kept.rid) == ("42", T, "8d3f")


def test_metadata_corruption_is_critical_and_names_both_rooms():
    (finding,) = DetectionPipeline(detectors=[MetadataCorruption()]).run(
        [
            ev(
                "metadata_corruption",
                "decode-0",
                T,
                rid="r1",
                bootstrap_room="111",
                actual_room="222",
            ),
        ]
    )
    assert finding.severity == "critical" and finding.bootstrap_room == "111"
    assert "222" in finding.summary and finding.runbook == "KVWatchMetadataCorruption"


def _aborted(room: str, reason: str, t: float) -> list[Event]:
    """A request decode aborted, as its request log records it (HTTP 500, the engine's own
    message reduced to `abort_reason`): no error line of the engine among the events."""
    return [
        ev("server_args", "decode-0", T - 60, disaggregation_mode="decode"),
        ev("request_received", "decode-0", t, rid="d9", bootstrap_room=room),
        ev(
            "request_finished",
            "decode-0",
            t + 2,
            rid="d9",
            bootstrap_room=room,
            prompt_tokens=4000,
            completion_tokens=0,
            finish_type="abort",
            status_code=500,
            abort_reason=reason,
        ),
    ]


def test_a_corrupt_transfer_known_only_from_the_finish_record_is_critical_and_named():
    # Only request logs collected: the finish record's abort reason is the proof.
    for detector, reason in (
        (ChecksumMismatch(), "checksum_mismatch"),
        (MetadataCorruption(), "metadata_corruption"),
    ):
        (finding,) = DetectionPipeline(detectors=[detector]).run(_aborted("4242", reason, T))
        assert (finding.detector, finding.severity, finding.bootstrap_room, finding.rid) == (
            reason,
            "critical",
            "4242",
            "d9",
        )
        assert finding.time == T + 2 and not finding.exposure
    # Another abort reason is no corruption.
    assert not list(
        DetectionPipeline(detectors=[ChecksumMismatch(), MetadataCorruption()]).run(
            _aborted("4243", "running_timeout", T)
        )
    )


def test_the_error_line_and_the_finish_record_of_one_mismatch_are_one_finding():
    line = ev(
        "checksum_mismatch",
        "decode-0",
        T + 1,
        rid="d9",
        bootstrap_room="4242",
        expected="0x1",
        got="0x2",
    )
    events = sorted([*_aborted("4242", "checksum_mismatch", T), line], key=lambda e: e.time)
    (finding,) = DetectionPipeline(detectors=[ChecksumMismatch()]).run(events)
    assert finding.evidence["expected"] == "0x1"  # the line's, which came first


def test_canary_violations_are_critical_once_per_slot():
    violation = {
        "launch_tag": "TAIL_K_FULL",
        "fail_reason": "verify_chain_hash",
        "slot_idx": 18433,
        "position": 511,
    }
    findings = list(
        DetectionPipeline(detectors=[KVCanaryViolation()]).run(
            [
                ev("kv_canary_violation", "decode-0", T, **violation),
                ev("kv_canary_violation", "decode-0", T + 5, **violation),
                ev("kv_canary_violation", "decode-0", T + 6, **dict(violation, slot_idx=7)),
            ]
        )
    )
    pages = [f for f in findings if f.severity == "critical"]
    assert [f.evidence["slot_idx"] for f in pages] == [18433, 7]
    # Each says, once, that no request was logged in flight to name.
    unnamed = [f for f in findings if f.severity == "warning"]
    assert [(f.evidence["slot_idx"], f.evidence["in_flight"]) for f in unnamed] == [
        (18433, 0),
        (7, 0),
    ]


VIOLATION = {
    "launch_tag": "TAIL_K_FULL",
    "fail_reason": "verify_chain_hash",
    "slot_idx": 18433,
    "position": 511,
}


def _served(room: int, start: float, end: float, decode: str = "decode-0") -> list[Event]:
    """An honest request whose decode side holds KV on `decode` from `start` to `end`."""
    from detectors.examples import request

    return request(
        room, start, prompt=4000, prefill_seconds=0.5, ttft=end - start - 3.0, decode=decode
    )


def _attribute(*events: Event) -> list:
    detector = KVCanaryViolation(attribution_seconds=600.0)
    ordered = sorted(events, key=lambda e: e.time or 0.0)
    return list(DetectionPipeline(detectors=[detector]).run(ordered))


def test_a_canary_violation_names_the_only_request_in_flight_on_its_node():
    findings = _attribute(
        ev("kv_canary_violation", "decode-0", T + 50, **VIOLATION),
        # The same slot reported again while the first report waits, when room 5 is in flight.
        ev("kv_canary_violation", "decode-0", T + 95, **VIOLATION),
        *_served(5, T + 92, T + 99),
        *_served(1, T + 40, T + 90),  # holds KV on decode-0 across the violation: hit
        *_served(2, T + 45, T + 80, decode="decode-1"),  # in flight, but on another node
        *_served(3, T, T + 49.5),  # ended on decode-0 half a second before it
        *_served(4, T + 51, T + 70),  # began on decode-0 the second after it
    )
    page, named = findings  # the page at once, then the request it hit (the repeat: neither)
    assert page.severity == "critical" and page.bootstrap_room is None and page.time == T + 50
    assert named.severity == "critical" and named.exposure
    assert (named.bootstrap_room, named.rid, named.node) == ("1", "d1", "decode-0")
    assert (
        named.evidence["violation_time"] == "2026-11-02T10:17:30.000Z"
        and named.evidence["prompt_tokens"] == 4000
    )


def test_a_canary_violation_with_several_requests_in_flight_lists_them_without_naming_one():
    findings = _attribute(
        ev("kv_canary_violation", "decode-0", T + 50, **VIOLATION),
        *_served(1, T + 40, T + 90),
        # Log times are whole seconds: a side that ended at 50.7 or began at 50.5 may have
        # held KV at the violation, which happened somewhere in [50, 51).
        *_served(2, T + 20, T + 50.7),
        *_served(3, T + 50.5, T + 75),
    )
    page, listed = findings
    assert listed.severity == "warning" and not listed.exposure and listed.bootstrap_room is None
    rooms = {c["bootstrap_room"] for c in listed.evidence["candidates"]}
    assert rooms == {"1", "2", "3"} and listed.evidence["in_flight"] == 3


def test_a_canary_violation_that_hit_a_failed_request_names_it_but_exposes_nothing():
    from detectors.examples import request

    aborted = request(5, T + 40, prompt=4000, prefill_seconds=0.5, ttft=1.0)
    aborted[-1].fields.update(finish_type="abort", status_code=500, completion_tokens=0)
    page, named = _attribute(ev("kv_canary_violation", "decode-0", T + 41, **VIOLATION), *aborted)
    assert named.severity == "critical" and named.bootstrap_room == "5" and not named.exposure


def test_a_canary_violation_on_one_data_parallel_rank_names_that_rank_s_request() -> None:
    """Blind review 51 D1: with DP attention each rank has a KV pool of its own. A violation
    logged by DP2's scheduler, three requests in flight on the node, one of them DP2's (its
    time stats say so): that one was hit; the other ranks' were listed beside it, and the
    exposure went unnamed."""

    def on_rank(events: list[Event], dp: int) -> list[Event]:
        """The request's events, and decode's time stats printed by DP rank `dp`."""
        (finish,) = [e for e in events if e.kind == "request_finished" and e.node == "decode-0"]
        stats = ev(
            "request_time_stats",
            "decode-0",
            finish.time,
            rid=finish.get("rid"),
            bootstrap_room=finish.get("bootstrap_room"),
            role="decode",
        )
        stats.ranks = {"dp": dp, "tp": dp}
        return [*events, stats]

    violation = ev("kv_canary_violation", "decode-0", T + 50, **VIOLATION)
    violation.ranks = {"dp": 2, "tp": 2}
    in_flight = [on_rank(_served(room, T + 40, T + 90), room) for room in (0, 1, 2)]
    page, named = _attribute(violation, *[e for events in in_flight for e in events])
    assert named.severity == "critical" and named.exposure
    assert named.bootstrap_room == "2" and named.evidence["dp_rank"] == 2
    # Ranks not logged (no time stats' prefix): every request in flight stays a candidate.
    plain = ev("kv_canary_violation", "decode-0", T + 50, **VIOLATION)
    _, listed = _attribute(plain, *[e for room in (0, 1, 2) for e in _served(room, T + 40, T + 90)])
    assert listed.evidence["in_flight"] == 3


def test_a_raised_canary_violation_killed_its_batch_and_names_no_victim():
    """Blind review 38 D6: under `--kv-canary raise` the server died at the check, its request
    in flight was never answered, and the run said "no request logged in flight there" and
    NOT JUDGED. No response was built from the slot: the page is all there is."""
    raised = ev("kv_canary_violation", "decode-0", T + 50, **VIOLATION, raised=True)
    (page,) = _attribute(raised, *_served(1, T, T + 10))
    assert page.severity == "critical" and page.evidence["raised"] is True


def test_a_raised_sweep_violation_found_a_slot_overwritten_before_and_is_attributed():
    """Blind review 51 D4: a sweep's check finds a slot overwritten some time before it ran;
    requests may have read it and been answered since. Raised, the server died at the sweep,
    not with the batch that read it: nothing logged in flight is said, as in `log` mode (it
    was an all-clear, exit 0, where `log` mode was NOT JUDGED)."""
    sweep = {**VIOLATION, "launch_tag": "SWEEP_V_FULL"}
    raised = ev("kv_canary_violation", "decode-0", T + 50, **sweep, raised=True)
    page, unnamed = _attribute(raised, *_served(1, T, T + 10))
    assert page.severity == "critical" and unnamed.severity == "warning"
    assert unnamed.evidence["in_flight"] == 0


def test_a_canary_violation_with_nothing_logged_in_flight_says_its_victim_is_unnamed():
    page, unnamed = _attribute(
        ev("kv_canary_violation", "decode-0", T + 50, **VIOLATION), *_served(1, T, T + 10)
    )
    assert page.severity == "critical" and page.bootstrap_room is None
    # The request answered before the violation is not accused; the violation says it could
    # name no one, rather than vanishing once its attribution window passed.
    assert unnamed.severity == "warning" and unnamed.bootstrap_room is None
    assert unnamed.evidence["in_flight"] == 0 and not unnamed.exposure


def _decoding_from(room: int, start: float, forward_start: float, end: float) -> list[Event]:
    """A request holding KV on decode-0 from `start`, in the running batch from `forward_start`
    (its decode time stats say so) until `end`."""
    stats = ev(
        "request_time_stats",
        "decode-0",
        end,
        rid=f"d{room:x}",
        bootstrap_room=str(room),
        role="decode",
        input_len=4000,
        cached_input_len=0,
        output_len=100,
        forward_duration=end - forward_start,
    )
    return [*_served(room, start, end), stats]


def test_a_launch_check_cannot_have_hit_a_request_still_waiting_for_its_forward_pass():
    waiting = _decoding_from(1, T + 40, forward_start=T + 60, end=T + 90)
    running = _decoding_from(2, T + 40, forward_start=T + 45, end=T + 90)
    page, named = _attribute(
        ev("kv_canary_violation", "decode-0", T + 50, **VIOLATION), *waiting, *running
    )
    assert named.bootstrap_room == "2" and named.exposure
    # A sweep checks every protected slot, waiting requests' too: both stay candidates.
    sweep = dict(VIOLATION, launch_tag="SWEEP_K_FULL")
    page, listed = _attribute(
        ev("kv_canary_violation", "decode-0", T + 50, **sweep), *waiting, *running
    )
    assert {c["bootstrap_room"] for c in listed.evidence["candidates"]} == {"1", "2"}


def test_beyond_max_pending_the_oldest_violation_is_attributed_with_what_it_has():
    detector = KVCanaryViolation(attribution_seconds=3000.0, max_pending=1)
    stream = sorted(
        [
            *_served(1, T + 40, T + 45),
            ev("kv_canary_violation", "decode-0", T + 42, **VIOLATION),
            # Later than the ledger's wait for room 1 (its roles are unknown: the join window).
            ev("kv_canary_violation", "decode-0", T + 2000, **dict(VIOLATION, slot_idx=7)),
        ],
        key=lambda e: e.time or 0.0,
    )
    findings = list(DetectionPipeline(detectors=[detector]).run(stream))
    # The second violation pages, and settles the first at once, long before its 3000 s: room 1,
    # which had ended by then, is named. The second finds no one in flight when the stream ends.
    assert [(f.time, f.bootstrap_room, f.severity) for f in findings] == [
        (T + 42, None, "critical"),
        (T + 2000, None, "critical"),
        (T + 45, "1", "critical"),
        (T + 2000, None, "warning"),
    ]


def test_a_request_that_never_reached_the_slots_position_was_not_hit():
    from detectors.examples import request

    # The slot held token 511 of its request; this one never had more than 300 + 100 tokens.
    short = request(1, T + 40, prompt=300, prefill_seconds=0.5, ttft=47.0, completion=100)
    page, named = _attribute(
        ev("kv_canary_violation", "decode-0", T + 50, **VIOLATION),
        *short,
        *_served(2, T + 40, T + 90),
    )
    assert named.bootstrap_room == "2" and named.exposure


def test_an_error_that_echoes_the_users_words_is_no_corruption() -> None:
    # A 400 whose message quotes a user's regex naming the engine's messages is no proof:
    # only a message that opens with the engine's own words is (reference §2.9).
    from collector.sglang.request_log import abort_code

    echoed = "Invalid grammar request: req.grammar_key=('regex', '(KV checksum mismatch|x)')"
    assert abort_code(echoed) == "other"
    assert abort_code("KV checksum mismatch") == "checksum_mismatch"
    # As a finish record's meta_info gives it: the literal's quote first.
    assert abort_code("'KV checksum mismatch', 'status_code': 500") == "checksum_mismatch"
    assert abort_code("Metadata corruption detected - bootstrap_room mismatch") == (
        "metadata_corruption"
    )
    # Outside PD no KV crossed between nodes: even the engine's words name no transfer.
    unified = [
        Event(e.kind, "unified-0", e.time, e.source, {**e.fields, "bootstrap_room": None})
        for e in _aborted("4242", "checksum_mismatch", T)[1:]
    ]
    assert not list(DetectionPipeline(detectors=[ChecksumMismatch()]).run(unified))


def test_a_canary_s_named_response_is_timed_when_it_was_sent():
    """Review: the response a violation hit was listed at its finish line's whole second
    (06:19:48.000) where the engine's own stamp says 06:19:48.652, as every other detector
    times an exposed response."""
    served = _served(1, T + 40, T + 90)
    served[-1].fields["response_sent_to_client_ts"] = T + 89.652
    _, named = _attribute(ev("kv_canary_violation", "decode-0", T + 50, **VIOLATION), *served)
    assert named.exposure and named.time == pytest.approx(T + 89.652, abs=1e-6)


def test_a_finding_is_stamped_with_the_stream_time_it_was_raised_at():
    """`raised_at`: when the pipeline raised it, on the logs' clock (what `kvwatch eval` times
    detection by); the page at the violation's own second, the named response once the
    requests in flight are gathered (here: at the end of the input, the last line at T+99)."""
    served = _served(1, T + 40, T + 90)
    served[-1].fields["response_sent_to_client_ts"] = T + 89.652
    page, named = _attribute(ev("kv_canary_violation", "decode-0", T + 50, **VIOLATION), *served)
    assert page.raised_at == page.time == T + 50
    assert named.time == pytest.approx(T + 89.652, abs=1e-6) and named.raised_at == T + 90
    assert named.to_json_dict()["raised_at"] == "2026-11-02T10:18:10.000Z"  # T + 90


def _hashed(stored: str, **fields) -> dict:
    """VIOLATION as the frozen summary line gives it, with what the slot held."""
    return {**VIOLATION, "stored_chain_hash": stored, "expected_aux": "0x2fe9045c", **fields}


def test_a_slot_overwritten_again_is_a_new_violation_with_its_own_victim():
    """Blind review 34 D3: slot 0, position 40 overwritten at 07:46:20 and again, re-let, at
    07:51:51: the second waited on the first's attribution, so its victim (91404d97) was in
    neither list and its page was deduped away. Its summary stores another chain hash."""
    findings = _attribute(
        ev("kv_canary_violation", "decode-0", T + 50, **_hashed("0x00002fe9daf1beef")),
        ev("kv_canary_violation", "decode-0", T + 380, **_hashed("0x00003a11da02beef")),
        *_served(1, T + 40, T + 90),  # in flight at the first only
        *_served(2, T + 370, T + 400),  # in flight at the second only
    )
    pages = [f for f in findings if f.bootstrap_room is None]
    named = {f.bootstrap_room: f for f in findings if f.bootstrap_room is not None}
    assert [p.time for p in pages] == [T + 50, T + 380]
    assert all(p.severity == "critical" for p in pages)
    assert set(named) == {"1", "2"} and all(f.exposure for f in named.values())
    assert named["2"].evidence["stored_chain_hash"] == "0x00003a11da02beef"


def test_the_same_violation_reported_again_stays_one_whoever_is_in_flight_then():
    """Another TP rank's line, or a later sweep finding the same overwrite (the same stored
    hash, whichever check point), is no new violation: one page, attributed at the first."""
    first = _hashed("0x00002fe9daf1beef")
    findings = _attribute(
        ev("kv_canary_violation", "decode-0", T + 50, **first),
        ev("kv_canary_violation", "decode-0", T + 50, **first),  # another rank
        ev(
            "kv_canary_violation",
            "decode-0",
            T + 95,
            **dict(first, launch_tag="SWEEP_K_FULL", stored_chain_hash="0x00002FE9DAF1BEEF"),
        ),
        *_served(1, T + 40, T + 90),
        *_served(5, T + 92, T + 99),  # in flight at the sweep's re-report only
    )
    page, named = findings
    assert page.time == T + 50 and named.bootstrap_room == "1"


def test_a_hashless_line_is_told_by_slot_and_position_as_before():
    findings = _attribute(
        ev("kv_canary_violation", "decode-0", T + 50, **VIOLATION),
        ev("kv_canary_violation", "decode-0", T + 380, **VIOLATION),
        *_served(1, T + 40, T + 90),
        *_served(2, T + 370, T + 400),
    )
    assert [(f.time, f.bootstrap_room) for f in findings] == [(T + 50, None), (T + 90, "1")]
