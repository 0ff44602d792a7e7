"""The varlen flash backends (CUDA, fp16/bf16): one kernel call for the whole ragged batch.

`flash_attn` calls the flash-attn package's `flash_attn_varlen_func`; `torch_varlen` calls
PyTorch's `torch.nn.attention.varlen.varlen_attn` (the same FlashAttention-2 kernels, shipped with
torch). Causal masks are bottom-right aligned, so a chunk after cached context attends to all of
it. With a block size that is a multiple of 256 the kernel reads K/V through the block table
(`paged`); otherwise the batch's keys are gathered into one ragged buffer per layer (`gathered`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from real.attention import (PAGED_BLOCK_MULTIPLE, AttentionMetadata, BatchLayout, slot_mapping,
                            to_device)


def _cumulative(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)])


class VarlenBackend:
    """One varlen flash-attention call per layer over the ragged batch."""

    def __init__(self, kind: str, block_size: int) -> None:
        self.kind = kind  # flash_attn | torch_varlen
        self.paged = block_size % PAGED_BLOCK_MULTIPLE == 0  # kernel reads the block table
        self.name = f"{kind}({'paged' if self.paged else 'gathered'})"
        self._kernel: Callable[..., Any] = _load_kernel(kind)

    def build(self, layout: BatchLayout, device: torch.device) -> AttentionMetadata:
        n, kv, bs = layout.num_new, layout.kv_lens, layout.block_size
        meta = AttentionMetadata(slot_mapping(layout, device))
        meta.cu_q = to_device(_cumulative(n), device, torch.int32)
        meta.cu_k = to_device(_cumulative(kv), device, torch.int32)
        meta.max_q, meta.max_k = int(n.max()), int(kv.max())
        if self.paged:
            width = int(-(-kv.max() // bs))
            table = np.zeros((len(n), width), dtype=np.int32)
            for i, blocks in enumerate(layout.block_tables):
                used = blocks[: -(-int(kv[i]) // bs)]
                table[i, : len(used)] = used
            meta.block_table = to_device(table, device, torch.int32)
            meta.seqused_k = to_device(kv, device, torch.int32)
        else:
            slots = [layout.slots(i, 0, int(k)) for i, k in enumerate(kv)]
            meta.kv_slots = to_device(np.concatenate(slots), device)
        return meta

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                meta: AttentionMetadata) -> torch.Tensor:
        if self.paged:
            k, v = k_cache, v_cache
        else:
            k = k_cache.view(-1, *k_cache.shape[2:]).index_select(0, meta.kv_slots)
            v = v_cache.view(-1, *v_cache.shape[2:]).index_select(0, meta.kv_slots)
        if self.kind == "flash_attn":
            return self._kernel(q, k, v, meta.cu_q, meta.cu_k, meta.max_q, meta.max_k,
                                causal=True, block_table=meta.block_table)
        extra = {"seqused_k": meta.seqused_k, "block_table": meta.block_table} if self.paged \
            else {}
        return self._kernel(q, k, v, meta.cu_q, meta.cu_k, meta.max_q, meta.max_k,
                            window_size=(-1, 0), enable_gqa=q.shape[1] != k.shape[-2], **extra)


def _load_kernel(kind: str) -> Callable[..., Any]:
    if kind == "flash_attn":
        from flash_attn import flash_attn_varlen_func  # optional dependency (CUDA only)
        return flash_attn_varlen_func
    from torch.nn.attention.varlen import varlen_attn  # torch >= 2.9
    return varlen_attn
