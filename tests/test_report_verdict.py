"""The verdict a responder reads first: never a green all-clear beside critical findings.

From audit R (the 0.5.23 abort race): the HTML box was green and said "No client response was
found to carry another request's data" next to seven critical findings; nothing said that the
engine had caught those transfers, nor when the releases timed out, nor that a write landing
after a timeout leaves no mismatch behind.
"""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import jsonschema

from collector.forensics.driver import SCHEMA_PATH, verdict
from collector.forensics.report import (
    _headline,
    _verdict_shade,
    abort_signals_line,
    caught_line,
    config_gaps,
    exposure_status,
    log_zones_line,
    next_steps,
    possibly_exposed_line,
    prompts_answered,
    status_line,
)


def _summary(
    *findings: tuple[str, str],
    exposed: int = 0,
    canary: str | None = None,
    pools: tuple[tuple[str, int], ...] = (("2026-11-02T05:58:00.000Z", 900_000),),
) -> dict:
    config = [
        {"time": at, "max_total_num_tokens": pool, "prompt_capacity": pool, "kv_canary": canary}
        | {"context_len": 262_144}
        for at, pool in pools
    ]
    summary: dict[str, Any] = {
        "exposure": {
            "count": exposed,
            "requests": [],
            "first": "2026-11-02T08:00:00.000Z" if exposed else None,
            "last": "2026-11-02T10:30:19.000Z" if exposed else None,
        },
        "findings": [
            {"detector": detector, "severity": severity, "evidence": {}}
            for detector, severity in findings
        ],
        "nodes": {"prefill-0": {"role": "prefill", "config": config}},
        "requests": {"total": 40, "nodes_not_judged": [], "pd_role_missing": None},
        "input": {
            "first_time": "2026-11-02T05:58:00.000Z",
            "last_time": "2026-11-02T10:30:52.000Z",
            "dropped_by_reason": {},
        },
        "abort_signals": {
            "deferred_release_outcomes": {"timeout": 59, "completed": 3},
            "transfer_failure_lines": 198,
            "timeouts_between": ["2026-11-02T09:30:00.000Z", "2026-11-02T09:55:00.000Z"],
        },
    }
    return summary


RACE = (
    ("checksum_mismatch", "critical"),
    ("checksum_mismatch", "critical"),
    ("metadata_corruption", "critical"),
    ("deferred_release_timeouts", "critical"),
)


def test_corrupt_transfers_the_engine_caught_are_said_beside_no_exposure() -> None:
    summary = _summary(*RACE)
    said = caught_line(summary)
    assert said.startswith(
        "The engine caught 2 KV checksum mismatches and 1 metadata corruption (critical, below) "
        "and aborted those requests"
    )
    assert said in _headline(summary)
    assert caught_line(_summary(("deferred_release_timeouts", "critical"))) == ""


def test_caught_corruptions_are_told_apart_from_exposed_responses() -> None:
    """Review: beside 9 exposed responses, 17 caught corruptions were critical findings naming
    a room and a rid with no word that their clients got an error: more recipients to tell,
    as the report read. A corruption on a room that is itself exposed is not caught."""
    summary = _summary(*RACE, exposed=3)
    summary["findings"][0]["bootstrap_room"] = "41"
    summary["findings"][1]["bootstrap_room"] = "42"
    summary["exposure"]["requests"] = [{"bootstrap_room": "42"}]
    said = caught_line(summary)
    assert said.startswith(
        "Caught, not exposed: the engine caught 1 KV checksum mismatch and 1 metadata "
        "corruption (critical, below) and aborted those requests, so their own clients got an "
        "error"
    )
    assert said in _headline(summary)


def test_the_storm_findings_beside_the_abort_signals_are_named_by_kind() -> None:
    """Review: "941 transfer-failure lines were logged (2 storm findings raised)" read as a
    transfer-failure storm where both findings were deferred-release timeout storms."""
    race = _summary(*RACE, ("deferred_release_timeouts", "warning"))
    assert (
        abort_signals_line(race)
        .split(" were logged ")[1]
        .startswith("(2 deferred-release timeout storm findings raised)")
    )
    race["findings"].append({"detector": "transfer_failure_storm", "severity": "warning"})
    assert (
        "(2 deferred-release timeout storm findings and 1 transfer-failure storm finding raised)"
        in abort_signals_line(race)
    )


def test_the_verdict_box_is_green_only_with_nothing_above_info() -> None:
    assert _verdict_shade(_summary(*RACE)) == "warn"
    assert _verdict_shade(_summary(("pool_below_context", "warning"))) == "warn"
    assert _verdict_shade(_summary(*RACE, exposed=1)) == "exposed"
    assert _verdict_shade(_summary(("telemetry_anomaly", "info"))) == "ok"


def test_timeouts_are_placed_in_time_and_what_only_the_canary_shows_is_said() -> None:
    said = abort_signals_line(_summary(*RACE))
    assert said.startswith(
        "Abort-race signals: 59 deferred KV releases timed out between 2026-11-02T09:30:00.000Z "
        "and 2026-11-02T09:55:00.000Z and 198 transfer-failure lines were logged (1 "
        "deferred-release timeout storm finding raised)."
    )
    assert "only the KV canary (--kv-canary log) names those responses" in said
    # With the canary on, its violations (or their absence) are in the verdicts already.
    assert "KV canary" not in abort_signals_line(_summary(*RACE, canary="log"))
    assert "KV canary" in abort_signals_line(_summary(*RACE, canary="off"))


GAP = (("2026-11-02T05:58:00.000Z", 200_000),)
CLOSED = (*GAP, ("2026-11-02T10:25:00.000Z", 900_000))


def test_the_status_says_whether_it_was_still_happening_when_the_logs_end() -> None:
    assert status_line(_summary(exposed=3, pools=GAP)) == (
        "Not over when the logs end: the last exposed response came 33 s before the logs end, "
        "and prefill-0 still ran a pool below the context, so a prompt longer than that pool "
        "would still be answered from other requests' KV."
    )
    assert status_line(_summary(exposed=3, pools=CLOSED)) == (
        "Stopped within these logs: the last exposed response came 33 s before the logs end, "
        "and every pool gap had closed by 2026-11-02T10:25:00.000Z."
    )
    # Exposed half an hour after every gap closed: the gaps do not say why it stopped (blind
    # review 62 D4: a 0.5.19 pool raised past the context still leaks the prompts within 6
    # tokens of it); within 10 minutes, an answer to a request made before the restart.
    late = _summary(exposed=3, pools=(*GAP, ("2026-11-02T10:00:00.000Z", 900_000)))
    assert exposure_status(late)[0] == "possibly_not_over"
    assert status_line(late).startswith(
        "Possibly not over: the last exposed response came 33 s before the logs end, though "
        "every pool gap had closed by 2026-11-02T10:00:00.000Z: responses exposed after that "
        "came by a path the pools do not close"
    )
    # No pool gap: the abort race, whose signs at the end say whether it was still open
    # (review: the last exposure's age alone answered nothing); an exposure 33 s before the
    # end is one of them (blind review 34 D1).
    assert status_line(_summary(exposed=3)) == (
        "Possibly not over: the last exposed response came 33 s before the logs end, within "
        "the last 15 min of them; aborted transfers could still land on pages re-let to other "
        "requests."
    )
    race = _summary(exposed=3)
    race["abort_signals"]["timeouts_between"][1] = "2026-11-02T10:30:40.000Z"
    assert status_line(race) == (
        "Possibly not over: the last exposed response came 33 s before the logs end, and the "
        "abort race's signs go on to the end of the logs: deferred KV releases still timed out "
        "12 s before the logs end; aborted transfers could still land on pages re-let to other "
        "requests."
    )
    assert status_line(_summary(pools=GAP)) == ""  # nothing exposed, nothing to say


def test_a_stopped_over_length_leak_says_the_abort_race_may_not_have_stopped() -> None:
    """Blind review 25: "Stopped" on a fleet restarted onto 0.5.20, its own warnings saying the
    abort race was open, and deferred releases timing out after the last exposure unsaid.
    Blind review 35 D1: with the race's signs reaching the end of the logs, "stopped" was the
    word anything keyed on `verdict.status` read, while the race still exposed responses; the
    same signs with no pool gap were already "possibly not over"."""
    closed = _summary(exposed=3, pools=CLOSED)
    assert status_line(closed).endswith("every pool gap had closed by 2026-11-02T10:25:00.000Z.")
    closed["nodes"]["prefill-0"]["config"][-1]["version"] = "0.5.20"
    # Timeouts ended an hour before the end: the leak stopped, the open release is said.
    assert status_line(closed) == (
        "Stopped within these logs: the last exposed response came 33 s before the logs end, "
        "and every pool gap had closed by 2026-11-02T10:25:00.000Z. But prefill-0 (0.5.20) "
        "still ran a release open to the abort race: aborted transfers could still land on "
        "pages re-let to other requests."
    )
    assert exposure_status(closed)[0] == "stopped"  # the leak the exposures came by did stop
    # Timeouts 12 s before the end: the race goes on, whatever became of the leak.
    closed["abort_signals"]["timeouts_between"][1] = "2026-11-02T10:30:40.000Z"
    assert exposure_status(closed) == (
        "possibly_not_over",
        "Possibly not over: the last exposed response came 33 s before the logs end; the "
        "over-length leak stopped (every pool gap had closed by 2026-11-02T10:25:00.000Z), but "
        "deferred KV releases still timed out 12 s before the logs end; prefill-0 (0.5.20) "
        "still ran a release open to the abort race: aborted transfers could still land on "
        "pages re-let to other requests.",
    )


def test_a_gap_left_open_on_a_release_that_refuses_what_it_cannot_hold_is_not_still_leaking() -> (
    None
):
    """A restart onto 0.5.22 with the same small pool read as "Not over" (blind review): from
    0.5.20 the prefill refuses such a prompt for good and decode answers nothing."""
    summary = _summary(exposed=3, pools=(*GAP, ("2026-11-02T10:00:00.000Z", 200_000)))
    summary["nodes"]["prefill-0"]["config"][0]["version"] = "0.5.19"
    summary["nodes"]["prefill-0"]["config"][1]["version"] = "0.5.22"
    assert status_line(summary) == (
        "Stopped within these logs: the last exposed response came 33 s before the logs end; "
        "prefill-0 still ran a pool below the context, but refused the prompts that pool "
        "cannot hold."
    )
    (_, still) = config_gaps(summary)
    assert still.period() == (
        "from 2026-11-02T10:00:00.000Z, still in force when the logs end (on 0.5.22: such "
        "prompts are refused, not answered)"
    )
    summary["nodes"]["prefill-0"]["config"][1]["version"] = "0.5.19"  # the leak still open
    assert status_line(summary).startswith("Not over when the logs end")
    summary["nodes"]["prefill-0"]["config"][1]["version"] = None  # not known: not taken as fixed
    assert status_line(summary).startswith("Not over when the logs end")


def test_a_release_seen_refusing_for_good_closes_the_gap_though_not_read() -> None:
    """Blind review 38 D5: a restart with no snapshot telling the release; after it decode
    aborted all 21 over-length prompts prefill refused, over 7 h, and the status said "Not
    over". Decode answering none of them is what a release that refuses for good does."""
    summary = _summary(exposed=3, pools=(*GAP, ("2026-11-02T10:00:00.000Z", 200_000)))
    after = summary["nodes"]["prefill-0"]["config"][1]
    after["refusals_decoded"] = {"answered": 0, "unanswered": 21}
    assert status_line(summary).startswith("Stopped within these logs")
    (_, still) = config_gaps(summary)
    assert still.period().endswith(
        "(its release not read, but decode answered none of the 21 prompts it refused: "
        "refused, not answered)"
    )
    schema = json.loads(SCHEMA_PATH.read_text())
    point = {"$schema": schema.get("$schema"), "$defs": schema["$defs"]}
    jsonschema.validate(after, {**point, "$ref": "#/$defs/config_point"})
    # One answered: the leak is open still; two unanswered are too few to tell.
    after["refusals_decoded"] = {"answered": 1, "unanswered": 20}
    assert status_line(summary).startswith("Not over when the logs end")
    after["refusals_decoded"] = {"answered": 0, "unanswered": 2}
    assert status_line(summary).startswith("Not over when the logs end")


def test_next_steps_follow_what_was_found() -> None:
    incident = _summary(("unsafe_engine_version", "critical"), exposed=3, pools=GAP)
    incident["nodes"]["prefill-0"]["config"][-1]["version"] = "0.5.19"
    restarted = copy.deepcopy(incident)
    incident = next_steps(incident)
    assert incident[0].startswith("Tell the owners of the 3 exposed responses")
    assert incident[1].startswith("Cap --context-length at or below the pool of prefill-0")
    assert incident[2].startswith("Upgrade SGLang: 0.5.20 closes the over-length leak")
    assert incident[-1].startswith("Test content, not status")
    # Restarted on a release the policy passes: no upgrade, whatever it ran before.
    restarted["nodes"]["prefill-0"]["config"][-1]["version"] = "0.5.22"
    assert not any(step.startswith("Upgrade") for step in next_steps(restarted))
    # The abort race caught by a checksum that is on: find the aborts, not turn it on.
    race = next_steps(_summary(*RACE))
    assert len(race) == 1 and race[0].startswith("Find what aborts transfers mid-flight")
    assert next_steps(_summary(("checksum_unverified", "warning")))[0].startswith(
        "Run the KV checksum on both sides"
    )
    # A gap closed before the logs end needs no cap; nothing found, nothing to do.
    assert not any(step.startswith("Cap") for step in next_steps(_summary(exposed=1, pools=CLOSED)))
    assert next_steps(_summary(("telemetry_anomaly", "info"))) == []


def test_next_steps_of_an_abort_race_found_by_the_canary() -> None:
    """Review: the abort race's report advised running the canary that had named its 9
    responses, and the over-length content test in a deployment whose pool held every prompt;
    the 14 answered responses the canary could not tell apart went unmentioned."""
    race = _summary(*RACE, ("kv_canary_violation", "critical"), exposed=9, canary="log")
    race["exposure"]["requests"] = [{"bootstrap_room": "7", "evidence": ["kv_canary_violation"]}]
    race["exposure"]["possible"] = {"groups": 10, "responses": 14}
    steps = next_steps(race)
    assert steps[0].startswith("Tell the owners of the 9 exposed responses")
    assert steps[1].startswith('Check the 14 answered responses under "Possibly hit"')
    assert steps[2] == (
        "Find what aborts transfers mid-flight (load balancer and client timeouts) and raise "
        "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE_TIMEOUT to 60-120 s."
    )
    assert len(steps) == 3  # no over-length content test: no response came that way
    race["nodes"]["prefill-0"]["config"][-1]["kv_canary"] = None
    race["findings"] = race["findings"][:-1]
    assert next_steps(race)[2].endswith(
        "and run --kv-canary log to name responses built on late writes."
    )
    race["exposure"]["requests"][0]["evidence"] = ["rejected_then_served"]
    assert next_steps(race)[-1].startswith("Test content, not status")


def test_a_longer_release_timeout_is_advised_only_where_releases_timed_out() -> None:
    """Review 34 premature_ack_nocanary: 0.5.21 Mooncake acked failed sends as drained, no
    release timed out, and the advice was to raise the release timeout, which holds nothing
    there; the upgrade is what helps, and it is the step before."""
    storm = _summary(("transfer_failure_storm", "warning"))
    storm["abort_signals"]["deferred_release_outcomes"] = {}
    assert next_steps(storm)[-1] == (
        "Find what aborts transfers mid-flight (load balancer and client timeouts), and run "
        "--kv-canary log to name responses built on late writes."
    )
    storm["abort_signals"]["deferred_release_counted"] = {"timeout": 3}
    assert "RELEASE_TIMEOUT to 60-120 s" in next_steps(storm)[-1]


def test_the_count_of_findings_says_how_many_name_the_exposed_responses() -> None:
    """447 critical findings for 145 responses read as three times the harm (audit R)."""
    summary = _summary(*RACE, exposed=2)
    for finding in summary["findings"][:3]:  # two detectors on one response, one on the other
        finding["exposure"] = True
    assert (
        "Findings: 4 critical (3 of them name the 2 exposed responses, one for each detector "
        "that names it), 0 warning, 0 info." in _headline(summary)
    )
    assert "Findings: 4 critical, 0 warning, 0 info." in _headline(_summary(*RACE))
    # One finding each: no detectors to count (blind review 9b).
    summary["findings"][1]["exposure"] = False
    assert "(2 of them name the 2 exposed responses, one each)" in _headline(summary)[-1]


def test_the_count_of_info_findings_says_which_detectors_raised_them() -> None:
    """ "579 info" alone left the demo's reader wondering what they were (review)."""
    summary = _summary(
        ("telemetry_anomaly", "info"),
        ("checksum_unverified", "info"),
        ("telemetry_anomaly", "info"),
        ("pool_below_context", "critical"),
    )
    assert (
        "Findings: 1 critical, 0 warning, 3 info (2 telemetry_anomaly, 1 checksum_unverified)."
        in _headline(summary)
    )


def test_an_all_clear_says_how_much_it_covers() -> None:
    """Audit R: a healthy fleet's all-clear never said it judged 17,724 requests on 5 nodes."""
    assert (
        "No client response was found to carry another request's data (40 requests judged "
        "on 1 node)." in _headline(_summary())
    )


def test_the_abort_signals_say_failed_releases_and_what_only_the_counters_counted() -> None:
    """Logs at ERROR show no timeout (a WARNING): "0 deferred KV releases timed out" sat beside
    a storm found in decode's counters, and 40 failed releases were not said (blind review)."""
    summary = _summary(("deferred_release_timeouts", "warning"))
    signals = summary["abort_signals"]
    signals.update(
        deferred_release_outcomes={"error": 40},
        transfer_failure_lines=0,
        timeouts_between=None,
        deferred_release_counted={"timeout": 150, "error": 12},
    )
    assert abort_signals_line(summary).startswith(
        "Abort-race signals: 0 deferred KV releases timed out, 40 failed, decode's /metrics "
        "counters counted 150 timeouts, and 0 transfer-failure lines were logged (1 "
        "deferred-release timeout storm finding raised)."
    )
    signals["deferred_release_counted"] = {"timeout": 0, "error": 40}  # no more than logged
    assert abort_signals_line(summary).startswith(
        "Abort-race signals: 0 deferred KV releases timed out, 40 failed and 0 transfer-failure "
        "lines were logged (1 "
    )


def test_a_zone_read_as_utc_by_assumption_is_said() -> None:
    summary = _summary()
    assert log_zones_line(summary) == ""
    summary["input"]["log_zone_unknown"] = ["decode-0", "prefill-0"]
    assert log_zones_line(summary) == (
        "The log stamps of decode-0 and prefill-0 carry no zone, and no UTC stamp in their lines "
        "(time stats, metrics stamps) tells it: they were read as UTC; on hosts set to another "
        "zone every time from them is off by its offset."
    )


def test_a_zone_set_against_other_nodes_is_said_with_whom() -> None:
    summary = _summary()
    summary["input"]["log_utc_offsets"] = {"decode-0": ["+02:00"], "decode-1": ["+03:00"]}
    summary["input"]["log_zone_aligned"] = {
        "decode-0": {"offset": "+02:00", "against": ["prefill-0"], "against_known": False}
    }
    summary["input"]["log_zone_unknown"] = ["prefill-0"]
    line = log_zones_line(summary)
    # decode-1's zone was told by its own stamps; decode-0's by prefill-0's clock, itself
    # assumed UTC: three different claims, each said once.
    assert line.startswith(
        "Log stamps of decode-1 in UTC+03:00 (the UTC stamps in their own request lines say so)"
    )
    assert (
        "The log stamps of decode-0 carry no zone; for the same requests (the lines both logged "
        "of the same rooms or rids: receipts, refusals, time stats, finishes) they read +02:00 "
        "from those of prefill-0 (read as UTC), and were moved by that." in line
    )
    assert line.endswith("every time from them is off by its offset.")
    assert line.count("decode-0") == 1
    summary["input"]["log_zone_aligned"]["decode-0"]["against_known"] = True
    assert "from those of prefill-0 (UTC)" in log_zones_line(summary)
    summary["input"]["log_zone_aligned"]["decode-2"] = {
        "offset": "+00:00", "against": ["prefill-0"], "against_known": True
    }  # fmt: skip
    assert (
        "The log stamps of decode-2 carry no zone; for the same requests (the lines both logged "
        "of the same rooms or rids: receipts, refusals, time stats, finishes) they agree with "
        "those of prefill-0 (UTC), and are UTC."
    ) in log_zones_line(summary)
    summary["input"]["log_zone_aligned"] = {
        f"decode-{i}": {"offset": "-05:00", "against": [f"prefill-{i}"], "against_known": False}
        for i in range(2)
    }  # each met its own prefill node: one sentence for the move
    assert (
        "The log stamps of decode-0 and decode-1 carry no zone; for the same requests (the "
        "lines both logged of the same rooms or rids: receipts, refusals, time stats, "
        "finishes) they read -05:00 from those of prefill-0 and prefill-1 (read as UTC), and "
        "were moved by that."
    ) in log_zones_line(summary)
    # Set in turn (blind review 28a): prefill-0 against decode-0, itself just set; the node
    # is not named among those its own clock was read from.
    moved = {"offset": "+02:00", "against_known": True}
    summary["input"]["log_zone_aligned"] = {
        "decode-0": {**moved, "against": ["prefill-1"]},
        "prefill-0": {**moved, "against": ["decode-0", "decode-1"]},
    }
    assert (
        "The log stamps of decode-0 and prefill-0 carry no zone; for the same requests (the "
        "lines both logged of the same rooms or rids: receipts, refusals, time stats, "
        "finishes) they read +02:00 from those of decode-1 and prefill-1 (UTC), and were "
        "moved by that."
    ) in log_zones_line(summary)


def test_a_room_numbered_again_holds_another_prompt_not_parallel_samples() -> None:
    """Blind review 12g: two exposed answers four hours apart in one room (a router numbering
    rooms itself) were said to answer one prompt by parallel sampling."""

    def exposed(rid: str, prompt: int) -> dict[str, Any]:
        return {"rid": rid, "bootstrap_room": "42", "prompt_tokens": prompt}

    reused = {"count": 2, "requests": [exposed("a-1", 900_000), exposed("b-2", 950_000)]}
    assert prompts_answered(reused) == ""
    sampled = {"count": 3, "requests": [exposed(f"s{k}", 900_000) for k in range(3)]}
    assert prompts_answered(sampled) == " (answering 1 prompt: parallel sampling)"


GAP_CONFIG = {
    "time": "2026-11-02T05:58:00.000Z",
    "max_total_num_tokens": 200_000,
    "prompt_capacity": 200_000,
    "context_len": 262_144,
}


def test_a_decode_pool_below_the_context_does_not_keep_the_leak_open() -> None:
    """Blind review 20: after the prefill's pool was raised, decode-0's 900k pool (context
    1,048,576) read as "Not over ... a prompt longer than that pool would still be answered
    from other requests' KV". Decode aborts such a prompt itself (reference §2.8, "PD decode
    pool too small": 400); the leak's path is the prefill's refusal."""
    summary = _summary(exposed=3, pools=CLOSED)
    summary["nodes"]["decode-0"] = {"role": "decode", "config": [dict(GAP_CONFIG)]}
    assert status_line(summary) == (
        "Stopped within these logs: the last exposed response came 33 s before the logs end; "
        "decode-0 still ran a pool below the context, but refused the prompts that pool "
        "cannot hold."
    )
    (still,) = [gap for gap in config_gaps(summary) if gap.node == "decode-0"]
    assert still.period() == "from 2026-11-02T05:58:00.000Z, still in force when the logs end"
    summary["nodes"]["decode-0"]["role"] = "prefill"  # the same gap on a prefill node is open
    assert status_line(summary).startswith("Not over when the logs end")


def _race(version: str = "0.5.22", *, canary: tuple[str | None, ...] = ("log",)) -> dict:
    """An abort race's run on prefill-0 and decode-0, no pool gap: 3 exposed responses up to
    09:00, timeouts 08:10..09:05 logged on decode-0, the logs to 10:30:52 (blind review 34)."""
    summary = _summary(*RACE, exposed=3)
    summary["exposure"]["last"] = "2026-11-02T09:00:00.000Z"
    times = ("2026-11-02T05:58:00.000Z", "2026-11-02T09:30:00.000Z")
    summary["nodes"] = {
        node: {
            "role": role,
            "last_read": "2026-11-02T10:30:52.000Z",
            "config": [
                {"time": at, "version": version, "transfer_backend": "mooncake", "kv_canary": mode}
                for at, mode in zip(times, canary, strict=False)
            ],
        }
        for node, role in (("decode-0", "decode"), ("prefill-0", "prefill"))
    }
    summary["abort_signals"]["timeouts_between"] = [
        "2026-11-02T08:10:00.000Z",
        "2026-11-02T09:05:00.000Z",
    ]
    summary["abort_signals"]["seen_by_node"] = {
        "timeout": {"decode-0": ["2026-11-02T08:10:00.000Z", "2026-11-02T09:05:00.000Z"]}
    }
    return summary


def test_a_storm_ended_long_before_the_end_on_a_fixed_release_is_stopped() -> None:
    """Blind review 34 D1: a storm ended at 06:50, the fleet on 0.5.22 since 07:05, the logs to
    08:30, read "Possibly not over ... but deferred KV releases still timed out 1 h 39 min
    before the logs end": a timeout after the last exposure, however long ago, kept it open."""
    assert exposure_status(_race()) == (
        "stopped",
        "Stopped within these logs: the last exposed response came 1 h 30 min before the logs "
        "end; the abort race's last sign, a deferred KV release timing out, came 1 h 25 min "
        "before the logs end, and every PD node last ran a release that closes the abort race: "
        "decode-0 and prefill-0 (0.5.22).",
    )
    # Ended as long ago, on a release still open to it: a hedge that says exactly that.
    status, said = exposure_status(_race("0.5.20"))
    assert status == "possibly_not_over"
    assert said.endswith(
        "came 1 h 25 min before the logs end, but decode-0 and prefill-0 (0.5.20) still ran a "
        "release open to the abort race, so the next transfer aborted mid-flight can land on "
        "pages re-let to other requests."
    )
    # No release read: only the ages are known, and it says so.
    status, said = exposure_status(_race("unknown"))
    assert status == "last_seen" and said.endswith(
        "but no release was read for decode-0 and prefill-0: whether it closes the abort race "
        "is not known from these logs."
    )


def test_a_storm_whose_timeouts_run_to_the_end_is_possibly_not_over() -> None:
    """Fixed release or not, timeouts in the final stretch of the logs keep the race open."""
    race = _race()
    race["abort_signals"]["seen_by_node"]["timeout"]["decode-0"][1] = "2026-11-02T10:28:00.000Z"
    status, said = exposure_status(race)
    assert status == "possibly_not_over"
    assert "deferred KV releases still timed out 2 min 52 s before the logs end" in said
    # A decode whose log ends mid-storm tells nothing of it since (cut_decode_only).
    race = _race()
    race["nodes"]["decode-0"]["last_read"] = "2026-11-02T09:05:30.000Z"
    status, said = exposure_status(race)
    assert status == "possibly_not_over"
    assert (
        "deferred KV releases still timed out 30 s before decode-0's logs end "
        "(2026-11-02T09:05:30.000Z), and nothing read tells of it since" in said
    )


def test_timeouts_only_the_counters_saw_to_the_end_are_possibly_not_over() -> None:
    """Blind review 34 D2 (dlines_missing_0522): the timeout lines filtered out, decode's
    counters counting 228 timeouts to the end, and the status gave the last exposure's age."""
    race = _race()
    race["abort_signals"]["timeouts_between"] = None
    race["abort_signals"]["seen_by_node"] = {
        "counted": {"decode-0": ["2026-11-02T08:20:00.000Z", "2026-11-02T10:30:00.000Z"]}
    }
    status, said = exposure_status(race)
    assert status == "possibly_not_over"
    assert "decode's release counters still counted timeouts 52 s before the logs end" in said
    # So do canary violations and answered possibly-hit responses with no timeout at all.
    race["abort_signals"]["seen_by_node"] = {}
    race["findings"] = [
        {
            "detector": "kv_canary_violation",
            "severity": "critical",
            "time": "2026-11-02T10:30:01.000Z",
            "node": "decode-0",
            "evidence": {},
        }
    ]
    assert exposure_status(race)[0] == "possibly_not_over"


def test_a_canary_turned_on_only_after_an_upgrade_keeps_its_caveat_for_before() -> None:
    """Blind review 34 D7: a 0.5.19 storm ran with no canary and the canary came on with the
    upgrade; the caveat and the advice went, as if the canary had covered it."""
    race = _race("0.5.22", canary=(None, "log"))
    said = abort_signals_line(race)
    assert said.endswith(
        "only the KV canary (--kv-canary log) names those responses, and it was off on "
        "decode-0 until 2026-11-02T09:30:00.000Z: responses exposed then cannot be named."
    )
    assert next_steps(race)[-1].endswith(
        "and keep --kv-canary log on: it was off on decode-0 until 2026-11-02T09:30:00.000Z, "
        "so any response built on a late write then cannot be named from these logs."
    )
    # Late writes land in decode's pages: a prefill that ran without it is no caveat when the
    # decode nodes the signs came on ran it (blind review 35 D3, another deployment's nodes).
    prefill_off = _race("0.5.22")
    prefill_off["nodes"]["prefill-0"]["config"][0]["kv_canary"] = None
    assert "KV canary" not in abort_signals_line(prefill_off)
    # On from the start: nothing to add; off at the end: run it.
    assert "KV canary" not in abort_signals_line(_race())
    assert next_steps(_race("0.5.22", canary=("log", None)))[-1].endswith(
        "and run --kv-canary log to name responses built on late writes."
    )


def test_an_all_clear_run_with_the_canary_off_claims_no_exposed_response() -> None:
    """Blind review: a healthy run, one deferred-release timeout, the canary off on decode-0,
    nothing exposed, said "responses exposed then cannot be named", which read as if some
    had been. With none found it is a condition; with some it still says they were."""
    clear = _race("0.5.22", canary=(None, "log"))
    clear["findings"] = []
    clear["exposure"] = {"count": 0, "requests": [], "first": None, "last": None}
    clear["abort_signals"] = {
        "deferred_release_outcomes": {"timeout": 1, "completed": 40},
        "transfer_failure_lines": 14,
        "timeouts_between": ["2026-11-02T08:33:34.000Z", "2026-11-02T08:33:34.000Z"],
        "seen_by_node": {
            "timeout": {"decode-0": ["2026-11-02T08:33:34.000Z", "2026-11-02T08:33:34.000Z"]}
        },
    }
    assert verdict(clear)["outcome"] == "none_found"
    said = abort_signals_line(clear)
    assert "exposed" not in said and "no storm finding" in said
    assert "1 deferred KV release timed out at 2026-11-02T08:33:34.000Z" in said
    assert said.endswith(
        "only the KV canary (--kv-canary log) names those responses, and it was off on "
        "decode-0 until 2026-11-02T09:30:00.000Z: any response such a write reached then "
        "could not be named."
    )
    clear["exposure"]["count"] = 2
    assert abort_signals_line(clear).endswith(": responses exposed then cannot be named.")


def _unwatched_storm(canary: tuple[str | None, ...], **storm: Any) -> dict:
    """`_race` with nothing exposed and a timeout storm of decode-0 from 08:10 to 09:05."""
    race = _race("0.5.21", canary=canary)
    race["exposure"] = {"count": 0, "requests": [], "first": None, "last": None}
    race["findings"] = [
        {
            "detector": "deferred_release_timeouts",
            "severity": "critical",
            "time": "2026-11-02T08:15:00.000Z",
            "node": "decode-0",
            "evidence": {"storm": storm or {"start": "2026-11-02T08:10:00.000Z"}},
        }
    ]
    return race


def test_a_storm_no_canary_watched_is_no_all_clear() -> None:
    """Blind review 34 D8: timeout storms with the canary off (4 to 54 responses truly
    exposed) gave `none_found`, and `--fail-on exposure` passed them."""
    unwatched = verdict(_unwatched_storm((None,)))
    assert unwatched["outcome"] == "not_judged"
    assert unwatched["said"].startswith(
        "a deferred-release timeout storm came with the KV canary off on decode-0:"
    )
    assert "can be neither named nor ruled out" in unwatched["said"]
    # The canary watched it: its silence is the answer.
    assert verdict(_unwatched_storm(("log",)))["outcome"] == "none_found"
    # Turned on at 09:30, after a storm that ended at 09:05: not watched; on before it began
    # (a storm from 09:40), watched.
    late = _unwatched_storm(
        (None, "log"), start="2026-11-02T08:10:00.000Z", end="2026-11-02T09:05:00.000Z"
    )
    assert verdict(late)["outcome"] == "not_judged"
    assert "until 2026-11-02T09:30:00.000Z" in verdict(late)["said"]
    after = _unwatched_storm(
        (None, "log"), start="2026-11-02T09:40:00.000Z", end="2026-11-02T10:00:00.000Z"
    )
    after["abort_signals"]["seen_by_node"]["timeout"]["decode-0"] = [
        "2026-11-02T09:40:00.000Z",
        "2026-11-02T10:00:00.000Z",
    ]
    assert verdict(after)["outcome"] == "none_found"
    # Off on prefill only: late writes land in decode's pages, which the canary watched.
    prefill_off = _unwatched_storm(("log",))
    prefill_off["nodes"]["prefill-0"]["config"][0]["kv_canary"] = None
    assert verdict(prefill_off)["outcome"] == "none_found"
    # No configuration read: the canary is not known to be off, only not known to be on.
    unknown = _unwatched_storm(("log",))
    for info in unknown["nodes"].values():
        info["config"] = []
    assert verdict(unknown)["said"].startswith(
        "a deferred-release timeout storm came with no KV canary read to be on:"
    )
    # Its mode not read, but decode-0 logged a canary violation: it ran the canary (blind
    # review 65 D2: "the KV canary off on decode-0" beside two of its violations).
    seen_on = _unwatched_storm((None,))
    seen_on["findings"].append(
        {"detector": "kv_canary_violation", "severity": "critical", "node": "decode-0"}
    )
    assert "the KV canary off" not in verdict(seen_on)["said"]
    stated_off = _unwatched_storm(("none",))
    stated_off["findings"].append(dict(seen_on["findings"][-1]))
    assert "the KV canary off on decode-0" in verdict(stated_off)["said"]
    # Timeouts below the storm's floor (no finding above info) keep the verdict.
    lone = _unwatched_storm((None,))
    lone["findings"][0]["severity"] = "info"
    assert verdict(lone)["outcome"] == "none_found"


def test_the_unjudged_storm_names_the_decode_nodes_it_was_on() -> None:
    """Blind review 45 D2: a decode with two lone timeouts at 05:59 and 06:30, hours before
    decode-0's storm, was named among the nodes whose responses cannot be cleared."""
    run = _unwatched_storm((None,), start="2026-11-02T08:10:00.000Z", nodes=["decode-0"])
    run["nodes"]["decode-1"] = copy.deepcopy(run["nodes"]["decode-0"])
    run["abort_signals"]["seen_by_node"]["timeout"]["decode-1"] = [
        "2026-11-02T05:59:00.000Z",
        "2026-11-02T06:30:00.000Z",
    ]
    said = verdict(run)["said"]
    assert said.startswith(
        "a deferred-release timeout storm came with the KV canary off on decode-0:"
    )
    # A storm that names no node keeps every decode its signs name.
    del run["findings"][0]["evidence"]["storm"]["nodes"]
    run["findings"][0]["node"] = None
    assert "off on decode-0 and decode-1:" in verdict(run)["said"]


def test_exposures_named_beside_a_storm_no_canary_watched_are_a_floor() -> None:
    """Blind review 35 D2: the leak's 11 responses named, 55 more built on late writes in a
    storm decode ran without the canary, and only a caveat in prose said the list was short."""
    floor = _unwatched_storm((None,))
    floor["exposure"].update(count=3, last="2026-11-02T09:00:00.000Z")
    said = verdict(floor)
    assert said["outcome"] == "exposed"
    assert said["unnamed"].startswith("a deferred-release timeout storm came with the KV canary")
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.validate(said, schema["properties"]["verdict"])
    watched = _unwatched_storm(("log",))
    watched["exposure"].update(count=3, last="2026-11-02T09:00:00.000Z")
    assert "unnamed" not in verdict(watched)


def test_a_floor_is_said_where_the_exposures_are() -> None:
    """The terminal and report.md say the list is a floor beside the exposures, from
    `verdict.unnamed`, and say nothing of it when the canary watched the storm."""
    from collector.forensics.driver import ForensicsResult, print_outcome
    from collector.forensics.report import _headline

    def said(summary: dict) -> tuple[str, list[str]]:
        summary["exposure"].update(count=3, last="2026-11-02T09:00:00.000Z")
        summary["verdict"] = verdict(summary)
        summary.setdefault("outputs", {})
        summary["findings_by_severity"] = {"critical": 1}
        summary["input"].update(files=4, bytes=4_000_000, lines=40_000)
        terminal = io.StringIO()
        print_outcome(ForensicsResult(summary, {}, 1.0), terminal)
        return terminal.getvalue(), _headline(summary)

    terminal, markdown = said(_unwatched_storm((None,)))
    floor = "a deferred-release timeout storm came with the KV canary off on decode-0"
    assert f"NOT ALL NAMED: {floor}" in terminal
    assert any(line.startswith(f"Not all named: {floor}") for line in markdown)
    terminal, markdown = said(_unwatched_storm(("log",)))
    assert "NOT ALL NAMED" not in terminal
    assert not any(line.startswith("Not all named") for line in markdown)


def _violations(*in_flight: int, possible: int = 0) -> dict:
    """A run over a watched deployment whose canary found KV overwritten: one violation per
    `in_flight` (0: no request logged in flight there) and `possible` answered responses
    listed under Possibly hit."""
    summary = _summary(canary="log")
    summary["nodes"]["decode-0"] = {
        "role": "decode",
        "config": summary["nodes"]["prefill-0"]["config"],
    }
    summary["findings"] = [
        {
            "detector": "kv_canary_violation",
            "severity": "critical" if count == 1 else "warning",
            "node": "decode-0",
            "time": f"2026-11-02T09:1{at}:00.000Z",
            "evidence": {"slot_idx": at, "in_flight": count},
        }
        for at, count in enumerate(in_flight)
    ]
    summary["exposure"]["possible"] = {"groups": 1 if possible else 0, "responses": possible}
    return summary


def test_the_possibly_exposed_are_counted_once_in_the_verdict_s_words_or_on_their_own_line():
    """The verdict's canary line and a "possibly exposed" line gave the same counts, one as
    violations, the other as corruptions: two sets of requests to check, it read."""
    several = _violations(4, possible=3)
    several["verdict"] = verdict(several)
    assert "3 of those requests" in several["verdict"]["said"]
    assert possibly_exposed_line(several) == ""
    # When the verdict gives another reason first, the counts are said on their own line.
    several["verdict"] = {"outcome": "not_judged", "status": None, "said": "another reason"}
    assert possibly_exposed_line(several) == (
        "1 KV corruption hit one of several requests in flight; 3 answered responses among "
        "them are not named above (listed in the report)"
    )
    several["exposure"]["possible"] = {"groups": 0, "responses": 0}
    assert possibly_exposed_line(several) == ""


def test_a_canary_violation_whose_victim_is_not_named_is_no_all_clear() -> None:
    """Blind review 36: two critical violations, no request logged in flight on the node, and
    `none_found` passed `--fail-on exposure`. The canary proved KV overwritten; some response
    may have been built from it."""
    unseen = verdict(_violations(0, 0))
    assert unseen["outcome"] == "not_judged"
    assert unseen["said"].startswith(
        "2 KV canary violations on decode-0 (first 2026-11-02T09:10:00.000Z) found KV "
        "overwritten with no request logged in flight there:"
    )
    several = verdict(_violations(4, possible=3))
    assert several["outcome"] == "not_judged"
    # The requests are counted, not the violations (it read "4 violations ..., 3 of them").
    assert "3 of those requests were answered and are not named" in several["said"]
    # Each violation named its one victim (answered or not): that is the answer.
    assert verdict(_violations(1, 1))["outcome"] == "none_found"
    # Several in flight, none answered or each named already: nothing left to check.
    assert verdict(_violations(3, possible=0))["outcome"] == "none_found"
    # Beside named exposures, the list is a floor.
    floor = _violations(0)
    floor["exposure"].update(count=2, last="2026-11-02T09:30:00.000Z")
    said = verdict(floor)
    assert said["outcome"] == "exposed" and said["unnamed"].startswith("1 KV canary violation ")
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.validate(said, schema["properties"]["verdict"])


def test_an_exposure_near_the_end_of_its_node_s_logs_is_said_so_not_near_the_end() -> None:
    """Blind review 62 D5: "the last exposed response came 3 h 0 min before the logs end,
    within the last 15 min of them": it was near the end of its decode node's logs, which
    ended hours before the others."""
    summary = _summary(exposed=1)
    summary["exposure"].update(
        first="2026-11-02T08:00:00.000Z",
        last="2026-11-02T08:00:00.000Z",
        requests=[{"time": "2026-11-02T08:00:00.000Z", "node": "decode-0"}],
    )
    summary["nodes"]["decode-0"] = {
        "role": "decode",
        "last_read": "2026-11-02T08:05:00.000Z",
        "config": [],
    }
    word, said = exposure_status(summary)
    assert word == "possibly_not_over"
    assert "within the last" not in said
    assert (
        "the last exposed response came 2 h 30 min before the logs end, and the abort race's "
        "signs go on to the end of the logs: an exposed response came 5 min 0 s before "
        "decode-0's logs end (2026-11-02T08:05:00.000Z), and nothing read tells of it since"
    ) in said
