"""A paged KV-cache block manager (vLLM's), shared by simulated policies and the real engine.

KV memory is `num_blocks` blocks of `block_size` tokens. Each request owns a block table: the
blocks holding its tokens in order. Blocks carry reference counts so requests can share them.
`allocated + free == total` holds after every call.

Prefix caching (`enable_caching=True`, vLLM's automatic prefix caching; lookups, sharing and
eviction in `sim/memory/block_cache.py`): a full block can be registered under a content key
(`cache_full_blocks`; `sim/memory/prefix_keys.py` makes the keys). A keyed block whose last
reference is freed stays cached: it counts as free but sits in an LRU of evictable blocks.
Allocation takes never-keyed free blocks first, then evicts the least recently freed cached block
(dropping its key). A new request's leading keys are looked up (`find_cached_prefix`): the longest
run of cached blocks is shared (`allocate(..., keys=...)`), reference counts go up and the blocks
leave the LRU. Requests free their blocks tail first, so a prompt's last blocks are evicted before
its first ones. Without caching nothing is ever keyed and the manager behaves exactly as a plain
free list; the simulator then counts blocks instead (`sim/memory/block_counter.py`), and keeps
tables only for callers that need block ids (`real/`).
"""

from __future__ import annotations

from typing import Sequence

from sim.memory.block_batch import BatchedBlocks
from sim.memory.block_cache import CachedBlocks
from sim.memory.block_checks import check_block_manager
from sim.memory.block_state import BlockKey


class OutOfBlocks(RuntimeError):
    """An allocation asked for more blocks than are free."""


class BlockManager(CachedBlocks, BatchedBlocks):
    """The block manager: counters and allocation here, the prefix cache and batched paths in
    its mix-ins, the state they share in `BlockState` (sim/memory/block_state.py)."""

    # ---- counters ---------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks no request holds (evictable cached blocks included)."""
        return len(self._free) + len(self._evictable) + self._run_extra

    @property
    def num_used_blocks(self) -> int:
        return self.num_total_blocks - self.num_free_blocks

    def has(self, request_id: int) -> bool:
        return request_id in self._tables

    def num_tokens_of(self, request_ids: Sequence[int]) -> list[int]:
        """`num_tokens` of each id, in one pass."""
        get = self._tokens.get
        return [get(rid, 0) for rid in request_ids]

    def num_blocks(self, request_id: int) -> int:
        """Blocks `request_id` holds (0 when none)."""
        return len(self._tables.get(request_id, ()))

    def block_table(self, request_id: int) -> list[int]:
        return list(self._tables.get(request_id, ()))

    # ---- allocation -------------------------------------------------------------------
    def can_allocate(self, num_tokens: int, hits: Sequence[int] = ()) -> bool:
        """Whether a new request of `num_tokens` fits, keeping the watermark free."""
        return (self.num_blocks_to_allocate(num_tokens, hits)
                <= self.num_free_blocks - self.watermark_blocks)

    def allocate(self, request_id: int, num_tokens: int,
                 keys: Sequence[BlockKey] = ()) -> list[int]:
        """Give a new request blocks for `num_tokens` tokens; returns its block table. With
        `keys` (its leading full blocks' content keys) cached blocks are shared first."""
        if request_id in self._tables:
            raise ValueError(f"request {request_id} already holds blocks")
        if len(keys) * self.block_size > num_tokens:
            raise ValueError(f"request {request_id}: {len(keys)} block keys for "
                             f"{num_tokens} tokens")
        hits = self.find_cached_prefix(keys) if keys else []
        need = self.num_blocks_to_allocate(num_tokens, hits)
        if need > self.num_free_blocks:
            raise OutOfBlocks(f"request {request_id} needs {need} blocks, "
                              f"{self.num_free_blocks} free")
        self.num_queried_blocks += len(keys)
        self.num_hit_blocks += len(hits)
        for b in hits:
            self._share(b, request_id)
        self._tables[request_id] = hits
        self._tokens[request_id] = len(hits) * self.block_size
        if self.enable_caching:
            self._num_keyed[request_id] = len(hits)
        self.append(request_id, num_tokens - len(hits) * self.block_size)
        return self.block_table(request_id)

    def blocks_to_append(self, request_id: int, num_new_tokens: int) -> int:
        """Extra blocks a request needs to grow by `num_new_tokens` tokens."""
        have = len(self._tables.get(request_id, ()))
        return max(0, self.blocks_for(self._tokens.get(request_id, 0) + num_new_tokens) - have)

    def can_append(self, request_id: int, num_new_tokens: int) -> bool:
        return self.blocks_to_append(request_id, num_new_tokens) <= self.num_free_blocks

    def append(self, request_id: int, num_new_tokens: int) -> list[int]:
        """Grow a request by `num_new_tokens` tokens; returns the blocks newly given to it."""
        need = self.blocks_to_append(request_id, num_new_tokens)
        if not need:  # the last block has room (most decodes): only the count moves
            self._tokens[request_id] += num_new_tokens
            return []
        if need > self.num_free_blocks:
            raise OutOfBlocks(f"request {request_id} needs {need} blocks, "
                              f"{self.num_free_blocks} free")
        self._tokens[request_id] += num_new_tokens
        return self._give(request_id, need)

    def _give(self, request_id: int, n: int) -> list[int]:
        """Hand `n` free blocks (there are) to `request_id`'s table; returns them."""
        free = self._free
        if self._evictable and n > len(free):
            new = self._take(n)
        elif n == 1:  # a decode crossing into a new block
            b = free.popleft()
            self._ref[b] = 1
            self._tables[request_id].append(b)
            return [b]
        else:
            new = [free.popleft() for _ in range(n)]
        ref = self._ref
        for b in new:
            ref[b] = 1
        self._tables[request_id].extend(new)
        return new

    def append_all(self, request_ids: Sequence[int], num_new_tokens: int) -> None:
        """`append(r, num_new_tokens)` for every id in `request_ids`, in order, all or none:
        OutOfBlocks, with nothing changed, when the free blocks do not cover them all
        (`grow_to_held(..., strict=True)` to each one's tokens + `num_new_tokens`, in one pass)."""
        tokens, tables, bs = self._tokens, self._tables, self.block_size
        need = 0
        grown = []  # (table, blocks it takes) in request order
        for rid in request_ids:
            table = tables[rid]
            more = -(-(tokens[rid] + num_new_tokens) // bs) - len(table)
            if more > 0:
                need += more
                grown.append((table, more))
        if need:
            if need > self.num_free_blocks:
                raise OutOfBlocks(f"{len(request_ids)} requests need {need} blocks, "
                                  f"{self.num_free_blocks} free")
            self._hand_out(grown, need)
        for rid in request_ids:
            tokens[rid] += num_new_tokens

    def grow_to(self, request_ids: Sequence[int], num_tokens: Sequence[int]) -> bool:
        """Grow each held request to at least `num_tokens[i]` tokens, in order, all or none:
        False, with nothing changed, when the free blocks do not cover them all."""
        return self.grow_to_held(request_ids, num_tokens) is not None

    def grow_to_held(self, request_ids: Sequence[int], num_tokens: Sequence[int],
                     strict: bool = False) -> list[int] | None:
        """`grow_to`, returning the tokens each request holds after it (None, or OutOfBlocks
        when `strict`: nothing changed, the free blocks do not cover them all). Blocks are
        taken request by request, as `append` one at a time takes them (one `_take` for all,
        handed out in order)."""
        tokens, tables, bs = self._tokens, self._tables, self.block_size
        need = 0
        after = []
        grown = []  # (table, blocks it takes) in request order
        for rid, t in zip(request_ids, num_tokens):
            held = tokens[rid]
            if t > held:
                table = tables[rid]
                more = -(-t // bs) - len(table)
                if more > 0:
                    need += more
                    grown.append((table, more))
                after.append(t)
            else:
                after.append(held)
        if need > self.num_free_blocks:
            if strict:
                raise OutOfBlocks(f"{len(after)} requests need {need} blocks, "
                                  f"{self.num_free_blocks} free")
            return None
        if need:
            self._hand_out(grown, need)
        tokens.update(zip(request_ids, after))
        return after

    # ---- release ----------------------------------------------------------------------
    def free(self, request_id: int, finished: bool = False,
             num_computed_tokens: int | None = None) -> int:
        """Release a request's blocks (finished or preempted), tail first; returns how many
        became free (cached ones stay cached, evictable). `finished`: the request never comes
        back, so its private keys are dead (sim/memory/block_runs.py). `num_computed_tokens`
        (its computed tokens) is for sim/memory/block_private.py: keys here are registered as
        computed, so it is not needed."""
        table = self._tables.pop(request_id, [])
        self._tokens.pop(request_id, None)
        keyed = self._num_keyed.pop(request_id, None)
        lazy = self._lazy.pop(request_id, None)
        freed = 0
        if not self.enable_caching:
            for b in reversed(table):
                self._ref[b] -= 1
                if self._ref[b] == 0:
                    self._free.append(b)
                    freed += 1
            return freed
        if self._multi.isdisjoint(table):  # no block shared: the loop below, pass by pass
            return self._free_unshared(table, len(table) if keyed is None
                                       else min(keyed, len(table)), lazy, finished)
        if lazy is not None:  # its leading blocks are shared: register the lazy ones first
            self._register_lazy(request_id, table, lazy, min(keyed or 0, len(table)))
        ref, holders, key_of, lru = self._ref, self._holders, self._key_of, self._evictable
        k = len(table) if keyed is None else min(keyed, len(table))
        if k < len(table):  # blocks past those looked at for keys: never keyed, never shared
            tail = table[k:]
            for b in tail:
                ref[b] = 0
            tail.reverse()
            self._free.extend(tail)
            freed = len(tail)
            del table[k:]
        for b in reversed(table):
            if ref[b] > 1:
                freed += self._release(b, request_id)
            elif b in key_of:  # a cached block only this request held: evictable
                ref[b] = 0
                del holders[b]
                lru[b] = key_of[b]
                freed += 1
            else:  # never keyed: straight back to the free list
                ref[b] = 0
                self._free.append(b)
                freed += 1
        return freed

    def check(self) -> None:
        """Assert the accounting and cache invariants (for tests; sim/memory/block_checks.py), with
        the blocks keyed lazily registered first."""
        self.register_lazy_keys()
        check_block_manager(self)

    def trim(self, request_id: int, num_tokens: int) -> int:
        """Drop a request's last `num_tokens` tokens (e.g. rejected speculative slots): blocks
        left empty lose the request's reference, tail first. Returns how many became free."""
        held = self._tokens.get(request_id, 0)
        if request_id not in self._tables or not 0 <= num_tokens <= held:
            raise ValueError(f"request {request_id} holds {held} tokens, cannot trim "
                             f"{num_tokens}")
        lazy = self._lazy.pop(request_id, None)
        if lazy is not None:
            self._register_lazy(request_id, self._tables[request_id], lazy,
                                self._num_keyed[request_id])
        table = self._tables[request_id]
        keep = self.blocks_for(held - num_tokens)
        freed = 0
        while len(table) > keep:
            freed += self._release(table.pop(), request_id)
        self._tokens[request_id] = held - num_tokens
        if request_id in self._num_keyed:
            self._num_keyed[request_id] = min(self._num_keyed[request_id], keep)
        return freed
