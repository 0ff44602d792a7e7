"""A prefix cache over memory tiers: GPU blocks, then host memory, then a remote KV store.

`TieredBlockManager` is vLLM's block manager with prefix caching (sim/memory/block_manager.py) whose
evicted cached blocks are demoted instead of dropped (LMCache's CPU backend, SGLang's HiCache,
Mooncake Store, all written back on eviction here). When an allocation evicts the least recently
freed cached GPU block, its content key moves to the host tier (an LRU of `LRUTier` keys with a
capacity in blocks); when the host tier is full its least recently used key moves to the remote
tier, if there is one, else it is dropped; a full remote tier drops its LRU key. A key lives in
one lower tier at a time (host or remote).

A new request's prefix is looked up as before on the GPU (`find_cached_prefix`: what admission
checks and routers see); `allocate(..., keys)` then goes on past the GPU hits through the keys
held by the host or remote tier (a leading run, stopping at the first key in neither or on the
GPU). Those blocks are promoted: each takes a fresh GPU block (as a miss would, so admission's
block counts do not change), is registered under its key with the request as holder, counts as a
hit, and leaves its lower tier. Promotions are copies the admitting step waits for (`KVMoves`:
host -> GPU over the host link, remote -> GPU over the remote link); demotions are written back
off the critical path (only their bytes are counted). Reference counts are the base manager's:
a promoted block is an ordinary cached block held once.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice
from typing import Sequence

from sim.memory.block_manager import BlockKey, BlockManager, OutOfBlocks
from sim.memory.kv_moves import KVMoves

HOST_IN, HOST_OUT = "kv_host_in_bytes", "kv_host_out_bytes"  # run counters: host tier, bytes
REMOTE_IN, REMOTE_OUT = "kv_remote_in_bytes", "kv_remote_out_bytes"  # remote tier, bytes
HOST_DROPPED, REMOTE_DROPPED = "num_host_dropped_blocks", "num_remote_dropped_blocks"


class LRUTier:
    """A lower tier of prefix blocks: content keys, least recently stored first."""

    def __init__(self, name: str, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"{name} tier: num_blocks={num_blocks} must be >= 0")
        self.name = name  # "host" or "remote"
        self.num_total_blocks = num_blocks  # capacity, blocks
        self._keys: OrderedDict[BlockKey, None] = OrderedDict()  # LRU first

    def __contains__(self, key: BlockKey) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def put(self, key: BlockKey) -> BlockKey | None:
        """Store `key` as most recently used; returns the key pushed out to make room (the
        least recently used one; `key` itself when the tier holds no block), else None."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return None
        if self.num_total_blocks == 0:
            return key
        self._keys[key] = None
        if len(self._keys) > self.num_total_blocks:
            return self._keys.popitem(last=False)[0]
        return None

    def take(self, key: BlockKey) -> bool:
        """Remove `key` (promoted); whether the tier held it."""
        return self._keys.pop(key, False) is None

    def keys(self) -> list[BlockKey]:
        """The keys held, least recently used first."""
        return list(self._keys)


class TieredBlockManager(BlockManager):
    """BlockManager with prefix caching whose evicted blocks go to lower tiers (see above)."""

    lazy_private_keys = False  # every key is registered as computed (the tiers store them)

    def __init__(self, num_blocks: int, block_size: int, watermark: float, host: LRUTier,
                 remote: LRUTier | None, moves: KVMoves) -> None:
        super().__init__(num_blocks, block_size, watermark, enable_caching=True)
        self.host = host  # the host-memory tier
        self.remote = remote  # the remote store, or None
        self.moves = moves  # pending copies of the instance's next step, run totals
        self.last_hits = (0, 0, 0)  # blocks the last allocation hit: (GPU, host, remote)

    def allocate(self, request_id: int, num_tokens: int,
                 keys: Sequence[BlockKey] = ()) -> list[int]:
        """BlockManager.allocate, then the lower tiers' leading run of `keys` promoted."""
        hits = self.find_cached_prefix(keys) if keys else []
        need = self.num_blocks_to_allocate(num_tokens, hits)
        if need > self.num_free_blocks:  # before anything is claimed from a lower tier
            raise OutOfBlocks(f"request {request_id} needs {need} blocks, "
                              f"{self.num_free_blocks} free")
        lower = self._claim(keys[len(hits):])
        table = super().allocate(request_id, num_tokens, keys)
        self._register(request_id, len(hits), lower)
        n_host = sum(1 for _, tier in lower if tier is self.host)
        n_remote = len(lower) - n_host
        self.last_hits = (len(hits), n_host, n_remote)
        bs = self.block_size
        if n_host:
            self.moves.swap_in_tokens += n_host * bs
            self.moves.count(HOST_IN, n_host * bs)
        if n_remote:
            self.moves.remote_in_tokens += n_remote * bs
            self.moves.count(REMOTE_IN, n_remote * bs)
        return table

    def _claim(self, keys: Sequence[BlockKey]) -> list[tuple[BlockKey, LRUTier]]:
        """The leading keys a lower tier holds (none on the GPU), taken out of their tier."""
        out: list[tuple[BlockKey, LRUTier]] = []
        for key in keys:
            if key in self._cached:
                break
            tier = self.host if key in self.host else (
                self.remote if self.remote is not None and key in self.remote else None)
            if tier is None:
                break
            tier.take(key)
            out.append((key, tier))
        return out

    def _register(self, request_id: int, start: int,
                  lower: list[tuple[BlockKey, LRUTier]]) -> None:
        """Key the request's fresh blocks from `start` on with the promoted keys."""
        if not lower:
            return
        table = self._tables[request_id]
        for b, (key, _) in zip(table[start:start + len(lower)], lower):
            self._cached[key] = b
            self._key_of[b] = key
            self._holders[b] = {request_id}
        self._num_keyed[request_id] = start + len(lower)
        self.num_hit_blocks += len(lower)

    def split_hit_tokens(self, num_cached_tokens: int) -> tuple[int, int]:
        """Of the last allocation's `num_cached_tokens` cached tokens (capped below its known
        tokens), those the host tier and the remote tier supplied; the GPU's come first."""
        bs = self.block_size
        gpu, host, _ = self.last_hits
        from_gpu = min(gpu * bs, num_cached_tokens)
        from_host = min(host * bs, num_cached_tokens - from_gpu)
        return from_host, num_cached_tokens - from_gpu - from_host

    def _take(self, n: int) -> list[int]:
        """BlockManager._take, demoting the keys of the cached blocks it evicts."""
        evict = n - len(self._free)
        keys = [key for _, key in islice(self._evictable.items(), evict)] if evict > 0 else []
        out = super()._take(n)
        for key in keys:
            self._demote(key)
        return out

    def _demote(self, key: BlockKey) -> None:
        """A GPU block holding `key` was evicted: write it to the host tier; what that pushes
        out goes to the remote tier (or is dropped)."""
        if key in self.host:
            self.host.put(key)  # computed twice: the host copy is the same, only refreshed
            return
        if self.remote is not None:
            self.remote.take(key)  # the fresh copy moves up to the host tier
        pushed = self.host.put(key)
        if pushed != key:  # stored (a tier of no blocks passes it on unwritten)
            self.moves.count(HOST_OUT, self.block_size)
        if pushed is None:
            return
        if self.remote is None:
            self.moves.counters[HOST_DROPPED] = self.moves.counters.get(HOST_DROPPED, 0) + 1
            return
        dropped = self.remote.put(pushed)
        if dropped != pushed:  # stored (a store of no blocks drops it unwritten)
            self.moves.count(REMOTE_OUT, self.block_size)
        if dropped is not None:
            self.moves.counters[REMOTE_DROPPED] = self.moves.counters.get(REMOTE_DROPPED, 0) + 1

    def check(self) -> None:
        """BlockManager.check, and the tiers within capacity and disjoint."""
        super().check()
        assert len(self.host) <= self.host.num_total_blocks, "host tier over capacity"
        if self.remote is not None:
            assert len(self.remote) <= self.remote.num_total_blocks, "remote tier over capacity"
            assert not set(self.host.keys()) & set(self.remote.keys()), "a key in two tiers"
