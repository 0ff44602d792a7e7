"""Builds the attention backend object for a resolved name (kept apart from `real.attention`,
which the backends themselves import, so no two modules import each other)."""

from __future__ import annotations

import logging

from real.attention import AttentionBackend

log = logging.getLogger(__name__)


def make_backend(name: str, block_size: int, num_kv_heads: int = 1, head_dim: int = 128,
                 elem_bytes: int = 2, num_sms: int = 1, max_seq_len: int = 4096
                 ) -> AttentionBackend:
    """The backend object for a resolved name (the shapes size the paged kernels' work)."""
    if name == "sdpa":
        from real.attn_sdpa import SdpaBackend
        backend: AttentionBackend = SdpaBackend()
    elif name == "paged":
        from real.attn_paged import PagedBackend
        backend = PagedBackend(num_sms, num_kv_heads, head_dim, elem_bytes, max_seq_len)
    else:
        from real.attn_varlen import VarlenBackend
        backend = VarlenBackend(name, block_size)
    log.info("attention backend: %s (block size %d)", backend.name, block_size)
    return backend
