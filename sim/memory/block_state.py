"""The state every part of a paged KV-cache block manager shares: the free list, reference
counts, block tables and the prefix cache's maps (sim/memory/block_manager.py; its mix-ins
sim/memory/block_cache.py and sim/memory/block_batch.py work on these fields)."""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Hashable, Sequence

from sim.memory.block_pool import BlockPool

BlockKey = Hashable  # a block's content key (sim.memory.prefix_keys: (chained hash, end token))


class BlockState(BlockPool):
    """`num_blocks` blocks of `block_size` tokens, their references, tables and cache maps."""

    def __init__(self, num_blocks: int, block_size: int = 16, watermark: float = 0.0,
                 enable_caching: bool = False) -> None:
        super().__init__(num_blocks, block_size, watermark)
        self.enable_caching = enable_caching  # keep freed keyed blocks for reuse
        self._free: deque[int] = deque(range(num_blocks))  # never-keyed free blocks, lowest first
        self._ref = [0] * num_blocks  # references per block
        self._tables: dict[int, list[int]] = {}  # request id -> block ids
        # prefix cache (empty unless enable_caching)
        self._evictable: OrderedDict[int, BlockKey] = OrderedDict()  # free keyed blocks, LRU first
        self._cached: dict[BlockKey, int] = {}  # content key -> block
        self._key_of: dict[int, BlockKey] = {}  # block -> content key
        self._holders: dict[int, set[int]] = {}  # keyed block in use -> request ids holding it
        self._multi: set[int] = set()  # blocks held by two or more requests
        self._num_extra_refs = 0  # sum over blocks of (references - 1)
        self._num_keyed: dict[int, int] = {}  # request id -> leading blocks looked at for keys
        # request id -> (its keys, first block keyed lazily): blocks [first, num_keyed) are
        # keyed under private keys, registered only when the request releases them
        self._lazy: dict[int, tuple[Sequence[BlockKey], int]] = {}
        # dead runs in the LRU (sim/memory/block_runs.py): one entry each, under a negative id
        self._num_runs = 0  # runs in the LRU
        self._run_extra = 0  # blocks in runs beyond one per run (len(LRU) counts one a run)
        self._num_runs_made = 0  # runs ever parked (their sentinels: -1, -2, ...)
        self.num_queried_blocks = 0  # keys looked up on allocation (blocks)
        self.num_hit_blocks = 0  # of those, found cached and shared (blocks)
        self.num_evicted_blocks = 0  # cached blocks whose key was dropped to reuse them
