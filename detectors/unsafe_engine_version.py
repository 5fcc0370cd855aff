"""Engine versions with known KV-exposure bugs in PD serving.

Feeds the alert `KVWatchUnsafeEngineVersion`.

Advisory databases list nothing for these versions, so dependency scanners stay silent on an
engine pinned below the fixes. The policy (see `detectors.engine_version`, whose
`VersionPolicy` states the releases): PD below 0.5.20 is critical (the over-length leak path is
open); below 0.5.21 a warning (abort race open, deferred release off by default); Mooncake below
0.5.22, MORI below 0.5.22 and NIXL/MORI below 0.5.23 warnings (failed sends confirmed as drained:
the race stays open with deferred release on, blind review 34 D5). Versions come
from `/server_info` (SGLang does not log its version), so this detector fires when a node's
version becomes known or changes; one finding per node, version, backend and severity.
"""

from __future__ import annotations

from typing import ClassVar, Final

from collector.state.config_timeline import ConfigChange
from detectors.base import Detector, DetectorConfig
from detectors.condition_since import ConditionSince
from detectors.context import DetectionContext
from detectors.engine_version import VersionPolicy, version_verdict
from detectors.finding import Finding

_FACTS: Final = VersionPolicy()  # the post-mortems' releases, stated once


class UnsafeEngineVersionConfig(DetectorConfig):
    # Below this, PD prefill leaks over-length prompts (critical).
    leak_fixed: str = _FACTS.leak_fixed
    # Below this, the abort race is open and deferred release is off by default.
    abort_race_fixed: str = _FACTS.abort_race_fixed
    # Below this, the MORI backend is not covered by the abort-race fixes.
    mori_fixed: str = _FACTS.mori_fixed
    # Below this, Mooncake (the default backend) can confirm failed sends as drained.
    mooncake_failed_send_fixed: str = _FACTS.mooncake_failed_send_fixed
    # Below this, NIXL and MORI can confirm failed sends as drained.
    nixl_mori_failed_send_fixed: str = _FACTS.nixl_mori_failed_send_fixed
    # The version operators are told to run (named in summaries; NIXL/MORI: their fix).
    recommended: str = _FACTS.recommended

    def policy(self) -> VersionPolicy:
        return VersionPolicy(
            leak_fixed=self.leak_fixed,
            abort_race_fixed=self.abort_race_fixed,
            mori_fixed=self.mori_fixed,
            mooncake_failed_send_fixed=self.mooncake_failed_send_fixed,
            nixl_mori_failed_send_fixed=self.nixl_mori_failed_send_fixed,
            recommended=self.recommended,
        )


class UnsafeEngineVersion(Detector[UnsafeEngineVersionConfig]):
    """PD node on an engine version with known exposure bugs; feeds
    `KVWatchUnsafeEngineVersion`.

    Examples
    --------
    >>> from collector.events import Event
    >>> from detectors.pipeline import DetectionPipeline
    >>> pipe = DetectionPipeline(detectors=[UnsafeEngineVersion()])
    >>> (f,) = pipe.process(Event("server_info", "decode-0", 1.0, "d.json",
    ...     {"version": "0.5.20", "disaggregation_mode": "decode",
    ...      "transfer_backend": "mooncake"}))
    >>> f.severity, f.evidence["version"]
    ('warning', '0.5.20')
    """

    name: ClassVar[str] = "unsafe_engine_version"
    alert: ClassVar[str] = "KVWatchUnsafeEngineVersion"
    config_class: ClassVar[type[DetectorConfig]] = UnsafeEngineVersionConfig
    wants_config: ClassVar[bool] = True

    def _init_learned(self) -> None:
        self.faults_ = ConditionSince()

    def _learned_state(self) -> dict[str, object]:
        return {"faults_": self.faults_.to_state()}

    def _load_learned(self, state: dict[str, object]) -> None:
        self.faults_ = ConditionSince.from_state(state.get("faults_"))

    def _on_config(self, change: ConfigChange, ctx: DetectionContext) -> list[Finding]:
        config = change.config
        if config.version is None:
            return []
        if not ({"version", "role", "transfer_backend"} & change.changed or change.restart):
            return []
        pd = config.is_pd or (config.role is None and ctx.timeline.is_pd(ctx.now))
        verdict = version_verdict(
            config.version, pd=pd, backend=config.transfer_backend, policy=self.config.policy()
        )
        if verdict.severity is None:
            self.faults_.mended(config.node)
            return []
        backend = config.transfer_backend or "unknown backend"
        since = self.faults_.began(
            config.node, (config.version, backend, verdict.severity), config.generation
        )
        mitigation = ""
        if config.deferred_release is True:
            mitigation = " (deferred release explicitly enabled)"
        want = self.config.policy().recommended_for(config.transfer_backend)
        summary = (
            f"{config.node} ({config.role or 'PD'}, {backend}) runs SGLang {config.version}: "
            f"{'; '.join(verdict.reasons)}{mitigation}; upgrade to {want} or later"
        )
        # The release ran from its engine's start: a `/server_info` saved after the logs (dated
        # by its file) tells it late, and the finding stood a month past the logs (blind
        # review 5a). When it was read is the finding's `raised_at`.
        return [
            self._finding(
                verdict.severity,
                time=ctx.since(config.since),
                node=config.node,
                summary=summary,
                subject=f"{config.node}:{config.version}:{backend}:{verdict.severity}:since{since}",
                evidence={
                    "version": config.version,
                    "role": config.role,
                    "transfer_backend": config.transfer_backend,
                    "deferred_release": config.deferred_release,
                    "reasons": len(verdict.reasons),
                    "generation": config.generation,
                },
            )
        ]
