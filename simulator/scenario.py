"""Scenario files: the deployment, its hardware, its traffic, and what goes wrong when.

A scenario is YAML validated by the pydantic models below (unknown keys are refused, and every
error names the YAML key it is about). Bundled scenarios live in `simulator/scenarios/`; a path to
any YAML file works the same way. Times are ISO 8601 UTC (`2026-09-07T00:00:00Z`).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.engine import EngineProfile, parse_version


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; the message names the offending key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Dist(_Strict):
    """A log-normal distribution clamped to [min, max] (sigma 0 gives a constant)."""

    median: float = Field(gt=0)
    sigma: float = Field(default=0.0, ge=0)
    min: float = Field(default=1.0, ge=0)
    max: float = Field(default=1e12, gt=0)

    @model_validator(mode="after")
    def _bounds(self) -> Dist:
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        return self


class ModelSpec(_Strict):
    """The served model; the numbers feed the latency model (see `simulator.latency`)."""

    name: str = "GLM-5.3"
    path: str = "zai-org/GLM-5.3"
    architecture: str = "GlmMoeDsaForCausalLM"
    active_params_b: float = Field(default=40.0, gt=0, description="active parameters, billions")
    layers: int = Field(default=78, gt=0)
    attn_dim: int = Field(default=8192, gt=0, description="query heads x head dim")
    kv_bytes_per_token: int = Field(default=89856, gt=0, description="KV bytes, all layers")
    kv_dtype: str = "torch.bfloat16"
    kv_layout: Literal["mla", "mha"] = "mla"
    weight_gb_per_gpu: float = Field(default=48.5, gt=0)


class HardwareSpec(_Strict):
    """One engine node's accelerators and its link to the other side."""

    gpus_per_node: int = Field(default=8, gt=0)
    peak_tflops_per_gpu: float = Field(default=989.0, gt=0)
    hbm_gb_s_per_gpu: float = Field(default=3350.0, gt=0)
    gpu_mem_gb: float = Field(default=80.0, gt=0)
    link_gb_s: float = Field(default=50.0, gt=0, description="RDMA GB/s prefill->decode")
    mfu: float = Field(default=0.45, gt=0.05, lt=0.95, description="achieved prefill MFU")
    prefill_batch_overhead_ms: float = Field(default=6.0, ge=0)
    decode_step_ms: float = Field(default=18.0, gt=0, description="decode step at batch 1")
    decode_step_per_req_ms: float = Field(default=0.12, ge=0)
    transfer_setup_ms: float = Field(default=1.5, ge=0)
    bootstrap_ms: float = Field(default=1.2, ge=0)
    network_ms: float = Field(default=0.4, ge=0)


class RoleSpec(_Strict):
    """Configuration shared by every node of one role (prefill or decode)."""

    count: int = Field(default=1, ge=1, le=64)
    version: str = "0.5.22"
    max_total_num_tokens: int = Field(gt=0)
    context_len: int = Field(gt=0)
    page_size: int = Field(default=64, ge=1, le=1024)
    tp_size: int = Field(default=8, ge=1)
    dp_size: int = Field(default=1, ge=1)
    ep_size: int = Field(default=1, ge=1)
    chunked_prefill_size: int = Field(default=16384, gt=0)
    max_prefill_tokens: int = Field(default=16384, gt=0)
    max_running_requests: int = Field(default=128, gt=0)
    transfer_backend: Literal["mooncake", "nixl", "mori"] = "mooncake"
    kv_checksum: bool = False
    deferred_release: bool | None = None
    deferred_release_timeout_s: float = Field(default=30.0, gt=0)
    kv_canary: Literal["none", "log"] = "none"
    log_requests: bool = True
    log_requests_level: Literal[0, 1, 2] = 2
    log_requests_format: Literal["text", "json"] = "text"
    enable_metrics: bool = True
    request_time_stats: bool = True
    log_ms: bool = False
    # The host's zone: SGLang prints its log prefix in local time (reference §2.1), while the
    # epochs in its request lines, scrapes and spans stay UTC.
    log_utc_offset_minutes: int = Field(default=0, ge=-12 * 60, le=14 * 60)
    decode_log_interval: int = Field(default=40, gt=0)
    num_reserved_decode_tokens: int = Field(default=512, ge=0)
    http_port: int = Field(default=30000, gt=0)
    bootstrap_port: int = Field(default=8998, gt=0)
    mem_fraction_static: float = Field(default=0.85, gt=0, lt=1)

    @model_validator(mode="after")
    def _features_exist(self) -> RoleSpec:
        try:
            profile = EngineProfile.for_version(self.version)
        except ValueError as exc:
            raise ValueError(f"version: {exc}") from exc
        if self.kv_checksum and not profile.has_kv_checksum:
            raise ValueError(f"kv_checksum: engine {self.version} has no KV checksum (>= 0.5.21)")
        if self.kv_canary != "none" and not profile.has_kv_canary:
            raise ValueError(f"kv_canary: engine {self.version} has no --kv-canary (>= 0.5.21)")
        return self

    @property
    def profile(self) -> EngineProfile:
        return EngineProfile.for_version(self.version)

    @property
    def deferred_release_on(self) -> bool:
        if self.deferred_release is None:
            return self.profile.deferred_release_default
        return self.deferred_release

    @property
    def max_req_input_len(self) -> int:
        """What the scheduler admits: min(context - 1, pool - 1) - 5 (telemetry §2.8)."""
        return min(self.context_len - 1, self.max_total_num_tokens - 1) - 5


class DeploymentSpec(_Strict):
    prefill: RoleSpec
    decode: RoleSpec
    bootstrap_timeout_s: float = Field(default=300.0, gt=0)
    waiting_timeout_s: float = Field(default=300.0, gt=0)
    heartbeat_interval_s: float = Field(default=5.0, gt=0)
    heartbeat_max_failure: int = Field(default=2, ge=1)


class PrefixSpec(_Strict):
    """Heavy prefix caching: a share of requests start with one of `docs` shared documents."""

    share: float = Field(ge=0, le=1)
    docs: int = Field(default=20, ge=1)
    doc_tokens: Dist


class TrafficSpec(_Strict):
    rate_per_s: float = Field(ge=0)
    diurnal_amplitude: float = Field(default=0.3, ge=0, lt=1)
    prompt_tokens: Dist
    output_tokens: Dist
    prefix: PrefixSpec | None = None
    marker_share: float = Field(default=0.1, ge=0, le=1, description="victim traffic")
    client_abort_share: float = Field(default=0.001, ge=0, le=1, description="baseline aborts")


class _Window(_Strict):
    start: datetime
    stop: datetime

    @model_validator(mode="after")
    def _ordered(self) -> _Window:
        if self.stop <= self.start:
            raise ValueError("stop must be after start")
        return self


class OverLengthFault(_Window):
    """Prompts longer than the prefill pool (but within the advertised context)."""

    kind: Literal["over_length"]
    rate_per_hour: float = Field(gt=0)
    prompt_tokens: Dist
    cached_share: float = Field(default=0.0, ge=0, le=1)
    marker_share: float = Field(default=0.0, ge=0, le=1)


class AbortStormFault(_Window):
    """Clients abort mid-transfer; some RDMA writes are still in flight and land late."""

    kind: Literal["abort_storm"]
    share: float = Field(gt=0, le=1, description="share of requests aborted mid-transfer")
    late_write_share: float = Field(default=1.0, ge=0, le=1)
    late_write_delay_s: Dist
    ack_lost_share: float = Field(default=0.5, ge=0, le=1)
    inflight_pages: int = Field(default=0, ge=0, description="0 = one prefill chunk")


class BootstrapTimeoutFault(_Window):
    kind: Literal["bootstrap_timeout"]
    share: float = Field(gt=0, le=1)
    stage: Literal["bootstrap", "waiting"] = "bootstrap"


class MetadataCollisionFault(_Window):
    kind: Literal["metadata_collision"]
    share: float = Field(gt=0, le=1)


class LostConnectionFault(_Strict):
    kind: Literal["lost_connection"]
    at: datetime
    prefill: str = "prefill-0"


Fault = Annotated[
    OverLengthFault
    | AbortStormFault
    | BootstrapTimeoutFault
    | MetadataCollisionFault
    | LostConnectionFault,
    Field(discriminator="kind"),
]


class RestartSpec(_Strict):
    """Nodes go down at `at` (traffic to them stops) and come back at `back` reconfigured."""

    at: datetime
    back: datetime
    nodes: list[str] | Literal["all"] = "all"
    prefill: dict[str, Any] = Field(default_factory=dict)
    decode: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ordered(self) -> RestartSpec:
        if self.back <= self.at:
            raise ValueError("back must be after at")
        return self


class SnapshotSpec(_Strict):
    interval_s: float = Field(default=3600.0, gt=0)


class LogSpec(_Strict):
    rotate_bytes: int = Field(default=256 * 1024 * 1024, ge=4096)
    gzip_level: int = Field(default=6, ge=1, le=9)


class Scenario(_Strict):
    name: str
    description: str = ""
    seed: int = 0
    start: datetime
    end: datetime
    model: ModelSpec = ModelSpec()
    hardware: HardwareSpec = HardwareSpec()
    deployment: DeploymentSpec
    traffic: TrafficSpec
    faults: list[Fault] = Field(default_factory=list)
    restarts: list[RestartSpec] = Field(default_factory=list)
    snapshots: SnapshotSpec = SnapshotSpec()
    logs: LogSpec = LogSpec()

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        if self.end <= self.start:
            raise ValueError("end must be after start")
        for i, restart in enumerate(self.restarts):
            for role in ("prefill", "decode"):
                over = getattr(restart, role)
                base = getattr(self.deployment, role)
                if "count" in over:
                    raise ValueError(f"restarts.{i}.{role}.count: node counts cannot change")
                try:
                    RoleSpec.model_validate({**base.model_dump(), **over})
                except ValidationError as exc:
                    raise ValueError(f"restarts.{i}.{role}: {_first_error(exc)}") from exc
        return self

    @property
    def start_epoch(self) -> float:
        return self.start.astimezone(UTC).timestamp()

    @property
    def end_epoch(self) -> float:
        return self.end.astimezone(UTC).timestamp()


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else str(err["msg"])


def _format_errors(source: str, exc: ValidationError) -> str:
    lines = [f"scenario {source} is invalid:"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).endswith("Fault"))
        lines.append(f"  {loc or '(top level)'}: {err['msg']}")
    return "\n".join(lines)


def bundled_scenarios() -> list[str]:
    folder = resources.files("simulator") / "scenarios"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def scenario_from_dict(data: dict[str, Any], source: str = "<dict>") -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_errors(source, exc)) from None


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A bundled scenario by name (`incident-replay`) or any YAML file by path."""
    text: str
    source = str(name_or_path)
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if path.is_dir():
            raise ScenarioError(
                f"scenario {path} is a folder: give a scenario's YAML file or a bundled name"
            )
        if not path.is_file():
            raise ScenarioError(f"scenario file {path} does not exist")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # review: a traceback, exit 1 ("below the bar")
            raise ScenarioError(f"scenario {path} is not text (UTF-8 YAML expected)") from None
        except OSError as exc:
            raise ScenarioError(f"scenario {path} could not be read: {exc.strerror}") from None
    else:
        resource = resources.files("simulator") / "scenarios" / f"{name_or_path}.yaml"
        if not resource.is_file():
            known = ", ".join(bundled_scenarios())
            raise ScenarioError(f"unknown scenario {name_or_path!r}; bundled: {known}")
        text = resource.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"scenario {source} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"scenario {source} must be a YAML mapping")
    return scenario_from_dict(data, source)


def apply_overrides(scenario: Scenario, overrides: dict[str, Any]) -> Scenario:
    """A copy with dotted keys replaced, e.g. `{"deployment.prefill.version": "0.5.20"}`."""
    data = copy.deepcopy(scenario.model_dump(mode="json", exclude_unset=False))
    for dotted, value in overrides.items():
        node: Any = data
        keys = dotted.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if isinstance(node, list):
            node[int(keys[-1])] = value
        else:
            node[keys[-1]] = value
    return scenario_from_dict(data, f"{scenario.name} (overridden)")


def role_at_restart(base: RoleSpec, overrides: dict[str, Any]) -> RoleSpec:
    return RoleSpec.model_validate({**base.model_dump(), **overrides})


__all__ = [
    "AbortStormFault",
    "BootstrapTimeoutFault",
    "DeploymentSpec",
    "Dist",
    "Fault",
    "HardwareSpec",
    "LostConnectionFault",
    "MetadataCollisionFault",
    "ModelSpec",
    "OverLengthFault",
    "RestartSpec",
    "RoleSpec",
    "Scenario",
    "ScenarioError",
    "TrafficSpec",
    "apply_overrides",
    "bundled_scenarios",
    "load_scenario",
    "parse_version",
    "role_at_restart",
    "scenario_from_dict",
]
