"""Prefix caching without block identity, while every key is private: `vllm`'s common case.

`vllm` (V1) keys every request's blocks (policies/vllm_v1.py: `own_keys`), so a request
preempted by recomputation finds its own blocks again when it is admitted anew. When the trace
gives no content ids, every key is private to its request (policies/prefix_caching.private_keys:
block j of request r is `-1 - (r << 32 | j)`): no block is ever shared, a request's cached
blocks are its leading ones, and only these facts decide anything a run reports:

- which blocks are free: never keyed ones, and keyed ones whose request released them (cached,
  evictable, in the LRU);
- the LRU's order: a request releases its blocks tail first, so its cached blocks are one run,
  blocks [0, h) evicted from the top; allocation takes never-keyed free blocks first, then
  evicts runs from the LRU's front;
- a waiting request's hits: blocks [0, h) of its own parked run, all shared on admission (it
  leaves the LRU whole).

`PrivateBlocks` keeps exactly that: tokens per held request, blocks keyed at admission (its
hits), and the LRU as one entry per request (request id -> h). A held request's keyed blocks
are its full computed blocks, so they are counted when it releases them (`free` takes its
computed tokens), not registered step by step: `cache_computed` does nothing. Each call answers
as `BlockManager(..., enable_caching=True)` would with the same calls (tests/scale compare them
on random V1-like sequences), except that there are no block ids (`block_table` raises) and a
running request's own keys count as cached up to its admission hits (no caller asks).

A request with content ids (shared keys) needs block identity: `to_block_manager` builds the
`BlockManager` this state stands for (fresh ids, keys registered), after which the policy goes
on with it (policies/vllm_v1.py does on the first such arrival).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Mapping, Sequence

from sim.memory.block_manager import BlockManager, OutOfBlocks
from sim.memory.block_pool import BlockPool
from sim.memory.block_state import BlockKey

_LOW = (1 << 32) - 1  # a private key's block-index bits


def private_key(request_id: int, j: int) -> int:
    """The private key of block `j` of `request_id` (policies/prefix_caching.private_keys)."""
    return -1 - ((request_id << 32) | j)


def key_owner(key: BlockKey) -> tuple[int, int]:
    """(request id, block index) of a private key; ValueError for a content key."""
    if type(key) is not int or key >= 0:
        raise ValueError(f"key {key!r} is a content key: PrivateBlocks holds private keys only "
                         f"(use BlockManager, PrivateBlocks.to_block_manager)")
    k = -1 - key
    return k >> 32, k & _LOW


class PrivateBlocks(BlockPool):
    """Block counts per request and the LRU as runs of private blocks (module doc)."""

    enable_caching = True  # keyed blocks stay cached when released
    lazy_private_keys = True  # as BlockManager's: keys counted when blocks are released

    def __init__(self, num_blocks: int, block_size: int = 16, watermark: float = 0.0) -> None:
        super().__init__(num_blocks, block_size, watermark)
        self.watermark = watermark  # fraction of blocks kept free on admission
        self.num_used_blocks = 0  # blocks some request holds
        self._keyed: dict[int, int] = {}  # held request id -> blocks it shared on admission
        # the LRU, first evicted first: request id -> its cached blocks [0, h); a finished
        # request's run under -1 - id instead (as BlockManager's dead runs: never found)
        self._lru: dict[int, int] = {}
        self._num_lru = 0  # blocks in the LRU (free, cached, evictable)
        self.num_queried_blocks = 0  # keys looked up on allocation (blocks)
        self.num_hit_blocks = 0  # of those, found cached and shared (blocks)
        self.num_evicted_blocks = 0  # cached blocks whose key was dropped to reuse them

    # ---- counters ---------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks no request holds (evictable cached blocks included)."""
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
        raise TypeError("PrivateBlocks keeps no block ids: PrivateBlocks.to_block_manager "
                        "gives the BlockManager that has them")

    def shared_tokens(self, request_ids: Sequence[int]) -> int:
        """KV tokens counted twice when contexts are summed: none, no block is shared."""
        return 0

    # ---- lookups ----------------------------------------------------------------------
    def find_cached_prefix(self, keys: Sequence[BlockKey]) -> list[BlockKey]:
        """The leading `keys` (one request's, consecutive) whose blocks are cached: its parked
        run's, or a held request's admission hits. The hits are the keys themselves."""
        if not keys:
            return []
        rid, j0 = key_owner(keys[0])
        cached = self._keyed[rid] if rid in self._tokens else self._lru.get(rid, 0)
        if cached <= j0:
            return []
        if key_owner(keys[-1]) != (rid, j0 + len(keys) - 1):
            raise ValueError(f"keys {keys[0]!r}..{keys[-1]!r} are not one request's "
                             f"consecutive blocks")
        return list(keys[: cached - j0])

    def num_blocks_to_allocate(self, num_tokens: int, hits: Sequence[BlockKey] = ()) -> int:
        """Free blocks a new request of `num_tokens` tokens takes when it shares `hits`
        (parked hits leave the free pool too; a held request's are its own)."""
        need = -(-num_tokens // self.block_size)
        if hits and key_owner(hits[0])[0] in self._tokens:
            return need - len(hits)
        return need

    def can_allocate(self, num_tokens: int, hits: Sequence[BlockKey] = ()) -> bool:
        """Whether a new request of `num_tokens` fits, keeping the watermark free."""
        return (self.num_blocks_to_allocate(num_tokens, hits)
                <= self.num_free_blocks - self.watermark_blocks)

    # ---- allocation -------------------------------------------------------------------
    def allocate(self, request_id: int, num_tokens: int, keys: Sequence[BlockKey] = ()) -> int:
        """Give a new request blocks for `num_tokens` tokens, sharing its parked run first;
        returns how many blocks it took."""
        if request_id in self._tokens:
            raise ValueError(f"request {request_id} already holds blocks")
        if len(keys) * self.block_size > num_tokens:
            raise ValueError(f"request {request_id}: {len(keys)} block keys for "
                             f"{num_tokens} tokens")
        hits = self.find_cached_prefix(keys)
        if hits and key_owner(hits[0])[0] != request_id:
            raise ValueError(f"request {request_id} looked up another request's private keys")
        need = -(-num_tokens // self.block_size)
        if need > self.num_free_blocks:
            raise OutOfBlocks(f"request {request_id} needs {need} blocks, "
                              f"{self.num_free_blocks} free")
        h, parked = len(hits), self._lru.get(request_id)
        if parked is not None and parked != h:  # BlockManager would leave the rest parked
            raise RuntimeError(f"request {request_id} shares {h} of its {parked} parked "
                               f"blocks: not modelled (PrivateBlocks.to_block_manager)")
        if h:
            del self._lru[request_id]
            self._num_lru -= h
            self.num_used_blocks += h
        self.num_queried_blocks += len(keys)
        self.num_hit_blocks += h
        self._take(need - h)
        self._tokens[request_id] = num_tokens
        self._keyed[request_id] = h
        return need

    def _take(self, n: int) -> None:
        """Hand out `n` free blocks (there are): never-keyed first, then the LRU's front."""
        evict = n - (self.num_total_blocks - self.num_used_blocks - self._num_lru)
        self.num_used_blocks += n
        if evict <= 0:
            return
        self.num_evicted_blocks += evict
        self._num_lru -= evict
        lru = self._lru
        while evict:
            rid = next(iter(lru))
            h = lru[rid]
            if h > evict:  # the rest keeps its place at the front
                lru[rid] = h - evict
                return
            del lru[rid]
            evict -= h

    def blocks_to_append(self, request_id: int, num_new_tokens: int) -> int:
        """Extra blocks a request needs to grow by `num_new_tokens` tokens."""
        held, bs = self._tokens.get(request_id, 0), self.block_size
        return max(0, -(-(held + num_new_tokens) // bs) - -(-held // bs))

    def can_append(self, request_id: int, num_new_tokens: int) -> bool:
        return self.blocks_to_append(request_id, num_new_tokens) <= self.num_free_blocks

    def append(self, request_id: int, num_new_tokens: int) -> int:
        """Grow a request by `num_new_tokens` tokens; returns how many blocks it newly took."""
        need = self.blocks_to_append(request_id, num_new_tokens)
        if need > self.num_free_blocks:
            raise OutOfBlocks(f"request {request_id} needs {need} blocks, "
                              f"{self.num_free_blocks} free")
        self._tokens[request_id] += num_new_tokens
        if need:
            self._take(need)
        return need

    def append_all(self, request_ids: Sequence[int], num_new_tokens: int) -> None:
        """`append(r, num_new_tokens)` for every id in `request_ids` (all or none)."""
        tokens, bs = self._tokens, self.block_size
        held = [tokens[rid] for rid in request_ids]
        need = sum([-(-(h + num_new_tokens) // bs) - -(-h // bs) for h in held])
        if need > self.num_free_blocks:
            raise OutOfBlocks(f"{len(held)} requests need {need} blocks, "
                              f"{self.num_free_blocks} free")
        for rid, h in zip(request_ids, held):
            tokens[rid] = h + num_new_tokens
        if need:
            self._take(need)

    def grow_to(self, request_ids: Sequence[int], num_tokens: Sequence[int]) -> bool:
        """Grow each held request to at least `num_tokens[i]` tokens, all or none."""
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

    # ---- registration and release -----------------------------------------------------
    def cache_computed(self, batch: Sequence[Any],
                       keys_of: Callable[[Any], Sequence[BlockKey]]) -> None:
        """Nothing to do: a held request's keyed blocks are counted when it releases them."""

    def free(self, request_id: int, finished: bool = False,
             num_computed_tokens: int | None = None) -> int:
        """Release a request's blocks, tail first: its keyed ones (its admission hits, or its
        full blocks among `num_computed_tokens`, whichever is more) park as one LRU run, the
        rest are free. `finished`: it never comes back, its run is never found. Returns how
        many became free."""
        if request_id not in self._tokens:
            return 0
        if num_computed_tokens is None:
            raise TypeError(f"PrivateBlocks.free(request {request_id}) needs the request's "
                            f"num_computed_tokens: its keyed blocks are counted from them")
        held = self._tokens.pop(request_id)
        n = -(-held // self.block_size)
        keyed = min(n, max(self._keyed.pop(request_id), num_computed_tokens // self.block_size))
        self.num_used_blocks -= n
        if keyed:
            if finished:  # no one looks its keys up again
                if -1 - request_id in self._lru:
                    raise RuntimeError(f"request {request_id} finished twice")
                self._lru[-1 - request_id] = keyed
            else:
                self._lru[request_id] = keyed
            self._num_lru += keyed
        return n

    def check(self) -> None:
        """Assert the accounting invariants (for tests)."""
        held = sum(-(-t // self.block_size) for t in self._tokens.values())
        assert held == self.num_used_blocks, "used blocks off"
        assert self.num_used_blocks + self._num_lru <= self.num_total_blocks, "blocks leaked"
        assert self._num_lru == sum(self._lru.values()), "LRU count off"
        assert all(h > 0 for h in self._lru.values()), "an empty run parked"
        assert not set(self._lru) & set(self._tokens), "a held request has a parked run"
        assert set(self._keyed) == set(self._tokens), "admission hits off"

    # ---- block identity ----------------------------------------------------------------
    def to_block_manager(self, num_computed_tokens: Mapping[int, int]) -> BlockManager:
        """The `BlockManager` this state stands for (`num_computed_tokens`: each held
        request's computed tokens): held blocks keyed as far as computed, the LRU's runs as
        cached evictable blocks in the same order, fresh block ids."""
        bm = BlockManager(self.num_total_blocks, self.block_size, self.watermark,
                          enable_caching=True)
        bs, b = self.block_size, 0
        for rid, held in self._tokens.items():
            n = -(-held // bs)
            table = list(range(b, b + n))
            b += n
            keyed = min(n, max(self._keyed[rid], num_computed_tokens[rid] // bs))
            bm._tables[rid], bm._tokens[rid], bm._num_keyed[rid] = table, held, keyed
            for j in range(keyed):
                bm._cached[private_key(rid, j)] = table[j]
                bm._key_of[table[j]] = private_key(rid, j)
                bm._holders[table[j]] = {rid}
            for blk in table:
                bm._ref[blk] = 1
        for rid, h in self._lru.items():  # tail first, as the release queued them
            if rid < 0:  # a finished request's: a dead run, its keys never found
                bm._park_dead(list(range(b + h - 1, b - 1, -1)),
                              [private_key(-1 - rid, j) for j in range(h - 1, -1, -1)])
            for j in range(h - 1, -1, -1) if rid >= 0 else ():
                key = private_key(rid, j)
                bm._cached[key], bm._key_of[b + j] = b + j, key
                bm._evictable[b + j] = key
            b += h
        bm._free = deque(range(b, self.num_total_blocks))
        bm.num_queried_blocks = self.num_queried_blocks
        bm.num_hit_blocks = self.num_hit_blocks
        bm.num_evicted_blocks = self.num_evicted_blocks
        return bm
