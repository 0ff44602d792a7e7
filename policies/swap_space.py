"""One instance's host memory for swapped-out KV (`preemption_mode: swap`, policies/swap.py)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sim.core.request import Request


@dataclass
class SwapSpace:
    """The host blocks of an instance's swap space and the requests swapped out to them."""

    num_total_blocks: int  # KV blocks the swap space holds (swap_space GiB / bytes per block)
    num_used_blocks: int = 0  # blocks swapped-out requests hold
    swapped: deque[Request] = field(default_factory=deque)  # swapped out, oldest first
    held_tokens: dict[int, int] = field(default_factory=dict)  # request id -> KV slots its GPU
    # blocks held when swapped out (tokens; restored on swap-in)

    @property
    def num_free_blocks(self) -> int:
        """Host blocks no swapped-out request holds."""
        return self.num_total_blocks - self.num_used_blocks
