"""A checksum on one side behind a release that predates it verifies nothing.

Blind review: a decode running the KV checksum behind a prefill on SGLang 0.5.19 (no checksum
flag before 0.5.21: its `/server_info` and startup args state no setting) raised no
`checksum_unverified`, and the audit passed the decode, while the same deployment with a
0.5.22 prefill running the checksum off was warned of and failed. A prefill whose setting is
merely not seen (no `/server_info` saved, release unknown) stays unknown: no warning.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector.audit import AuditPolicy, Deployment, NodeFacts, judge_node
from collector.events import Event
from collector.forensics.driver import run_forensics
from detectors.checksum_unverified import ChecksumUnverified
from detectors.finding import Finding
from detectors.pipeline import DetectionPipeline
from simulator.offline import run_offline
from simulator.scenario import scenario_from_dict
from tests.test_audit import lines, run
from tests.test_detectors_config import T, args, ev, info
from tests.test_detectors_config import run as detect

SCENARIOS = Path(__file__).parents[1] / "simulator" / "scenarios"


def _old_prefill(prefill_version: str = "0.5.19", **prefill: Any) -> Any:
    """The healthy long-context pair, ten minutes, decode 0.5.23 with the checksum on, the
    prefill on `prefill_version` with `prefill` options (the checksum unset by default)."""
    data = yaml.safe_load((SCENARIOS / "healthy-long-context-small.yaml").read_text())
    data["end"] = "2026-10-12T12:10:00Z"
    side = data["deployment"]["prefill"]
    side.pop("kv_checksum")
    side.pop("kv_canary")
    side.update(version=prefill_version, **prefill)
    return scenario_from_dict(data, "old-prefill")


@pytest.fixture(scope="module")
def old_sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sim = tmp_path_factory.mktemp("old") / "sim"
    run_offline(_old_prefill(), sim)
    return sim


def _unverified(sim_parts: list[Path], out: Path) -> list[dict[str, Any]]:
    result = run_forensics([str(p) for p in sim_parts], out, write_parquet=False)
    return [f for f in result.summary["findings"] if f["detector"] == "checksum_unverified"]


def _prefill_infos(sim: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((sim / "snapshots").glob("prefill-*.json"))]


def test_a_decode_verifying_behind_a_prefill_that_predates_the_checksum_is_warned(
    old_sim: Path, tmp_path: Path
) -> None:
    # The premise: a 0.5.19 engine states no checksum setting anywhere.
    infos = _prefill_infos(old_sim)
    assert infos and all(i["version"] == "0.5.19" for i in infos)
    assert not any("kv_checksum" in key for i in infos for key in i)
    assert "kv_checksum" not in (old_sim / "logs" / "prefill-0.log").read_text()
    (warning,) = _unverified([old_sim / "logs", old_sim / "snapshots"], tmp_path / "out")
    assert warning["severity"] == "warning" and warning["node"] is None
    assert "enabled on decode-0" in warning["summary"]
    assert "prefill-0 (SGLang 0.5.19) predates it (first in 0.5.21)" in warning["summary"]
    assert "upgrade prefill-0" in warning["summary"]
    assert warning["evidence"]["predating_nodes"] == 1


def test_the_same_prefill_unseen_is_not_warned(old_sim: Path, tmp_path: Path) -> None:
    """Logs alone: the prefill's release and setting are unknown, not known to be missing."""
    assert _unverified([old_sim / "logs"], tmp_path / "out") == []


def test_a_prefill_with_the_checksum_off_is_warned_as_before(tmp_path: Path) -> None:
    run_offline(_old_prefill("0.5.22", kv_checksum=False), tmp_path / "sim")
    found = _unverified([tmp_path / "sim" / "logs", tmp_path / "sim" / "snapshots"], tmp_path / "o")
    warnings = [f for f in found if f["severity"] == "warning"]
    assert [f["summary"] for f in warnings] == [
        "KV checksum is enabled on decode-0 but not on prefill-0: it must be set on both "
        "prefill and decode, or transfers go unverified"
    ]


def test_audit_fails_the_decode_behind_a_prefill_that_predates_the_checksum(
    old_sim: Path,
) -> None:
    code, out, _ = run(str(old_sim / "logs"), str(old_sim / "snapshots"))
    decode = [line for line in lines(out) if line.startswith("decode-0")]
    assert decode == [
        "decode-0   decode   FAIL  KV checksum on here, but prefill-0 (0.5.19) predates it "
        "(first in 0.5.21: no digest written, transfers unverified)"
    ]
    assert code == 1


def test_audit_of_logs_alone_says_the_prefill_unknown_and_fails_nothing_for_it(
    old_sim: Path,
) -> None:
    code, out, _ = run(str(old_sim / "logs"))
    said = lines(out)
    assert any(line.startswith("prefill-0  prefill  UNKNOWN") for line in said)
    assert not any("FAIL" in line or "predate" in line for line in said)
    assert code == 3


def _config(node: str, role: str, version: str | None, checksum: bool | None) -> list[Event]:
    """A node's startup args and `/server_info`; a release without the flag states none."""
    fields: dict[str, Any] = {"disaggregation_mode": role, "transfer_backend": "mooncake"}
    if checksum is not None:
        fields["kv_checksum"] = checksum
    said = [ev("server_args", node, T, **fields)]
    return said if version is None else [*said, ev("server_info", node, T + 1, version=version)]


def test_a_prefill_verifying_behind_a_decode_that_predates_the_checksum_is_warned() -> None:
    events = [
        *_config("prefill-0", "prefill", "0.5.23", True),
        *_config("decode-0", "decode", "0.5.20", None),
    ]
    (warning,) = [f for f in detect(ChecksumUnverified(), events) if f.severity == "warning"]
    assert "enabled on prefill-0 but decode-0 (SGLang 0.5.20) predates it" in warning.summary
    prefill = NodeFacts("prefill-0", role="prefill", version="0.5.23", kv_checksum=True)
    decode = NodeFacts("decode-0", role="decode", version="0.5.20")
    result = judge_node(prefill, Deployment.of([prefill, decode]), AuditPolicy())
    assert result.status == "FAIL"
    assert any("decode-0 (0.5.20) predates it" in reason for reason in result.reasons)


def test_an_unknown_release_with_no_setting_is_not_judged() -> None:
    events = [
        *_config("prefill-0", "prefill", "0.5.23", True),
        *_config("decode-0", "decode", None, None),
    ]
    assert [f for f in detect(ChecksumUnverified(), events) if f.severity == "warning"] == []
    prefill = NodeFacts("prefill-0", role="prefill", version="0.5.23", kv_checksum=True)
    decode = NodeFacts("decode-0", role="decode")
    result = judge_node(prefill, Deployment.of([prefill, decode]), AuditPolicy())
    assert not any("predate" in reason for reason in result.reasons)


def test_a_decode_verifying_behind_a_prefill_whose_setting_is_unknown_does_not_pass() -> None:
    """Its checksum verifies the prefill's transfers only if the prefill runs it too: the
    decode's own line must not vouch for what nothing stated."""
    decode = NodeFacts("decode-0", role="decode", version="0.5.23", kv_checksum=True)
    unknown = NodeFacts("prefill-0", role="prefill", version="0.5.23")
    result = judge_node(decode, Deployment.of([decode, unknown]), AuditPolicy())
    (checksum,) = [c for c in result.checks if c.check == "checksum"]
    assert checksum.status == "UNKNOWN" and "setting unknown for prefill-0" in checksum.reason
    stated = NodeFacts("prefill-0", role="prefill", version="0.5.23", kv_checksum=True)
    result = judge_node(decode, Deployment.of([decode, stated]), AuditPolicy())
    assert [c.status for c in result.checks if c.check == "checksum"] == ["PASS"]


def test_audit_of_logs_alone_does_not_pass_the_decode_behind_the_unseen_prefill(
    old_sim: Path,
) -> None:
    _, out, _ = run(str(old_sim / "logs"))
    (decode,) = [line for line in lines(out) if line.startswith("decode-0")]
    assert decode.startswith("decode-0   decode   UNKNOWN  ")
    assert "KV checksum on here, setting unknown for prefill-0" in decode
    assert "PASS" not in decode


@pytest.mark.parametrize(
    ("prefill", "decode", "warned"),
    [("0.5.21", "0.5.23", True), ("0.5.22", "0.5.24", True), ("0.5.23", "0.5.23", False)]
    + [("0.5.21", "0.5.22", False)],
)
def test_a_decode_that_checks_signatures_behind_a_prefill_that_writes_none_is_warned(
    prefill: str, decode: str, warned: bool
) -> None:
    """Blind review 29b: both sides on, a 0.5.23 decode behind a 0.5.21 prefill; the audit
    failed the decode (it skips their unsigned digests without a word), forensics said
    nothing."""
    events = [
        *_config("prefill-0", "prefill", prefill, True),
        *_config("decode-0", "decode", decode, True),
    ]
    found = [f for f in detect(ChecksumUnverified(), events) if f.severity == "warning"]
    if not warned:
        assert found == []
        return
    (warning,) = found
    assert (
        f"KV checksum is on on both sides, but decode-0 (SGLang {decode}) skips the unsigned "
        f"digests prefill-0 (SGLang {prefill}) writes" in warning.summary
    )
    assert "upgrade prefill-0 to 0.5.23" in warning.summary


def _restart_told_late(prefill_checksum_after: bool) -> tuple[DetectionPipeline, list[Finding]]:
    """Both sides off, then a restart at T + 3,600 with the checksum on: decode's log says it
    at once, prefill's only in a snapshot ten minutes later that dates its start."""
    events = [
        info("prefill-0", T, "0.5.22", disaggregation_mode="prefill", kv_checksum=False),
        args("decode-0", T, "decode", kv_checksum=False),
        info("decode-0", T + 1, "0.5.22"),
        args("decode-0", T + 3_600, "decode", kv_checksum=True),
        info("decode-0", T + 3_601, "0.5.22"),
        ev("decode_batch", "decode-0", T + 3_900, running_req=1),
        info(
            "prefill-0",
            T + 4_200,
            "0.5.22",
            disaggregation_mode="prefill",
            kv_checksum=prefill_checksum_after,
            max_total_num_tokens=2_040_000,
            started_at=T + 3_600,
        ),
    ]
    pipeline = DetectionPipeline(detectors=[ChecksumUnverified()], raise_errors=True)
    findings = [f for f in pipeline.run(events) if f.node is None]
    return pipeline, findings


def test_a_one_sided_checksum_a_later_snapshot_refutes_is_withdrawn_in_the_report() -> None:
    """Blind review 30a: five minutes after the restart, prefill's snapshot not read yet, the
    warning said prefill-0 did not verify; the snapshot read later dated its start with the
    checksum on. Raised as known then, withdrawn (info) once the input is read whole."""
    pipeline, findings = _restart_told_late(prefill_checksum_after=True)
    assert [(f.severity, f.time) for f in findings] == [("warning", T + 3_900)]
    (withdrawn,) = pipeline.revised(findings)
    assert (withdrawn.severity, withdrawn.time) == ("info", T + 3_900)
    assert withdrawn.summary.startswith("Withdrawn, the input read whole shows prefill-0")
    assert withdrawn.evidence["withdrawn"] is True


def test_a_one_sided_checksum_a_later_snapshot_confirms_stays_a_warning() -> None:
    pipeline, findings = _restart_told_late(prefill_checksum_after=False)
    assert [f.severity for f in pipeline.revised(findings)] == ["warning"]
