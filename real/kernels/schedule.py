"""Host-side launch planning for the attention kernels: split-KV counts and prefill tile lists.

Plain Python and numpy only (no torch, no triton): a scheduler can plan an iteration, and a
CUDA-graph capture can fix its split count, without importing either. Every value here is a
Python int or a host array, so the kernels' grids depend only on shapes and these ints.
"""

from __future__ import annotations

import numpy as np

MIN_TOKENS_PER_SPLIT = 256  # keys: below this a split's fixed cost (q load, partials) dominates
MAX_SPLITS = 64  # splits per (row, kv head): bounds the fp32 workspace and the reduce's tile
PROGRAMS_PER_SM = 2  # decode programs per SM that keep enough loads in flight to stream HBM


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def choose_num_splits(batch_size: int, num_kv_heads: int, max_seq_len: int, num_sms: int) -> int:
    """KV splits per (row, kv head) for split-KV decode attention.

    One program per (row, kv head, split). When batch_size * num_kv_heads already reaches the SM
    count the grid fills the GPU and splitting only adds a reduce: 1. Otherwise split each row's
    keys so that about PROGRAMS_PER_SM programs run per SM, keeping at least
    MIN_TOKENS_PER_SPLIT keys (of `max_seq_len`, the longest context the launch must serve) per
    split and at most MAX_SPLITS splits. The count is rounded down to a power of two: it is a
    compile-time constant of the kernel, so few values mean few compiles, all done at warm-up.
    """
    programs = max(batch_size * num_kv_heads, 1)
    if programs >= num_sms:
        return 1
    wanted = _cdiv(PROGRAMS_PER_SM * num_sms, programs)
    by_length = max(max_seq_len // MIN_TOKENS_PER_SPLIT, 1)
    splits = max(1, min(wanted, by_length, MAX_SPLITS))
    return 1 << (splits.bit_length() - 1)


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
