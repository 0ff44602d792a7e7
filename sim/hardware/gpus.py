"""GPU datasheet numbers used by the roofline cost model.

Units: memory in bytes of *usable device memory* as nvidia-smi reports it (MiB = 2**20 bytes,
so an "80GB" A100 is 81920 MiB = 80 GiB); bandwidths in decimal bytes/s as vendors state them
(1 GB/s = 1e9 bytes/s); peak rates in FLOP/s for dense (non-sparse) math.

Interconnect bandwidth is per direction: NVLink datasheets quote the bidirectional total
(V100 300 GB/s, A100 600 GB/s, H100/H200 900 GB/s), so the per-direction figure is half of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from sim.util.errors import ConfigError, check_positive

MIB = 2**20  # bytes per MiB
GB = 1e9  # bytes per decimal GB
TFLOPS = 1e12  # FLOP/s per TFLOP/s


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU's peak rates and memory, from its public datasheet."""

    name: str  # canonical name, e.g. "A100-80GB"
    memory_bytes: int  # bytes of device memory (as nvidia-smi reports it)
    hbm_bandwidth: float  # bytes/s, peak device-memory bandwidth
    peak_tensor_flops: float  # FLOP/s, dense fp16/bf16 tensor-core peak
    peak_vector_flops: float  # FLOP/s, fp32 non-tensor peak (used for dequantization)
    interconnect_bandwidth: float  # bytes/s per direction between GPUs (NVLink or PCIe)
    interconnect_latency_s: float  # seconds, fixed latency of one collective call
    peak_fp8_flops: float = 0.0  # FLOP/s, dense fp8 tensor-core peak (0: no fp8 tensor cores)
    peak_int8_ops: float = 0.0  # ops/s, dense int8 tensor-core peak (0: not stated; recorded only)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("name", self.name, "GPU name must be non-empty")
        for field in ("memory_bytes", "hbm_bandwidth", "peak_tensor_flops",
                      "peak_vector_flops", "interconnect_bandwidth"):
            value = getattr(self, field)
            if not math.isfinite(value):
                raise ConfigError(field, value, "must be finite")
            check_positive(field, value)
        check_positive("interconnect_latency_s", self.interconnect_latency_s, allow_zero=True)
        for field in ("peak_fp8_flops", "peak_int8_ops"):
            value = getattr(self, field)
            if not math.isfinite(value):
                raise ConfigError(field, value, "must be finite")
            check_positive(field, value, allow_zero=True)

    @property
    def has_fp8(self) -> bool:
        """Whether the GPU has fp8 tensor cores (runs fp8 weights and activations)."""
        return self.peak_fp8_flops > 0


NVLINK_LATENCY_S = 8e-6  # seconds, one small NCCL all-reduce over NVLink
PCIE_LATENCY_S = 20e-6  # seconds, one small NCCL all-reduce over PCIe

_BUILTIN = (
    # V100-SXM2-32GB: 32 GB HBM2 (32768 MiB), 900 GB/s, 125 TFLOP/s tensor, 15.7 fp32, NVLink 300.
    GPUSpec("V100-32GB", 32768 * MIB, 900 * GB, 125 * TFLOPS, 15.7 * TFLOPS,
            150 * GB, NVLINK_LATENCY_S),
    # A10G (AWS g5): 24 GB GDDR6 (23028 MiB), 600 GB/s, ~70 TFLOP/s dense fp16, 31.2 fp32, PCIe 4.
    GPUSpec("A10G", 23028 * MIB, 600 * GB, 70 * TFLOPS, 31.2 * TFLOPS,
            32 * GB, PCIE_LATENCY_S),
    # A100-SXM4-40GB: 40960 MiB, 1555 GB/s, 312 TFLOP/s, 19.5 fp32, NVLink 600; int8 624 TOPS
    # dense, no fp8 (NVIDIA A100 datasheet).
    GPUSpec("A100-40GB", 40960 * MIB, 1555 * GB, 312 * TFLOPS, 19.5 * TFLOPS,
            300 * GB, NVLINK_LATENCY_S, peak_int8_ops=624 * TFLOPS),
    # A100-SXM4-80GB: 81920 MiB, 2039 GB/s, 312 TFLOP/s, 19.5 fp32, NVLink 600; int8 624 TOPS.
    GPUSpec("A100-80GB", 81920 * MIB, 2039 * GB, 312 * TFLOPS, 19.5 * TFLOPS,
            300 * GB, NVLINK_LATENCY_S, peak_int8_ops=624 * TFLOPS),
    # H100-SXM5-80GB: 81559 MiB, 3350 GB/s, 989 TFLOP/s, 67 fp32, NVLink 900; fp8 1979 TFLOP/s
    # and int8 1979 TOPS dense (NVIDIA H100 datasheet, 3958 with sparsity).
    GPUSpec("H100-80GB", 81559 * MIB, 3350 * GB, 989 * TFLOPS, 67 * TFLOPS,
            450 * GB, NVLINK_LATENCY_S, peak_fp8_flops=1979 * TFLOPS,
            peak_int8_ops=1979 * TFLOPS),
    # H200-SXM 141 GB: 143771 MiB, 4800 GB/s, 989 TFLOP/s, 67 fp32, NVLink 900; fp8 1979
    # TFLOP/s and int8 1979 TOPS dense (NVIDIA H200 datasheet, 3958 with sparsity).
    GPUSpec("H200", 143771 * MIB, 4800 * GB, 989 * TFLOPS, 67 * TFLOPS,
            450 * GB, NVLINK_LATENCY_S, peak_fp8_flops=1979 * TFLOPS,
            peak_int8_ops=1979 * TFLOPS),
    # L40S: 48 GB GDDR6 (46068 MiB as nvidia-smi reports it), 864 GB/s, 362 TFLOP/s dense
    # fp16/bf16 (733 with sparsity), fp8 733 TFLOP/s and int8 733 TOPS dense, 91.6 fp32, PCIe
    # 4.0 x16 (64 GB/s bidirectional: 32 per direction), no NVLink (NVIDIA L40S datasheet).
    GPUSpec("L40S", 46068 * MIB, 864 * GB, 362 * TFLOPS, 91.6 * TFLOPS,
            32 * GB, PCIE_LATENCY_S, peak_fp8_flops=733 * TFLOPS, peak_int8_ops=733 * TFLOPS),
)

GPUS: Mapping[str, GPUSpec] = MappingProxyType({g.name: g for g in _BUILTIN})

_ALIASES: Mapping[str, str] = MappingProxyType({
    "v100": "V100-32GB", "v100-32g": "V100-32GB", "v100-sxm2-32gb": "V100-32GB",
    "a10g": "A10G", "a10g-24gb": "A10G",
    "a100-40g": "A100-40GB", "a100-sxm4-40gb": "A100-40GB",
    "a100": "A100-80GB", "a100-80g": "A100-80GB", "a100-sxm4-80gb": "A100-80GB",
    "h100": "H100-80GB", "h100-80g": "H100-80GB", "h100-sxm": "H100-80GB",
    "h100-sxm5-80gb": "H100-80GB",
    "h200": "H200", "h200-141gb": "H200", "h200-sxm": "H200",
    "l40s-48gb": "L40S",
})


def dense_peak_flops(gpu: GPUSpec, weight_dtype: str) -> float:
    """FLOP/s peak of the dense matmuls: fp8 weights and activations (W8A8) on fp8 tensor cores;
    fp16/bf16 and weight-only int8/int4 (dequantized to fp16) at the fp16/bf16 peak."""
    return gpu.peak_fp8_flops if weight_dtype == "fp8" else gpu.peak_tensor_flops


def check_weight_dtype_fits(gpu: GPUSpec, weight_dtype: str) -> None:
    """ConfigError naming weight_dtype and the GPU when it cannot run `weight_dtype`."""
    if weight_dtype == "fp8" and not gpu.has_fp8:
        raise ConfigError("weight_dtype", weight_dtype, (
            f"{gpu.name} has no fp8 tensor cores; use fp16, bf16, int8 or int4 there, or a GPU "
            f"with fp8 (H100, H200, L40S, or a GPU file declaring tensor_tflops.fp8)"))


def _normalize(name: str) -> str:
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    return key.removeprefix("nvidia-")


def get_gpu(name: str) -> GPUSpec:
    """Look a GPU up by name, case-insensitively; "a100" means the 80 GB part."""
    key = _normalize(name)
    for spec in GPUS.values():
        if spec.name.lower() == key:
            return spec
    if key in _ALIASES:
        return GPUS[_ALIASES[key]]
    raise ConfigError("gpu", name, f"unknown GPU; known: {', '.join(GPUS)}, or a GPU file "
                      f"(.yaml / .json, docs/hardware.md)")
