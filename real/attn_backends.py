"""Builds the attention backend object for a resolved name (kept apart from `real.attention`,
which the backends themselves import, so no two modules import each other)."""

from __future__ import annotations

import logging

from real.attention import AttentionBackend

log = logging.getLogger(__name__)


def make_backend(name: str, block_size: int) -> AttentionBackend:
    """The backend object for a resolved name."""
    if name == "sdpa":
        from real.attn_sdpa import SdpaBackend
        backend: AttentionBackend = SdpaBackend()
    else:
        from real.attn_varlen import VarlenBackend
        backend = VarlenBackend(name, block_size)
    log.info("attention backend: %s (block size %d)", backend.name, block_size)
    return backend
