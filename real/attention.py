"""Attention over the paged KV cache: per-iteration metadata and the kernels that read it.

Four backends, the default first where it runs (`resolve_backend_name`, reported as
`TorchExecutor.attention_backend`):
  paged         paged decode (split-KV) and prefill kernels reading K/V through the block table,
                no padding (`real/attn_paged.py`; Triton on CUDA, capturable in CUDA graphs;
                the torch references elsewhere): the default on CUDA;
  flash_attn    the flash-attn package's `flash_attn_varlen_func` (CUDA, fp16/bf16);
  torch_varlen  PyTorch's own flash kernel, `torch.nn.attention.varlen.varlen_attn` (CUDA);
  sdpa          `scaled_dot_product_attention`: all 1-token chunks (decodes) in one padded call,
                each longer chunk (prefill) in its own causal call: the default on CPU.
The varlen kernels read K/V straight from the blocks (`paged`) when the block size is a multiple
of 256 (flash-attn's page-size rule); otherwise each iteration gathers the batch's K/V into one
ragged buffer first (`gathered`). Metadata is built once per iteration, before the layer loop, so
the layers never synchronize with the host.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from sim.util.errors import ConfigError

PAGED_BLOCK_MULTIPLE = 256  # tokens: flash kernels read paged KV only with such block sizes


@dataclass(frozen=True)
class BatchLayout:
    """Host-side shape of one iteration: per scheduled request, its chunk and its blocks."""

    num_new: np.ndarray  # tokens computed per request (int64)
    num_context: np.ndarray  # tokens already cached per request (int64)
    block_tables: list[np.ndarray]  # block ids per request, covering context + new tokens
    block_size: int  # tokens per block

    @property
    def kv_lens(self) -> np.ndarray:
        return self.num_context + self.num_new

    @property
    def starts(self) -> np.ndarray:
        """Offset of each request's first new token in the flat batch."""
        return np.cumsum(self.num_new) - self.num_new

    def slots(self, i: int, start: int, stop: int) -> np.ndarray:
        """Cache slots (block * block_size + offset) of request i's positions [start, stop)."""
        pos = np.arange(start, stop)
        bs = self.block_size
        return self.block_tables[i][pos // bs] * bs + pos % bs


@dataclass
class PrefillChunk:
    """A chunk of more than one token, attended on its own (sdpa backend)."""

    start: int  # first token in the flat batch
    num_tokens: int  # query tokens
    kv_len: int  # keys: cached context plus the chunk
    blocks: torch.Tensor  # block ids holding the keys (long)
    mask: torch.Tensor | None  # [num_tokens, kv_len] bool, None when causal from position 0


@dataclass
class AttentionMetadata:
    """Device tensors one iteration's attention reads (built once, used by every layer)."""

    slot_mapping: torch.Tensor  # [tokens] long: cache slot of each new token
    decode_index: torch.Tensor | None = None  # sdpa: flat positions of 1-token chunks
    decode_blocks: torch.Tensor | None = None  # sdpa: [decodes, max blocks] block ids (0-padded)
    decode_mask: torch.Tensor | None = None  # sdpa: [decodes, 1, 1, keys] bool, key is valid
    prefills: list[PrefillChunk] = field(default_factory=list)  # sdpa: longer chunks
    cu_q: torch.Tensor | None = None  # varlen: [requests + 1] int32 query offsets
    cu_k: torch.Tensor | None = None  # varlen: [requests + 1] int32 key offsets
    max_q: int = 0  # varlen: longest chunk, tokens
    max_k: int = 0  # varlen: longest key sequence, tokens
    kv_slots: torch.Tensor | None = None  # varlen gathered: slots of every key, request-major
    block_table: torch.Tensor | None = None  # varlen paged: [requests, max blocks] int32
    seqused_k: torch.Tensor | None = None  # varlen paged: [requests] int32 key lengths


class AttentionBackend(Protocol):
    """Builds one iteration's metadata (any object with a `slot_mapping`), then attends for
    every layer."""

    name: str  # reported as TorchExecutor.attention_backend

    def build(self, layout: BatchLayout, device: torch.device) -> Any: ...

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                meta: Any) -> torch.Tensor: ...


def to_device(array: np.ndarray, device: torch.device, dtype: torch.dtype = torch.long
              ) -> torch.Tensor:
    """A host array on `device`, copied asynchronously from pinned memory on CUDA."""
    t = torch.from_numpy(np.ascontiguousarray(array)).to(dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t


def slot_mapping(layout: BatchLayout, device: torch.device) -> torch.Tensor:
    slots = [layout.slots(i, int(c), int(c + n))
             for i, (n, c) in enumerate(zip(layout.num_new, layout.num_context))]
    return to_device(np.concatenate(slots) if slots else np.zeros(0, np.int64), device)


def available_backends(device: torch.device, dtype: torch.dtype) -> list[str]:
    """Attention backends usable here, the default first."""
    from real.kernels.ops import triton_available

    names = []
    if device.type == "cuda" and triton_available(device):
        names.append("paged")
    if device.type == "cuda" and dtype in (torch.float16, torch.bfloat16):
        if importlib.util.find_spec("flash_attn") is not None:
            names.append("flash_attn")
        if importlib.util.find_spec("torch.nn.attention.varlen") is not None:
            names.append("torch_varlen")
    names.append("sdpa")
    return names if device.type == "cuda" else names + ["paged"]  # CPU: torch references


def default_block_size(backend: str) -> int:
    """Tokens per KV block: 256 lets the varlen kernels read blocks in place; else vLLM's 16."""
    return PAGED_BLOCK_MULTIPLE if backend in ("flash_attn", "torch_varlen") else 16


def resolve_backend_name(requested: str, device: torch.device, dtype: torch.dtype) -> str:
    """The backend `requested` names (`auto`: the default here), checked to be usable."""
    usable = available_backends(device, dtype)
    if requested == "auto":
        return usable[0]
    if requested not in usable:
        raise ConfigError("real.attention", requested, f"not usable on {device} with {dtype}; "
                          f"usable: {', '.join(usable)}")
    return requested

