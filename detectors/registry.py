"""Every detector by its config name: one explicit dict, no discovery magic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from detectors.base import Detector
from detectors.checksum_mismatch import ChecksumMismatch
from detectors.checksum_unverified import ChecksumUnverified
from detectors.deferred_release_timeouts import DeferredReleaseTimeouts
from detectors.impossibly_fast_prefill import ImpossiblyFastPrefill
from detectors.kv_canary_violation import KVCanaryViolation
from detectors.metadata_corruption import MetadataCorruption
from detectors.over_length_answered import OverLengthAnswered
from detectors.pool_below_context import PoolBelowContext
from detectors.rejected_then_served import RejectedThenServed
from detectors.telemetry_anomaly import TelemetryAnomaly
from detectors.transfer_failure_storm import TransferFailureStorm
from detectors.unsafe_engine_version import UnsafeEngineVersion

REGISTRY: Final[Mapping[str, type[Detector[Any]]]] = {
    "pool_below_context": PoolBelowContext,
    "unsafe_engine_version": UnsafeEngineVersion,
    "over_length_answered": OverLengthAnswered,
    "rejected_then_served": RejectedThenServed,
    "impossibly_fast_prefill": ImpossiblyFastPrefill,
    "checksum_mismatch": ChecksumMismatch,
    "checksum_unverified": ChecksumUnverified,
    "metadata_corruption": MetadataCorruption,
    "kv_canary_violation": KVCanaryViolation,
    "deferred_release_timeouts": DeferredReleaseTimeouts,
    "transfer_failure_storm": TransferFailureStorm,
    "telemetry_anomaly": TelemetryAnomaly,
}


def detector_from_state(state: Mapping[str, Any]) -> Detector[Any]:
    """Rebuild a detector saved with `to_state()`, whatever its class."""
    name = str(state.get("detector"))
    if name not in REGISTRY:
        raise KeyError(f"unknown detector {name!r}")
    return REGISTRY[name].from_state(state)
