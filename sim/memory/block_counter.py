"""Paged KV-cache accounting without block identity: what the simulator needs when nothing is
shared (prefix caching off).

`BlockManager` (sim/memory/block_manager.py) keeps a block table per request and a free list, touching
every block a request takes or frees. Without prefix caching no block is ever shared or looked
up, so only counts matter: a request holding `t` tokens holds `ceil(t / block_size)` blocks, and
the free blocks are the total less the sum of those. `CountingBlockManager` keeps one int per
request and one running total, so growth and release are arithmetic, O(1) per call whatever the
number of blocks. It answers every query of `BlockManager` identically (tests/scale compares them
on random operation sequences), except that it has no block ids: `allocate` and `append` return
how many blocks they took (`BlockManager` returns their ids) and `block_table` raises. Callers that
need ids (the real engine, prefix caching) use `BlockManager`; `make_block_manager` picks.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Union

from sim.memory.block_manager import BlockKey, BlockManager, OutOfBlocks
from sim.memory.block_pool import BlockPool


class CountingBlockManager(BlockPool):
    """Block counts per request; the free-block count is the total less their sum."""

    enable_caching = False  # never: block identity is not kept
    num_hit_blocks = 0  # keys found cached (blocks): none without a cache
    num_evicted_blocks = 0  # cached blocks dropped for reuse: none without a cache
    num_cached_blocks = 0  # blocks registered under a content key: none

    def __init__(self, num_blocks: int, block_size: int = 16, watermark: float = 0.0) -> None:
        super().__init__(num_blocks, block_size, watermark)
        self.num_used_blocks = 0  # blocks some request holds
        self.num_queried_blocks = 0  # keys passed to allocate (blocks; none is ever cached)

    # ---- counters ---------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks no request holds."""
        return self.num_total_blocks - self.num_used_blocks

    def has(self, request_id: int) -> bool:
        return request_id in self._tokens

    def num_blocks(self, request_id: int) -> int:
        """Blocks `request_id` holds (0 when none)."""
        return -(-self._tokens.get(request_id, 0) // self.block_size)

    def num_tokens_of(self, request_ids: Sequence[int]) -> list[int]:
        """`num_tokens` of each id, in one pass."""
        get = self._tokens.get
        return [get(rid, 0) for rid in request_ids]

    def block_table(self, request_id: int) -> list[int]:
        raise TypeError(f"{type(self).__name__} keeps no block ids: use sim.memory."
                        f"block_manager.BlockManager where block tables are needed")

    # ---- prefix cache (never anything cached) -------------------------------------------
    def find_cached_prefix(self, keys: Sequence[BlockKey]) -> list[int]:
        """No block is ever cached: no hits."""
        return []

    def num_blocks_to_allocate(self, num_tokens: int, hits: Sequence[int] = ()) -> int:
        """Free blocks a new request of `num_tokens` tokens takes (no hits without a cache)."""
        if hits:
            raise ValueError("CountingBlockManager has no cached blocks to share")
        return -(-num_tokens // self.block_size)

    def shared_tokens(self, request_ids: Sequence[int]) -> int:
        """KV tokens counted twice when contexts are summed: none, nothing is shared."""
        return 0

    def cache_full_blocks(self, request_id: int, keys: Sequence[BlockKey],
                          num_computed_tokens: int) -> int:
        """Nothing is cached without block identity."""
        return 0

    def cache_computed(self, batch: Sequence[Any],
                       keys_of: Callable[[Any], Sequence[BlockKey]]) -> None:
        """Nothing is cached without block identity."""

    # ---- allocation -------------------------------------------------------------------
    def can_allocate(self, num_tokens: int, hits: Sequence[int] = ()) -> bool:
        """Whether a new request of `num_tokens` fits, keeping the watermark free."""
        return (self.num_blocks_to_allocate(num_tokens, hits)
                <= self.num_free_blocks - self.watermark_blocks)

    def allocate(self, request_id: int, num_tokens: int,
                 keys: Sequence[BlockKey] = ()) -> int:
        """Give a new request blocks for `num_tokens` tokens; returns how many it took."""
        if request_id in self._tokens:
            raise ValueError(f"request {request_id} already holds blocks")
        if len(keys) * self.block_size > num_tokens:
            raise ValueError(f"request {request_id}: {len(keys)} block keys for "
                             f"{num_tokens} tokens")
        need = -(-num_tokens // self.block_size)
        free = self.num_total_blocks - self.num_used_blocks
        if need > free:
            raise OutOfBlocks(f"request {request_id} needs {need} blocks, {free} free")
        self.num_queried_blocks += len(keys)
        self._tokens[request_id] = num_tokens
        self.num_used_blocks += need
        return need

    def blocks_to_append(self, request_id: int, num_new_tokens: int) -> int:
        """Extra blocks a request needs to grow by `num_new_tokens` tokens."""
        held, bs = self._tokens.get(request_id, 0), self.block_size
        return max(0, -(-(held + num_new_tokens) // bs) - -(-held // bs))

    def can_append(self, request_id: int, num_new_tokens: int) -> bool:
        return self.blocks_to_append(request_id, num_new_tokens) <= self.num_free_blocks

    def append(self, request_id: int, num_new_tokens: int) -> int:
        """Grow a request by `num_new_tokens` tokens; returns how many blocks it newly took."""
        held, bs = self._tokens[request_id], self.block_size
        need = max(0, -(-(held + num_new_tokens) // bs) - -(-held // bs))
        free = self.num_total_blocks - self.num_used_blocks
        if need > free:
            raise OutOfBlocks(f"request {request_id} needs {need} blocks, {free} free")
        self._tokens[request_id] = held + num_new_tokens
        if need:
            self._take(need)
        return need

    def append_all(self, request_ids: Sequence[int], num_new_tokens: int) -> None:
        """`append(r, num_new_tokens)` for every id in `request_ids` (all or none)."""
        tokens, bs = self._tokens, self.block_size
        held = [tokens[rid] for rid in request_ids]
        need = sum([-(-(h + num_new_tokens) // bs) - -(-h // bs) for h in held])
        free = self.num_total_blocks - self.num_used_blocks
        if need > free:
            raise OutOfBlocks(f"{len(held)} requests need {need} blocks, {free} free")
        for rid, h in zip(request_ids, held):
            tokens[rid] = h + num_new_tokens
        if need:
            self._take(need)

    def grow_to(self, request_ids: Sequence[int], num_tokens: Sequence[int]) -> bool:
        """Grow each held request to at least `num_tokens[i]` tokens, all or none: False, with
        nothing changed, when the free blocks do not cover them all."""
        return self.grow_to_held(request_ids, num_tokens) is not None

    def grow_to_held(self, request_ids: Sequence[int], num_tokens: Sequence[int],
                     strict: bool = False) -> list[int] | None:
        """`grow_to`, returning the tokens each request holds after it (None, or OutOfBlocks
        when `strict`: nothing changed, the free blocks do not cover them all)."""
        tokens, bs = self._tokens, self.block_size
        need = 0
        after = []
        for rid, t in zip(request_ids, num_tokens):
            held = tokens[rid]
            if t > held:
                need += -(-t // bs) - -(-held // bs)
                after.append(t)
            else:
                after.append(held)
        if need > self.num_total_blocks - self.num_used_blocks:
            if strict:
                raise OutOfBlocks(f"{len(after)} requests need {need} blocks, "
                                  f"{self.num_free_blocks} free")
            return None
        tokens.update(zip(request_ids, after))
        if need:
            self._take(need)
        return after

    def _take(self, n: int) -> None:
        """Hand out `n` free blocks (there are)."""
        self.num_used_blocks += n

    def free(self, request_id: int, finished: bool = False,
             num_computed_tokens: int | None = None) -> int:
        """Release a request's blocks (finished or preempted); returns how many became free
        (`finished`, `num_computed_tokens` as BlockManager's: nothing to do with counts)."""
        held = self._tokens.pop(request_id, 0)
        n = -(-held // self.block_size)
        self.num_used_blocks -= n
        return n

    def trim(self, request_id: int, num_tokens: int) -> int:
        """Drop a request's last `num_tokens` tokens; returns how many blocks became free."""
        held = self._tokens.get(request_id, 0)
        if request_id not in self._tokens or not 0 <= num_tokens <= held:
            raise ValueError(f"request {request_id} holds {held} tokens, cannot trim "
                             f"{num_tokens}")
        bs = self.block_size
        freed = -(-held // bs) - -(-(held - num_tokens) // bs)
        self._tokens[request_id] = held - num_tokens
        self.num_used_blocks -= freed
        return freed

    def check(self) -> None:
        """Assert the accounting invariants (for tests)."""
        held = sum(-(-t // self.block_size) for t in self._tokens.values())
        assert held == self.num_used_blocks, "used blocks off"
        assert 0 <= self.num_used_blocks <= self.num_total_blocks, "more blocks used than exist"
        assert all(t >= 0 for t in self._tokens.values()), "negative tokens"


KVBlocks = Union[BlockManager, CountingBlockManager]  # either accounting, same queries


def make_block_manager(num_blocks: int, block_size: int = 16, watermark: float = 0.0,
                       enable_caching: bool = False) -> KVBlocks:
    """Block tables when prefix caching needs block identity, counts otherwise."""
    if enable_caching:
        return BlockManager(num_blocks, block_size, watermark, enable_caching=True)
    return CountingBlockManager(num_blocks, block_size, watermark)
