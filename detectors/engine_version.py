"""SGLang engine versions: parsing, ordering, and the PD safety policy from the post-mortems.

No public advisory database lists these versions, so dependency scanners stay silent; this
module is the policy instead, and `VersionPolicy` the one place its releases are stated
(incident.md, "Versions"): PD below 0.5.20 has the over-length leak path open; below 0.5.21 the
abort race is open and deferred release is off by default; MORI is covered from 0.5.22. Deferred
release holds an aborted transfer's pages until prefill confirms the transfer drained, and until
the failed-send fix prefill confirms a *failed* send as drained too: Mooncake (the default
backend) from 0.5.22, NIXL and MORI from 0.5.23. Below those the hold ends while RDMA writes may
still land, so the race stays open. Pre-releases sort before their release (PEP 440), so
`0.5.20rc1` counts as below 0.5.20.

Examples
--------
>>> parse_version("0.5.19.post2") < parse_version("0.5.20rc1") < parse_version("v0.5.20")
True
>>> version_verdict("0.5.19", pd=True, backend="mooncake").severity
'critical'
>>> version_verdict("0.5.21", pd=True, backend="mooncake").reasons
('failed Mooncake sends can be confirmed as drained before 0.5.22',)
>>> version_verdict("0.5.22", pd=True, backend="nixl").reasons
('NIXL/MORI failed sends can be confirmed as drained before 0.5.23',)
>>> version_verdict("0.5.23", pd=True, backend="mori").severity is None
True
>>> holds_aborted_pages("0.5.21", backend="mooncake"), holds_aborted_pages("0.5.22", backend=None)
(False, True)
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


# The backends whose failed-send fix came with 0.5.23 (incident.md, PR 45973); every other one
# is taken as Mooncake's (the default backend), whose fix came with 0.5.22.
_LATE_FAILED_SEND_FIX: Final = frozenset({"nixl", "mori"})


@dataclass(frozen=True, slots=True)
class VersionPolicy:
    """The thresholds; defaults are the post-mortems' (incident.md, "Versions")."""

    leak_fixed: str = LEAK_FIXED
    # Deferred release on by default (0.5.21: PRs 38935, 39500, 41023).
    abort_race_fixed: str = "0.5.21"
    # MORI covered by the abort-race fixes (0.5.22: PRs 37077, 43719).
    mori_fixed: str = "0.5.22"
    # Failed Mooncake sends no longer confirmed as drained (0.5.22, the same PRs).
    mooncake_failed_send_fixed: str = "0.5.22"
    # The same for NIXL and MORI (0.5.23: PR 45973).
    nixl_mori_failed_send_fixed: str = "0.5.23"
    # What operators are told to run (NIXL and MORI: their failed-send fix).
    recommended: str = "0.5.22"

    def failed_send_fixed(self, backend: str | None) -> str:
        """The first release whose prefill no longer confirms `backend`'s failed sends as
        drained (an unnamed backend is the default, Mooncake)."""
        if _backend(backend) in _LATE_FAILED_SEND_FIX:
            return self.nixl_mori_failed_send_fixed
        return self.mooncake_failed_send_fixed

    def recommended_for(self, backend: str | None) -> str:
        fixed = self.failed_send_fixed(backend)
        return fixed if is_below(self.recommended, fixed) else self.recommended


def _backend(backend: str | None) -> str:
    name = (backend or "").strip().lower()
    return "mooncake" if name == "mooncake_tcp" else name


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
    name = _backend(backend)
    if name == "mori" and is_below(parsed, rules.mori_fixed):
        severity = severity or "warning"
        reasons.append(f"MORI not covered by the abort-race fixes before {rules.mori_fixed}")
    fixed = rules.failed_send_fixed(name)
    if name in _LATE_FAILED_SEND_FIX and is_below(parsed, fixed):
        severity = severity or "warning"
        reasons.append(f"NIXL/MORI failed sends can be confirmed as drained before {fixed}")
    elif is_below(parsed, fixed) and not is_below(parsed, rules.abort_race_fixed):
        # Deferred release is on, yet a failed send is confirmed as drained and its pages let
        # go while its writes may still land: 0.5.21 Mooncake stayed open to the race, and a
        # storm of it passed in silence (blind review 34 D5). Below 0.5.21 the reason above
        # already says the race is open.
        severity = severity or "warning"
        sends = {"": "Mooncake sends (the default backend)", "mooncake": "Mooncake sends"}.get(
            name, f"{name} sends (taken as Mooncake's)"
        )
        reasons.append(f"failed {sends} can be confirmed as drained before {fixed}")
    return VersionVerdict(severity, tuple(reasons))


def holds_aborted_pages(
    version: str | None,
    *,
    backend: str | None,
    policy: VersionPolicy | None = None,
    deferred_release: bool | None = None,
) -> bool | None:
    """Whether a release holds an aborted transfer's pages until the transfer has drained, with
    deferred release as stated (`deferred_release`) or else as the release defaults it; None
    when the version does not parse.

    Deferred release (on from 0.5.21, MORI from 0.5.22) holds them until prefill's drain ack,
    but before the backend's failed-send fix prefill acks a failed send as drained at once: the
    hold ends with no timeout said while writes may still land. Taken as held from 0.5.21, a
    0.5.21 Mooncake storm of clients' aborts was no transfer-failure storm, and passed with not
    one warning over 54 exposed responses (blind review 34 D5)."""
    parsed = parse_version(version)
    if parsed is None:
        return None
    rules = policy if policy is not None else VersionPolicy()
    name = _backend(backend)
    if deferred_release is False or (name == "mori" and is_below(parsed, rules.mori_fixed)):
        return False
    if deferred_release is None and is_below(parsed, rules.abort_race_fixed):
        return False
    return not is_below(parsed, rules.failed_send_fixed(name))


def refuses_for_good(version: str | None, leak_fixed: str = LEAK_FIXED) -> bool:
    """The release is known and refuses an over-length prompt for good: decode answers nothing
    its prefill refused. Unknown releases are not taken for fixed ones."""
    return is_at_least(version, leak_fixed)


def is_at_least(version: str | EngineVersion | None, threshold: str) -> bool:
    """True when `version` parses and sorts at or after `threshold`: a text that is no version
    (a `/server_info` saved with garbage in it) is not taken for a new release (blind review
    50: such a prefill was taken to refuse over-length prompts for good, and three answers it
    was the only pool for were neither named nor warned of)."""
    parsed = version if isinstance(version, EngineVersion) else parse_version(version)
    limit = parse_version(threshold)
    return parsed is not None and limit is not None and not parsed < limit


def is_below(version: str | EngineVersion | None, threshold: str) -> bool:
    """True when `version` parses and sorts before `threshold`."""
    parsed = version if isinstance(version, EngineVersion) else parse_version(version)
    limit = parse_version(threshold)
    return parsed is not None and limit is not None and parsed < limit
