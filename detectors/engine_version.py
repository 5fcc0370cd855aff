"""SGLang engine versions: parsing, ordering, and the PD safety policy from the post-mortems.

No public advisory database lists these versions, so dependency scanners stay silent; this
module is the policy instead (incident.md, "Versions"): PD below 0.5.20 has the over-length
leak path open; below 0.5.21 the abort race is open and deferred release is off by default;
MORI needs 0.5.22; NIXL and MORI need 0.5.23 for the failed-send fix. Pre-releases sort before
their release (PEP 440), so `0.5.20rc1` counts as below 0.5.20.

Examples
--------
>>> parse_version("0.5.19.post2") < parse_version("0.5.20rc1") < parse_version("v0.5.20")
True
>>> version_verdict("0.5.19", pd=True, backend="mooncake").severity
'critical'
>>> version_verdict("0.5.22", pd=True, backend="nixl").reasons
('NIXL/MORI failed sends can be confirmed as drained before 0.5.23',)
>>> version_verdict("0.5.23", pd=True, backend="mori").severity is None
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from detectors.finding import Severity

_VERSION_RE: Final = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$", re.IGNORECASE)
_PRE_RE: Final = re.compile(r"^[.\-_]?(a|b|c|rc|alpha|beta|pre|preview|dev)", re.IGNORECASE)


@dataclass(frozen=True, order=True, slots=True)
class EngineVersion:
    """A comparable version: release numbers, then 0 for a pre-release and 1 for a release."""

    release: tuple[int, int, int, int]
    final: int
    text: str = field(compare=False)

    def __str__(self) -> str:
        return self.text


def parse_version(text: str | None) -> EngineVersion | None:
    """`0.5.21`, `v0.5.20rc1`, `0.5.19.post2`, `0.5.22+cu128` ...; None when not a version."""
    if text is None:
        return None
    match = _VERSION_RE.match(str(text))
    if match is None:
        return None
    parts = tuple(int(p) if p else 0 for p in match.group(1, 2, 3, 4))
    release = (parts[0], parts[1], parts[2], parts[3])
    final = 0 if _PRE_RE.match(match.group(5) or "") else 1
    return EngineVersion(release, final, str(text).strip())


# The first release whose prefill refuses an over-length prompt for good (incident.md).
LEAK_FIXED: Final = "0.5.20"


@dataclass(frozen=True, slots=True)
class VersionPolicy:
    """The thresholds; defaults are the post-mortems'."""

    leak_fixed: str = LEAK_FIXED
    abort_race_fixed: str = "0.5.21"
    mori_fixed: str = "0.5.22"
    nixl_mori_failed_send_fixed: str = "0.5.23"


@dataclass(frozen=True, slots=True)
class VersionVerdict:
    severity: Severity | None
    reasons: tuple[str, ...]


def version_verdict(
    version: str | None,
    *,
    pd: bool,
    backend: str | None,
    policy: VersionPolicy | None = None,
) -> VersionVerdict:
    """Judge one engine version for one node; only PD deployments are exposed to these bugs."""
    parsed = parse_version(version)
    if parsed is None or not pd:
        return VersionVerdict(None, ())
    rules = policy if policy is not None else VersionPolicy()
    reasons: list[str] = []
    severity: Severity | None = None
    if is_below(parsed, rules.leak_fixed):
        severity = "critical"
        reasons.append(f"over-length leak path open before {rules.leak_fixed}")
    if is_below(parsed, rules.abort_race_fixed):
        severity = severity or "warning"
        reasons.append(
            f"abort race open and deferred KV release off by default before "
            f"{rules.abort_race_fixed}"
        )
    name = (backend or "").strip().lower()
    if name == "mori" and is_below(parsed, rules.mori_fixed):
        severity = severity or "warning"
        reasons.append(f"MORI not covered by the abort-race fixes before {rules.mori_fixed}")
    if name in ("nixl", "mori") and is_below(parsed, rules.nixl_mori_failed_send_fixed):
        severity = severity or "warning"
        reasons.append(
            f"NIXL/MORI failed sends can be confirmed as drained before "
            f"{rules.nixl_mori_failed_send_fixed}"
        )
    return VersionVerdict(severity, tuple(reasons))


def holds_aborted_pages(
    version: str | None, *, backend: str | None, policy: VersionPolicy | None = None
) -> bool | None:
    """Whether a release holds an aborted transfer's pages until prefill's drain ack by default
    (deferred KV release, the abort-race fix: MORI only from its own fix); None when the
    version does not parse."""
    parsed = parse_version(version)
    if parsed is None:
        return None
    rules = policy if policy is not None else VersionPolicy()
    name = (backend or "").strip().lower()
    fixed = rules.mori_fixed if name == "mori" else rules.abort_race_fixed
    return not is_below(parsed, fixed)


def refuses_for_good(version: str | None, leak_fixed: str = LEAK_FIXED) -> bool:
    """The release is known and refuses an over-length prompt for good: decode answers nothing
    its prefill refused. Unknown releases are not taken for fixed ones."""
    return version is not None and not is_below(version, leak_fixed)


def is_below(version: str | EngineVersion | None, threshold: str) -> bool:
    """True when `version` parses and sorts before `threshold`."""
    parsed = version if isinstance(version, EngineVersion) else parse_version(version)
    limit = parse_version(threshold)
    return parsed is not None and limit is not None and parsed < limit
