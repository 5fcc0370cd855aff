"""Event detectors: KV checksum mismatch, metadata corruption, KV canary violation."""

from __future__ import annotations

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
    assert [f.evidence["slot_idx"] for f in findings] == [18433, 7]
    assert all(f.severity == "critical" for f in findings)
