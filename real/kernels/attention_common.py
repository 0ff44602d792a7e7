"""Triton building blocks shared by the paged attention kernels: page gathers and the online
softmax step.

Scores are kept in log2 units: the caller passes qk_scale = softmax scale * log2(e), so the
softmax uses exp2 (one MUFU instruction) and a log-sum-exp is m + log2(l). Both matmuls accumulate
in fp32; `PREC` is the tl.dot input precision ("ieee" for fp32 inputs, so TF32 does not change
fp32 answers; "tf32", the default, which fp16 / bf16 inputs ignore).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # log2(e): converts natural-log scores to log2 units


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot input precision for activations of `dtype` (see the module docstring)."""
    return "ieee" if dtype == torch.float32 else "tf32"


def head_dim_pad(head_dim: int) -> int:
    """head_dim rounded up to a power of two, at least 16 (tl.dot's smallest K)."""
    return max(16, triton.next_power_of_2(head_dim))


@triton.jit
def kv_offsets(table_row_ptr, n, n_mask, kv_head, stride_cb, stride_co, stride_ch,
               BLOCK_SIZE: tl.constexpr):
    """Element offsets [BLOCK_N] (int64) of key positions n (tokens) of one row's kv head in a
    paged cache: block table_row[n // BLOCK_SIZE], offset n % BLOCK_SIZE. Masked positions read
    no table entry and get block 0."""
    page = tl.load(table_row_ptr + n // BLOCK_SIZE, mask=n_mask, other=0).to(tl.int64)
    return page * stride_cb + (n % BLOCK_SIZE) * stride_co + kv_head * stride_ch


@triton.jit
def attend_tile(q, acc, m_i, l_i, k_ptr, v_ptr, offs, d, load_mask, d_mask, score_mask,
                qk_scale, PREC: tl.constexpr, MASKED: tl.constexpr):
    """One online-softmax step of queries q [M, D_PAD] over a key tile at offs [N].

    load_mask [N]: keys that exist (others are not read); score_mask [M, N]: pairs that attend
    (used when MASKED). acc [M, D_PAD], m_i and l_i [M] are the running fp32 output, max and sum
    (log2 units). A row with every score masked keeps its state (its m stays -inf safely).
    """
    kt = tl.load(k_ptr + offs[None, :] + d[:, None],
                 mask=load_mask[None, :] & d_mask[:, None], other=0.0)  # [D_PAD, N]
    s = tl.dot(q, kt, input_precision=PREC) * qk_scale  # [M, N]
    if MASKED:
        s = tl.where(score_mask, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    v = tl.load(v_ptr + offs[:, None] + d[None, :],
                mask=load_mask[:, None] & d_mask[None, :], other=0.0)  # [N, D_PAD]
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return acc, m_new, l_i * alpha + tl.sum(p, 1)
