"""Content ids (`block_ids`) of a synthetic token stream whose first tokens may be shared.

A generated workload names each token stream in granules of `block_tokens` tokens
(`sim/memory/prefix_keys.py`): granule i of a stream gets `own_base + i`, except granules lying wholly
inside the stream's shared leading tokens (a system prompt, a P-tuning task's soft prompt),
which get `shared_base + i`, the same in every stream that shares them. Streams take bases
STREAM_STRIDE apart, so ids of different streams never meet.
"""

from __future__ import annotations

STREAM_STRIDE = 2**32  # content ids per stream (granules of one token stream)


def stream_ids(block_tokens: int, num_tokens: int, own_base: int, shared_tokens: int = 0,
               shared_base: int = 0) -> tuple[int, ...]:
    """Content ids of a stream's first `num_tokens` tokens (granules of `block_tokens`; the
    last may end early), the granules inside its first `shared_tokens` tokens shared."""
    shared = shared_tokens // block_tokens  # granules wholly inside the shared tokens
    return tuple(shared_base + i if i < shared else own_base + i
                 for i in range(-(-num_tokens // block_tokens)))
