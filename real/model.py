"""A Llama-family decoder (Llama-2/3, Mistral, Qwen2) with selective batching over a paged cache.

The dense layers run on every new token of the batch flattened to [tokens, hidden]; attention
runs per request over its own cached keys (`real.attention`). Parameter names are transformers'
(`model.layers.0.self_attn.q_proj.weight`, ...), so a HF state dict or safetensors checkpoint
loads as is. Logits are computed only for the rows that sample.
"""

from __future__ import annotations

import torch
from torch import nn

from real.attention import AttentionBackend, AttentionMetadata, write_kv
from real.layers import RMSNorm, SwiGLU, apply_rope, rope_cos_sin, rope_inv_freq
from real.spec import RealModelConfig

Device = torch.device | str | None


class LlamaAttention(nn.Module):
    def __init__(self, config: RealModelConfig, device: Device = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        s = config.spec
        self.num_heads = s.num_attention_heads  # query heads
        self.num_kv_heads = s.num_kv_heads  # key / value heads
        self.head_dim = s.head_dim  # elements per head
        kw = {"device": device, "dtype": dtype}
        bias = config.attention_bias
        self.q_proj = nn.Linear(s.hidden_size, s.num_attention_heads * s.head_dim, bias=bias, **kw)
        self.k_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=bias, **kw)
        self.v_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=bias, **kw)
        self.o_proj = nn.Linear(s.num_attention_heads * s.head_dim, s.hidden_size, bias=False,
                                **kw)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                kv: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata,
                backend: AttentionBackend) -> torch.Tensor:
        t = x.shape[0]
        q = apply_rope(self.q_proj(x).view(t, self.num_heads, self.head_dim), cos, sin)
        k = apply_rope(self.k_proj(x).view(t, self.num_kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        write_kv(kv[0], kv[1], k, v, meta.slot_mapping)
        out = backend.forward(q, kv[0], kv[1], meta)
        return self.o_proj(out.reshape(t, self.num_heads * self.head_dim))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: RealModelConfig, device: Device = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        s = config.spec
        self.input_layernorm = RMSNorm(s.hidden_size, config.rms_norm_eps, device, dtype)
        self.self_attn = LlamaAttention(config, device, dtype)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, config.rms_norm_eps, device, dtype)
        self.mlp = SwiGLU(s.hidden_size, s.intermediate_size, device, dtype)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                kv: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata,
                backend: AttentionBackend) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, kv, meta, backend)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(nn.Module):
    def __init__(self, config: RealModelConfig, device: Device = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        s = config.spec
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size, device=device, dtype=dtype)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, device, dtype)
                                    for _ in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size, config.rms_norm_eps, device, dtype)


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
        self.inv_freq: torch.Tensor | None = None  # RoPE frequencies (set by `setup_rope`)

    def setup_rope(self, device: torch.device) -> None:
        """Compute the RoPE frequencies on `device` (after the weights are materialized)."""
        self.inv_freq = rope_inv_freq(self.config).to(device)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_caches: list[tuple[torch.Tensor, torch.Tensor]], meta: AttentionMetadata,
                backend: AttentionBackend) -> torch.Tensor:
        """Hidden states [tokens, hidden] of a flat batch of new tokens."""
        if self.inv_freq is None:
            self.setup_rope(input_ids.device)
        h = self.model.embed_tokens(input_ids)
        cos, sin = rope_cos_sin(self.inv_freq, positions, h.dtype)  # type: ignore[arg-type]
        for layer, kv in zip(self.model.layers, kv_caches):
            h = layer(h, cos, sin, kv, meta, backend)
        return h

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [rows, vocab] of the given rows' hidden states (final norm, then lm_head)."""
        return self.lm_head(self.model.norm(hidden))
