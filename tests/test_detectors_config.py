"""Configuration detectors: pool below context, unsafe engine version, unverified checksum."""

from __future__ import annotations

import pytest

from collector.audit.policy import AuditPolicy
from collector.events import Event
from detectors.base import Detector
from detectors.checksum_unverified import ChecksumUnverified
from detectors.engine_version import (
    VersionPolicy,
    holds_aborted_pages,
    is_at_least,
    parse_version,
    refuses_for_good,
    version_verdict,
)
from detectors.pipeline import DetectionPipeline
from detectors.pool_below_context import PoolBelowContext
from detectors.unsafe_engine_version import UnsafeEngineVersion

T = 1_788_500_000.0
CONTEXT = 1_048_576


def ev(kind: str, node: str, t: float, **fields) -> Event:
    return Event(kind, node, t, f"{node}.log", dict(fields))


def args(node: str, t: float, role: str | None, **extra) -> Event:
    fields = {"disaggregation_mode": role, "transfer_backend": "mooncake", "kv_checksum": False}
    fields.update(extra)
    return ev("server_args", node, t, **fields)


def capacity(node: str, t: float, pool: int, context: int = CONTEXT) -> Event:
    return ev("capacity", node, t, max_total_num_tokens=pool, context_len=context)


def info(node: str, t: float, version: str, **extra) -> Event:
    return ev("server_info", node, t, version=version, **extra)


def prefill_refusal() -> list[Event]:
    """prefill-0 receives room 1 and refuses it as over-length (700,000 tokens)."""
    return [
        ev("request_received", "prefill-0", T + 100, rid="p1", bootstrap_room="1"),
        ev(
            "request_rejected",
            "prefill-0",
            T + 100.1,
            rid="p1",
            input_tokens=700_000,
            limit_tokens=681_274,
            reason="input_too_long",
        ),
    ]


def decode_answer(**finish: object) -> list[Event]:
    """decode-0's lines of room 1 (prefill's `p1`), finished as `finish` says."""
    return [
        ev("request_received", "decode-0", T + 100, rid="d1", bootstrap_room="1"),
        ev("request_finished", "decode-0", T + 100.2, rid="d1", bootstrap_room="1", **finish),
    ]


def run(detector: Detector, events: list[Event]):
    return list(DetectionPipeline(detectors=[detector], raise_errors=True).run(events))


# -- pool below context -------------------------------------------------------------------------


def test_pd_prefill_pool_below_context_on_a_leaky_engine_is_critical():
    (finding,) = run(
        PoolBelowContext(),
        [
            args("prefill-0", T, "prefill"),
            info("prefill-0", T + 1, "0.5.19"),
            capacity("prefill-0", T + 60, 681_280),
        ],
    )
    assert finding.severity == "critical" and finding.node == "prefill-0"
    assert finding.runbook == "KVWatchPoolBelowContext"
    # incident.md: 367,296 tokens, 35% of the window.
    assert finding.evidence["gap_tokens"] == 367_296
    assert finding.evidence["gap_fraction"] == pytest.approx(0.3503, abs=1e-4)
    assert "681,280" in finding.summary and "1,048,576" in finding.summary


def test_fixed_engine_or_unknown_version_without_refusals_is_a_warning():
    fixed = run(
        PoolBelowContext(),
        [
            args("prefill-0", T, "prefill"),
            info("prefill-0", T + 1, "0.5.21"),
            capacity("prefill-0", T + 60, 681_280),
        ],
    )
    assert [f.severity for f in fixed] == ["warning"]
    unknown = run(
        PoolBelowContext(),
        [
            args("prefill-0", T, "prefill"),
            capacity("prefill-0", T + 60, 681_280),
        ],
    )
    assert [f.severity for f in unknown] == ["warning"]
    # Only a fixed engine refuses safely: with the version unknown, the summary says both.
    assert "will be refused" in fixed[0].summary
    assert "will be refused" not in unknown[0].summary
    assert "answered from other requests' KV" in unknown[0].summary


def test_unknown_version_escalates_to_critical_once_prefill_refuses_over_length_prompts():
    findings = run(
        PoolBelowContext(),
        [
            args("prefill-0", T, "prefill"),
            capacity("prefill-0", T + 60, 681_280),
            *prefill_refusal(),
        ],
    )
    assert [f.severity for f in findings] == ["warning", "critical"]
    assert findings[1].evidence["refusals"] == 1


def test_a_dict_server_args_line_does_not_read_the_prefill_as_a_fixed_engine():
    """0.5.19, the incident's engine, prints server_args as a dict, which the reference gives
    as 0.5.23's (audit U, against its source): read as a fixed engine, its pool gap stayed a
    reassuring warning while it refused prompts decode answered."""
    findings = run(
        PoolBelowContext(),
        [
            args("prefill-0", T, "prefill", args_format="dict"),
            capacity("prefill-0", T + 60, 681_280),
            *prefill_refusal(),
        ],
    )
    assert [f.severity for f in findings] == ["warning", "critical"]
    assert "engine version is not known yet" in findings[0].summary


def test_refusals_decode_retired_do_not_make_an_unknown_version_critical():
    # The version is unknown (no snapshot since a restart), but decode aborted every refused
    # request: the leak's path is closed on this engine, whatever release it is.
    refused = [
        *prefill_refusal(),
        *decode_answer(prompt_tokens=700_000, finish_type="abort", status_code=400),
    ]
    fleet = [
        args("prefill-0", T, "prefill"),
        capacity("prefill-0", T + 60, 681_280),
        args("decode-0", T, "decode"),
        capacity("decode-0", T + 60, 2_000_000),
    ]
    findings = run(PoolBelowContext(), fleet + refused)
    assert [(f.node, f.severity) for f in findings] == [("prefill-0", "warning")]
    assert findings[0].evidence["refusals"] == 0  # judged before the refusal was seen
    # Answered with success instead, the same refusal makes it critical.
    served = [
        e
        if e.kind != "request_finished"
        else ev(
            "request_finished",
            "decode-0",
            T + 100.2,
            rid="d1",
            bootstrap_room="1",
            prompt_tokens=700_000,
            completion_tokens=80,
            finish_type="stop",
        )
        for e in refused
    ]
    findings = run(PoolBelowContext(), fleet + served)
    assert [f.severity for f in findings if f.node == "prefill-0"] == ["warning", "critical"]


def test_prefill_pool_is_compared_with_the_context_the_deployment_advertises():
    findings = run(
        PoolBelowContext(),
        [
            args("prefill-0", T, "prefill"),
            info("prefill-0", T + 1, "0.5.19"),
            capacity("prefill-0", T + 60, 200_000, context=131_072),  # fits its own context
            args("decode-0", T, "decode"),
            capacity("decode-0", T + 60, 2_000_000, context=CONTEXT),
        ],
    )
    # Said against the longer context, but as info until a request joins the two: a pool that
    # holds the context the node states may be another deployment's of the model (blind review
    # 42 D2); joined, it is critical (tests/test_deployments_side_by_side.py).
    assert [(f.node, f.severity, f.evidence["context_len"]) for f in findings] == [
        ("prefill-0", "info", CONTEXT)
    ]


def test_decode_and_unified_nodes_below_context_are_warnings_and_healthy_nodes_silent():
    findings = run(
        PoolBelowContext(),
        [
            args("decode-0", T, "decode"),
            info("decode-0", T + 1, "0.5.19"),
            capacity("decode-0", T + 60, 500_000),
            args("u0", T, None),
            capacity("u0", T + 60, 20_480, context=32_768),
            args("u1", T, None),
            capacity("u1", T + 60, 40_960, context=32_768),
        ],
    )
    assert sorted((f.node, f.severity) for f in findings) == [
        ("decode-0", "warning"),
        ("u0", "warning"),
    ]


def test_restarts_raise_again_only_when_the_condition_changes():
    findings = run(
        PoolBelowContext(),
        [
            args("prefill-0", T, "prefill"),
            capacity("prefill-0", T + 60, 681_280),
            args("prefill-0", T + 1_000, "prefill"),  # restart, same pool: no new finding
            capacity("prefill-0", T + 1_060, 681_280),
            args("prefill-0", T + 2_000, "prefill"),  # restart, smaller pool: new condition
            capacity("prefill-0", T + 2_060, 600_000),
            args("prefill-0", T + 3_000, "prefill"),  # restart, big enough pool: silent
            capacity("prefill-0", T + 3_060, 2_040_000),
        ],
    )
    assert [f.evidence["pool_tokens"] for f in findings] == [681_280, 600_000]
    assert [f.evidence["generation"] for f in findings] == [0, 2]


def test_a_fault_mended_and_then_back_is_raised_again():
    # A rollback: the pool raised with an upgrade, then the old engine and pool restored. The
    # same gap and the same unsafe engine as at first, but after they were mended: they page
    # again. The same fault over two restarts in a row stays one finding.
    def generation(t: float, version: str, pool: int) -> list[Event]:
        return [args("prefill-0", t, "prefill"), info("prefill-0", t + 1, version)] + [
            capacity("prefill-0", t + 60, pool)
        ]

    events = (
        generation(T, "0.5.19", 681_280)
        + generation(T + 1_000, "0.5.23", 2_040_000)
        + generation(T + 2_000, "0.5.19", 681_280)
        + generation(T + 3_000, "0.5.19", 681_280)
    )
    pools = run(PoolBelowContext(), events)
    assert [(f.severity, f.evidence["generation"]) for f in pools] == [
        ("critical", 0),
        ("critical", 2),
    ]
    versions = run(UnsafeEngineVersion(), events)
    assert [(f.severity, f.evidence["generation"]) for f in versions] == [
        ("critical", 0),
        ("critical", 2),
    ]
    # A restore of the detector keeps what it knew: the fault in force is not raised anew.
    detector = UnsafeEngineVersion()
    pipeline = DetectionPipeline(detectors=[detector], raise_errors=True)
    list(pipeline.run(events[:3]))
    restored = UnsafeEngineVersion.from_state(detector.to_state())
    assert restored.faults_.began("prefill-0", ("0.5.19", "mooncake", "critical"), 5) == 0


# -- unsafe engine version ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "backend", "severity"),
    [
        ("0.5.19", "mooncake", "critical"),
        ("0.5.20rc1", "mooncake", "critical"),
        ("0.5.20", "mooncake", "warning"),
        # Failed Mooncake sends are confirmed as drained until 0.5.22 (blind review 34 D5).
        ("0.5.21", "mooncake", "warning"),
        ("0.5.21", "mooncake_tcp", "warning"),
        ("0.5.21", None, "warning"),  # the default backend
        ("0.5.22", "mooncake", None),
        ("0.5.22", None, None),
        ("0.5.21", "mori", "warning"),
        ("0.5.22", "nixl", "warning"),
        ("0.5.22", "mori", "warning"),
        ("0.5.23", "mori", None),
        ("0.5.23.post1", "nixl", None),
        ("0.4.9", "nixl", "critical"),
    ],
)
def test_version_policy_table(version, backend, severity):
    assert version_verdict(version, pd=True, backend=backend).severity == severity


@pytest.mark.parametrize(
    ("version", "backend", "deferred", "held"),
    [
        ("0.5.19", "mooncake", None, False),  # deferred release off by default
        ("0.5.21", "mooncake", None, False),  # on, but failed sends acked as drained at once
        ("0.5.21", None, None, False),
        ("0.5.21", "mooncake", True, False),  # stated on: the ack is as early
        ("0.5.22", "mooncake", None, True),
        ("0.5.22", None, None, True),
        ("0.5.22", "mooncake", False, False),  # turned off
        ("0.5.22", "nixl", None, False),
        ("0.5.22", "mori", None, False),
        ("0.5.23", "nixl", None, True),
        ("0.5.23", "mori", None, True),
        ("0.5.19", "mooncake", True, False),  # the stopgap, on a release acking early
        ("main", "mooncake", None, None),
    ],
)
def test_pages_are_held_until_drained_only_with_the_backends_failed_send_fix(
    version: str, backend: str | None, deferred: bool | None, held: bool | None
) -> None:
    """Blind review 34 D5: taken as held from 0.5.21, a 0.5.21 Mooncake storm of clients'
    aborts (failed sends confirmed as drained, so no timeout said) exposed 54 responses with
    not one warning. incident.md, "Versions": 0.5.22 stops confirming failed Mooncake sends as
    drained, 0.5.23 NIXL's and MORI's."""
    got = holds_aborted_pages(version, backend=backend, deferred_release=deferred)
    assert got is held


def test_the_version_facts_are_stated_once():
    facts = VersionPolicy()
    assert UnsafeEngineVersion().config.policy() == facts
    audit = AuditPolicy()
    assert (audit.pd_minimum, audit.recommended, audit.mori_minimum) == (
        facts.abort_race_fixed,
        facts.mooncake_failed_send_fixed,
        facts.mori_fixed,
    )
    assert audit.nixl_mori_recommended == facts.nixl_mori_failed_send_fixed


def test_versions_outside_pd_or_unparseable_are_not_judged():
    assert version_verdict("0.5.10", pd=False, backend=None).severity is None
    assert version_verdict("main", pd=True, backend="mooncake").severity is None
    assert parse_version("v0.5.21") == parse_version("0.5.21")
    assert parse_version("0.5.21+cu128") > parse_version("0.5.21rc2")


def test_unsafe_version_finding_per_node_and_version():
    findings = run(
        UnsafeEngineVersion(),
        [
            args("prefill-0", T, "prefill"),
            info("prefill-0", T + 1, "0.5.19"),
            info("prefill-0", T + 2, "0.5.19"),  # same again: nothing new
            args("decode-0", T, "decode", transfer_backend="nixl"),
            info("decode-0", T + 1, "0.5.22"),
            args("u0", T, None),
            info("u0", T + 1, "0.5.10"),  # not PD
            info("prefill-0", T + 5_000, "0.5.22"),  # upgraded: mooncake on 0.5.22 is fine
        ],
    )
    assert [(f.node, f.severity) for f in findings] == [
        ("prefill-0", "critical"),
        ("decode-0", "warning"),
    ]
    assert "0.5.23" in findings[1].summary  # NIXL wants 0.5.23
    assert findings[0].runbook == "KVWatchUnsafeEngineVersion"


def test_a_0521_mooncake_node_is_a_warning_naming_the_failed_send_fix():
    """Blind review 34 D5: nothing said 0.5.21 Mooncake was still open to the abort race."""
    (finding,) = run(
        UnsafeEngineVersion(), [args("decode-0", T, "decode"), info("decode-0", T + 1, "0.5.21")]
    )
    assert finding.severity == "warning"
    assert "failed Mooncake sends can be confirmed as drained before 0.5.22" in finding.summary
    assert finding.summary.endswith("upgrade to 0.5.22 or later")


# -- unverified checksum ------------------------------------------------------------------------


def test_checksum_skipped_is_a_warning_per_signature_pair():
    skipped = ev(
        "checksum_skipped",
        "decode-0",
        T + 10,
        prefill_signature="0x1f2e",
        decode_signature="0x2e1f",
    )
    findings = run(
        ChecksumUnverified(),
        [
            skipped,
            skipped,
            ev(
                "checksum_skipped",
                "decode-0",
                T + 20,
                prefill_signature="0x3c",
                decode_signature="0x2e1f",
            ),
        ],
    )
    assert [f.severity for f in findings] == ["warning", "warning"]
    assert "admits requests" in findings[0].summary


def test_checksum_on_one_side_only_is_a_warning_and_off_on_a_capable_engine_is_info():
    findings = run(
        ChecksumUnverified(),
        [
            args("prefill-0", T, "prefill", kv_checksum=True),
            info("prefill-0", T + 1, "0.5.22"),
            args("decode-0", T + 2, "decode", kv_checksum=False),
            info("decode-0", T + 3, "0.5.22"),
        ],
    )
    assert sorted((f.severity, f.node) for f in findings) == [
        ("info", "decode-0"),
        ("warning", None),
    ]
    quiet = run(
        ChecksumUnverified(),
        [
            args("prefill-0", T, "prefill", kv_checksum=False),
            info("prefill-0", T + 1, "0.5.19"),  # no checksum in this engine: nothing to say
        ],
    )
    assert quiet == []


def test_two_deployments_each_consistent_are_no_one_sided_checksum():
    """Blind review 8a: two deployments of one model saved side by side, the checksum off on
    both sides of one and on on both sides of the other, were warned of as one-sided."""
    events = []
    for deployment, on in (("dep-a", False), ("dep-b", True)):
        for node, role in (("prefill-0", "prefill"), ("decode-0", "decode")):
            events.append(args(f"{deployment}/{node}", T, role, kv_checksum=on))
            events.append(info(f"{deployment}/{node}", T + 1, "0.5.22"))
    warnings = [f for f in run(ChecksumUnverified(), events) if f.severity == "warning"]
    assert warnings == []
    events.append(args("dep-b/decode-1", T + 2, "decode", kv_checksum=False))
    (warning,) = [f for f in run(ChecksumUnverified(), events) if f.severity == "warning"]
    assert "dep-b/decode-1" in warning.summary and "dep-a" not in warning.summary


def test_a_one_sided_checksum_read_with_no_time_is_told_with_none():
    """Snapshots no name or line dates: the check was timed 1970-01-01T00:05 (blind review 8a)."""
    events = [
        Event(
            "server_info",
            "prefill-0",
            None,
            "p.json",
            {"disaggregation_mode": "prefill", "kv_checksum": True, "version": "0.5.22"},
        ),
        Event(
            "server_info",
            "decode-0",
            None,
            "d.json",
            {"disaggregation_mode": "decode", "kv_checksum": False, "version": "0.5.22"},
        ),
    ]
    (warning,) = [f for f in run(ChecksumUnverified(), events) if f.severity == "warning"]
    assert warning.time is None


def test_a_restart_that_turns_the_checksum_off_is_a_warning():
    """Review (abort race): the restart that turned the checksum off on both sides, the moment
    corruptions it had caught as aborts began to be answered, was an info finding the reports
    left out; a node that never ran it stays info."""
    findings = run(
        ChecksumUnverified(),
        [
            args("prefill-0", T, "prefill", kv_checksum=True),
            info("prefill-0", T + 1, "0.5.22"),
            args("decode-0", T, "decode", kv_checksum=False),
            info("decode-0", T + 1, "0.5.22"),
            args("prefill-0", T + 3_600, "prefill", kv_checksum=False),
            info("prefill-0", T + 3_601, "0.5.22"),
        ],
    )
    noted = [f for f in findings if f.node is not None]
    assert [(f.severity, f.node) for f in noted] == [("info", "decode-0"), ("warning", "prefill-0")]
    assert "after running with it on" in noted[1].summary


def test_a_prefill_logging_a_decode_s_extra_metadata_buffer_is_a_warning_per_node():
    """Audit X (0.5.23): checksum on decode only, no `server_args` read. Decode logs nothing
    (a prefill writing no digest is skipped silently); prefill logs, per decode registration,
    that the peer has one more metadata buffer. That line is the only tell."""
    from collector.sglang.logs import LineParser

    line = (
        "[2026-11-02 05:59:30 TP0] Decode 10.0.1.21:17000 registered 14 metadata buffers but "
        "this prefill has 13; only the first 13 are transferred, and misaligned if the extra "
        "buffer is not the last. An optional metadata buffer is enabled on one engine only: "
        "--disaggregation-enable-kv-checksum, SGLANG_ENABLE_DISAGG_SAMPLING_MASK, or the DSA "
        "top-k buffer."
    )
    events = []
    for node, n in (("prefill-0", 1), ("prefill-0", 2), ("prefill-1", 3)):
        _, event = LineParser(node).parse(line, f"{node}.log:{n}")
        assert event is not None
        events.append(event)
    other = ev("transfer_warning", "prefill-0", T, warning="metadata_not_ready")
    findings = run(ChecksumUnverified(), [other, *events])
    assert [(f.severity, f.node) for f in findings] == [
        ("warning", "prefill-0"),
        ("warning", "prefill-1"),
    ]
    assert "--disaggregation-enable-kv-checksum" in findings[0].summary
    assert findings[0].evidence["source"] == "prefill-0.log:1"


def test_a_rolling_restart_that_turns_the_checksum_off_everywhere_is_not_one_sided():
    findings = run(
        ChecksumUnverified(note_disabled=False),
        [
            args("prefill-0", T, "prefill", kv_checksum=True),
            args("decode-0", T, "decode", kv_checksum=True),
            # decode restarts first with the checksum off; prefill follows 40 s later
            args("decode-0", T + 3_600, "decode", kv_checksum=False),
            args("prefill-0", T + 3_640, "prefill", kv_checksum=False),
            ev("decode_batch", "decode-0", T + 7_200, running_req=1, prealloc_req=0),
        ],
    )
    assert findings == []


def test_a_pool_sharded_over_dcp_ranks_is_compared_whole_with_the_context():
    """0.5.19 takes prompts up to min(context - 1, pool x dcp_size - 1) - 5: a 681,280-token pool
    sharded over two ranks holds a full-context prompt (audit U)."""
    sharded = [args("prefill-0", T, "prefill", dcp_size=2), capacity("prefill-0", T + 60, 681_280)]
    assert run(PoolBelowContext(), sharded) == []
    (finding,) = run(
        PoolBelowContext(),
        [args("prefill-0", T, "prefill", dcp_size=1), capacity("prefill-0", T + 60, 681_280)],
    )
    assert finding.evidence["pool_tokens"] == 681_280 and "dcp" not in finding.summary
    (finding,) = run(
        PoolBelowContext(),
        [args("prefill-0", T, "prefill", dcp_size=2), capacity("prefill-0", T + 60, 500_000)],
    )
    # No release known: taken as one rank's (0.5.19 and 0.5.20 report it so), and said.
    said = "KV pool 500,000 x dcp 2 (per rank, if before 0.5.21) < context 1,048,576 (48,576"
    assert said in finding.summary
    assert finding.evidence["prompt_pool_tokens"] == 1_000_000


def test_from_0_5_21_the_pool_reported_already_counts_its_dcp_ranks():
    """Audit T: 0.5.21's `tp_worker.get_worker_info` ("The runner already reports logical DCP
    capacity") reports the pool over the dcp ranks; multiplied again, the incident's gap on a
    0.5.23 prefill with `--dcp-size 8` read as 5.4M tokens and passed."""
    boot = [
        args("prefill-0", T, "prefill", dcp_size=8),
        info("prefill-0", T + 1, "0.5.23", max_total_num_tokens=681_280),
        capacity("prefill-0", T + 60, 681_280),
    ]
    (finding,) = run(PoolBelowContext(), boot)
    assert "KV pool 681,280 (over its 8 dcp ranks) < context 1,048,576" in finding.summary
    assert finding.evidence["gap_tokens"] == 1_048_576 - 681_280
    # The same figures on 0.5.19: one rank's pool, eight of them hold the context.
    old = [boot[0], info("prefill-0", T + 1, "0.5.19", max_total_num_tokens=681_280), boot[2]]
    assert run(PoolBelowContext(), old) == []


def test_kv_cache_sharding_without_a_stated_limit_leaves_the_capacity_unknown():
    """Audit T: `--enable-kv-cache-sharding` (0.5.22 on, PD prefill) widens the capacity by a
    factor the reported pool does not carry: 262,144 tokens took prompts of 1,048,570. No gap
    is claimed on the pool alone; the limit the engine states is judged."""
    sharded = args("prefill-0", T, "prefill", kv_cache_sharding=True)
    assert run(PoolBelowContext(), [sharded, capacity("prefill-0", T + 60, 262_144)]) == []
    stated = info("prefill-0", T + 70, "0.5.23", max_req_input_len=681_274)
    (finding,) = run(PoolBelowContext(), [sharded, capacity("prefill-0", T + 60, 262_144), stated])
    assert "KV max_req_input_len 681,274 + 6 < context 1,048,576" in finding.summary


def test_a_pool_gap_told_critical_late_is_dated_from_its_engine_s_start():
    """The version that makes the gap critical is read from a `/server_info` saved after the
    logs: the gap stood from the engine's start, not from when the file was copied (blind
    review 8c: a critical finding stamped with the time the tool ran)."""
    findings = run(
        PoolBelowContext(),
        [
            args("prefill-0", T, "prefill"),
            capacity("prefill-0", T + 40, 681_280),
            ev("prefill_batch", "prefill-0", T + 3_600, new_seq=1),
            info("prefill-0", T + 30 * 86_400, "0.5.19"),
        ],
    )
    critical = [f for f in findings if f.severity == "critical"]
    assert critical and all(f.time == T for f in critical)


def test_a_refusal_whose_decode_answer_is_not_read_waits_for_the_release():
    """A refused request decode's lines do not show: whether its answer leaked is the release's
    to say, and a `/server_info` saved after the logs may say it. 0.5.23 refuses for good: no
    critical (blind review 9a); with no release ever read, critical from that refusal."""
    fleet = [
        args("prefill-0", T, "prefill"),
        capacity("prefill-0", T + 60, 681_280),
        args("decode-0", T, "decode"),
        capacity("decode-0", T + 60, 2_000_000),
    ]
    hours = [ev("decode_batch", "decode-0", T + 3600 * h, running_req=1) for h in range(1, 5)]
    late = info("prefill-0", T + 9e5, "0.5.23")  # saved after the logs: read last
    told = run(PoolBelowContext(), [*fleet, *prefill_refusal(), *hours, late])
    assert [f.severity for f in told if f.node == "prefill-0"] == ["warning"]
    untold = run(PoolBelowContext(), [*fleet, *prefill_refusal(), *hours])
    critical = [f for f in untold if f.severity == "critical"]
    assert len(critical) == 1 and critical[0].time == T + 100
    # Said as the input shows it (blind review 9b: "decode did not retire them", no decode log).
    assert "decode's answers to them are not in the input" in critical[0].summary


def test_a_pool_gap_after_a_restart_is_dated_no_earlier_than_the_restart():
    """Refusals decode answered under the first pool made the gap critical; a restart with
    another pool, still below the context, is critical from the restart, not from refusals
    made with the pool before it (blind review 9b)."""
    answered = [
        *prefill_refusal(),
        *decode_answer(prompt_tokens=700_000, completion_tokens=80, finish_type="stop"),
    ]
    findings = run(
        PoolBelowContext(),
        [
            args("prefill-0", T, "prefill"),
            capacity("prefill-0", T + 60, 681_280),
            args("decode-0", T, "decode"),
            capacity("decode-0", T + 60, 2_000_000),
            *answered,
            ev("decode_batch", "decode-0", T + 600, running_req=1),
            args("prefill-0", T + 2_400, "prefill"),
            capacity("prefill-0", T + 2_460, 900_000),
        ],
    )
    critical = {f.evidence["pool_tokens"]: f for f in findings if f.severity == "critical"}
    assert critical[681_280].time == T + 100
    assert critical[900_000].time == T + 2_400
    assert "decode answered them" in critical[900_000].summary


def test_a_restart_that_turns_the_checksum_off_is_a_warning_before_its_release_is_told():
    """Blind review 37 D5: the restart's `server_args` stated the checksum off, no snapshot
    after told its release, and nothing was found. A node that ran the checksum has it; the
    snapshot telling that start's release later makes no second finding."""
    restart = [
        args("decode-0", T, "decode", kv_checksum=True),
        info("decode-0", T + 1, "0.5.22"),
        args("decode-0", T + 3_600, "decode", kv_checksum=False),
    ]
    for told_later in ([], [info("decode-0", T + 7_200, "0.5.22")]):
        findings = run(ChecksumUnverified(), restart + told_later)
        noted = [f for f in findings if f.node is not None]
        assert [(f.severity, f.node, f.time) for f in noted] == [("warning", "decode-0", T + 3_600)]
        assert noted[0].summary.startswith("decode-0 (decode) restarted with the KV checksum off")


@pytest.mark.parametrize("version", ["garbage-version", "", "unknown", None])
def test_a_text_that_is_no_version_is_no_release_that_refuses_for_good(
    version: str | None,
) -> None:
    """Blind review 50: a saved `/server_info` with garbage for `version` was taken for a
    release that refuses over-length prompts for good, and the answers its pool left to decode
    were neither named nor warned of."""
    assert not refuses_for_good(version)
    assert not is_at_least(version, "0.5.20")
    assert refuses_for_good("0.5.20") and refuses_for_good("v0.5.23")
    assert not refuses_for_good("0.5.19.post2")
