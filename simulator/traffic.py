"""The clients: when requests arrive, how long they are, and which faults they carry.

One seeded generator serves both modes: offline feeds arrivals straight into the deployment,
live turns each into an HTTP chat request (`to_chat_body`). Background traffic is a Poisson
process with a daily cycle (peak 14:00 UTC); each over-length fault adds its own Poisson stream.
Fault windows decide, per request, whether a client aborts mid-transfer (and whether RDMA writes
land late), whether bootstrap times out, or whether metadata collides.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from simulator.scenario import (
    AbortStormFault,
    BootstrapTimeoutFault,
    Dist,
    MetadataCollisionFault,
    OverLengthFault,
    Scenario,
)


@dataclass(slots=True)
class RequestFault:
    """What goes wrong for one request (also accepted live as the `sim_fault` body field)."""

    abort_at_fraction: float | None = None
    late_write_delay_s: float | None = None
    inflight_pages: int = 0
    ack_lost: bool = False
    bootstrap_timeout: Literal["bootstrap", "waiting"] | None = None
    metadata_collision: bool = False


@dataclass(slots=True)
class Arrival:
    t: float
    tokens: int
    natural_output: int
    max_tokens: int
    doc_name: str = ""
    doc_tokens: int = 0
    marker: bool = False
    over_length: bool = False
    fault: RequestFault | None = None


def sample(rng: random.Random, dist: Dist) -> float:
    value = dist.median * math.exp(dist.sigma * rng.gauss(0.0, 1.0)) if dist.sigma else dist.median
    return min(dist.max, max(dist.min, value))


class TrafficGenerator:
    """Arrivals between `start` and `end` (epoch seconds), in time order."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int,
        scale: float = 1.0,
        start: float | None = None,
        end: float | None = None,
        shift: float = 0.0,
    ) -> None:
        self.sc = scenario
        self.rng = random.Random(seed * 7919 + 17)
        self.scale = scale
        self.shift = shift
        self.start = scenario.start_epoch + shift if start is None else start
        self.end = scenario.end_epoch + shift if end is None else end
        tr = scenario.traffic
        self._doc_tokens: list[int] = []
        if tr.prefix is not None:
            self._doc_tokens = [
                int(sample(self.rng, tr.prefix.doc_tokens)) for _ in range(tr.prefix.docs)
            ]
        self._over = [f for f in scenario.faults if isinstance(f, OverLengthFault)]
        self._corpus: dict[int, list[int]] = {
            i: [int(sample(self.rng, f.prompt_tokens) * 0.985) for _ in range(4)]
            for i, f in enumerate(self._over)
        }
        self._windows = [
            f
            for f in scenario.faults
            if isinstance(f, AbortStormFault | BootstrapTimeoutFault | MetadataCollisionFault)
        ]

    def _window(self, fault: Any) -> tuple[float, float]:
        return fault.start.timestamp() + self.shift, fault.stop.timestamp() + self.shift

    def rate(self, t: float) -> float:
        tr = self.sc.traffic
        hours = (t % 86400.0) / 3600.0
        return (
            tr.rate_per_s
            * self.scale
            * (1.0 + tr.diurnal_amplitude * math.sin(2 * math.pi * (hours - 8.0) / 24.0))
        )

    def __iter__(self) -> Iterator[Arrival]:
        tr = self.sc.traffic
        rng = self.rng
        peak = tr.rate_per_s * self.scale * (1.0 + tr.diurnal_amplitude)
        heads: list[float] = []
        t_bg = self.start + (rng.expovariate(peak) if peak > 0 else math.inf)
        heads.append(t_bg)
        for f in self._over:
            lo, _ = self._window(f)
            heads.append(max(lo, self.start) + rng.expovariate(f.rate_per_hour / 3600.0))
        while True:
            i = min(range(len(heads)), key=heads.__getitem__)
            t = heads[i]
            if t >= self.end or math.isinf(t):
                return
            if i == 0:
                heads[0] = t + rng.expovariate(peak)
                if rng.random() * peak <= self.rate(t):
                    yield self._background(t)
            else:
                f = self._over[i - 1]
                lo, hi = self._window(f)
                heads[i] = t + rng.expovariate(f.rate_per_hour / 3600.0)
                if lo <= t < hi:
                    yield self._over_length(t, i - 1, f)
                elif t >= hi:
                    heads[i] = math.inf

    def _background(self, t: float) -> Arrival:
        tr = self.sc.traffic
        rng = self.rng
        body = int(sample(rng, tr.prompt_tokens))
        doc_name, doc_tokens = "", 0
        if tr.prefix is not None and rng.random() < tr.prefix.share:
            k = int(len(self._doc_tokens) * rng.random() ** 2)
            doc_name, doc_tokens = f"doc-{k}", self._doc_tokens[k]
            body = max(16, body // 4)
        tokens = body + (doc_tokens + 4 if doc_name else 0)
        natural = int(sample(rng, tr.output_tokens))
        max_tokens = natural if rng.random() < 0.25 else natural + 1 + int(natural * rng.random())
        arrival = Arrival(
            t=t,
            tokens=tokens,
            natural_output=natural,
            max_tokens=max_tokens,
            doc_name=doc_name,
            doc_tokens=doc_tokens,
            marker=rng.random() < tr.marker_share,
        )
        arrival.fault = self._fault(t)
        return arrival

    def _over_length(self, t: float, index: int, f: OverLengthFault) -> Arrival:
        rng = self.rng
        natural = int(sample(rng, self.sc.traffic.output_tokens))
        if rng.random() < f.cached_share:
            k = rng.randrange(4)
            doc_tokens = self._corpus[index][k]
            body = 200 + rng.randrange(4000)
            tokens = doc_tokens + 4 + body
            doc_name = f"corpus-{index}-{k}"
        else:
            tokens = int(sample(rng, f.prompt_tokens))
            doc_name, doc_tokens = "", 0
        return Arrival(
            t=t,
            tokens=tokens,
            natural_output=natural,
            max_tokens=natural + 64,
            doc_name=doc_name,
            doc_tokens=doc_tokens,
            marker=rng.random() < f.marker_share,
            over_length=True,
            fault=self._fault(t),
        )

    def _fault(self, t: float) -> RequestFault | None:
        rng = self.rng
        fault: RequestFault | None = None
        if rng.random() < self.sc.traffic.client_abort_share:
            fault = RequestFault(abort_at_fraction=rng.uniform(0.1, 0.9))
        for f in self._windows:
            lo, hi = self._window(f)
            if not lo <= t < hi or rng.random() >= f.share:
                continue
            fault = fault or RequestFault()
            if isinstance(f, AbortStormFault):
                fault.abort_at_fraction = rng.uniform(0.2, 0.9)
                if rng.random() < f.late_write_share:
                    fault.late_write_delay_s = sample(rng, f.late_write_delay_s)
                fault.ack_lost = rng.random() < f.ack_lost_share
                fault.inflight_pages = f.inflight_pages
            elif isinstance(f, BootstrapTimeoutFault):
                fault.bootstrap_timeout = f.stage
            else:
                fault.metadata_collision = True
        return fault


def to_chat_body(arrival: Arrival, model: str, marker: str | None) -> dict[str, Any]:
    """The OpenAI chat request a live client sends for an arrival."""
    parts: list[str] = []
    if arrival.doc_name:
        parts.append(f"[[doc {arrival.doc_name} {arrival.doc_tokens}]]")
    if marker:
        parts.append(f"Please keep this reference: {marker}.")
    used = (
        4
        + 2
        + (arrival.doc_tokens if arrival.doc_name else 0)
        + sum(len(p.split()) for p in parts if not p.startswith("[["))
    )
    pad = max(0, arrival.tokens - used - 5)
    parts.append(f"[[pad {pad}]] Summarise the above. [[reply {arrival.natural_output}]]")
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": " ".join(parts)}],
        "max_tokens": arrival.max_tokens,
        "temperature": 0.7,
    }
    if arrival.fault is not None:
        f = arrival.fault
        body["sim_fault"] = {
            k: v
            for k, v in {
                "abort_at_fraction": f.abort_at_fraction,
                "late_write_delay_s": f.late_write_delay_s,
                "inflight_pages": f.inflight_pages or None,
                "ack_lost": f.ack_lost or None,
                "bootstrap_timeout": f.bootstrap_timeout,
                "metadata_collision": f.metadata_collision or None,
            }.items()
            if v is not None
        }
    return body
