"""Per-GPU `StageParams` for the stage cost model, each value with where it came from.

A100-80GB is FITTED (`sim.fit.stage_fit.fit_stage_params` from `FIT_START`, least squares on
log-time; tests/test_fidelity_stage.py refits and compares) on the shared
A100 profile of Llama-2-7B at TP 1 (`../shared/data/profiles/a100/`: Vidur's mlp.csv rows at
num_tensor_parallel_workers=1, the intra-node all_reduce.csv curve); its attention terms are
FITTED (`sim.fit.stage_fit.fit_attention` from `CONTEXT_START`; tests/test_stage_attention.py refits
where the rows are present) on the TP-1 rows of Vidur's measured FlashInfer attention profile of
Llama-3-8B on A100 (adi-anirudh/vidur_hbf_hbm_backend, data/profiling/compute/a100/meta-llama/
Meta-Llama-3-8B/attention.csv: prefill chunks 64..16128 over KV prefixes 0..16240, decode
batches 1..200 over 32..15872 tokens), and describe that kernel (`sim/cost/attention_kernels.py` keeps
the earlier set, fitted on the shared sample's FLASH_ATTENTION rows). H100-80GB is FITTED the
same way (`python -m experiments.fidelity.fit_gpu`) on Vidur's measured H100 profile
(github.com/microsoft/vidur, data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv
TP-1 rows and data/profiling/network/h100_dgx/all_reduce.csv); its attention rows are stored with
Git LFS and were not reachable, so its attention terms are derived from the A100
fit. Every other GPU is DERIVED from the nearest fit by `derive_params` (H200 from the H100,
the rest from the A100):
  * efficiencies (fractions of the GPU's own datasheet peak) are kept: the same kernels
    (cuBLAS GEMMs, FlashAttention / paged attention, fused norms) reach similar fractions of
    peak across NVIDIA generations;
  * gemm_half_tokens is scaled by the GPU's ridge point (peak FLOP/s / HBM bytes/s) over the
    reference's, so the memory- to compute-bound transition sits at the same place relative to
    the roofline ridge (H100: 295 FLOP/B vs 153 -> x1.93);
  * attn_prefill_key_s (a query tile's FLOPs per key at the GPU's rate) scales with the inverse
    of peak tensor FLOP/s (per SM it would be the SM's rate: an H100's 132 SMs against the
    A100's 108 make its span 22% longer than this rule; the specs hold no SM count);
  * fixed per-kernel and per-layer costs (launch and tail latencies of a few microseconds; the
    decode work item and split-KV floor too) scale with the inverse of the GPU's boost clock
    (`BOOST_CLOCK_MHZ`): a kernel's fixed part is a number of cycles. Checked on the measured H100
    profile: the A100 fit derived this way predicts its dense-layer rows within 8.4% median in
    every regime at TP 1-8 (3.0-8.4%), where keeping the A100's fixed costs missed small-batch
    decode at TP 8 by +35%;
  * all-reduce: bus bandwidth = the A100 fit's fraction of its per-direction NVLink bandwidth
    (hardware.py, 300 GB/s) times the GPU's own interconnect bandwidth; latency = the A100 fit's
    plus (the GPU's interconnect_latency_s - the A100's): +12 us over PCIe;
  * sampler and CPU/engine costs are host-side and kept.
The sampler and CPU/engine values are NOT measured by any shared profile: they are order-of-
magnitude estimates from issue 12 (cause 5: an end-to-end engine pays ~10x the roofline's
0.3 ms per step) until the engine-benchmark calibration fits them.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType
from typing import Mapping

from sim.cost.stage_params import AllReduceParams, StageParams
from sim.hardware.gpus import GB, GPUS, MIB, PCIE_LATENCY_S, TFLOPS, GPUSpec, get_gpu
from sim.util.errors import ConfigError

# L40S (not in sim/hardware/gpus.py this round): 48 GB GDDR6 (46068 MiB as nvidia-smi reports it),
# 864 GB/s, 362 TFLOP/s dense fp16/bf16 tensor (733 with sparsity), 91.6 TFLOP/s fp32, PCIe 4.0
# x16 (64 GB/s bidirectional: 32 GB/s per direction); NVIDIA L40S datasheet.
L40S = GPUSpec("L40S", 46068 * MIB, 864 * GB, 362 * TFLOPS, 91.6 * TFLOPS, 32 * GB,
               PCIE_LATENCY_S)

A100_REF = GPUS["A100-80GB"]  # the GPU the reference parameters were fitted on

# SM boost clocks (MHz) from NVIDIA's datasheets: fixed kernel costs scale with their inverse
BOOST_CLOCK_MHZ: Mapping[str, float] = MappingProxyType({
    "V100-32GB": 1530.0, "A10G": 1710.0, "A100-40GB": 1410.0, "A100-80GB": 1410.0,
    "H100-80GB": 1980.0, "H200": 1980.0, "L40S": 2520.0})

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
    # attention: FlashInfer on Llama-3-8B (module doc); 254 TP-1 prefill rows (the kernel;
    # its 0.55 us/token KV save left out, sim/measured/profile_tables.py), 106 decode rows (kernel + save)
    attn_prefill_eff=0.683,  # fit: prefill rows (FLOPs at 213 TFLOP/s, span aside)
    attn_prefill_half_tokens=0.0,  # FlashInfer's FLOP rate does not fall with the chunk
    attn_prefill_fixed_s=22.7e-6,  # fit: prefill rows
    attn_prefill_key_s=1.15e-7,  # fit: prefill rows (the longest query tile's loop per key)
    attn_prefill_split_rows=54900.0,  # fit: prefill rows (query rows x heads per GPU)
    attn_decode_eff_small=0.646,  # fit: decode rows
    attn_decode_eff_large=0.846,  # fit: decode rows (1.72 TB/s at large batch)
    attn_decode_half_batch=12.5,  # fit: decode rows
    attn_decode_fixed_s=8.10e-6,  # fit: decode rows (the 2-3 us KV save included)
    attn_decode_item_s=13.8e-9,  # fit: decode rows (per sequence and KV head)
    attn_decode_floor_s=28.8e-6,  # fit: decode rows (split-KV: 24-27 us at TP 1 and 4 alike)
    attn_decode_floor_half_tokens=133.0,  # fit: decode rows (6 us at 32 tokens: no split)
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


def clock_ratio(gpu: GPUSpec, ref_gpu: GPUSpec) -> float:
    """The reference GPU's boost clock over `gpu`'s (1 when either is not listed: a GPU file's
    own GPU keeps the reference's fixed costs)."""
    mine, ref = BOOST_CLOCK_MHZ.get(gpu.name), BOOST_CLOCK_MHZ.get(ref_gpu.name)
    return ref / mine if mine and ref else 1.0


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
    clock = clock_ratio(gpu, ref_gpu)
    return replace(ref, gemm_half_tokens=ref.gemm_half_tokens * _ridge(gpu) / _ridge(ref_gpu),
                   allreduce=allreduce, gemm_fixed_s=ref.gemm_fixed_s * clock,
                   small_fixed_s=ref.small_fixed_s * clock,
                   attn_prefill_fixed_s=ref.attn_prefill_fixed_s * clock,
                   attn_decode_fixed_s=ref.attn_decode_fixed_s * clock,
                   attn_prefill_key_s=ref.attn_prefill_key_s * ref_gpu.peak_tensor_flops
                   / gpu.peak_tensor_flops,
                   attn_decode_item_s=ref.attn_decode_item_s * clock,
                   attn_decode_floor_s=ref.attn_decode_floor_s * clock)


H100_REF = GPUS["H100-80GB"]  # the second fitted GPU

# Fitted on Vidur's measured H100 profile (module doc): GEMMs and small kernels on the TP-1 rows
# of Llama-2-7B's mlp.csv (num_tokens 1..4096), all-reduce on h100_dgx/all_reduce.csv; the
# attention terms derived from the A100's FlashInfer fit (no H100 attention rows were
# reachable): efficiencies kept, span x 312/989 (peak FLOP/s), fixed costs x 1410/1980 (clock)
H100_80GB_PARAMS = replace(
    derive_params(H100_REF),
    gemm_compute_eff=0.786,  # fit: mlp.csv TP1 attn_pre_proj/attn_post_proj/mlp_up/down_proj
    gemm_half_tokens=185.0,  # fit: same GEMM rows
    gemm_weight_eff=0.851,  # fit: same GEMM rows
    gemm_fixed_s=6.04e-6,  # fit: same GEMM rows (A100 7.9 us x 1410 / 1980 MHz = 5.6 us)
    norm_eff=0.383,  # fit: mlp.csv TP1 input_layernorm + post_attention_layernorm
    rope_eff=0.503,  # fit: mlp.csv TP1 attn_rope
    act_eff=0.575,  # fit: mlp.csv TP1 mlp_act
    add_eff=1.0,  # fit: mlp.csv TP1 add (at its bound)
    small_fixed_s=2.03e-6,  # fit: the five small-kernel ops together
    allreduce=AllReduceParams(  # fit: h100_dgx/all_reduce.csv
        num_workers=(2, 4, 8),  # GPUs per group measured on the H100 DGX
        latency_s=(26.4e-6, 33.0e-6, 40.5e-6),  # fit: bulk protocol alpha per group size
        bus_bandwidth=(327.7e9, 388.6e9, 375.6e9),  # fit: bulk beta (bytes/s); the A100-derived
        # rule gave 255 / 242 / 229 GB/s
        ll_latency_s=(26.4e-6, 33.0e-6, 28.1e-6),  # fit: NCCL LL protocol (8 GPUs only)
        ll_bus_bandwidth=(327.7e9, 388.6e9, 302.4e9)))  # fit: LL beta (bytes/s)


GPU_STAGE_PARAMS: Mapping[str, StageParams] = MappingProxyType({
    # fitted on the shared A100 profile (above)
    "A100-80GB": A100_80GB_PARAMS,
    # derived: the same GA100 chip with HBM2 at 1555 GB/s: ridge 201 vs 153 FLOP/B ->
    # gemm_half_tokens x1.31; NVLink 300 GB/s per direction as the A100-80GB: all-reduce kept
    "A100-40GB": derive_params(GPUS["A100-40GB"]),
    # fitted on Vidur's measured H100 profile (above)
    "H100-80GB": H100_80GB_PARAMS,
    # derived from the H100 fit: the same GH100 die and clocks with HBM3e at 4800 GB/s: ridge
    # x0.70; the same NVLink 4 (450 GB/s per direction): all-reduce kept
    "H200": derive_params(GPUS["H200"], H100_80GB_PARAMS, H100_REF),
    # derived: 362 TFLOP/s / 864 GB/s: ridge x2.74; PCIe 4.0 x16 (32 GB/s per direction):
    # bus bandwidth x0.107 (about 17 GB/s), latency +12 us (PCIe vs NVLink collective latency);
    # 2520 MHz: fixed costs x0.56
    "L40S": derive_params(L40S),
    # derived: 70 TFLOP/s / 600 GB/s: ridge x0.76; PCIe 4.0: bus bandwidth x0.107, latency +12 us;
    # 1710 MHz: fixed costs x0.82
    "A10G": derive_params(GPUS["A10G"]),
    # derived: 125 TFLOP/s / 900 GB/s: ridge x0.91; NVLink 2 150 GB/s per direction: bus
    # bandwidth x0.5; 1530 MHz: fixed costs x0.92. V100 has no FlashAttention-2: the A100's
    # attention efficiencies are a guess
    "V100-32GB": derive_params(GPUS["V100-32GB"]),
})
STAGE_GPUS: Mapping[str, GPUSpec] = MappingProxyType({**GPUS, L40S.name: L40S})


def get_stage_gpu(name: str) -> GPUSpec:
    """A GPU by name: sim.hardware.gpus's GPUs, plus L40S."""
    if name.strip().lower().removeprefix("nvidia-").replace("_", "-") in ("l40s", "l40s-48gb"):
        return L40S
    return get_gpu(name)


FITTED = ((A100_REF, A100_80GB_PARAMS), (H100_REF, H100_80GB_PARAMS))  # measured references


def nearest_fit(gpu: GPUSpec) -> tuple[GPUSpec, StageParams]:
    """The fitted GPU closest to `gpu` in (log HBM bandwidth, log tensor peak)."""
    def distance(ref: GPUSpec) -> float:
        return (math.log(gpu.hbm_bandwidth / ref.hbm_bandwidth) ** 2
                + math.log(gpu.peak_tensor_flops / ref.peak_tensor_flops) ** 2)
    return min(FITTED, key=lambda pair: distance(pair[0]))


def stage_params_for(gpu: str | GPUSpec) -> StageParams:
    """The StageParams of a GPU by name or spec: its own set, else (a user's GPUSpec, e.g. from
    a GPU file) derived by the module doc's rules from the fitted GPU nearest to it (an
    H100-like file from the H100 fit); ConfigError for an unknown name."""
    if isinstance(gpu, GPUSpec) and gpu.name not in GPU_STAGE_PARAMS:
        ref_gpu, ref = nearest_fit(gpu)
        return derive_params(gpu, ref, ref_gpu)
    name = gpu.name if isinstance(gpu, GPUSpec) else get_stage_gpu(gpu).name
    if name not in GPU_STAGE_PARAMS:
        raise ConfigError("gpu", name, f"no stage parameters; known: "
                          f"{', '.join(GPU_STAGE_PARAMS)}")
    return GPU_STAGE_PARAMS[name]
