"""Per-GPU parameters of the stage cost model (`sim/cost/stage_model.py`); torch-free, no state.

Each stage has its own efficiency (a fraction of the GPU's datasheet peak, `sim/hardware/gpus.py`)
and a fixed cost per kernel or per layer that does NOT divide by tensor parallelism:

  GEMM        max(flops / (peak * eff_c(n)), bytes / (bw * gemm_weight_eff)) + gemm_fixed_s,
              eff_c(n) = gemm_compute_eff * n / (n + gemm_half_tokens)  (n = tokens);
  small       norms, RoPE, activation, residual add: bytes / (bw * <kernel>_eff) + small_fixed_s;
  prefill     attention of p chunks of n query tokens, each after c cached tokens (one kernel):
              max(work + span, kv bytes / (bw * eff_kv_large)) + attn_prefill_fixed_s, where
              work = flops / (peak * eff_a(n)), flops = 4 heads head_dim p n (c + (n + 1) / 2)
              (the context part and the causal part), eff_a(n) = attn_prefill_eff * n / (n +
              attn_prefill_half_tokens) (half 0: a rate independent of the chunk), and span =
              attn_prefill_key_s * (c + n) * r / (r + attn_prefill_split_rows), r = p n heads
              query rows per GPU: the serial key loop of the longest query tile, which a kernel
              with few query rows splits across idle SMs (sim/cost/stage_attention.py);
  decode      attention of b sequences with kv tokens each: max(floor, attn_decode_fixed_s
              + attn_decode_item_s * b * kv_heads + kv bytes / (bw * eff_kv(b))), eff_kv(b)
              rising from attn_decode_eff_small (batch -> 0) to attn_decode_eff_large (batch ->
              inf), floor = attn_decode_floor_s * kv / (kv + attn_decode_floor_half_tokens)
              (the split-KV path a long context takes: partial attention, then a merge kernel);
  all-reduce  allreduce_launch_s + min over NCCL protocols of latency(w) + bytes * 2 (w - 1) / w
              / bus_bandwidth(w): the bulk protocol and, where fitted, the low-latency one
              (NCCL's LL: less latency, less bandwidth; its tuner picks the faster);
  per step    sampler (sampler_fixed_s + rows x (sampler_per_seq_s + sampler_logit_passes x
              vocab x 4 bytes / (bw * add_eff)), sim/cost/sampler_cost.py) and CPU/engine costs;
              the GPU work of a step cannot finish before the host has launched it:
              max(GPU time, num_layers * cpu_launch_per_layer_s) (an eager engine launching
              kernel by kernel; 0 for CUDA graphs, the default). The host work
              follows the GPU work (in series), or with `cpu_overlapped` runs beside it
              (asynchronous scheduling): the step takes the longer of the two.
Host terms come from a named preset (`sim/cost/host_presets.py`) over these per-GPU values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from sim.util.errors import ConfigError, check_fraction, check_positive

EFFICIENCY_FIELDS = ("gemm_compute_eff", "gemm_weight_eff", "norm_eff", "rope_eff", "act_eff",
                     "add_eff", "attn_prefill_eff", "attn_decode_eff_small",
                     "attn_decode_eff_large")
ZERO_OK_FIELDS = ("attn_prefill_half_tokens", "attn_decode_floor_half_tokens")  # may be 0


def _check_finite_nonneg(where: str, value: float, allow_zero: bool = True) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(where, value, "must be a finite number")
    check_positive(where, value, allow_zero=allow_zero)


@dataclass(frozen=True, slots=True)
class AllReduceParams:
    """Alpha-beta curves of one all-reduce per group size (NCCL ring / NVLS on one node), for
    the bulk protocol and optionally a low-latency one (NCCL's LL, for small messages)."""

    num_workers: tuple[int, ...]  # GPUs in the group, ascending (e.g. 2, 4, 8)
    latency_s: tuple[float, ...]  # seconds, fixed cost of one all-reduce per group size
    bus_bandwidth: tuple[float, ...]  # bytes/s of NCCL "bus bandwidth" per group size
    ll_latency_s: tuple[float, ...] = ()  # seconds, low-latency protocol per group size (or none)
    ll_bus_bandwidth: tuple[float, ...] = ()  # bytes/s, low-latency protocol per group size

    def __post_init__(self) -> None:
        n = len(self.num_workers)
        if n == 0 or len(self.latency_s) != n or len(self.bus_bandwidth) != n:
            raise ConfigError("allreduce.num_workers", self.num_workers,
                              "needs one latency_s and one bus_bandwidth per group size")
        if (len(self.ll_latency_s), len(self.ll_bus_bandwidth)) not in ((0, 0), (n, n)):
            raise ConfigError("allreduce.ll_latency_s", self.ll_latency_s,
                              "give ll_latency_s and ll_bus_bandwidth for every group size, "
                              "or neither")
        for i in range(len(self.ll_latency_s)):
            _check_finite_nonneg(f"allreduce.ll_latency_s[{i}]", self.ll_latency_s[i])
            _check_finite_nonneg(f"allreduce.ll_bus_bandwidth[{i}]", self.ll_bus_bandwidth[i],
                                 allow_zero=False)
        if list(self.num_workers) != sorted(set(self.num_workers)) or self.num_workers[0] < 2:
            raise ConfigError("allreduce.num_workers", self.num_workers,
                              "must be distinct ints >= 2, ascending")
        for i in range(n):
            _check_finite_nonneg(f"allreduce.latency_s[{i}]", self.latency_s[i])
            _check_finite_nonneg(f"allreduce.bus_bandwidth[{i}]", self.bus_bandwidth[i],
                                 allow_zero=False)

    def _index(self, num_workers: int) -> int:
        """The listed group size for num_workers: itself, else the nearest listed size above
        it (or the largest listed)."""
        for i, w in enumerate(self.num_workers):
            if w >= num_workers:
                return i
        return len(self.num_workers) - 1

    def curve(self, num_workers: int) -> tuple[float, float]:
        """(latency_s, bus_bandwidth) of the bulk protocol for a group size."""
        i = self._index(num_workers)
        return self.latency_s[i], self.bus_bandwidth[i]

    def ll_curve(self, num_workers: int) -> tuple[float, float] | None:
        """(latency_s, bus_bandwidth) of the low-latency protocol, or None when not given."""
        if not self.ll_latency_s:
            return None
        i = self._index(num_workers)
        return self.ll_latency_s[i], self.ll_bus_bandwidth[i]


@dataclass(frozen=True, slots=True)
class StageParams:
    """How one GPU spends time per stage; see the module docstring for the formulas."""

    gemm_compute_eff: float  # fraction of peak tensor FLOP/s large GEMMs reach
    gemm_half_tokens: float  # tokens at which GEMM compute efficiency is half its maximum
    gemm_weight_eff: float  # fraction of peak HBM bytes/s a GEMM streams its weights at
    gemm_fixed_s: float  # seconds per GEMM kernel (launch, tail), independent of TP
    norm_eff: float  # fraction of peak HBM bytes/s of an RMSNorm/LayerNorm kernel
    rope_eff: float  # fraction of peak HBM bytes/s of the rotary-embedding kernel
    act_eff: float  # fraction of peak HBM bytes/s of the MLP activation (SiLU*mul) kernel
    add_eff: float  # fraction of peak HBM bytes/s of the residual-add kernel
    small_fixed_s: float  # seconds per small (norm, RoPE, act, add, embedding) kernel
    attn_prefill_eff: float  # max fraction of peak tensor FLOP/s of prefill attention
    attn_prefill_half_tokens: float  # chunk tokens at which prefill attention eff is half max
    # (0: a FLOP rate independent of the chunk; the span term then carries the shape)
    attn_prefill_fixed_s: float  # seconds per layer of the prefill attention kernel
    attn_decode_eff_small: float  # fraction of peak HBM bytes/s decode reads KV at, batch -> 0
    attn_decode_eff_large: float  # fraction of peak HBM bytes/s decode reads KV at, batch -> inf
    attn_decode_half_batch: float  # batch at which decode KV efficiency is halfway small->large
    attn_decode_fixed_s: float  # seconds per layer of the decode attention kernel
    allreduce: AllReduceParams  # NCCL all-reduce curves by group size
    allreduce_launch_s: float  # seconds of host launch per all-reduce (Vidur adds 20 us)
    sampler_fixed_s: float  # seconds per iteration of the sampler (softmax, top-k/p kernels)
    sampler_per_seq_s: float  # seconds per sampled sequence per iteration in the sampler
    cpu_step_s: float  # seconds of CPU/engine work per iteration (schedule, prepare, output)
    cpu_per_seq_s: float  # seconds of CPU/engine work per scheduled sequence per iteration
    cpu_launch_per_layer_s: float = 0.0  # seconds of host launch work per layer per iteration
    # that the GPU work overlaps (a floor on it); 0: CUDA graphs replay a step in one launch
    cpu_overlapped: bool = False  # host work runs beside the GPU step (async scheduling): a
    # step takes the longer of the two, not their sum
    # attention terms added with the FlashInfer fit (issue 25); their defaults (0) give the
    # chunk-only prefill and linear decode of the earlier parameter sets exactly
    attn_prefill_key_s: float = 0.0  # seconds per attended key of the longest query tile's
    # serial loop (the prefill kernel's span); 0: no span term
    attn_prefill_split_rows: float = 0.0  # query rows (tokens x heads per GPU) at which half
    # the span remains: fewer rows split the key loop across idle SMs; 0: never split
    attn_decode_item_s: float = 0.0  # seconds per (sequence, KV head) work item of decode
    attn_decode_floor_s: float = 0.0  # seconds per layer decode attention takes at least on
    # long contexts (the split-KV path: partial attention, then a merge kernel)
    attn_decode_floor_half_tokens: float = 0.0  # context tokens per sequence at which half the
    # floor applies (0: all of it at any context)
    sampler_logit_passes: float = 0.0  # HBM passes over each sampled row's fp32 logits (V x 4
    # bytes each) the sampler makes (issue 31, sim/cost/sampler_cost.py); 0: the flat estimate alone

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "allreduce":
                if not isinstance(value, AllReduceParams):
                    raise ConfigError("allreduce", value, "must be an AllReduceParams")
            elif f.name == "cpu_overlapped":
                if not isinstance(value, bool):
                    raise ConfigError(f.name, value, "must be true or false")
            elif f.name in EFFICIENCY_FIELDS:
                _check_finite_nonneg(f.name, value, allow_zero=False)
                check_fraction(f.name, value)
            else:
                _check_finite_nonneg(f.name, value, allow_zero=f.name in ZERO_OK_FIELDS
                                     or not f.name.endswith(("_tokens", "_batch")))
