"""Analytic roofline cost model of one inference iteration on one (tensor-parallel) instance.

An iteration's time is a sum of stages, each a roofline max(FLOPs / (peak * compute_eff),
bytes / (bandwidth * memory_eff)):
  dense      linear layers: 2 FLOPs per weight per token (+ the lm_head only for sampled
             sequences, as vLLM computes logits only where it samples); reads every weight once
             per iteration plus `activation_bytes_factor` * hidden activations per token per layer;
             fp8 weights (W8A8) run at the GPU's fp8 tensor peak, every other dtype at fp16's;
  dequant    weight-only int8/int4: each weight is dequantized on the vector (fp32) units;
  attention  4 * head_dim FLOPs per (query, key) pair per head; reads the KV of every context
             token, writes the KV of every new token;
  allreduce  with tensor parallelism, 2 ring all-reduces of the hidden states per layer (1 with
             parallel attention, `ModelSpec.allreduces_per_layer`);
  MoE        routed experts: 2 FLOPs per expert weight per token-expert row, weights of the
             expected distinct experts the batch touches read once (sim/cost/moe_cost.py); with
             expert parallelism a dispatch and a combine all-to-all per MoE layer;
  overhead   a fixed per-iteration cost plus a per-sequence cost (scheduling, sampling, launch).
Efficiencies and overheads live in `CostModelConfig` and can be calibrated on real profiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sim.core.run_ends import ends_of
from sim.cost.deployment import (  # noqa: F401 (re-exported: the names cost models import)
    ACT_DTYPE_BYTES, FIXED_RESERVE_BYTES, GIB, KV_DTYPE_BYTES, PROFILE_SEQS, PROFILE_TOKENS,
    QUANT_GROUP_SIZE, WEIGHT_DTYPE_BYTES, DeploymentSpec, default_activation_reserve,
    kv_dtype_bytes, weight_dtype_bytes)
from sim.cost.moe_cost import RooflineMoE
from sim.hardware.gpus import dense_peak_flops
from sim.util.errors import ConfigError, check_fraction, check_positive

@dataclass(frozen=True, slots=True)
class CostModelConfig:
    """Efficiency factors and overheads of the roofline model (calibratable)."""

    compute_efficiency: float = 0.6  # fraction of peak tensor FLOP/s that matmuls achieve
    memory_efficiency: float = 0.85  # fraction of peak HBM bytes/s that streaming achieves
    interconnect_efficiency: float = 0.8  # fraction of interconnect bytes/s all-reduce achieves
    step_overhead_s: float = 0.3e-3  # seconds per iteration (scheduler, launch, sampling)
    per_seq_overhead_s: float = 0.0  # seconds per sequence per iteration
    int8_dequant_ops_per_weight: float = 2.0  # vector FLOPs to dequantize one int8 weight
    int4_dequant_ops_per_weight: float = 4.0  # vector FLOPs to dequantize one int4 weight
    activation_bytes_factor: float = 10.0  # hidden-sized activations moved per token per layer

    def __post_init__(self) -> None:
        check_fraction("compute_efficiency", self.compute_efficiency)
        check_fraction("memory_efficiency", self.memory_efficiency)
        check_fraction("interconnect_efficiency", self.interconnect_efficiency)
        for field in ("step_overhead_s", "per_seq_overhead_s", "int8_dequant_ops_per_weight",
                      "int4_dequant_ops_per_weight", "activation_bytes_factor"):
            value = getattr(self, field)
            if not math.isfinite(value):
                raise ConfigError(field, value, "must be finite")
            check_positive(field, value, allow_zero=True)

    def dequant_ops_per_weight(self, weight_dtype: str) -> float:
        """Vector FLOPs per weight to dequantize `weight_dtype` (0 for fp16/bf16)."""
        return {"int8": self.int8_dequant_ops_per_weight,
                "int4": self.int4_dequant_ops_per_weight}.get(weight_dtype, 0.0)


@dataclass(frozen=True, slots=True)
class StageCost:
    """Work and modelled time of one stage of one iteration."""

    flops: float  # FLOPs per GPU
    bytes: float  # bytes moved per GPU (HBM, or interconnect for the all-reduce)
    seconds: float  # modelled time of the stage


class RooflineCostModel:
    """Per-iteration times of a deployment; constants are folded once, calls stay cheap."""

    __slots__ = ("deployment", "config", "_inv_c", "_inv_cd", "_inv_m", "_dense_fpt", "_lm_fps",
                 "_layer_bytes", "_lm_bytes", "_act_bpt", "_dequant_s", "_attn_fpp", "_kv_bpt",
                 "_ar_fixed_s", "_ar_bpt", "_ar_spt", "_step_s", "_seq_s", "_moe", "_decode_cache")

    def __init__(self, deployment: DeploymentSpec, config: CostModelConfig = CostModelConfig()):
        self.deployment = deployment  # the instance modelled
        self.config = config  # efficiencies and overheads
        m, gpu, tp = deployment.model, deployment.gpu, deployment.tensor_parallel
        layers_params = deployment.num_quantized_params / tp  # weights per GPU in layers
        self._inv_c = 1.0 / (gpu.peak_tensor_flops * config.compute_efficiency)  # s/FLOP
        self._inv_cd = 1.0 / (dense_peak_flops(gpu, deployment.weight_dtype)
                              * config.compute_efficiency)  # s/FLOP of the dense matmuls
        self._inv_m = 1.0 / (gpu.hbm_bandwidth * config.memory_efficiency)  # s/byte
        self._dense_fpt = 2.0 * layers_params  # FLOPs per token
        self._lm_fps = 2.0 * m.vocab_size * m.hidden_size / tp  # FLOPs per sampled sequence
        self._layer_bytes = layers_params * weight_dtype_bytes(deployment.weight_dtype)  # bytes
        self._lm_bytes = m.num_embedding_params * ACT_DTYPE_BYTES / tp  # bytes
        self._act_bpt = (config.activation_bytes_factor * m.hidden_size * ACT_DTYPE_BYTES
                         * m.num_layers)  # bytes per token
        self._dequant_s = (layers_params * config.dequant_ops_per_weight(deployment.weight_dtype)
                           / gpu.peak_vector_flops)  # seconds per iteration
        self._attn_fpp = 4.0 * m.num_layers * (m.num_attention_heads // tp) * m.head_dim  # FLOPs
        self._kv_bpt = deployment.kv_bytes_per_token_per_gpu  # bytes per token
        num_ar = m.allreduces_per_layer * m.num_layers if tp > 1 else 0  # per iteration
        self._moe: RooflineMoE | None = None  # the routed experts' terms of an MoE model
        if m.moe is not None or m.mla is not None:
            num_ar -= self._init_moe(deployment, config)
        self._ar_fixed_s = num_ar * gpu.interconnect_latency_s  # seconds
        self._ar_bpt = num_ar * m.hidden_size * ACT_DTYPE_BYTES * 2 * (tp - 1) / tp  # bytes/token
        self._ar_spt = self._ar_bpt / (gpu.interconnect_bandwidth
                                       * config.interconnect_efficiency)  # s per token
        self._step_s = config.step_overhead_s  # seconds
        self._seq_s = config.per_seq_overhead_s  # seconds per sequence
        self._decode_cache: dict[int, tuple[float, tuple[float, ...], bool]] = {}  # by batch

    def _init_moe(self, deployment: DeploymentSpec, config: CostModelConfig) -> int:
        """Fold the MoE and MLA terms; the all-reduces per iteration the all-to-alls replace."""
        m, tp = deployment.model, deployment.tensor_parallel
        if m.mla is not None:  # attention FLOPs per pair with per-head materialized K and V
            self._attn_fpp = (float(m.num_layers * (m.num_attention_heads // tp))
                              * m.mla.flops_per_pair_per_head())
        if m.moe is None:
            return 0
        wb = weight_dtype_bytes(deployment.weight_dtype)
        moe = self._moe = RooflineMoE(m, deployment.gpu, tp, deployment.expert_parallel,
                                      deployment.expert_zipf, wb, config.interconnect_efficiency)
        self._dense_fpt = 2.0 * moe.rest_params  # FLOPs per token outside the routed experts
        self._layer_bytes = moe.rest_params * wb  # bytes read every iteration
        return moe.replaced_allreduces

    def _dense_work(self, num_tokens: int, num_sampled: int) -> tuple[float, float]:
        flops = self._dense_fpt * num_tokens + self._lm_fps * num_sampled
        weights = self._layer_bytes + (self._lm_bytes if num_sampled else 0.0)
        if self._moe is not None:  # routed experts: rows computed, distinct experts read
            e_flops, e_bytes = self._moe.work(num_tokens)
            flops += e_flops
            weights += e_bytes
        return flops, weights + self._act_bpt * num_tokens

    def _first_time(self, num_tokens: int, sum_context: int, pairs: float, num_seqs: int,
                    num_sampled: int) -> float:
        """Seconds of one iteration from batch sums (pairs: attention (query, key) pairs)."""
        if not num_tokens:
            return self._step_s  # nothing to compute: no forward pass
        inv_c, inv_m = self._inv_c, self._inv_m
        d_flops, d_bytes = self._dense_work(num_tokens, num_sampled)
        dense = max(d_flops * self._inv_cd, d_bytes * inv_m)
        kv_bytes = self._kv_bpt * (sum_context + num_tokens)
        attn = max(self._attn_fpp * pairs * inv_c, kv_bytes * inv_m)
        ar = self._ar_fixed_s + self._ar_spt * num_tokens
        if self._moe is not None:
            ar += self._moe.a2a_s(num_tokens)
        return dense + self._dequant_s + attn + ar + self._step_s + self._seq_s * num_seqs

    def iteration_times_from_sums(self, num_tokens: int, sum_context: int, sum_new_x_context: int,
                                  sum_new_squared: int, num_seqs: int, num_sampled: int,
                                  num_iterations: int = 1) -> np.ndarray:
        """`iteration_times` from batch sums: sum n_i, sum c_i, sum n_i*c_i, sum n_i**2."""
        pairs = (2 * sum_new_x_context + sum_new_squared + num_tokens) * 0.5
        first = self._first_time(num_tokens, sum_context, pairs, num_seqs, num_sampled)
        if num_iterations == 1:
            return np.array((first,))
        b = num_seqs  # later iterations: one new token per sequence, all sampled
        out = np.empty(num_iterations)
        out[0] = first
        if not b:
            out[1:] = self._step_s  # an empty batch only pays the overhead
            return out
        ctx = np.arange(num_iterations - 1, dtype=np.int64) * b + (sum_context + num_tokens)
        base, tail, _ = self._decode_terms(b)
        rest = base + np.maximum(self._attn_fpp * (ctx + b) * self._inv_c,
                                 self._kv_bpt * (ctx + b) * self._inv_m)
        for t in tail:  # all-reduce, (all-to-all,) step and per-sequence overheads, in order
            rest += t
        out[1:] = rest
        return out

    def iteration_ends_from_sums(self, num_tokens: int, sum_context: int,
                                 sum_new_x_context: int, sum_new_squared: int, num_seqs: int,
                                 num_sampled: int, num_iterations: int, until_s: float,
                                 first_extra_s: float = 0.0) -> list[float]:
        """Cumulative ends (seconds) of `iteration_times_from_sums` (plus `first_extra_s` on the
        first), bit for bit, computed only up to the first end at or after `until_s`."""
        b = num_seqs
        base, tail, mem_bound = self._decode_terms(b) if b else (0.0, (), False)
        x = sum_context + num_tokens  # attention's context in the first iteration, tokens
        if (mem_bound and len(tail) == 3 and num_tokens == b == num_sampled
                and sum_new_squared == b):  # every row decodes: the later iterations' formula
            t0, t1, t2 = tail
            first = base + self._kv_bpt * x * self._inv_m + t0 + t1 + t2 + first_extra_s
        else:
            pairs = (2 * sum_new_x_context + sum_new_squared + num_tokens) * 0.5
            first = self._first_time(num_tokens, sum_context, pairs, num_seqs,
                                     num_sampled) + first_extra_s
        if num_iterations == 1 or first >= until_s or not b:
            if num_iterations > 1 and first < until_s:  # an empty batch: overhead only
                return ends_of(first, [self._step_s] * (num_iterations - 1), until_s)
            return [first]
        fpp, kvb, inv_c, inv_m = self._attn_fpp, self._kv_bpt, self._inv_c, self._inv_m
        x += b  # attention's context + b in the second iteration, tokens
        if mem_bound and len(tail) == 3:  # the usual case, unrolled
            t0, t1, t2 = tail
            ends, e = [first], first
            for _ in range(num_iterations - 1):
                e += base + kvb * x * inv_m + t0 + t1 + t2
                ends.append(e)
                if e >= until_s:
                    break
                x += b
            return ends
        ends, e = [first], first
        for _ in range(num_iterations - 1):
            a, m = fpp * x * inv_c, kvb * x * inv_m
            r = base + (a if a >= m else m)
            for t in tail:
                r += t
            e += r
            ends.append(e)
            if e >= until_s:
                break
            x += b
        return ends

    def _decode_terms(self, b: int) -> tuple[float, tuple[float, ...], bool]:
        """A decode iteration of `b` sequences: dense + dequant seconds, the terms added after
        attention (in order), and whether attention is always memory-bound (kvb x / bw above
        the FLOP term for every context x, with margin for rounding). Cached per batch size."""
        terms = self._decode_cache.get(b)
        if terms is None:
            d_flops, d_bytes = self._dense_work(b, b)
            base = max(d_flops * self._inv_cd, d_bytes * self._inv_m) + self._dequant_s
            tail = [self._ar_fixed_s + self._ar_spt * b]
            if self._moe is not None:
                tail.append(self._moe.a2a_s(b))
            tail += [self._step_s, self._seq_s * b]
            mem_bound = self._kv_bpt * self._inv_m > self._attn_fpp * self._inv_c * (1.0 + 1e-9)
            terms = self._decode_cache[b] = (base, tuple(tail), mem_bound)
        return terms

    def iteration_times(self, num_new_tokens: Sequence[int], num_context_tokens: Sequence[int],
                        num_sampled: int, num_iterations: int = 1) -> np.ndarray:
        """Seconds of each iteration of a step: iteration 1 computes the given chunks; each later
        one computes one token per sequence whose context grew by the previous new tokens."""
        n, c = tuple(num_new_tokens), tuple(num_context_tokens)
        return self.iteration_times_from_sums(
            sum(n), sum(c), sum(a * b for a, b in zip(n, c)), sum(a * a for a in n),
            len(n), num_sampled, num_iterations)

    def breakdown(self, num_new_tokens: Sequence[int], num_context_tokens: Sequence[int],
                  num_sampled: int) -> dict[str, StageCost]:
        """Per-stage FLOPs, bytes and seconds of one iteration; "total" sums the seconds and the
        FLOPs and HBM bytes (all-reduce bytes cross the interconnect and are left out)."""
        n, c = tuple(num_new_tokens), tuple(num_context_tokens)
        tokens, sum_c = sum(n), sum(c)
        pairs = sum(a * (b + (a + 1) / 2) for a, b in zip(n, c))
        d_flops, d_bytes = self._dense_work(tokens, num_sampled)
        a_flops, a_bytes = self._attn_fpp * pairs, self._kv_bpt * (sum_c + tokens)
        dequant_flops = self._dequant_s * self.deployment.gpu.peak_vector_flops
        stages = {
            "dense": StageCost(d_flops, d_bytes,
                               max(d_flops * self._inv_cd, d_bytes * self._inv_m)),
            "dequant": StageCost(dequant_flops, 0.0, self._dequant_s),
            "attention": StageCost(a_flops, a_bytes,
                                   max(a_flops * self._inv_c, a_bytes * self._inv_m)),
            "allreduce": StageCost(0.0, self._ar_bpt * tokens,
                                   self._ar_fixed_s + self._ar_spt * tokens),
            "overhead": StageCost(0.0, 0.0, self._step_s + self._seq_s * len(n)),
        }
        if self._moe is not None and self._moe.plan.expert_parallel > 1:
            a2a_bytes = 2 * self._moe.plan.num_moe_layers * self._moe.plan.a2a_bytes(tokens)
            stages["alltoall"] = StageCost(0.0, a2a_bytes, self._moe.a2a_s(tokens))
        total = sum(s.seconds for s in stages.values())
        stages["total"] = StageCost(d_flops + dequant_flops + a_flops, d_bytes + a_bytes, total)
        return stages
