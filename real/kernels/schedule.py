"""Host-side launch planning for the attention kernels: split-KV counts and prefill tile lists.

Plain Python and numpy only (no torch, no triton): a scheduler can plan an iteration, and a
CUDA-graph capture can fix its split count, without importing either. Every value here is a
Python int or a host array, so the kernels' grids depend only on shapes and these ints.
"""

from __future__ import annotations

import numpy as np

from sim.cost.split_kv import (MAX_SPLITS, MIN_TOKENS_PER_SPLIT, PROGRAMS_PER_SM,  # noqa: F401
                          choose_num_splits)


def prefill_block_m(head_dim: int, elem_bytes: int) -> int:
    """Queries per prefill tile (BLOCK_M) for activations of `elem_bytes` bytes: 128 for 2-byte
    activations with head_dim <= 128, 64 for wider heads, 32 for fp32 (whose exact dot runs on
    FMA units and holds its operands in registers). Sized, with the kernel's BLOCK_N, to compile
    for sm_90 without register spills."""
    if elem_bytes > 2:
        return 32
    return 128 if head_dim <= 128 else 64


def prefill_tiles(q_len: np.ndarray, block_m: int) -> tuple[np.ndarray, np.ndarray]:
    """The prefill kernel's work list: one tile per `block_m` consecutive queries of a row.

    Returns (tile_row, tile_q_offset), int32 [num_tiles]: the row of each tile and the index of
    its first query within the row's chunk (tokens). Rows with q_len 0 get no tile. Tiles are
    ordered by decreasing query offset (stable): later queries attend more keys under the causal
    mask, so the longest tiles launch first and the short ones fill the tail of the grid.
    """
    if block_m < 1:
        raise ValueError(f"block_m must be positive, got {block_m}")
    lens = np.asarray(q_len, dtype=np.int64).reshape(-1)
    per_row = -(-np.maximum(lens, 0) // block_m)
    rows = np.repeat(np.arange(len(lens), dtype=np.int64), per_row)
    first = np.cumsum(per_row) - per_row
    offsets = (np.arange(len(rows), dtype=np.int64) - np.repeat(first, per_row)) * block_m
    order = np.argsort(-offsets, kind="stable")
    return rows[order].astype(np.int32), offsets[order].astype(np.int32)
