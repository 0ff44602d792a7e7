"""The split-KV decode plan of the paged attention kernel: how many programs share each row.

Plain numpy, shared by the real engine's kernels (`real/kernels/schedule.py`, which launches
them) and the engine time model (`sim/cost/engine_time.py`, which prices them): the kernel runs one
program per (decode row, kv head, split), each streaming its split of the row's keys. When the
rows are few the GPU is not filled, a program streams at a fraction of HBM bandwidth, and the
iteration waits for the longest row's split (`longest_split_tokens`), not for the sum of all rows.
"""

from __future__ import annotations

from functools import lru_cache

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


def num_splits_of(num_decodes: np.ndarray, num_kv_heads: int, max_seq_len: int,
                  num_sms: int) -> np.ndarray:
    """`choose_num_splits` of each entry of `num_decodes` (decode rows per iteration)."""
    rows = np.asarray(num_decodes, dtype=np.int64)
    table = _splits_table(num_kv_heads, max_seq_len, num_sms)
    return np.where(rows < len(table), table[np.minimum(rows, len(table) - 1)], 1)


@lru_cache(maxsize=64)
def _splits_table(num_kv_heads: int, max_seq_len: int, num_sms: int) -> np.ndarray:
    """Splits of every batch size below the one that fills the SMs (1 from there on)."""
    return np.array([choose_num_splits(b, num_kv_heads, max_seq_len, num_sms)
                     for b in range(_cdiv(num_sms, max(num_kv_heads, 1)) + 1)])


def longest_split_tokens(longest_kv: np.ndarray, num_decodes: np.ndarray, num_kv_heads: int,
                         max_seq_len: int, num_sms: int) -> np.ndarray:
    """Keys the busiest decode program streams: the longest row's KV over its split count."""
    splits = num_splits_of(num_decodes, num_kv_heads, max_seq_len, num_sms)
    return np.ceil(np.asarray(longest_kv, dtype=np.float64) / splits)
