"""A Llama-family decoder (Llama-2/3, Mistral, Qwen2) with selective batching over a paged cache.

The dense layers run on every new token of the batch flattened to [tokens, hidden]; attention
runs per request over its own cached keys (`real.attention`). As serving engines do, q, k and v
are one matmul (`qkv_proj`) and gate and up another (`gate_up_proj`), and the small ops are fused
kernels (`real.kernels.ops`: residual add + RMSNorm, RoPE + KV-cache write, SiLU-and-mul; Triton
on CUDA, their torch references elsewhere), so a decode step is a few kernels per layer and
captures in a CUDA graph. transformers' parameter names map onto slices of the fused weights
(`hf_parameter_views`), so a HF state dict or safetensors checkpoint loads as is. Logits are
computed only for the rows that sample.
"""

from __future__ import annotations

import torch
from torch import nn

from real.kernels import ops
from real.kernels.reference import cos_sin_table
from real.layers import rope_inv_freq
from real.spec import RealModelConfig

Device = torch.device | str | None


class RMSNormWeight(nn.Module):
    """An RMSNorm's scale; the norm itself is `ops.fused_add_rms_norm`."""

    def __init__(self, size: int, device: Device, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, device=device, dtype=dtype))  # scale


class LlamaAttention(nn.Module):
    def __init__(self, config: RealModelConfig, device: Device = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        s = config.spec
        self.num_heads = s.num_attention_heads  # query heads
        self.num_kv_heads = s.num_kv_heads  # key / value heads
        self.head_dim = s.head_dim  # elements per head
        self.q_size = s.num_attention_heads * s.head_dim  # columns of q in qkv_proj's output
        self.kv_size = s.num_kv_heads * s.head_dim  # columns of k (and of v)
        kw = {"device": device, "dtype": dtype}
        self.qkv_proj = nn.Linear(s.hidden_size, self.q_size + 2 * self.kv_size,
                                  bias=config.attention_bias, **kw)
        self.o_proj = nn.Linear(self.q_size, s.hidden_size, bias=False, **kw)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
                kv: tuple[torch.Tensor, torch.Tensor], meta, backend) -> torch.Tensor:
        t = x.shape[0]
        qkv = self.qkv_proj(x)
        q = qkv[:, : self.q_size].view(t, self.num_heads, self.head_dim)
        k = qkv[:, self.q_size: self.q_size + self.kv_size].view(t, self.num_kv_heads,
                                                                 self.head_dim)
        v = qkv[:, self.q_size + self.kv_size:].view(t, self.num_kv_heads, self.head_dim)
        ops.rope_and_cache(q, k, v, positions, cos_sin, kv[0], kv[1], meta.slot_mapping)
        out = backend.forward(q, kv[0], kv[1], meta)
        return self.o_proj(out.reshape(t, self.q_size))


class LlamaMLP(nn.Module):
    """down(silu(gate(x)) * up(x)), gate and up as one matmul."""

    def __init__(self, hidden: int, intermediate: int, device: Device = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        kw = {"bias": False, "device": device, "dtype": dtype}
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, **kw)  # type: ignore[arg-type]
        self.down_proj = nn.Linear(intermediate, hidden, **kw)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(ops.silu_and_mul(self.gate_up_proj(x)))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: RealModelConfig, device: Device = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        s = config.spec
        self.eps = config.rms_norm_eps  # RMSNorm epsilon
        self.input_layernorm = RMSNormWeight(s.hidden_size, device, dtype)
        self.self_attn = LlamaAttention(config, device, dtype)
        self.post_attention_layernorm = RMSNormWeight(s.hidden_size, device, dtype)
        self.mlp = LlamaMLP(s.hidden_size, s.intermediate_size, device, dtype)

    def forward(self, h: torch.Tensor, residual: torch.Tensor | None, positions: torch.Tensor,
                cos_sin: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], meta, backend
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(this layer's output, the residual stream before it is added): the next norm adds."""
        x, residual = ops.fused_add_rms_norm(h, residual, self.input_layernorm.weight, self.eps)
        h = self.self_attn(x, positions, cos_sin, kv, meta, backend)
        x, residual = ops.fused_add_rms_norm(h, residual, self.post_attention_layernorm.weight,
                                             self.eps)
        return self.mlp(x), residual


class LlamaModel(nn.Module):
    def __init__(self, config: RealModelConfig, device: Device = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        s = config.spec
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size, device=device, dtype=dtype)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, device, dtype)
                                    for _ in range(s.num_layers))
        self.norm = RMSNormWeight(s.hidden_size, device, dtype)


class LlamaForCausalLM(nn.Module):
    """The decoder plus lm_head; `forward` returns hidden states, `logits` the sampled rows'."""

    def __init__(self, config: RealModelConfig, device: Device = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        s = config.spec
        self.config = config  # shapes and forward-pass constants
        self.model = LlamaModel(config, device, dtype)
        self.lm_head = nn.Linear(s.hidden_size, s.vocab_size, bias=False, device=device,
                                 dtype=dtype)
        if s.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.cos_sin: torch.Tensor | None = None  # [positions, head_dim] fp32 (`setup_rope`)

    def setup_rope(self, device: torch.device, max_positions: int) -> None:
        """The RoPE cos / sin table of positions [0, max_positions) on `device`."""
        self.cos_sin = cos_sin_table(rope_inv_freq(self.config).to(device), max_positions)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_caches: list[tuple[torch.Tensor, torch.Tensor]], meta, backend
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden, residual) [tokens, hidden] of a flat batch of new tokens; `logits` adds
        them and applies the final norm."""
        if self.cos_sin is None:
            raise RuntimeError("setup_rope must run before the first forward pass")
        h = self.model.embed_tokens(input_ids)
        residual = None
        for layer, kv in zip(self.model.layers, kv_caches):
            h, residual = layer(h, residual, positions, self.cos_sin, kv, meta, backend)
        return h, residual  # type: ignore[return-value]

    def logits(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """Logits [rows, vocab] of the given rows (residual add, final norm, lm_head)."""
        x, _ = ops.fused_add_rms_norm(hidden, residual, self.model.norm.weight,
                                      self.config.rms_norm_eps)
        return self.lm_head(x)


def hf_parameter_views(model: LlamaForCausalLM) -> dict[str, torch.Tensor]:
    """transformers' parameter names -> the tensors (or row slices of fused ones) they fill."""
    s = model.config.spec
    views: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if name.endswith("qkv_proj.weight") or name.endswith("qkv_proj.bias"):
            base, kind = name.rsplit(".qkv_proj.", 1)
            q, kv = s.num_attention_heads * s.head_dim, s.num_kv_heads * s.head_dim
            for proj, (lo, hi) in zip("qkv", ((0, q), (q, q + kv), (q + kv, q + 2 * kv))):
                views[f"{base}.{proj}_proj.{kind}"] = param.data[lo:hi]
        elif name.endswith("gate_up_proj.weight"):
            base = name.rsplit(".gate_up_proj.", 1)[0]
            half = param.shape[0] // 2
            views[f"{base}.gate_proj.weight"] = param.data[:half]
            views[f"{base}.up_proj.weight"] = param.data[half:]
        else:
            views[name] = param.data
    return views
