"""Decode jumps over block counts: how far a batch of single-token decodes can run unchanged.

A request holding `t` tokens has `-t % block_size` free slots in its last block; growing it by
`x` tokens takes `ceil(max(x - slack, 0) / block_size)` new blocks. A decode-only batch can run
as many iterations as its fewest remaining outputs allow while the free blocks cover every
request's growth; plain ints, as the batches are small (a few to a few hundred requests).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.request import Request


@dataclass(slots=True)
class DecodeBatch:
    """Running requests grown by one decode slot each, in admission order."""

    requests: list[Request]  # the decodes
    ids: list[int] | None = None  # their request ids (None: not gathered)
    held: list[int] | None = None  # tokens each holds after growing (None: not gathered)


def extra_blocks(slack: list[int], num_tokens: int, block_size: int) -> int:
    """Blocks requests with `slack[i]` free slots in their last block take to grow by
    `num_tokens` tokens each."""
    return sum([-(-(num_tokens - f) // block_size) for f in slack if num_tokens > f])


def jump_iterations(slack: list[int], most: int, free: int, block_size: int) -> tuple[int, int]:
    """(iterations, blocks the iterations after the first take): at most `most` iterations,
    the extra ones limited by `free` blocks (binary search; the first always fits)."""
    hi = most - 1  # extra iterations
    need = extra_blocks(slack, hi, block_size)
    if need <= free:
        return most, need  # the common case: every remaining output fits
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if extra_blocks(slack, mid, block_size) <= free:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1, extra_blocks(slack, lo, block_size)
