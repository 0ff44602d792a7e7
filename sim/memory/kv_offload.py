"""vLLM V1's KV offload tiers: a host (CPU) cache and a remote store, written through.

vLLM V1 offloads KV through a KV connector (`--kv-offloading-backend native`: the
OffloadingConnector over its CPU backend; `lmcache`: LMCacheConnectorV1). Unlike vLLM v0-style
tiers (sim/memory/kv_tiers.py: GPU evictions demoted, hits promoted out of their tier), a connector
stores every full block of a scheduled request once it is computed (write-through;
`OffloadingConnectorScheduler._get_reqs_to_store` in
vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py), and a load copies blocks
back to the GPU without taking them out: the tiers hold copies of what the GPU holds too.

`OffloadTier` follows the CPU manager (vllm/v1/kv_offload/cpu/manager.py) over its LRU policy
(cpu/policies/lru.py), with a capacity in blocks:

- `store(keys, start, end)`: a request's blocks [start, end) were computed. The keys the tier
  lacks are inserted as most recently used, evicting its least recently used keys other than
  the request's own [start, end) (`prepare_store`'s protected set); when that cannot make room,
  nothing is stored (prepare_store returns None) and None is returned. When anything was stored,
  the request's keys [0, end) are touched, last first, so its first block ends most recently
  used (`LRUCachePolicy.touch` over `reversed`).
- `touch(keys)`: the same refresh, which a lookup gives the request's keys.

`OffloadStore` is one instance's host tier and optional remote tier (LMCache's remote backend:
every stored block goes to each tier, a hit is read from the host when it has it, else the
remote). Bytes written and blocks evicted are added to the run's counters.
"""

from __future__ import annotations

from typing import Sequence

from sim.memory.block_manager import BlockKey
from sim.memory.kv_tiers import HOST_DROPPED, HOST_OUT, REMOTE_DROPPED, REMOTE_OUT, LRUTier


class OffloadTier(LRUTier):
    """One offload tier: content keys in LRU order (least recently used first); V1 stores a
    request's blocks as a batch and touches them on hits (LRUTier's put / take unused)."""

    def touch(self, keys: Sequence[BlockKey]) -> None:
        """Make the held ones of `keys` most recently used, the first key last of all."""
        held = self._keys
        for key in reversed(keys):
            if key in held:
                held.move_to_end(key)

    def store(self, keys: Sequence[BlockKey], start: int, end: int) -> tuple[int, int] | None:
        """Store a request's blocks [start, end) (see the module doc); returns (blocks written,
        blocks evicted), or None when nothing could be stored."""
        batch = keys[start:end]
        held = self._keys
        new = [k for k in batch if k not in held]
        if not new:
            return 0, 0
        evict = len(held) + len(new) - self.num_total_blocks
        if evict > 0:
            protected = set(batch)
            victims = []
            for k in held:
                if k not in protected:
                    victims.append(k)
                    if len(victims) == evict:
                        break
            if len(victims) < evict:
                return None
            for k in victims:
                del held[k]
        for k in new:
            held[k] = None
        self.touch(keys[:end])
        return len(new), max(evict, 0)


class OffloadStore:
    """An instance's host tier and optional remote tier, written through (module doc)."""

    def __init__(self, host: OffloadTier, remote: OffloadTier | None, block_size: int,
                 kv_bytes_per_token: float, counters: dict[str, float]) -> None:
        self.host = host  # the host-memory (CPU) tier
        self.remote = remote  # the remote store (LMCache's remote backend), or None
        self.block_size = block_size  # tokens per block
        self.kv_bytes_per_token = kv_bytes_per_token  # bytes of KV per token
        self.counters = counters  # the run's totals (Recorder.counters)

    def tiers(self) -> list[tuple[OffloadTier, str, str]]:
        """(tier, bytes-written counter, evicted-blocks counter) of each tier, host first."""
        out = [(self.host, HOST_OUT, HOST_DROPPED)]
        if self.remote is not None:
            out.append((self.remote, REMOTE_OUT, REMOTE_DROPPED))
        return out

    def store(self, keys: Sequence[BlockKey], start: int, end: int) -> bool:
        """Store a request's computed blocks [start, end) in every tier; False when the host
        tier could not make room (the request tries again after its next step, as vLLM's
        scheduler does)."""
        c, block_bytes = self.counters, self.block_size * self.kv_bytes_per_token
        ok = True
        for tier, written, dropped in self.tiers():
            done = tier.store(keys, start, end)
            if done is None:
                ok = ok and tier is not self.host
                continue
            c[written] = c.get(written, 0.0) + done[0] * block_bytes
            if done[1]:
                c[dropped] = c.get(dropped, 0) + done[1]
        return ok

    def match(self, keys: Sequence[BlockKey]) -> list[OffloadTier]:
        """The tier each leading key is read from (host first), up to the first key in none."""
        out: list[OffloadTier] = []
        host, remote = self.host, self.remote
        for key in keys:
            if key in host:
                out.append(host)
            elif remote is not None and key in remote:
                out.append(remote)
            else:
                break
        return out

    def touch(self, keys: Sequence[BlockKey]) -> None:
        """A lookup of a request's keys refreshes them in every tier."""
        for tier, _, _ in self.tiers():
            tier.touch(keys)

    def check(self) -> None:
        """Assert the tiers are within their capacities (for tests)."""
        for tier, _, _ in self.tiers():
            assert len(tier) <= tier.num_total_blocks, f"{tier.name} tier over capacity"
