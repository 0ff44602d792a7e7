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
on random V1-like sequences), except that there are no block ids (`block_table` raises), a
held request's keyed blocks are not counted before it releases them (`num_cached_blocks`
raises), `trim` is refused (speculation keeps tables), and a running request's own keys count
as cached up to its admission hits (no caller asks). Queries and growth are the counting
manager's (sim/memory/block_counter.py), its blocks handed out through the LRU (`_take`).

A request with content ids (shared keys) needs block identity: `to_block_manager` builds the
`BlockManager` this state stands for (fresh ids, keys registered), after which the policy goes
on with it (policies/vllm_v1.py does on the first such arrival).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Mapping, Sequence

from sim.memory.block_manager import BlockManager, OutOfBlocks
from sim.memory.block_counter import CountingBlockManager
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


class PrivateBlocks(CountingBlockManager):
    """Block counts per request and the LRU as runs of private blocks (module doc): the
    counting manager's queries and growth, its blocks handed out through the LRU."""

    enable_caching = True  # keyed blocks stay cached when released
    private_keys_only = True  # no key is ever another request's (content keys raise)
    lazy_private_keys = True  # as BlockManager's: keys counted when blocks are released

    def __init__(self, num_blocks: int, block_size: int = 16, watermark: float = 0.0) -> None:
        super().__init__(num_blocks, block_size, watermark)
        self.watermark = watermark  # fraction of blocks kept free on admission
        self._keyed: dict[int, int] = {}  # held request id -> blocks it shared on admission
        # the LRU, first evicted first: request id -> its cached blocks [0, h); a finished
        # request's run under -1 - id instead (as BlockManager's dead runs: never found)
        self._lru: dict[int, int] = {}
        self._num_lru = 0  # blocks in the LRU (free, cached, evictable)
        self.num_hit_blocks = 0  # keys found cached and shared on allocation (blocks)
        self.num_evicted_blocks = 0  # cached blocks whose key was dropped to reuse them

    @property
    def num_cached_blocks(self) -> int:
        raise TypeError("PrivateBlocks counts a held request's keyed blocks only when it "
                        "releases them: PrivateBlocks.to_block_manager gives the BlockManager")

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
        n = -(-self._tokens[request_id] // self.block_size)
        keyed = self._keyed_blocks(request_id, num_computed_tokens)
        del self._tokens[request_id], self._keyed[request_id]
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

    def _keyed_blocks(self, request_id: int, num_computed_tokens: int) -> int:
        """Keyed blocks of a held request: its admission hits or its full computed blocks,
        whichever is more (as BlockManager's registration as computed leaves them)."""
        n = -(-self._tokens[request_id] // self.block_size)
        return min(n, max(self._keyed[request_id], num_computed_tokens // self.block_size))

    def trim(self, request_id: int, num_tokens: int) -> int:
        raise TypeError("PrivateBlocks does not trim (speculative decoding keeps block tables: "
                        "policies/vllm_v1.py)")

    def check(self) -> None:
        """Assert the accounting invariants (for tests)."""
        super().check()
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
            keyed = self._keyed_blocks(rid, num_computed_tokens[rid])
            bm._tables[rid], bm._tokens[rid], bm._num_keyed[rid] = table, held, keyed
            for j in range(keyed):
                bm._cached[private_key(rid, j)] = table[j]
                bm._key_of[table[j]] = private_key(rid, j)
                bm._holders[table[j]] = {rid}
            for blk in table:
                bm._ref[blk] = 1
        for rid, h in self._lru.items():  # tail first, as the release queued them
            tail_first = range(h - 1, -1, -1)
            if rid < 0:  # a finished request's: a dead run, its keys never found
                bm._park_dead([b + j for j in tail_first],
                              [private_key(-1 - rid, j) for j in tail_first])
            else:
                for j in tail_first:
                    key = private_key(rid, j)
                    bm._cached[key], bm._key_of[b + j] = b + j, key
                    bm._evictable[b + j] = key
            b += h
        bm._free = deque(range(b, self.num_total_blocks))
        bm.num_queried_blocks = self.num_queried_blocks
        bm.num_hit_blocks = self.num_hit_blocks
        bm.num_evicted_blocks = self.num_evicted_blocks
        return bm
