"""vLLM V1's KV connectors on `vllm`: host / remote prefix tiers, and CPU offload as V1's swap.

`vllm` with `host_prefix_cache_gib` (vLLM's `--kv-offloading-size`) > 0 runs a connector on each
instance as vLLM V1's scheduler drives one (vllm/v1/core/sched/scheduler.py; the connectors in
vllm/distributed/kv_transfer/kv_connector/v1/):

- Store. After every step, each request of the step stores its blocks that became full and
  computed, from the first it has not stored yet (GPU prefix hits included: the tier may lack
  them), to every tier (sim/memory/kv_offload.py: write-through LRU; `_get_reqs_to_store`). The copies
  run beside the forward (the connector's worker copies on its own stream): their bytes are
  counted, not timed.
- Lookup (`get_num_new_matched_tokens`). A waiting request looks its keys up on the GPU first,
  then in the tiers from the first GPU miss on: the run of blocks they hold is its external hit.
  GPU and external hits together are capped so that one token is computed.
- Allocation (`allocate_slots`). Blocks for the GPU hits (shared), the external hits (fresh)
  and, unless the load is asynchronous, the first chunk.
- Load, by `kv_offloading_backend`:
  - `native` (the OffloadingConnector): asynchronous. The load starts at admission on the
    instance's host link (one load at a time, latency + bytes / bandwidth each: `TierLinks`,
    sim/memory/kv_moves.py) while other requests compute; the request computes from the first step
    that starts after it lands, when its loaded blocks are cached (`_update_waiting_for_remote_kv`).
    vLLM parks it in the waiting queue (WAITING_FOR_REMOTE_KVS) holding its blocks; here it joins
    the running list holding them and is skipped until loaded: the same wait, and an instance
    whose blocks all belong to loading requests cannot deadlock (it counts in `max_num_seqs`
    and may be preempted, dropping its load).
  - `lmcache` (LMCacheConnectorV1): synchronous. The admitting step copies the blocks before its
    forward (host link for host hits, remote link for remote hits) and the request computes in
    it; its loaded blocks are cached at once.
- Preemption stays recomputation (V1 has no swap). A preempted request's blocks were stored as
  they were computed, so when it is admitted again its lookup finds them, on the GPU while they
  are cached there, else in the tiers, and loads them instead of recomputing them.

Exact jumps: while a load is in flight on an instance its steps run one iteration (the next may
find it landed), and a decode jump ends at the first iteration that completes a block (so stores,
the only changes to the tiers, happen as one-iteration steps make them). The run records
`num_host_hit_tokens` / `num_remote_hit_tokens` and the tier counters of policies/kv_tiers.py
(`kv_host_out_bytes`: bytes stored; `num_host_dropped_blocks`: evictions).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from sim.core.executor import InstanceInfo
from sim.core.request import Request
from sim.memory.block_manager import BlockKey
from sim.memory.kv_moves import KVMoves
from sim.memory.kv_offload import OffloadStore, OffloadTier
from sim.memory.kv_tiers import HOST_DROPPED, HOST_IN, HOST_OUT, REMOTE_DROPPED, REMOTE_IN, REMOTE_OUT
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError

from policies.kv_tier_config import gib_blocks, uses_kv_tiers
from policies.kv_tiers import TIER_COLUMNS, kv_size_of, zero
from policies.paged_instance import PagedInstance


class V1Connector:
    """The KV connectors of one `vllm` policy's instances (module doc)."""

    def __init__(self, config: Any, instances: Sequence[InstanceInfo],
                 state: list[PagedInstance], recorder: Recorder) -> None:
        self.sync = config.kv_offloading_backend == "lmcache"  # loads paid by the step
        self.recorder = recorder
        self.block_size = bs = config.block_size  # tokens per block
        self.stores: list[OffloadStore] = []  # per instance: its tiers
        self.links: list[Any] = []  # per instance: its TierLinks (asynchronous loads)
        c = recorder.counters
        for info, s in zip(instances, state):
            per_token = kv_size_of(config, info)
            if not self.sync and info.kv_links is None:
                raise ConfigError("kv_offloading_backend", config.kv_offloading_backend,
                                  f"instance {info.instance_id} reports no KV links to time "
                                  f"the OffloadingConnector's loads")
            remote = OffloadTier("remote", gib_blocks(config.remote_prefix_cache_gib, bs,
                                                      per_token)) \
                if config.remote_prefix_cache_gib > 0 else None
            host = OffloadTier("host", gib_blocks(config.host_prefix_cache_gib, bs, per_token))
            self.stores.append(OffloadStore(host, remote, bs, per_token, c))
            self.links.append(info.kv_links)
            s.moves = KVMoves(per_token, c)
        # request id -> (instance, when its load lands in seconds, the request)
        self.loading: dict[int, tuple[int, float, Request]] = {}
        self.link_free_s = [0.0] * len(state)  # when each instance's host link is free
        self.next_store: dict[int, int] = {}  # request id -> its first block not stored yet
        zero(c, (HOST_IN, HOST_OUT), (HOST_DROPPED,))
        if config.remote_prefix_cache_gib > 0:
            zero(c, (REMOTE_IN, REMOTE_OUT), (REMOTE_DROPPED,))
        recorder.add_record_columns(TIER_COLUMNS)

    # ---- admission ----------------------------------------------------------------------
    def lookup(self, instance_id: int, keys: Sequence[BlockKey],
               num_gpu_hits: int) -> list[OffloadTier]:
        """The tier of each block of the external hit after `num_gpu_hits` GPU hits."""
        return self.stores[instance_id].match(keys[num_gpu_hits:])

    def waits(self, external: Sequence[OffloadTier]) -> bool:
        """Whether a request with this external hit waits for an asynchronous load."""
        return bool(external) and not self.sync

    def admitted(self, instance_id: int, s: PagedInstance, r: Request, keys: Sequence[BlockKey],
                 num_gpu_hits: int, external: Sequence[OffloadTier], now: float) -> None:
        """`r` got its blocks with `r.num_computed_tokens` cached: touch its keys, count its
        hits per tier and start (or charge the step) the load of its external blocks."""
        store, bs = self.stores[instance_id], self.block_size
        store.touch(keys)
        if not external:
            return
        n_host = sum(1 for t in external if t is store.host)
        n_remote = len(external) - n_host
        cached = r.num_computed_tokens
        from_gpu = min(num_gpu_hits * bs, cached)
        host_tokens = min(n_host * bs, cached - from_gpu)
        r.num_host_hit_tokens += host_tokens
        r.num_remote_hit_tokens += cached - from_gpu - host_tokens
        s.moves.count(HOST_IN, n_host * bs)
        s.moves.count(REMOTE_IN, n_remote * bs)
        self.next_store[r.request_id] = num_gpu_hits + len(external)
        if self.sync:
            s.moves.swap_in_tokens += n_host * bs
            s.moves.remote_in_tokens += n_remote * bs
            s.blocks.cache_full_blocks(r.request_id, keys, cached)
            return
        start = max(now, self.link_free_s[instance_id])
        lands = start + self.links[instance_id].host_load_seconds(n_host * bs)
        self.link_free_s[instance_id] = lands
        self.loading[r.request_id] = (instance_id, lands, r)
        self.recorder.event(now, "kv_load", r.request_id,
                            f"instance {instance_id}: {n_host * bs} tokens from host memory, "
                            f"starts {start:.6f}, lands {lands:.6f}")

    # ---- loads in flight ---------------------------------------------------------------
    def is_loading(self, r: Request) -> bool:
        return r.request_id in self.loading

    def num_loading(self, instance_id: int) -> int:
        return sum(1 for i, _, _ in self.loading.values() if i == instance_id)

    def poll(self, instance_id: int, s: PagedInstance, prefix: Any, now: float) -> None:
        """Loads landed by `now`: their blocks are cached under their keys, and the requests
        compute from this step on."""
        for rid, (i, lands, r) in list(self.loading.items()):
            if i == instance_id and lands <= now:
                del self.loading[rid]
                s.blocks.cache_full_blocks(rid, prefix.keys(r), r.num_computed_tokens)

    def next_landing_s(self, instance_id: int) -> float:
        """When the next load in flight on the instance lands (math.inf: none)."""
        return min([lands for i, lands, _ in self.loading.values() if i == instance_id],
                   default=math.inf)

    def forget(self, r: Request) -> None:
        """`r` was preempted or cancelled: its load (if any) is dropped."""
        self.loading.pop(r.request_id, None)

    # ---- stores ----------------------------------------------------------------------------
    def store_step(self, instance_id: int, batch: Sequence[Request],
                   keys: Sequence[Sequence[BlockKey]], done: Sequence[Request]) -> None:
        """After a step: each request of `batch` (its keys in `keys`) stores its blocks that
        became full and computed; finished ones (`done`) are then forgotten."""
        store, bs = self.stores[instance_id], self.block_size
        for r, own in zip(batch, keys):
            end = min(len(own), r.num_computed_tokens // bs)
            start = self.next_store.get(r.request_id, 0)
            if end > start and store.store(own, start, end):
                self.next_store[r.request_id] = end
        for r in done:
            self.next_store.pop(r.request_id, None)

    def jump_cap(self, decodes: Sequence[Request]) -> int:
        """Iterations a decode jump may run: up to the first block a decode completes."""
        bs = self.block_size
        return min([bs - r.num_computed_tokens % bs for r in decodes], default=1)


class OffloadHooks:
    """Mixed into `vllm`'s policy class (policies/vllm_v1.py): where the paged policy's build,
    preemption, cancellation, step updates and idle wake-ups call the connector."""

    config: Any
    instances: list[InstanceInfo]
    state: list[PagedInstance]
    recorder: Recorder
    prefix: Any
    offload: V1Connector | None = None  # the instances' connectors, when a tier is on

    def build_tiers(self) -> None:
        """V1's connectors instead of vLLM v0's tiers, when the config turns a tier on."""
        if uses_kv_tiers(self.config):
            self.offload = V1Connector(self.config, self.instances, self.state, self.recorder)

    def is_loading(self, r: Request) -> bool:
        """Whether running `r` still waits for its asynchronous load."""
        return self.offload is not None and self.offload.is_loading(r)

    def preempt(self, s: PagedInstance, victim: Request, now: float) -> None:
        if self.offload is not None:
            self.offload.forget(victim)
        super().preempt(s, victim, now)  # type: ignore[misc]

    def cancel(self, request: Request, now: float) -> None:
        if self.offload is not None:
            self.offload.forget(request)
        super().cancel(request, now)  # type: ignore[misc]

    def update(self, step: Any, result: Any, now: float) -> list[Request]:
        if self.offload is None:
            return super().update(step, result, now)  # type: ignore[misc]
        batch = self.state[step.instance_id].in_flight
        keys = [self.prefix.keys(r) for r in batch]  # before finished ones are forgotten
        done = super().update(step, result, now)  # type: ignore[misc]
        self.offload.store_step(step.instance_id, batch, keys, done)
        return done

    def next_wakeup_s(self, instance_id: int, now: float) -> float:
        """An idle instance wakes when its next load lands."""
        if self.offload is None:
            return math.inf
        return self.offload.next_landing_s(instance_id)
