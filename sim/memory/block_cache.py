"""The prefix cache of `BlockManager` (sim/memory/block_manager.py), mixed into it: content-key
lookups, registration of computed full blocks, sharing cached blocks, and eviction.

A keyed block whose last reference is dropped stays cached: it counts as free but sits in an LRU
of evictable blocks (`_release`). Taking free blocks prefers never-keyed ones, then evicts the
least recently freed cached block, dropping its key (`_take`). A new request's leading keys are
looked up (`find_cached_prefix`); each hit it shares gains a reference and a holder, and leaves
the LRU (`_share`). Without caching nothing is ever keyed, so none of this changes a plain free
list's behaviour.
"""

from __future__ import annotations

from typing import Callable, Sequence

from sim.memory.block_runs import DeadRuns
from sim.memory.block_state import BlockKey


class CachedBlocks(DeadRuns):
    """Prefix-cache paths of BlockManager (a mix-in: it uses the manager's tables and maps)."""

    _cache_blocks: Callable[..., int]  # BatchedBlocks' (no stub: it would come first)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks registered under a content key (in use or evictable)."""
        lazy = sum([self._num_keyed[rid] - lo for rid, (_, lo) in self._lazy.items()])
        return len(self._key_of) + self.num_run_blocks + lazy

    # ---- lookups ----------------------------------------------------------------------------
    def find_cached_prefix(self, keys: Sequence[BlockKey]) -> list[int]:
        """The cached blocks of the longest run of leading `keys` that are all cached."""
        hits: list[int] = []
        cached = self._cached
        for key in keys:
            block = cached.get(key)
            if block is None:
                break
            hits.append(block)
        return hits

    def num_blocks_to_allocate(self, num_tokens: int, hits: Sequence[int] = ()) -> int:
        """Free blocks a new request of `num_tokens` tokens takes when it shares `hits`
        (evictable hits leave the free pool too)."""
        revived = sum(1 for b in hits if self._ref[b] == 0)
        return self.blocks_for(num_tokens) - len(hits) + revived

    def shared_tokens(self, request_ids: Sequence[int]) -> int:
        """KV tokens counted more than once when the contexts of `request_ids` are summed:
        every shared (full) block counts once per extra holder among them."""
        if not self._multi:
            return 0
        if len(request_ids) == len(self._tables):  # every holder: the running total
            return self._num_extra_refs * self.block_size
        ids = set(request_ids)
        extra = sum(max(0, len(self._holders[b] & ids) - 1) for b in self._multi)
        return extra * self.block_size

    # ---- registration -----------------------------------------------------------------------
    def cache_full_blocks(self, request_id: int, keys: Sequence[BlockKey],
                          num_computed_tokens: int) -> int:
        """Register the request's full blocks whose KV is computed (`num_computed_tokens`)
        under `keys` (its leading full blocks' content keys); returns blocks newly cached.
        A key already cached elsewhere (computed twice concurrently) leaves the block unkeyed."""
        if not self.enable_caching or request_id not in self._tables:
            return 0
        table = self._tables[request_id]
        start = self._num_keyed[request_id]
        end = min(len(keys), num_computed_tokens // self.block_size, len(table))
        if end <= start:
            return 0
        self._num_keyed[request_id] = end
        return self._cache_blocks(request_id, table, keys, start, end)

    # ---- sharing and eviction ---------------------------------------------------------------
    def _take(self, n: int) -> list[int]:
        """`n` free blocks: never-keyed first, then the least recently freed cached blocks."""
        free, lru, cached, key_of = self._free, self._evictable, self._cached, self._key_of
        if self._num_runs:  # dead runs in the LRU (sim/memory/block_runs.py)
            if n == 1 and not free:
                self.num_evicted_blocks += 1
                return [self._evict_one()]
            out = [free.popleft() for _ in range(min(n, len(free)))] if free else []
            self.num_evicted_blocks += n - len(out)
            return out + self._evict(n - len(out)) if n > len(out) else out
        if n == 1 and not free:  # a decode crossing into a new block, evicting
            b, key = lru.popitem(last=False)
            del cached[key]
            del key_of[b]
            self.num_evicted_blocks += 1
            return [b]
        out = [free.popleft() for _ in range(min(n, len(free)))] if free else []
        evict = n - len(out)
        popped = [lru.popitem(last=False) for _ in range(evict)]
        for b, key in popped:
            del cached[key]
            del key_of[b]
        out += [b for b, _ in popped]
        self.num_evicted_blocks += evict
        return out

    def _share(self, b: int, request_id: int) -> None:
        """`request_id` takes a reference to cached block `b`."""
        if self._ref[b] == 0:
            del self._evictable[b]
            self._holders[b] = {request_id}
        else:
            self._holders[b].add(request_id)
            self._multi.add(b)
            self._num_extra_refs += 1
        self._ref[b] += 1

    def _release(self, b: int, request_id: int) -> int:
        """Drop `request_id`'s reference to block `b`; 1 when the block became free."""
        self._ref[b] -= 1
        ref = self._ref[b]
        if b in self._holders:
            self._holders[b].discard(request_id)
            if ref >= 1:
                self._num_extra_refs -= 1
                if ref == 1:
                    self._multi.discard(b)
        if ref:
            return 0
        if b in self._key_of:
            del self._holders[b]
            self._evictable[b] = self._key_of[b]  # most recently used end
        else:
            self._free.append(b)
        return 1
