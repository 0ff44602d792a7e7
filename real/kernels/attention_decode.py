"""Triton split-KV ("flash-decoding") paged attention for decode rows (one query token each).

Stage 1, grid (B, Hkv, NUM_SPLITS): a program takes one row, one kv head and one contiguous
share of the row's keys. It loads the GROUP = Hq / Hkv query heads that share the kv head as one
[GROUP_PAD, D] tile, so each K / V element it streams serves the whole group, and walks its keys
BLOCK_N tokens at a time, gathering each tile's rows through the block table (any block size).
Both matmuls use tl.dot with the group padded to GROUP_PAD = max(16, next_pow2(GROUP)) rows
(tl.dot's smallest M): the padding rows cost idle MMA lanes, which decode (a memory-bound
kernel, ~16 flops per byte of KV here against ~300 the tensor cores sustain) can spare, whereas a
broadcast-multiply-sum would hold a [GROUP, BLOCK_N, D] product in registers (32K fp32 for a
group of 4) and spill. The online softmax runs in fp32 (log2 units); each program writes its
normalized partial output and log-sum-exp to fp32 workspaces [B, Hq, NUM_SPLITS, (D)].
Stage 2, grid (B, Hq): merges a row's splits by their log-sum-exps.
With NUM_SPLITS == 1 stage 1 writes the output directly and stage 2 is skipped.

Split ranges are computed in-kernel from seq_lens (each split gets cdiv(seq_len, NUM_SPLITS)
keys rounded up to BLOCK_N), so the grid depends only on shapes and the caller's NUM_SPLITS and
one CUDA graph serves any context lengths. A row with seq_len 0 (padding) reads nothing, not
even its query, and its output is zeros. With `active_splits` (an int32 device scalar, at most
NUM_SPLITS) only that many splits share each row's keys and the rest find no key: a graph
captured with the widest grid then runs whatever split plan its batch has.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from real.kernels.attention_common import LOG2E, attend_tile, dot_precision, head_dim_pad
from real.kernels.attention_common import kv_offsets


@triton.jit
def _decode_split_kernel(q_ptr, k_ptr, v_ptr, table_ptr, seq_lens_ptr, qidx_ptr, out_ptr,
                         part_out_ptr, part_lse_ptr, active_ptr, qk_scale, stride_qt, stride_qh,
                         stride_tb,
                         stride_cb, stride_co, stride_ch, stride_ob, stride_oh,
                         NUM_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
                         HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                         BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr, PREC: tl.constexpr,
                         RUNTIME_SPLITS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + row).to(tl.int32)
    if RUNTIME_SPLITS:
        active = tl.load(active_ptr).to(tl.int32)  # splits in use, <= NUM_SPLITS
        per_split = tl.cdiv(tl.cdiv(seq_len, active), BLOCK_N) * BLOCK_N  # keys
    else:
        per_split = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N  # keys
    start = split * per_split
    end = tl.minimum(start + per_split, seq_len)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, D_PAD)
    heads = kv_head * GROUP + g
    g_mask = g < GROUP
    d_mask = d < HEAD_DIM
    token = tl.load(qidx_ptr + row, mask=start < end, other=0).to(tl.int64)
    q = tl.load(q_ptr + token * stride_qt + heads[:, None] * stride_qh + d[None, :],
                mask=g_mask[:, None] & d_mask[None, :] & (start < end), other=0.0)
    acc = tl.zeros([GROUP_PAD, D_PAD], dtype=tl.float32)
    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    table_row = table_ptr + row * stride_tb
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        n_mask = n < end
        offs = kv_offsets(table_row, n, n_mask, kv_head, stride_cb, stride_co, stride_ch,
                          BLOCK_SIZE)
        acc, m_i, l_i = attend_tile(q, acc, m_i, l_i, k_ptr, v_ptr, offs, d, n_mask, d_mask,
                                    n_mask[None, :], qk_scale, PREC, True)
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # zeros where the split had no key
    o_mask = g_mask[:, None] & d_mask[None, :]
    if NUM_SPLITS == 1:
        tl.store(out_ptr + row * stride_ob + heads[:, None] * stride_oh + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=o_mask)
    else:
        lse = tl.where(l_i > 0.0, m_i + tl.log2(tl.where(l_i > 0.0, l_i, 1.0)),
                       float("-inf"))  # log2 units
        part = (row * NUM_HEADS + heads) * NUM_SPLITS + split  # [GROUP_PAD] workspace rows
        tl.store(part_out_ptr + part[:, None] * HEAD_DIM + d[None, :], out, mask=o_mask)
        tl.store(part_lse_ptr + part, lse, mask=g_mask)


@triton.jit
def _decode_reduce_kernel(part_out_ptr, part_lse_ptr, out_ptr, stride_ob, stride_oh,
                          NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
                          NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, D_PAD)
    part = (row * NUM_HEADS + head) * NUM_SPLITS + s
    lse = tl.load(part_lse_ptr + part, mask=s < NUM_SPLITS, other=float("-inf"))
    m = tl.max(lse, 0)
    w = tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m))  # 0 for empty splits
    parts = tl.load(part_out_ptr + part[:, None] * HEAD_DIM + d[None, :],
                    mask=(s < NUM_SPLITS)[:, None] & (d < HEAD_DIM)[None, :], other=0.0)
    total = tl.sum(w, 0)
    out = tl.sum(parts * w[:, None], 0) / tl.where(total > 0.0, total, 1.0)
    tl.store(out_ptr + row * stride_ob + head * stride_oh + d, out.to(out_ptr.dtype.element_ty),
             mask=d < HEAD_DIM)


def launch_config(head_dim: int, dtype: torch.dtype) -> tuple[int, int]:
    """(BLOCK_N keys per tile, num_warps): 64 keys (32 for head_dim > 128) and 4 warps for 2-byte
    activations; 32 keys (16 for head_dim > 128) and 8 warps for fp32, whose exact dot holds its
    operands in registers. Each compiles for sm_90 without register spills."""
    wide = head_dim > 128
    if dtype == torch.float32:
        return (16 if wide else 32), 8
    return (32 if wide else 64), 4


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor,
                           query_index: torch.Tensor, scale: float, num_splits: int,
                           block_n: int | None = None,
                           active_splits: torch.Tensor | None = None) -> torch.Tensor:
    """Attention [B, Hq, D] of decode rows (see `reference.paged_decode_attention`); `block_n`
    overrides the key tile (tokens, a power of two >= 16); `active_splits` (int32 [1] on the
    device, 1..num_splits) sets how many of the grid's `num_splits` splits share the keys."""
    rows, n_heads, dim = block_tables.shape[0], q.shape[1], q.shape[2]
    n_kv = k_cache.shape[2]
    if k_cache.stride() != v_cache.stride() or q.stride(-1) != 1 or k_cache.stride(-1) != 1:
        raise ValueError("q and the caches need unit stride within a head, one shared layout")
    if block_tables.stride(-1) != 1:
        raise ValueError("block_tables needs unit stride along a row")
    out = torch.empty(rows, n_heads, dim, dtype=q.dtype, device=q.device)
    if rows == 0:
        return out
    splits = max(int(num_splits), 1)
    group = n_heads // n_kv
    default_n, num_warps = launch_config(dim, q.dtype)
    block_n = block_n or default_n
    part_out, part_lse = out, out  # unused with one split: stage 1 writes `out` directly
    if splits > 1:  # fp32 workspaces: normalized partial outputs and their log2-sum-exps
        part_out = torch.empty(rows, n_heads, splits, dim, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(rows, n_heads, splits, dtype=torch.float32, device=q.device)
    d_pad = head_dim_pad(dim)
    runtime = active_splits is not None and splits > 1
    _decode_split_kernel[(rows, n_kv, splits)](
        q, k_cache, v_cache, block_tables, seq_lens, query_index, out, part_out, part_lse,
        active_splits if runtime else seq_lens, scale * LOG2E, q.stride(0), q.stride(1),
        block_tables.stride(0), k_cache.stride(0),
        k_cache.stride(1), k_cache.stride(2), out.stride(0), out.stride(1), NUM_HEADS=n_heads,
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=dim,
        D_PAD=d_pad, BLOCK_SIZE=k_cache.shape[1], BLOCK_N=block_n, NUM_SPLITS=splits,
        PREC=dot_precision(q.dtype), RUNTIME_SPLITS=runtime, num_warps=num_warps, num_stages=2)
    if splits > 1:
        _decode_reduce_kernel[(rows, n_heads)](
            part_out, part_lse, out, out.stride(0), out.stride(1), NUM_HEADS=n_heads,
            HEAD_DIM=dim, D_PAD=d_pad, NUM_SPLITS=splits,
            SPLITS_PAD=triton.next_power_of_2(splits), num_warps=4)
    return out
