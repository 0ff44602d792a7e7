"""KV memory tiers of a paged policy's instances, set up when its config turns them on.

Per instance: a `KVMoves` (sim/memory/kv_moves.py) collecting the KV copies its next step makes; with
`preemption_mode: swap` a `SwapSpace` of `swap_space` GiB (policies/swap.py); with
`host_prefix_cache_gib` > 0 a `TieredBlockManager` (sim/memory/kv_tiers.py) in place of the prefix-cache
block manager, over a host tier of that many GiB and, with `remote_prefix_cache_gib` > 0, a
remote tier. GiB become blocks through the model's KV bytes per token the instance reports
(`InstanceInfo.kv_bytes_per_token`); an instance that reports none (the real engine, calibrated
cost models, test executors without it) or runs HF static batches is refused.

The run then records, per request, `num_swapped_out_tokens` / `num_swapped_in_tokens` (swap) and
`num_host_hit_tokens` / `num_remote_hit_tokens` (tiers), and its summary adds the bytes moved per
tier, the swap counts and the prefix hit rate per tier (sim/metrics/summary.py). Runs without tiers
record none of these.
"""

from __future__ import annotations

from typing import Any, Sequence

from sim.core.executor import InstanceInfo
from sim.memory.kv_moves import KVMoves
from sim.memory.kv_tiers import (HOST_DROPPED, HOST_IN, HOST_OUT, REMOTE_DROPPED, REMOTE_IN, REMOTE_OUT,
                          LRUTier, TieredBlockManager)
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError

from policies.kv_tier_config import gib_blocks, tier_field, uses_kv_tiers
from policies.paged_instance import PagedInstance
from policies.swap import NUM_SWAP_OUTS, NUM_SWAP_RECOMPUTES, SWAP_IN_BYTES, SWAP_OUT_BYTES
from policies.swap_space import SwapSpace

SWAP_COLUMNS = ("num_swapped_out_tokens", "num_swapped_in_tokens")  # record columns with swap
TIER_COLUMNS = ("num_host_hit_tokens", "num_remote_hit_tokens")  # ... with a prefix tier


def build_kv_tiers(config: Any, instances: Sequence[InstanceInfo],
                   state: list[PagedInstance], recorder: Recorder) -> None:
    """Give each instance's state its KV tiers when `config` turns any on (else nothing)."""
    if not uses_kv_tiers(config):
        return
    swap = config.preemption_mode == "swap"
    host_gib, remote_gib = config.host_prefix_cache_gib, config.remote_prefix_cache_gib
    bs = config.block_size
    for info, s in zip(instances, state):
        per_token = kv_size_of(config, info)
        s.moves = KVMoves(per_token, recorder.counters)
        if swap:
            s.swap = SwapSpace(gib_blocks(config.swap_space, bs, per_token))
        if host_gib > 0:
            host = LRUTier("host", gib_blocks(host_gib, bs, per_token))
            remote = LRUTier("remote", gib_blocks(remote_gib, bs, per_token)) \
                if remote_gib > 0 else None
            s.blocks = TieredBlockManager(s.blocks.num_total_blocks, bs, config.watermark,
                                          host, remote, s.moves)
    counters = recorder.counters
    names: tuple[str, ...] = ()
    if swap:
        names += SWAP_COLUMNS
        zero(counters, (SWAP_OUT_BYTES, SWAP_IN_BYTES), (NUM_SWAP_OUTS, NUM_SWAP_RECOMPUTES))
    if host_gib > 0:
        names += TIER_COLUMNS
        zero(counters, (HOST_IN, HOST_OUT), (HOST_DROPPED,))
        if remote_gib > 0:
            zero(counters, (REMOTE_IN, REMOTE_OUT), (REMOTE_DROPPED,))
    recorder.add_record_columns(names)


def zero(counters: dict[str, float], byte_keys: tuple[str, ...],
         count_keys: tuple[str, ...]) -> None:
    """Start the run's tier counters, so the summary lists them even when nothing moved."""
    for key in byte_keys:
        counters.setdefault(key, 0.0)
    for key in count_keys:
        counters.setdefault(key, 0)


def kv_size_of(config: Any, info: InstanceInfo) -> float:
    """The instance's KV bytes per token; ConfigError naming the tier field when it reports
    none or cannot hold tiers."""
    name, value = tier_field(config)
    if "(hf_static)" in info.name:
        raise ConfigError(name, value, f"instance {info.instance_id} runs HF static batches "
                          f"(contiguous KV): no paged blocks to swap or cache")
    if not info.kv_bytes_per_token > 0:
        raise ConfigError(name, value, f"instance {info.instance_id} ({info.name or 'unnamed'}) "
                          f"does not report its KV bytes per token, so GiB cannot become "
                          f"blocks: KV tiers run on the cost-model backend (not the real "
                          f"engine or a calibrated cost model)")
    return info.kv_bytes_per_token
