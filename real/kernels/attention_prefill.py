"""Triton paged prefill attention: flash-attention forward over chunks after cached context.

Grid (num_tiles, Hq). A tile (from `schedule.prefill_tiles`) is up to BLOCK_M consecutive queries
of one row; its program loads their [BLOCK_M, D] queries of one head once and walks the row's
keys BLOCK_N tokens at a time, gathering K / V rows through the block table, with an fp32 online
softmax (log2 units) and fp32 accumulator. Query i of a row (0-based in its chunk) attends keys
[0, context_len + i] (causal, bottom-right aligned), so the tile's keys split in two loops:
  keys [0, context_len + first query) are visible to every query of the tile: no mask at all;
  keys up to context_len + last query: the causal mask; tiles past it are never visited.
The query head's kv head is head // (Hq / Hkv); its K / V are re-read by each of the group's
programs, mostly from L2. Output rows past the chunk (tail of the last tile) are not written.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from real.kernels.attention_common import LOG2E, attend_tile, dot_precision, head_dim_pad
from real.kernels.attention_common import kv_offsets


@triton.jit
def _prefill_kernel(q_ptr, k_ptr, v_ptr, out_ptr, table_ptr, q_start_ptr, q_len_ptr, ctx_ptr,
                    tile_row_ptr, tile_off_ptr, qk_scale, stride_qt, stride_qh, stride_ot,
                    stride_oh, stride_tb, stride_cb, stride_co, stride_ch,
                    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
                    BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    PREC: tl.constexpr):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head // GROUP
    row = tl.load(tile_row_ptr + tile).to(tl.int64)
    first = tl.load(tile_off_ptr + tile).to(tl.int32)  # first query of the tile in its chunk
    q_len = tl.load(q_len_ptr + row).to(tl.int32)
    ctx = tl.load(ctx_ptr + row).to(tl.int32)
    tokens = tl.load(q_start_ptr + row).to(tl.int64) + first + tl.arange(0, BLOCK_M)
    i = first + tl.arange(0, BLOCK_M)  # queries, 0-based in the chunk
    m_mask = i < q_len
    d = tl.arange(0, D_PAD)
    d_mask = d < HEAD_DIM
    q = tl.load(q_ptr + tokens[:, None] * stride_qt + head * stride_qh + d[None, :],
                mask=m_mask[:, None] & d_mask[None, :], other=0.0)
    acc = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    table_row = table_ptr + row * stride_tb
    kv_end = ctx + tl.minimum(first + BLOCK_M, q_len)  # keys the tile's last query attends
    open_end = (ctx + first) // BLOCK_N * BLOCK_N  # whole tiles every query attends
    for n0 in range(0, open_end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        offs = kv_offsets(table_row, n, n < kv_end, kv_head, stride_cb, stride_co, stride_ch,
                          BLOCK_SIZE)
        acc, m_i, l_i = attend_tile(q, acc, m_i, l_i, k_ptr, v_ptr, offs, d, n < kv_end,
                                    d_mask, None, qk_scale, PREC, False)
    for n0 in range(open_end, kv_end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        offs = kv_offsets(table_row, n, n < kv_end, kv_head, stride_cb, stride_co, stride_ch,
                          BLOCK_SIZE)
        causal = n[None, :] <= ctx + i[:, None]  # also masks keys past kv_end
        acc, m_i, l_i = attend_tile(q, acc, m_i, l_i, k_ptr, v_ptr, offs, d, n < kv_end,
                                    d_mask, causal, qk_scale, PREC, True)
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(out_ptr + tokens[:, None] * stride_ot + head * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & d_mask[None, :])


def launch_config(head_dim: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(BLOCK_N keys per tile, num_warps, num_stages): 64 keys (32 for head_dim > 128) for 2-byte
    activations, 16 for fp32; with `schedule.prefill_block_m` these compile for sm_90 without
    register spills (bf16 head_dim 128: 128 x 64 tiles, wgmma, ~180 registers)."""
    if dtype == torch.float32:
        return 16, 8, 2
    return (64, 8, 3) if head_dim <= 128 else (32, 8, 2)


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, q_start: torch.Tensor,
                            q_len: torch.Tensor, context_len: torch.Tensor, scale: float,
                            out: torch.Tensor, tile_row: torch.Tensor,
                            tile_q_offset: torch.Tensor, block_m: int,
                            block_n: int | None = None) -> None:
    """Causal prefill attention into out [T, Hq, D] (see `reference.paged_prefill_attention`)
    over the tiles (tile_row, tile_q_offset) that `schedule.prefill_tiles(q_len, block_m)`
    built; `block_n` overrides the key tile (tokens, a power of two >= 16)."""
    n_heads, dim = q.shape[1], q.shape[2]
    if k_cache.stride() != v_cache.stride() or q.stride(-1) != 1 or k_cache.stride(-1) != 1:
        raise ValueError("q and the caches need unit stride within a head, one shared layout")
    if block_tables.stride(-1) != 1:
        raise ValueError("block_tables needs unit stride along a row")
    if out.stride(-1) != 1:
        raise ValueError("out needs unit stride within a head")
    num_tiles = tile_row.shape[0]
    if num_tiles == 0:
        return
    default_n, num_warps, num_stages = launch_config(dim, q.dtype)
    block_n = block_n or default_n
    _prefill_kernel[(num_tiles, n_heads)](
        q, k_cache, v_cache, out, block_tables, q_start, q_len, context_len, tile_row,
        tile_q_offset, scale * LOG2E, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        block_tables.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        GROUP=n_heads // k_cache.shape[2], HEAD_DIM=dim, D_PAD=head_dim_pad(dim),
        BLOCK_SIZE=k_cache.shape[1], BLOCK_M=block_m, BLOCK_N=block_n,
        PREC=dot_precision(q.dtype), num_warps=num_warps,
        num_stages=num_stages)
