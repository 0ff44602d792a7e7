"""Device, dtype and KV-cache sizing of the real engine.

On CUDA the cache takes what `gpu_memory_utilization` of the GPU leaves after the weights, memory
outside torch (CUDA context, other processes) and the simulator's activation reserve
(`sim.cost.cost_model.default_activation_reserve`, vLLM's profiling batch); on CPU it holds an
explicit token budget.
"""

from __future__ import annotations

import torch

from real.kv_cache import kv_bytes_per_block
from real.sizing import MemoryPlan, host_memory_bytes
from real.spec import RealModelConfig
from sim.cost.cost_model import default_activation_reserve
from sim.util.errors import ConfigError

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def resolve_device(device: str | torch.device) -> torch.device:
    """`auto` -> cuda when available, else cpu; CUDA must exist when asked for."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:  # torch's message lists every device type it knows
        raise ConfigError("real.device", str(device), "auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("real.device", str(device), "CUDA is not available on this machine")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """`auto`/None -> bf16 on CUDA, fp32 on CPU; names fp32 | fp16 | bf16."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ConfigError("real.dtype", dtype, f"one of auto, {', '.join(DTYPES)}")
    return DTYPES[dtype]


def dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in DTYPES.items()}.get(dtype, str(dtype))


def num_kv_blocks(config: RealModelConfig, block_size: int, dtype: torch.dtype,
                  device: torch.device, kv_tokens: int | None,
                  gpu_memory_utilization: float) -> int:
    """Blocks of the KV cache: `kv_tokens` when given, else what the GPU has room for."""
    if kv_tokens is not None:
        return kv_tokens // block_size
    if device.type != "cuda":
        raise ConfigError("real.kv_tokens", None, "give a KV token budget when running on CPU")
    s = config.spec
    per_block = kv_bytes_per_block(s.num_layers, block_size, s.num_kv_heads, s.head_dim, dtype)
    free, total = torch.cuda.mem_get_info(device)
    outside_torch = (total - free) - torch.cuda.memory_reserved(device)
    usable = total * gpu_memory_utilization - outside_torch
    reserve = default_activation_reserve(s, 1)
    budget = usable - torch.cuda.memory_allocated(device) - reserve
    if budget < per_block:  # the weights left no room for one block: say so with the sizes
        plan = MemoryPlan(s, dtype_name(dtype), block_size, None, reserve)
        raise ConfigError("cluster.model", s.name, "leaves no room for one KV block: "
                          + plan.sizes(str(device), usable))
    return int(budget // per_block)


def usable_memory(device: torch.device, gpu_memory_utilization: float) -> tuple[float | None, str]:
    """Bytes the engine may allocate on `device` now, and a description of them.

    CUDA: utilization x total, less what other processes and live tensors hold (as
    `num_kv_blocks` counts it); CPU: the host's physical memory."""
    if device.type != "cuda":
        return host_memory_bytes(), "cpu (host memory)"
    free, total = torch.cuda.mem_get_info(device)
    # held by other processes, plus live tensors of this one (torch's free cache is reusable)
    used = (total - free) - torch.cuda.memory_reserved(device) \
        + torch.cuda.memory_allocated(device)
    return (total * gpu_memory_utilization - used,
            f"{device} ({total / 2**30:.2f} GiB x gpu_memory_utilization "
            f"{gpu_memory_utilization}, {used / 2**30:.2f} GiB already in use)")


def check_fits(config: RealModelConfig, block_size: int, dtype: torch.dtype,
               device: torch.device, kv_tokens: int | None,
               gpu_memory_utilization: float) -> None:
    """ConfigError with the sizes, before anything is allocated, unless the weights, the
    activation reserve and the KV budget (at least one block) fit the device."""
    s = config.spec
    reserve = default_activation_reserve(s, 1) if device.type == "cuda" else 0
    plan = MemoryPlan(s, dtype_name(dtype), block_size, kv_tokens, reserve)
    usable, label = usable_memory(device, gpu_memory_utilization)
    plan.check(label, usable)
