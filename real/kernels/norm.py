"""Triton fused residual add + RMSNorm: one program per row, statistics in fp32.

Matches `reference.fused_add_rms_norm` (HF LlamaRMSNorm's rounding): the sum x + residual is
rounded to x's dtype (and stored as the new residual), the normalized row is rounded to x's
dtype before the weight multiply, and the product is rounded to the output dtype. One pass: the
whole row (up to 16,384 elements in registers) is loaded once, reduced once and written once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _add_rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, new_res_ptr, n_cols, eps,
                         stride_x, stride_res, stride_out, stride_new,
                         HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)
        tl.store(new_res_ptr + row * stride_new + cols, x, mask=mask)
    h = x.to(tl.float32)
    mean_sq = tl.sum(h * h, axis=0) / n_cols
    normed = (h * tl.rsqrt(mean_sq + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (w * normed).to(out_ptr.dtype.element_ty),
             mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t as [rows, cols] with unit column stride (a view when possible)."""
    t = t.reshape(-1, t.shape[-1])
    return t if t.stride(-1) == 1 else t.contiguous()


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(x + residual) * weight, x + residual); the new residual is x when residual is
    None. Shapes [..., H]; the output dtype is torch's promotion of x and weight (x's dtype when
    they match, as in the engine)."""
    shape, cols = x.shape, x.shape[-1]
    x2 = _rows(x)
    out = torch.empty(x2.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    if residual is None:  # the new residual is x itself: nothing to store
        r2, new2, new_res = x2, x2, x
    else:
        r2 = _rows(residual)
        new2 = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
        new_res = new2.view(shape)
    if x2.shape[0]:
        block = triton.next_power_of_2(cols)
        num_warps = 4 if block <= 1024 else (8 if block <= 4096 else 16)
        _add_rms_norm_kernel[(x2.shape[0],)](
            x2, r2, weight, out, new2, cols, eps, x2.stride(0), r2.stride(0), out.stride(0),
            new2.stride(0), HAS_RESIDUAL=residual is not None, BLOCK=block, num_warps=num_warps)
    return out.view(shape), new_res
