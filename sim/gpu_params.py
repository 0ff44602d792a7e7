"""Per-GPU `StageParams` for the stage cost model, each value with where it came from.

A100-80GB is FITTED (`sim.stage_fit.fit_stage_params` from `FIT_START`, least squares on
log-time; tests/test_fidelity_stage.py refits and compares) on the shared
A100 profile of Llama-2-7B at TP 1 (`../shared/data/profiles/a100/`: Vidur's mlp.csv rows at
num_tensor_parallel_workers=1, the 47 attention_sample.csv rows, the intra-node all_reduce.csv
curve). Every other GPU is DERIVED from that fit by `derive_params`:
  * efficiencies (fractions of the GPU's own datasheet peak) are kept: the same kernels
    (cuBLAS GEMMs, FlashAttention / paged attention, fused norms) reach similar fractions of
    peak across NVIDIA generations;
  * gemm_half_tokens is scaled by the GPU's ridge point (peak FLOP/s / HBM bytes/s) over the
    A100-80GB's, so the memory- to compute-bound transition sits at the same place relative to
    the roofline ridge (H100: 295 FLOP/B vs 153 -> x1.93);
  * fixed per-kernel and per-layer costs are kept (launch + tail latencies of a few microseconds
    are about the same on every GPU from V100 to H200);
  * all-reduce: bus bandwidth = the A100 fit's fraction of its per-direction NVLink bandwidth
    (hardware.py, 300 GB/s) times the GPU's own interconnect bandwidth; latency = the A100 fit's
    plus (the GPU's interconnect_latency_s - the A100's): +12 us over PCIe;
  * sampler and CPU/engine costs are host-side and kept.
The sampler and CPU/engine values are NOT measured by any shared profile: they are order-of-
magnitude estimates from issue 12 (cause 5: an end-to-end engine pays ~10x the roofline's
0.3 ms per step) until the engine-benchmark calibration fits them.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Mapping

from sim.errors import ConfigError
from sim.hardware import GB, GPUS, MIB, PCIE_LATENCY_S, TFLOPS, GPUSpec, get_gpu
from sim.stage_params import AllReduceParams, StageParams

# L40S (not in sim/hardware.py this round): 48 GB GDDR6 (46068 MiB as nvidia-smi reports it),
# 864 GB/s, 362 TFLOP/s dense fp16/bf16 tensor (733 with sparsity), 91.6 TFLOP/s fp32, PCIe 4.0
# x16 (64 GB/s bidirectional: 32 GB/s per direction); NVIDIA L40S datasheet.
L40S = GPUSpec("L40S", 46068 * MIB, 864 * GB, 362 * TFLOPS, 91.6 * TFLOPS, 32 * GB,
               PCIE_LATENCY_S)

A100_REF = GPUS["A100-80GB"]  # the GPU the reference parameters were fitted on

# Fitted on the shared A100 Llama-2-7B profile (rows named per field); see the module doc.
A100_80GB_PARAMS = StageParams(
    gemm_compute_eff=0.732,  # fit: mlp.csv TP1 attn_pre_proj/attn_post_proj/mlp_up/down_proj
    gemm_half_tokens=65.0,  # fit: same GEMM rows (num_tokens 1..4096)
    gemm_weight_eff=0.835,  # fit: same GEMM rows; 0.68 of peak once gemm_fixed_s is included
    gemm_fixed_s=7.88e-6,  # fit: same GEMM rows (issue 12: 5-20 us per kernel)
    norm_eff=0.369,  # fit: mlp.csv TP1 input_layernorm + post_attention_layernorm
    rope_eff=0.454,  # fit: mlp.csv TP1 attn_rope
    act_eff=0.492,  # fit: mlp.csv TP1 mlp_act
    add_eff=1.0,  # fit: mlp.csv TP1 add (at its bound: 100 MB in 55 us at 4096 tokens)
    small_fixed_s=2.55e-6,  # fit: the five small-kernel ops above together
    attn_prefill_eff=0.193,  # fit: 7 prefill rows of attention_sample.csv (0.16 at 3840 tok)
    attn_prefill_half_tokens=770.0,  # fit: same prefill rows (chunks 112..3840)
    attn_prefill_fixed_s=1.41e-6,  # fit: same prefill rows
    attn_decode_eff_small=0.623,  # fit: 40 decode rows of attention_sample.csv (batch 1..128)
    attn_decode_eff_large=1.0,  # fit: same decode rows (at its bound: 2.0 TB/s at batch 128)
    attn_decode_half_batch=39.2,  # fit: same decode rows
    attn_decode_fixed_s=8.51e-6,  # fit: same decode rows
    allreduce=AllReduceParams(  # fit: all_reduce.csv, devices_per_node == num_workers rows
        num_workers=(2, 4, 8),  # GPUs per group measured on the A100 DGX
        latency_s=(44.2e-6, 39.5e-6, 44.4e-6),  # fit: bulk protocol alpha per group size
        bus_bandwidth=(170.3e9, 161.5e9, 152.6e9),  # fit: bulk beta per group size (bytes/s)
        # fit: low-latency protocol (NCCL LL) where it is the faster on >= 8 measured sizes:
        # 4 GPUs measure ~20 us below ~140 KB, 8 GPUs ~25-35 us; 2 GPUs show no such regime
        ll_latency_s=(44.2e-6, 19.7e-6, 31.6e-6),  # fit: LL alpha (2 GPUs: the bulk curve)
        ll_bus_bandwidth=(170.3e9, 10.05e9, 18.79e9)),  # fit: LL beta (bytes/s)
    allreduce_launch_s=20e-6,  # public: Vidur adds 0.02 ms of CPU launch per all-reduce
    sampler_fixed_s=0.2e-3,  # estimate (issue 12 cause 5), not measured here
    sampler_per_seq_s=2e-6,  # estimate, not measured here
    cpu_step_s=2.5e-3,  # estimate: ~10x the roofline's 0.3 ms step overhead (issue 12)
    cpu_per_seq_s=5e-6,  # estimate, not measured here
)


def _ridge(gpu: GPUSpec) -> float:
    return gpu.peak_tensor_flops / gpu.hbm_bandwidth  # FLOP per byte


def derive_params(gpu: GPUSpec, ref: StageParams = A100_80GB_PARAMS,
                  ref_gpu: GPUSpec = A100_REF) -> StageParams:
    """`ref` (fitted on `ref_gpu`) carried over to `gpu` by the rules of the module doc."""
    link = gpu.interconnect_bandwidth / ref_gpu.interconnect_bandwidth
    extra_lat = gpu.interconnect_latency_s - ref_gpu.interconnect_latency_s
    ar = ref.allreduce
    allreduce = AllReduceParams(
        ar.num_workers, tuple(max(0.0, lat + extra_lat) for lat in ar.latency_s),
        tuple(bw * link for bw in ar.bus_bandwidth),
        tuple(max(0.0, lat + extra_lat) for lat in ar.ll_latency_s),
        tuple(bw * link for bw in ar.ll_bus_bandwidth))
    return replace(ref, gemm_half_tokens=ref.gemm_half_tokens * _ridge(gpu) / _ridge(ref_gpu),
                   allreduce=allreduce)


GPU_STAGE_PARAMS: Mapping[str, StageParams] = MappingProxyType({
    # fitted on the shared A100 profile (above)
    "A100-80GB": A100_80GB_PARAMS,
    # derived: the same GA100 chip with HBM2 at 1555 GB/s: ridge 201 vs 153 FLOP/B ->
    # gemm_half_tokens x1.31; NVLink 300 GB/s per direction as the A100-80GB: all-reduce kept
    "A100-40GB": derive_params(GPUS["A100-40GB"]),
    # derived: 989 TFLOP/s / 3350 GB/s: ridge x1.93; NVLink 4 450 GB/s per direction: all-reduce
    # bus bandwidth x1.5, latency kept
    "H100-80GB": derive_params(GPUS["H100-80GB"]),
    # derived: 989 TFLOP/s / 4800 GB/s: ridge x1.35; NVLink 450 GB/s: bus bandwidth x1.5
    "H200": derive_params(GPUS["H200"]),
    # derived: 362 TFLOP/s / 864 GB/s: ridge x2.74; PCIe 4.0 x16 (32 GB/s per direction):
    # bus bandwidth x0.107 (about 17 GB/s), latency +12 us (PCIe vs NVLink collective latency)
    "L40S": derive_params(L40S),
    # derived: 70 TFLOP/s / 600 GB/s: ridge x0.76; PCIe 4.0: bus bandwidth x0.107, latency +12 us
    "A10G": derive_params(GPUS["A10G"]),
    # derived: 125 TFLOP/s / 900 GB/s: ridge x0.91; NVLink 2 150 GB/s per direction: bus
    # bandwidth x0.5. V100 has no FlashAttention-2: the A100's attention efficiencies are a guess
    "V100-32GB": derive_params(GPUS["V100-32GB"]),
})
STAGE_GPUS: Mapping[str, GPUSpec] = MappingProxyType({**GPUS, L40S.name: L40S})


def get_stage_gpu(name: str) -> GPUSpec:
    """A GPU by name: sim.hardware's GPUs, plus L40S."""
    if name.strip().lower().removeprefix("nvidia-").replace("_", "-") in ("l40s", "l40s-48gb"):
        return L40S
    return get_gpu(name)


def stage_params_for(gpu: str | GPUSpec) -> StageParams:
    """The StageParams of a GPU by name or spec: its own set, else (a user's GPUSpec, e.g. from
    a GPU file) derived from the A100 fit by the module doc's rules; ConfigError for an
    unknown name."""
    if isinstance(gpu, GPUSpec) and gpu.name not in GPU_STAGE_PARAMS:
        return derive_params(gpu)
    name = gpu.name if isinstance(gpu, GPUSpec) else get_stage_gpu(gpu).name
    if name not in GPU_STAGE_PARAMS:
        raise ConfigError("gpu", name, f"no stage parameters; known: "
                          f"{', '.join(GPU_STAGE_PARAMS)}")
    return GPU_STAGE_PARAMS[name]
