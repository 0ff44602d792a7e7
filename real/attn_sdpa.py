"""The `sdpa` attention backend: torch's scaled_dot_product_attention over gathered blocks.

All 1-token chunks (decodes) run as one batched call over their blocks, padded to the longest
and masked; every longer chunk (a prefill, possibly after cached context) runs as its own causal
call. Works on any device and dtype; on CUDA torch picks its flash / memory-efficient kernels.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from real.attention import AttentionMetadata, BatchLayout, PrefillChunk, slot_mapping, to_device


class SdpaBackend:
    name = "sdpa"
    paged = True  # reads K/V through the block tables (gathering blocks per call)

    def build(self, layout: BatchLayout, device: torch.device) -> AttentionMetadata:
        """Metadata of one iteration, on `device`."""
        meta = AttentionMetadata(slot_mapping(layout, device))
        n, kv, starts, bs = layout.num_new, layout.kv_lens, layout.starts, layout.block_size
        dec = np.flatnonzero(n == 1)
        if len(dec):
            lens = kv[dec]
            width = int(-(-lens.max() // bs))
            blocks = np.zeros((len(dec), width), dtype=np.int64)
            for row, i in enumerate(dec.tolist()):
                table = layout.block_tables[i][: -(-int(kv[i]) // bs)]
                blocks[row, : len(table)] = table
            mask = np.arange(width * bs)[None, :] < lens[:, None]
            meta.decode_index = to_device(starts[dec], device)
            meta.decode_blocks = to_device(blocks, device)
            meta.decode_mask = to_device(mask[:, None, None, :], device, torch.bool)
        for i in np.flatnonzero(n > 1).tolist():
            c, q = int(layout.num_context[i]), int(n[i])
            table = layout.block_tables[i][: -(-(c + q) // bs)]
            mask = None
            if c:
                allowed = np.arange(c + q)[None, :] <= (c + np.arange(q))[:, None]
                mask = to_device(allowed, device, torch.bool)
            meta.prefills.append(PrefillChunk(int(starts[i]), q, c + q,
                                              to_device(table, device), mask))
        return meta

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                meta: AttentionMetadata) -> torch.Tensor:
        """Attention output [tokens, heads, head_dim] for queries [tokens, heads, head_dim]."""
        gqa = q.shape[1] != k_cache.shape[2]
        out = torch.empty_like(q)
        if meta.decode_index is not None:
            qd = q.index_select(0, meta.decode_index).unsqueeze(2)  # [B, H, 1, D]
            kd = k_cache[meta.decode_blocks].flatten(1, 2).transpose(1, 2)  # [B, Hkv, L, D]
            vd = v_cache[meta.decode_blocks].flatten(1, 2).transpose(1, 2)
            od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=meta.decode_mask,
                                                enable_gqa=gqa)
            out.index_copy_(0, meta.decode_index, od.squeeze(2))
        for p in meta.prefills:
            qp = q[p.start: p.start + p.num_tokens].transpose(0, 1).unsqueeze(0)
            kp = k_cache[p.blocks].flatten(0, 1)[: p.kv_len].transpose(0, 1).unsqueeze(0)
            vp = v_cache[p.blocks].flatten(0, 1)[: p.kv_len].transpose(0, 1).unsqueeze(0)
            op = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=p.mask,
                                                is_causal=p.mask is None, enable_gqa=gqa)
            out[p.start: p.start + p.num_tokens] = op[0].transpose(0, 1)
        return out
