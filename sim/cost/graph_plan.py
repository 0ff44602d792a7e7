"""Which iterations a CUDA-graph engine replays, and at what padded size (torch-free).

The real engine (`real/cuda_graphs.py`, `real/mixed_graphs.py`) captures two kinds of graph:
decode-only iterations per batch-size bucket (1, 2, 4, 8, 16, ... up to `max_graph_batch` rows),
and any other iteration (prefill chunks, with or without decode rows) per token-count bucket up
to `max_graph_tokens`, its decode rows, chunks and tiles padded to fixed counts so one graph
serves every schedule of that size. A replayed iteration costs the host one launch instead of a
few hundred, and the device computes the padding: the dense layers run on the bucket's tokens.
The engine time model (`sim/cost/engine_time.py`) prices exactly this plan, so both sides share it.
"""

from __future__ import annotations

import numpy as np

TOKEN_STEP = 16  # tokens: bucket granularity below 256 tokens
MAX_GRAPH_CHUNKS = 64  # prefill chunks a mixed graph holds at most (fewer in small buckets)


def token_buckets(max_tokens: int) -> list[int]:
    """Token-count buckets with a mixed graph: every 16 tokens up to 256, then every 32 to 512,
    64 to 1024, 128 beyond (padding stays under 1/8 of the bucket), the last `max_tokens`."""
    if max_tokens <= 0:
        return []
    sizes: list[int] = []
    size, step = TOKEN_STEP, TOKEN_STEP
    while size < max_tokens:
        sizes.append(size)
        if size >= 256 and size % (step * 16) == 0:
            step *= 2
        size += step
    sizes.append(max_tokens)
    return sizes


def token_bucket(num_tokens: int, max_tokens: int) -> int:
    """The smallest bucket holding `num_tokens` tokens, 0 when there is none."""
    for size in token_buckets(max_tokens):
        if size >= num_tokens:
            return size
    return 0


def max_chunks(bucket: int) -> int:
    """Prefill chunks a mixed graph of `bucket` tokens holds (a chunk has >= 2 tokens)."""
    return min(bucket // 2, MAX_GRAPH_CHUNKS)


def max_decodes(bucket: int, max_rows: int) -> int:
    """Decode rows a mixed graph of `bucket` tokens holds."""
    return min(bucket, max_rows)


def mixed_graph_tokens(num_tokens: np.ndarray, num_chunks: np.ndarray, num_decodes: np.ndarray,
                       max_tokens: int, max_rows: int) -> np.ndarray:
    """Per iteration, the bucket its mixed graph pads it to, or 0 where it runs eagerly (no
    bucket holds its tokens, or it has more chunks or decode rows than the bucket's graph)."""
    tokens = np.asarray(num_tokens)
    if max_tokens <= 0 or tokens.size == 0:
        return np.zeros(tokens.shape, dtype=np.int64)
    sizes = np.array(token_buckets(max_tokens) + [0], dtype=np.int64)  # 0: past the last
    bucket = sizes[np.searchsorted(sizes[:-1], tokens)]
    fits = ((np.asarray(num_chunks) <= np.minimum(bucket // 2, MAX_GRAPH_CHUNKS))
            & (np.asarray(num_decodes) <= np.minimum(bucket, max_rows)))
    return np.where(fits, bucket, 0)
