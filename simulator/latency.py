"""How long things take: prefill, KV transfer, decode steps.

The model is deliberately simple but physically honest, so that timing detectors can be judged
against it. With N = active parameters, L = layers, d = attention width (query heads x head dim),
B = KV bytes per token, G = GPUs per node x peak FLOP/s per GPU, and MFU the achieved fraction:

* FLOPs to prefill `u` new tokens on top of `c` tokens already in the KV cache (causal):
  ``F(u, c) = 2 N u + 4 L d u (c + (u + 1) / 2)`` — weights, plus QK^T and AV for every new
  token against every earlier one.
* prefill batch time = ``sum F / (G * MFU) + batch overhead``; a long prompt is prefilled in
  chunks of `chunked_prefill_size`, each chunk one batch.
* physical floor = ``F(u, c) / G`` (MFU 1.0, no overhead). Because MFU < 1, every honest prefill
  takes longer than its floor; a reply faster than the floor of its *uncached* tokens did not
  read its prompt.
* KV transfer of `n` tokens = ``setup + n B / link bandwidth``; the KV of each chunk is sent as
  soon as the chunk is computed, so transfer overlaps chunked prefill.
* decode step = ``base + per_request x batch + (sum of running context) B / (GPUs x HBM BW)``;
  a request's decode time is its output tokens times the step time at admission.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.scenario import HardwareSpec, ModelSpec


@dataclass(frozen=True, slots=True)
class LatencyModel:
    active_params: float
    layers: int
    attn_dim: int
    kv_bytes_per_token: int
    node_peak_flops: float
    mfu: float
    batch_overhead_s: float
    link_bytes_per_s: float
    transfer_setup_s: float
    decode_step_s: float
    decode_per_req_s: float
    node_hbm_bytes_per_s: float
    bootstrap_s: float
    network_s: float

    @classmethod
    def from_specs(cls, model: ModelSpec, hw: HardwareSpec) -> LatencyModel:
        return cls(
            active_params=model.active_params_b * 1e9,
            layers=model.layers,
            attn_dim=model.attn_dim,
            kv_bytes_per_token=model.kv_bytes_per_token,
            node_peak_flops=hw.gpus_per_node * hw.peak_tflops_per_gpu * 1e12,
            mfu=hw.mfu,
            batch_overhead_s=hw.prefill_batch_overhead_ms / 1000.0,
            link_bytes_per_s=hw.link_gb_s * 1e9,
            transfer_setup_s=hw.transfer_setup_ms / 1000.0,
            decode_step_s=hw.decode_step_ms / 1000.0,
            decode_per_req_s=hw.decode_step_per_req_ms / 1000.0,
            node_hbm_bytes_per_s=hw.gpus_per_node * hw.hbm_gb_s_per_gpu * 1e9,
            bootstrap_s=hw.bootstrap_ms / 1000.0,
            network_s=hw.network_ms / 1000.0,
        )

    def prefill_flops(self, new_tokens: int, context_before: int) -> float:
        u = float(new_tokens)
        attn = 4.0 * self.layers * self.attn_dim * u * (context_before + (u + 1.0) / 2.0)
        return 2.0 * self.active_params * u + attn

    def prefill_floor_s(self, uncached_tokens: int, cached_tokens: int) -> float:
        """The least time any prefill of these tokens can take on this hardware."""
        return self.prefill_flops(uncached_tokens, cached_tokens) / self.node_peak_flops

    def chunk_compute_s(self, new_tokens: int, context_before: int) -> float:
        """Compute time of one chunk at the achieved MFU (no batch overhead)."""
        return self.prefill_flops(new_tokens, context_before) / (self.node_peak_flops * self.mfu)

    def transfer_s(self, tokens: int) -> float:
        return self.transfer_setup_s + tokens * self.kv_bytes_per_token / self.link_bytes_per_s

    def kv_bytes(self, tokens: int) -> int:
        return tokens * self.kv_bytes_per_token

    def decode_step(self, batch: int, context_tokens: int) -> float:
        read = context_tokens * self.kv_bytes_per_token / self.node_hbm_bytes_per_s
        return self.decode_step_s + self.decode_per_req_s * batch + read
