"""Pure-torch references of the fused kernels; also the engine's CPU path.

Each function has the signature and semantics of its Triton twin in `real.kernels.ops`:
  fused_add_rms_norm       residual add, then HF LlamaRMSNorm (fp32 statistics);
  rope_and_cache           HF rotate_half RoPE on q and k in place, k / v into the paged cache;
  silu_and_mul             SwiGLU's silu(gate) * up on the fused gate_up projection;
  paged_decode_attention   one query token per row over its paged keys (fp32 softmax);
  paged_prefill_attention  causal chunks after cached context, keys read through block tables.
Rounding follows transformers' Llama: activations are rounded to their dtype where HF rounds.
Paged layout: K and V caches [num_blocks, block_size, kv_heads, head_dim]; token position p of a
row lives in block `block_table[p // block_size]` at offset `p % block_size`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cos_sin_table(inv_freq: torch.Tensor, max_positions: int) -> torch.Tensor:
    """fp32 [max_positions, head_dim]: cos(p * inv_freq) in the first half, sin in the second.

    Computed as `real.layers.rope_cos_sin` does (fp32 product of position and frequency), so a
    row of the table equals that function's cos / sin halves before their cast.
    """
    freqs = torch.arange(max_positions, device=inv_freq.device).float()[:, None] * inv_freq[None]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(x + residual), x + residual); the sum is rounded to x's dtype, as HF's is."""
    new_residual = x if residual is None else x + residual
    h = new_residual.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype), new_residual


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_and_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                   cos_sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   slot_mapping: torch.Tensor) -> None:
    """Rotate q [T, Hq, D] and k [T, Hkv, D] in place, then store k and v at their cache slots.

    `cos_sin` [max_positions, D] fp32 (see `cos_sin_table`); cos / sin are cast to the
    activation dtype before the multiplies, as HF does. A negative slot is not written (its
    boolean selection syncs with the host on CUDA; the Triton kernel does not).
    """
    half = cos_sin.shape[-1] // 2
    table = cos_sin.index_select(0, positions.long())
    cos = table[:, :half].repeat(1, 2).to(q.dtype).unsqueeze(1)  # [T, 1, D]
    sin = table[:, half:].repeat(1, 2).to(q.dtype).unsqueeze(1)
    q.copy_(q * cos + _rotate_half(q) * sin)
    k.copy_(k * cos + _rotate_half(k) * sin)
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    k_cache.view(-1, *k.shape[1:]).index_copy_(0, slots, k[keep])
    v_cache.view(-1, *v.shape[1:]).index_copy_(0, slots, v[keep])


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for gate_up [..., 2I] holding gate then up; returns [..., I]."""
    half = gate_up.shape[-1] // 2
    return F.silu(gate_up[..., :half]) * gate_up[..., half:]


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor,
                           query_index: torch.Tensor, scale: float,
                           num_splits: int = 1,
                           active_splits: torch.Tensor | None = None) -> torch.Tensor:
    """Attention [B, Hq, D] of decode rows: row b's query q[query_index[b]] over its seq_lens[b]
    cached keys. A row with seq_len 0 is padding: its output is zeros. Softmax in fp32.

    Keys past a row's length are masked in the scores and zeroed in the values, so stale or
    non-finite cache contents there cannot leak in. `num_splits` (the Triton kernel's split-KV
    count) and `active_splits` do not change the result and are ignored here.
    """
    rows, hq, dim = block_tables.shape[0], q.shape[1], q.shape[2]
    bs, hkv = k_cache.shape[1], k_cache.shape[2]
    out = torch.zeros(rows, hq, dim, dtype=q.dtype, device=q.device)
    if rows == 0 or q.shape[0] == 0:
        return out
    tables = block_tables.long()
    if q.device.type == "cpu":  # trim to the longest row (a host sync costs nothing here)
        tables = tables[:, : -(-int(seq_lens.max()) // bs)]
    width = tables.shape[1] * bs  # keys gathered per row
    valid = torch.arange(width, device=q.device)[None, :] < seq_lens.long()[:, None]  # [B, L]
    qi = torch.where(seq_lens > 0, query_index.long(), torch.zeros_like(query_index.long()))
    qr = q.index_select(0, qi).float().view(rows, hkv, hq // hkv, dim)
    keys = k_cache[tables].flatten(1, 2).float().permute(0, 2, 3, 1)  # [B, Hkv, D, L]
    vals = v_cache[tables].flatten(1, 2).float().masked_fill(~valid[:, :, None, None], 0.0)
    scores = torch.matmul(qr, keys) * scale  # [B, Hkv, G, L]
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1).masked_fill(~valid[:, None, None, :], 0.0)
    return torch.matmul(probs, vals.transpose(1, 2)).reshape(rows, hq, dim).to(q.dtype)


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, q_start: torch.Tensor, q_len: torch.Tensor,
                            context_len: torch.Tensor, scale: float, out: torch.Tensor) -> None:
    """Causal attention of prefill chunks, written into out [T, Hq, D] at the chunks' tokens.

    Row r's queries are q[q_start[r] : q_start[r] + q_len[r]]; its keys are cache positions
    [0, context_len[r] + q_len[r]) (already written); its query i attends keys
    [0, context_len[r] + i] (causal, bottom-right aligned). One SDPA call per row: the rows'
    shapes differ, and padding them to one call would cost more than the loop.
    """
    bs = k_cache.shape[1]
    gqa = q.shape[1] != k_cache.shape[2]
    for r, (s, n, c) in enumerate(zip(q_start.tolist(), q_len.tolist(), context_len.tolist())):
        if n <= 0:
            continue
        kv = c + n  # keys the row's last query attends
        blocks = block_tables[r, : -(-kv // bs)].long()
        k = k_cache[blocks].flatten(0, 1)[:kv].transpose(0, 1)  # [Hkv, kv, D]
        v = v_cache[blocks].flatten(0, 1)[:kv].transpose(0, 1)
        mask = None
        if c:
            pos = torch.arange(kv, device=q.device)
            mask = pos[None, :] <= (c + torch.arange(n, device=q.device))[:, None]
        o = F.scaled_dot_product_attention(q[s: s + n].transpose(0, 1), k, v, attn_mask=mask,
                                           is_causal=mask is None, scale=scale, enable_gqa=gqa)
        out[s: s + n] = o.transpose(0, 1)
