"""The batched and deferred paths of `BlockManager` (sim/memory/block_manager.py), mixed into it: what
a step's registration, growth and releases do at once instead of block by block, with the same
result as the one-at-a-time calls (tests/test_block_manager_batch.py).

- `cache_computed`: one pass over a step's batch, `cache_full_blocks` for the requests with a
  newly full computed block; runs of blocks keyed with bulk dict updates.
- Private keys registered on release: a request never preempted whose keys from some block on
  are private (negative ints, policies/prefix_caching.private_keys) is looked up by no one
  while it runs (only it has those keys, and it looks them up only when re-admitted after a
  preemption released them), has none of them cached (it never released a block) and holds
  only unkeyed blocks past its hits, so every one of them would be registered as computed.
  The manager records how far they go (`_lazy`) and registers them when the request releases
  the blocks (`free`, `trim`; `check` and `register_lazy_keys` too). It relies on what the
  decode jump caps rely on (policies/paged_prefix_jumps.py): a request released on an
  instance comes back there only with `num_preemptions` counted.
- `_hand_out`: the blocks a batch's growth takes, taken at once and handed out in order.
- `_free_unshared`: a released table none of whose blocks is shared, in list passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from sim.memory.block_runs import DeadRuns
from sim.memory.block_state import BlockKey

if TYPE_CHECKING:
    from sim.core.request import Request


class BatchedBlocks(DeadRuns):
    """Batched paths of BlockManager (a mix-in: it uses the manager's tables and cache maps)."""

    # register the private keys of a request never preempted when it releases its blocks
    # (see above); False in subclasses whose cache must see every key as it is computed
    lazy_private_keys = True

    def _take(self, n: int) -> list[int]:  # sim/memory/block_cache.py's CachedBlocks (and its subclasses')
        raise NotImplementedError

    def _hand_out(self, grown: list[tuple[list[int], int]], need: int) -> None:
        """Take `need` free blocks (there are) and extend each table of `grown` by its count,
        in order: the blocks `_give` one table at a time would take."""
        free, ref = self._free, self._ref
        if self._evictable and need > len(free):
            new = self._take(need)
        elif need == 1:  # a decode crossing into a new block
            b = free.popleft()
            ref[b] = 1
            grown[0][0].append(b)
            return
        else:
            new = [free.popleft() for _ in range(need)]
        for b in new:
            ref[b] = 1
        if len(grown) == 1:
            grown[0][0].extend(new)
            return
        i = 0
        for table, more in grown:
            if more == 1:
                table.append(new[i])
            else:
                table.extend(new[i:i + more])
            i += more

    def _free_unshared(self, table: list[int], k: int,
                       lazy: tuple[Sequence[BlockKey], int] | None, dead: bool = False) -> int:
        """Free a released table none of whose blocks another request holds, tail first, as
        the block-by-block loop of `free` does: blocks past the `k` looked at for keys to the
        free list; of the rest, keyed ones (with the `lazy` ones, registered now, or parked as
        one dead run when the request is `dead`: finished) to the end of the LRU, the others
        to the free list. Returns how many became free."""
        ref, holders, key_of, lru = self._ref, self._holders, self._key_of, self._evictable
        for b in table:
            ref[b] = 0
        lo = k if lazy is None else lazy[1]
        tail = table[k:]
        head = table[:lo]
        head.reverse()
        keyed = [b for b in head if b in key_of]
        if tail:
            tail.reverse()
            self._free.extend(tail)
        if len(keyed) < len(head):
            self._free.extend([b for b in head if b not in key_of])
        if lo < k:  # keyed lazily (unshared, never keyed before): into the cache, evictable
            blocks, keys = table[lo:k], list(lazy[0][lo:k])  # type: ignore[index]
            blocks.reverse()
            keys.reverse()
            if dead:  # no one can look them up again: one LRU entry for the run
                self._park_dead(blocks, keys)
            else:
                self._cached.update(zip(keys, blocks))
                key_of.update(zip(blocks, keys))
                lru.update(zip(blocks, keys))
        for b in keyed:
            del holders[b]
        lru.update([(b, key_of[b]) for b in keyed])
        return len(table)

    def _register_lazy(self, request_id: int, table: list[int],
                       lazy: tuple[Sequence[BlockKey], int], end: int) -> None:
        """Register the blocks `request_id` keyed lazily, [lazy[1], end), as
        `cache_full_blocks` would have (it holds them)."""
        keys, lo = lazy
        self._cached.update(zip(keys[lo:end], table[lo:end]))
        self._key_of.update(zip(table[lo:end], keys[lo:end]))
        self._holders.update([(b, {request_id}) for b in table[lo:end]])

    def register_lazy_keys(self) -> None:
        """Register every held block keyed lazily now, and expand the LRU's dead runs (for
        `check` and callers reading the key maps): what a request's release would register,
        nothing else changes."""
        self.expand_runs()
        for rid, lazy in list(self._lazy.items()):
            del self._lazy[rid]
            self._register_lazy(rid, self._tables[rid], lazy, self._num_keyed[rid])

    def cache_computed(self, batch: Sequence[Request],
                       keys_of: Callable[[Request], Sequence[BlockKey]]) -> None:
        """`cache_full_blocks(r.request_id, keys_of(r), r.num_computed_tokens)` for each `r`
        of `batch`, in order (`keys_of` is called only for requests whose computed full blocks
        go past those already looked at: the others would cache nothing)."""
        if not self.enable_caching:
            return
        num_keyed, tables, bs = self._num_keyed, self._tables, self.block_size
        cached, key_of, holders = self._cached, self._key_of, self._holders
        lazy, lazy_ok = self._lazy, self.lazy_private_keys
        for r in batch:
            rid = r.request_id
            start = num_keyed.get(rid)  # None: holds no blocks
            if start is None or r.num_computed_tokens // bs <= start:
                continue
            keys = keys_of(r)
            table = tables[rid]
            end = min(len(keys), r.num_computed_tokens // bs, len(table))
            if end <= start:
                continue
            num_keyed[rid] = end
            if rid in lazy:
                continue  # keyed when it releases the blocks
            if lazy_ok and not r.num_preemptions and type(keys[start]) is int and keys[start] < 0:
                # private keys from here on (they follow the content keys): only this request
                # looks them up, after a preemption releases them; none is cached (it never
                # released a block) and its fresh blocks are unkeyed, so all would register
                lazy[rid] = (keys, start)
                continue
            if end - start == 1:  # a decode completed one block (the common case)
                b, key = table[start], keys[start]
                if b not in key_of and key not in cached:
                    cached[key] = b
                    key_of[b] = key
                    holders[b] = {rid}
            else:
                self._cache_blocks(rid, table, keys, start, end)

    def _cache_blocks(self, request_id: int, table: list[int], keys: Sequence[BlockKey],
                      start: int, end: int) -> int:
        """Key `table[start:end]` under `keys[start:end]`, skipping blocks already keyed and
        keys already cached; returns blocks newly cached."""
        cached, key_of, holders = self._cached, self._key_of, self._holders
        blocks, new_keys = table[start:end], keys[start:end]
        if key_of.keys().isdisjoint(blocks) and cached.keys().isdisjoint(new_keys):
            cached.update(zip(new_keys, blocks))  # none keyed yet: the loop below, at once
            key_of.update(zip(blocks, new_keys))
            holders.update([(b, {request_id}) for b in blocks])
            return end - start
        added = 0
        for b, key in zip(blocks, new_keys):
            if b in key_of or key in cached:
                continue
            cached[key] = b
            key_of[b] = key
            holders[b] = {request_id}
            added += 1
        return added
