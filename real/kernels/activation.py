"""Triton SwiGLU activation: out = silu(gate) * up on the fused gate_up projection.

gate_up [T, 2I] holds gate in its first I columns and up in the last I; out is [T, I]. Grid
(T, cdiv(I, BLOCK)): each program reads BLOCK gate and BLOCK up elements of one row and writes
BLOCK outputs, so the kernel streams 3 * I elements per row once. silu is computed in fp32 and
rounded to the activation dtype before the multiply, as torch's F.silu(gate) * up rounds.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024  # elements of one row per program


@triton.jit
def _silu_and_mul_kernel(gu_ptr, out_ptr, n_cols, stride_gu, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_gu + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    act = (g / (1.0 + tl.exp(-g))).to(gu_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (act * u).to(out_ptr.dtype.element_ty),
             mask=mask)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for gate_up [..., 2I]; returns a new [..., I] tensor."""
    inter = gate_up.shape[-1] // 2
    rows = gate_up.reshape(-1, gate_up.shape[-1])
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape[0], inter, dtype=gate_up.dtype, device=gate_up.device)
    if rows.shape[0] and inter:
        grid = (rows.shape[0], triton.cdiv(inter, BLOCK))
        _silu_and_mul_kernel[grid](rows, out, inter, rows.stride(0), out.stride(0), BLOCK=BLOCK,
                                   num_warps=4)
    return out.view(*gate_up.shape[:-1], inter)
