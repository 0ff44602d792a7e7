"""The varlen flash backends (CUDA, fp16/bf16): one kernel call for the whole ragged batch.

`flash_attn` calls the flash-attn package's `flash_attn_varlen_func`; `torch_varlen` calls
PyTorch's `torch.nn.attention.varlen.varlen_attn` (the same FlashAttention-2 kernels, shipped with
torch). Causal masks are bottom-right aligned, so a chunk after cached context attends to all of
it. With a block size that is a multiple of 256 the kernel reads K/V through the block table
(`paged`); otherwise the batch's keys are gathered into one ragged buffer per layer (`gathered`).

torch's `varlen_attn` has changed keywords between releases (2.9-2.11 take neither `enable_gqa`
nor a block table; 2.13 takes `enable_gqa`, `seqused_k` and `block_table`; a `page_table` some
builds take belongs to another contract, FlashAttention-3's appended KV cache, and is not used).
`varlen_call_options` reads the installed signature once and says which keywords
the call passes; the kernels handle grouped-query attention natively, so `enable_gqa` is passed
only where it exists, and paging is used only where the signature has a block table.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from real.attention import (PAGED_BLOCK_MULTIPLE, AttentionMetadata, BatchLayout, slot_mapping,
                            to_device)


def _cumulative(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)])


@dataclass(frozen=True)
class VarlenCallOptions:
    """Which keywords the installed torch `varlen_attn` takes."""

    causal: str  # "window_size" ((-1, 0) is causal) or "is_causal"
    gqa_keyword: bool  # takes enable_gqa (else grouped-query attention is native)
    block_table: str | None  # keyword of the paged-KV block table, None when unsupported


def varlen_call_options(kernel: Callable[..., Any]) -> VarlenCallOptions:
    """The call options of torch's varlen_attn, read off its signature."""
    params = inspect.signature(kernel).parameters
    if "window_size" in params:
        causal = "window_size"
    elif "is_causal" in params:
        causal = "is_causal"
    else:
        raise RuntimeError(f"torch varlen_attn{inspect.signature(kernel)} takes neither "
                           f"window_size nor is_causal: this torch is not supported; use "
                           f"attention: sdpa or paged")
    table = "block_table" if {"block_table", "seqused_k"} <= set(params) else None
    return VarlenCallOptions(causal, "enable_gqa" in params, table)


class VarlenBackend:
    """One varlen flash-attention call per layer over the ragged batch."""

    def __init__(self, kind: str, block_size: int,
                 kernel: Callable[..., Any] | None = None) -> None:
        self.kind = kind  # flash_attn | torch_varlen
        self._kernel: Callable[..., Any] = kernel or _load_kernel(kind)  # the varlen kernel
        self.options = varlen_call_options(self._kernel) if kind == "torch_varlen" else None
        can_page = self.options is None or self.options.block_table is not None
        self.paged = can_page and block_size % PAGED_BLOCK_MULTIPLE == 0  # reads block tables
        self.name = f"{kind}({'paged' if self.paged else 'gathered'})"

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
        q = q.contiguous()  # a view of the fused qkv projection: the kernels want dense heads
        if self.paged:
            k, v = k_cache, v_cache
        else:
            k = k_cache.view(-1, *k_cache.shape[2:]).index_select(0, meta.kv_slots)
            v = v_cache.view(-1, *v_cache.shape[2:]).index_select(0, meta.kv_slots)
        if self.kind == "flash_attn":
            return self._kernel(q, k, v, meta.cu_q, meta.cu_k, meta.max_q, meta.max_k,
                                causal=True, block_table=meta.block_table)
        return self._kernel(q, k, v, meta.cu_q, meta.cu_k, meta.max_q, meta.max_k,
                            **self._torch_keywords(q, k, meta))

    def _torch_keywords(self, q: torch.Tensor, k: torch.Tensor,
                        meta: AttentionMetadata) -> dict[str, Any]:
        """Keywords of torch's varlen_attn call, as the installed signature names them."""
        opts = self.options
        assert opts is not None
        kw: dict[str, Any] = ({"window_size": (-1, 0)} if opts.causal == "window_size"
                              else {"is_causal": True})
        if opts.gqa_keyword:
            kw["enable_gqa"] = q.shape[1] != k.shape[-2]
        if self.paged and opts.block_table is not None:
            kw["seqused_k"] = meta.seqused_k
            kw[opts.block_table] = meta.block_table
        return kw


def _load_kernel(kind: str) -> Callable[..., Any]:
    if kind == "flash_attn":
        from flash_attn import flash_attn_varlen_func  # optional dependency (CUDA only)
        return flash_attn_varlen_func
    from torch.nn.attention.varlen import varlen_attn  # torch >= 2.9
    return varlen_attn
