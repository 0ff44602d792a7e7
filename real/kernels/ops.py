"""The fused ops the engine calls: the Triton kernel on CUDA, the torch reference elsewhere.

Each op has `real.kernels.reference`'s signature. It runs the Triton kernel when its tensors are
on CUDA and triton imports (`triton_available`), else the reference. `use_triton(True)` forces
the kernels for the duration of a `with` block (the interpreter tests run them on CPU with
TRITON_INTERPRET=1), `use_triton(False)` forces the references; the choice lives in a context
variable reset on exit, so nothing outlives the block. Importing this module imports neither
triton nor the kernel modules: they load on the first kernel call.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import torch

from real.kernels import reference
from real.kernels.schedule import choose_num_splits, prefill_block_m, prefill_tiles

__all__ = ["PrefillTiles", "choose_num_splits", "fused_add_rms_norm", "paged_decode_attention",
           "paged_prefill_attention", "prefill_block_m", "prefill_tiles", "rope_and_cache",
           "silu_and_mul", "triton_available", "use_triton"]

_FORCED: ContextVar[bool | None] = ContextVar("real_kernels_use_triton", default=None)


@contextmanager
def use_triton(force: bool = True) -> Iterator[None]:
    """Within the block, run the Triton kernels (True) or the references (False) on any device."""
    token = _FORCED.set(force)
    try:
        yield
    finally:
        _FORCED.reset(token)


@functools.lru_cache(maxsize=1)
def _triton_imports() -> bool:
    if importlib.util.find_spec("triton") is None:
        return False
    try:
        importlib.import_module("triton")
    except Exception:  # a broken install (no driver libraries, ABI mismatch) counts as absent
        return False
    return True


def triton_available(device: torch.device | str) -> bool:
    """Whether the Triton kernels can run on `device`: a CUDA device, with triton importable."""
    return torch.device(device).type == "cuda" and _triton_imports()


def _kernels(t: torch.Tensor) -> bool:
    forced = _FORCED.get()
    return triton_available(t.device) if forced is None else forced


@dataclass(frozen=True)
class PrefillTiles:
    """The prefill kernel's work list on the device (see `schedule.prefill_tiles`)."""

    tile_row: torch.Tensor  # [num_tiles] int32: row of each tile
    tile_q_offset: torch.Tensor  # [num_tiles] int32: tile's first query in its chunk, tokens
    block_m: int  # queries per tile

    @classmethod
    def build(cls, q_len: np.ndarray, block_m: int, device: torch.device | str) -> PrefillTiles:
        """Tiles of chunks of q_len tokens, copied to `device` (host work, before the layers)."""
        rows, offsets = prefill_tiles(q_len, block_m)
        return cls(_to_device(rows, device), _to_device(offsets, device), block_m)


def _to_device(array: np.ndarray, device: torch.device | str) -> torch.Tensor:
    """A host array on `device`, copied asynchronously from pinned memory on CUDA."""
    t = torch.from_numpy(array)
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(x + residual) * weight, x + residual); see `reference.fused_add_rms_norm`."""
    if _kernels(x):
        from real.kernels import norm
        return norm.fused_add_rms_norm(x, residual, weight, eps)
    return reference.fused_add_rms_norm(x, residual, weight, eps)


def rope_and_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                   cos_sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   slot_mapping: torch.Tensor) -> None:
    """RoPE on q and k in place, k / v into the paged cache; see `reference.rope_and_cache`."""
    if _kernels(q):
        from real.kernels import rope_cache
        rope_cache.rope_and_cache(q, k, v, positions, cos_sin, k_cache, v_cache, slot_mapping)
    else:
        reference.rope_and_cache(q, k, v, positions, cos_sin, k_cache, v_cache, slot_mapping)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of gate_up [..., 2I]; see `reference.silu_and_mul`."""
    if _kernels(gate_up):
        from real.kernels import activation
        return activation.silu_and_mul(gate_up)
    return reference.silu_and_mul(gate_up)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor,
                           query_index: torch.Tensor, scale: float,
                           num_splits: int = 1,
                           active_splits: torch.Tensor | None = None) -> torch.Tensor:
    """Decode rows' attention [B, Hq, D]; see `reference.paged_decode_attention`. `num_splits`
    (a Python int, e.g. from `choose_num_splits`) fixes the kernel's split-KV grid;
    `active_splits` (int32 [1] on the device) how many of them share the keys (a graph's plan)."""
    args = (q, k_cache, v_cache, block_tables, seq_lens, query_index, scale, num_splits)
    if _kernels(q):
        from real.kernels import attention_decode
        return attention_decode.paged_decode_attention(*args, active_splits=active_splits)
    return reference.paged_decode_attention(*args)


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, q_start: torch.Tensor, q_len: torch.Tensor,
                            context_len: torch.Tensor, scale: float, out: torch.Tensor,
                            tiles: PrefillTiles | None = None) -> None:
    """Prefill chunks' causal attention into `out`; see `reference.paged_prefill_attention`.

    The kernel runs over `tiles` (`PrefillTiles.build(q_len_host, prefill_block_m(...), dev)`,
    built once per iteration on the host). Without them the kernel path builds them from q_len,
    which copies q_len to the host: a sync that a CUDA-graph capture cannot contain.
    """
    args = (q, k_cache, v_cache, block_tables, q_start, q_len, context_len, scale, out)
    if not _kernels(q):
        reference.paged_prefill_attention(*args)
        return
    from real.kernels import attention_prefill
    if tiles is None:
        block_m = prefill_block_m(q.shape[2], q.element_size())
        tiles = PrefillTiles.build(q_len.cpu().numpy(), block_m, q.device)
    attention_prefill.paged_prefill_attention(*args, tiles.tile_row, tiles.tile_q_offset,
                                              tiles.block_m)
