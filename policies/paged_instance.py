"""One instance's state under a paged-KV policy (policies/paged.py): queues and KV cache."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sim.core.request import Request
from sim.memory.block_counter import KVBlocks
from sim.memory.kv_moves import KVMoves

from policies.lora import LoraSlots
from policies.swap_space import SwapSpace


@dataclass
class PagedInstance:
    """One instance's queues and KV cache."""

    blocks: KVBlocks  # the instance's paged KV cache (counts only, without prefix caching)
    waiting: deque[Request] = field(default_factory=deque)  # routed here; preempted at the head
    running: list[Request] = field(default_factory=list)  # admitted, in admission order
    in_flight: list[Request] = field(default_factory=list)  # the running step's requests
    num_pending_blocks: int = 0  # blocks the step in flight takes after its first iteration
    swap: SwapSpace | None = None  # host memory for swapped-out KV (preemption_mode: swap)
    moves: KVMoves | None = None  # KV copies between tiers the next step makes (tiers on)
    max_num_seqs: int = 256  # running requests at most on this instance
    lora: LoraSlots | None = None  # resident LoRA adapters (policies/lora.py), when LoRA is on
