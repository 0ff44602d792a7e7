"""The `paged` attention backend: kernels that read K/V through the block table, no padding.

Decode rows (one new token) run `ops.paged_decode_attention`: each row attends its own cached
keys page by page, with split-KV when the batch is too small to fill the GPU; prefill chunks run
`ops.paged_prefill_attention` (causal, bottom-right aligned after any cached context). Nothing
is gathered or padded to the longest context, so a decode reads each row's KV once. On CUDA both
are Triton kernels (`real/kernels/`), capturable in CUDA graphs; elsewhere their torch
references run. Metadata is built on the host once per iteration, before the layers.

Nothing compiles while serving: the decode kernel's split count (a compile-time constant) depends
only on the number of decode rows, through the same function the captured graphs use, and
`compile_kernels` compiles every count at warm-up; block tables are padded to a multiple of 16
columns, so their row stride never selects another specialization of a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from real.attention import BatchLayout, slot_mapping, to_device
from real.kernels import ops


@dataclass
class PagedMetadata:
    """Device tensors of one iteration (built once, read by every layer)."""

    slot_mapping: torch.Tensor  # [tokens] long: cache slot of each new token (-1: skip)
    decode_index: torch.Tensor | None = None  # [decodes] long: flat position of each decode
    decode_tables: torch.Tensor | None = None  # [decodes, blocks] int32 block tables
    decode_lens: torch.Tensor | None = None  # [decodes] int32 keys incl. the new token
    num_splits: int = 1  # split-KV partitions of the decode kernel
    decode_only: bool = False  # every token is a decode, in order (output = decode kernel's)
    prefill_tables: torch.Tensor | None = None  # [chunks, blocks] int32 block tables
    prefill_start: torch.Tensor | None = None  # [chunks] int32 first query in the flat batch
    prefill_len: torch.Tensor | None = None  # [chunks] int32 queries of each chunk
    prefill_context: torch.Tensor | None = None  # [chunks] int32 cached keys before the chunk
    prefill_tiles: ops.PrefillTiles | None = None  # the prefill kernel's work list
    active_splits: torch.Tensor | None = None  # [1] int32: splits in use of num_splits (graphs)
    scratch_row: bool = False  # the output has one row past the tokens, where padding decode
    # rows (decode_index = tokens) land (`real/mixed_graphs.py`)


TABLE_COLUMNS = 16  # block tables are padded to a multiple of this many columns


def block_table_rows(layout: BatchLayout, rows: np.ndarray, width: int) -> np.ndarray:
    """int32 [len(rows), width rounded up to TABLE_COLUMNS] block tables (0-padded)."""
    width = -(-max(width, 1) // TABLE_COLUMNS) * TABLE_COLUMNS
    out = np.zeros((len(rows), width), dtype=np.int32)
    bs = layout.block_size
    for j, i in enumerate(rows.tolist()):
        used = layout.block_tables[i][: -(-int(layout.kv_lens[i]) // bs)]
        out[j, : len(used)] = used
    return out


class PagedBackend:
    """Paged decode and prefill kernels over the block tables."""

    name = "paged"
    paged = True  # reads K/V through the block tables in place

    def __init__(self, num_sms: int = 1, num_kv_heads: int = 1, head_dim: int = 128,
                 elem_bytes: int = 2, max_seq_len: int = 4096) -> None:
        self.num_sms = num_sms  # streaming multiprocessors the split-KV choice fills
        self.num_kv_heads = num_kv_heads  # KV heads per token
        self.max_seq_len = max_seq_len  # tokens: the longest context a decode row may have
        self.block_m = ops.prefill_block_m(head_dim, elem_bytes)  # queries per prefill tile

    def num_splits(self, num_decodes: int) -> int:
        """Split-KV partitions of a decode batch (a function of its size alone)."""
        return ops.choose_num_splits(num_decodes, self.num_kv_heads, self.max_seq_len,
                                     self.num_sms)

    def compile_kernels(self, q: torch.Tensor, k_cache: torch.Tensor,
                        v_cache: torch.Tensor) -> None:
        """Run the decode kernel once per split count any batch size can choose (rows of
        length 0: nothing is read), so none compiles while serving."""
        counts = {self.num_splits(b) for b in range(1, self.num_sms + 1)}
        for splits in sorted(counts):
            zeros = torch.zeros(1, device=q.device, dtype=torch.int32)
            ops.paged_decode_attention(q[:1], k_cache, v_cache,
                                       torch.zeros(1, TABLE_COLUMNS, device=q.device,
                                                   dtype=torch.int32),
                                       zeros, zeros.long(), q.shape[-1] ** -0.5, splits)

    def build(self, layout: BatchLayout, device: torch.device) -> PagedMetadata:
        n, kv = layout.num_new, layout.kv_lens
        meta = PagedMetadata(slot_mapping(layout, device))
        dec, pre = np.flatnonzero(n == 1), np.flatnonzero(n > 1)
        bs = layout.block_size
        if len(dec):
            lens = kv[dec]
            meta.decode_index = to_device(layout.starts[dec], device)
            meta.decode_tables = to_device(block_table_rows(
                layout, dec, int(-(-lens.max() // bs))), device, torch.int32)
            meta.decode_lens = to_device(lens, device, torch.int32)
            meta.num_splits = self.num_splits(len(dec))
            meta.decode_only = len(pre) == 0
        if len(pre):
            meta.prefill_tables = to_device(block_table_rows(
                layout, pre, int(-(-kv[pre].max() // bs))), device, torch.int32)
            meta.prefill_start = to_device(layout.starts[pre], device, torch.int32)
            meta.prefill_len = to_device(n[pre], device, torch.int32)
            meta.prefill_context = to_device(layout.num_context[pre], device, torch.int32)
            meta.prefill_tiles = ops.PrefillTiles.build(n[pre].astype(np.int64), self.block_m,
                                                        device)
        return meta

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                meta: PagedMetadata) -> torch.Tensor:
        """Attention output [tokens, heads, head_dim] for queries [tokens, heads, head_dim]."""
        scale = q.shape[-1] ** -0.5
        decode = None
        if meta.decode_index is not None:
            decode = ops.paged_decode_attention(q, k_cache, v_cache, meta.decode_tables,
                                                meta.decode_lens, meta.decode_index, scale,
                                                meta.num_splits, meta.active_splits)
            if meta.decode_only:
                return decode
        tokens = q.shape[0]
        out = q.new_empty((tokens + int(meta.scratch_row),) + tuple(q.shape[1:]))
        if decode is not None:
            out.index_copy_(0, meta.decode_index, decode)
        if meta.prefill_start is not None:
            ops.paged_prefill_attention(q, k_cache, v_cache, meta.prefill_tables,
                                        meta.prefill_start, meta.prefill_len,
                                        meta.prefill_context, scale, out, meta.prefill_tiles)
        return out[:tokens] if meta.scratch_row else out
