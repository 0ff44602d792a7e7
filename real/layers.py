"""The Llama building blocks in plain torch: RMSNorm, rotary position embeddings, SwiGLU.

Computations follow transformers' LlamaForCausalLM so that fp32 logits agree to rounding:
RMSNorm in fp32, RoPE with `rotate_half` (non-interleaved halves) on cos / sin computed in fp32.
The engine runs fused versions of them (`real/kernels/`); these are the definitions the fused
ops are tested against, and `rope_inv_freq` gives the engine its RoPE frequencies.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from real.spec import RealModelConfig


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, device=device, dtype=dtype))  # scale
        self.eps = eps  # added to the mean square

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_inv_freq(config: RealModelConfig) -> torch.Tensor:
    """Inverse frequencies (fp32, head_dim / 2), with linear or Llama-3 scaling applied."""
    dim = config.spec.head_dim
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if config.rope_type == "linear":
        return inv / config.rope_factor
    if config.rope_type != "llama3":
        return inv
    old_len = config.rope_original_max_position
    low_wavelen = old_len / config.rope_low_freq_factor
    high_wavelen = old_len / config.rope_high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / config.rope_factor, inv)
    smooth = ((old_len / wavelen - config.rope_low_freq_factor)
              / (config.rope_high_freq_factor - config.rope_low_freq_factor))
    smoothed = (1 - smooth) * scaled / config.rope_factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [tokens, 1, head_dim] of each token's position, computed in fp32."""
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate `x` [tokens, heads, head_dim] by its tokens' positions."""
    return x * cos + _rotate_half(x) * sin


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), with transformers' parameter names."""

    def __init__(self, hidden: int, intermediate: int, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        kw = {"bias": False, "device": device, "dtype": dtype}
        self.gate_proj = nn.Linear(hidden, intermediate, **kw)  # type: ignore[arg-type]
        self.up_proj = nn.Linear(hidden, intermediate, **kw)  # type: ignore[arg-type]
        self.down_proj = nn.Linear(intermediate, hidden, **kw)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
