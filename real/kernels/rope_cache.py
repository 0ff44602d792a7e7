"""Triton RoPE + KV-cache write: rotate q and k in place and store k / v at their cache slots.

One program per token (grid (T,)): it loads the token's cos / sin halves once from the fp32
table, rotates all of its query heads and key heads as [heads, head_dim / 2] tiles (HF's
rotate_half convention: the first half pairs with the second), writes q and k back in place
and, unless the token's slot is negative (a padding row of a CUDA-graph batch), stores the
rotated k and the untouched v at the slot (block = slot // block_size, offset = slot %
block_size). Rounding matches HF's `x * cos + rotate_half(x) * sin` in the activation dtype:
cos / sin are rounded to it, and so is each product and the sum (computed in fp32, rounded once
each, which equals the dtype's own arithmetic for fp16 / bf16).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate(x1, x2, cos, sin, dtype: tl.constexpr):
    """HF rotate_half RoPE of halves x1, x2 (fp32), each product and sum rounded to dtype."""
    a = (x1 * cos).to(dtype).to(tl.float32) - (x2 * sin).to(dtype).to(tl.float32)
    b = (x2 * cos).to(dtype).to(tl.float32) + (x1 * sin).to(dtype).to(tl.float32)
    return a.to(dtype), b.to(dtype)


@triton.jit
def _rope_heads(ptr, stride_h, n_heads, cos, sin, HALF: tl.constexpr, HEADS_PAD: tl.constexpr,
                HALF_PAD: tl.constexpr):
    """Rotate n_heads heads at ptr (one token) in place; returns the rotated halves."""
    h = tl.arange(0, HEADS_PAD)[:, None]
    d = tl.arange(0, HALF_PAD)[None, :]
    mask = (h < n_heads) & (d < HALF)
    p = ptr + h * stride_h + d
    x1 = tl.load(p, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(p + HALF, mask=mask, other=0.0).to(tl.float32)
    a, b = _rotate(x1, x2, cos, sin, ptr.dtype.element_ty)
    tl.store(p, a, mask=mask)
    tl.store(p + HALF, b, mask=mask)
    return a, b, h, d, mask


@triton.jit
def _rope_cache_kernel(q_ptr, k_ptr, v_ptr, pos_ptr, cs_ptr, kc_ptr, vc_ptr, slot_ptr,
                       n_q_heads, n_kv_heads, stride_qt, stride_qh, stride_kt, stride_kh,
                       stride_vt, stride_vh, stride_cs, stride_cb, stride_co, stride_ch,
                       BLOCK_SIZE: tl.constexpr, HALF: tl.constexpr, HALF_PAD: tl.constexpr,
                       HQ_PAD: tl.constexpr, HKV_PAD: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    dtype = q_ptr.dtype.element_ty
    pos = tl.load(pos_ptr + t).to(tl.int64)
    d = tl.arange(0, HALF_PAD)[None, :]
    cs = cs_ptr + pos * stride_cs + d
    cos = tl.load(cs, mask=d < HALF, other=0.0).to(dtype).to(tl.float32)
    sin = tl.load(cs + HALF, mask=d < HALF, other=0.0).to(dtype).to(tl.float32)
    _rope_heads(q_ptr + t * stride_qt, stride_qh, n_q_heads, cos, sin, HALF, HQ_PAD, HALF_PAD)
    k1, k2, h, d, mask = _rope_heads(k_ptr + t * stride_kt, stride_kh, n_kv_heads, cos, sin,
                                     HALF, HKV_PAD, HALF_PAD)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    mask = mask & (slot >= 0)
    dst = (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_co + h * stride_ch + d
    tl.store(kc_ptr + dst, k1, mask=mask)
    tl.store(kc_ptr + dst + HALF, k2, mask=mask)
    src = v_ptr + t * stride_vt + h * stride_vh + d
    tl.store(vc_ptr + dst, tl.load(src, mask=mask, other=0.0), mask=mask)
    tl.store(vc_ptr + dst + HALF, tl.load(src + HALF, mask=mask, other=0.0), mask=mask)


def rope_and_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                   cos_sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   slot_mapping: torch.Tensor) -> None:
    """Rotate q [T, Hq, D] and k [T, Hkv, D] in place (views of a fused qkv output are fine: any
    token and head strides, unit stride within a head) and write k / v to the paged caches
    [num_blocks, block_size, Hkv, D] at slot_mapping [T] (negative: not written)."""
    tokens, n_q, dim = q.shape
    n_kv = k.shape[1]
    if dim % 2 or cos_sin.shape[-1] != dim or cos_sin.stride(-1) != 1:
        raise ValueError(f"cos_sin {tuple(cos_sin.shape)} must be a unit-stride "
                         f"[positions, {dim}] table and head_dim even")
    if any(t.stride(-1) != 1 for t in (q, k, v, k_cache, v_cache)):
        raise ValueError("q, k, v and the caches need unit stride within a head")
    if k_cache.stride() != v_cache.stride():
        raise ValueError("k_cache and v_cache must share one layout")
    if tokens == 0:
        return
    half = dim // 2
    hq_pad, hkv_pad = triton.next_power_of_2(n_q), triton.next_power_of_2(n_kv)
    tile = hq_pad * half  # elements of one query half-tile
    num_warps = 4 if tile <= 2048 else (8 if tile <= 4096 else 16)
    _rope_cache_kernel[(tokens,)](
        q, k, v, positions, cos_sin, k_cache, v_cache, slot_mapping, n_q, n_kv,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        cos_sin.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        BLOCK_SIZE=k_cache.shape[1], HALF=half, HALF_PAD=triton.next_power_of_2(half),
        HQ_PAD=hq_pad, HKV_PAD=hkv_pad, num_warps=num_warps)
