"""The KV memory tier parameters of the paged policies, and the combinations refused.

`PagedConfig` (policies/paged.py) has four fields, all off by default:

- `preemption_mode`: `recompute` (vLLM's default, and all V1 has) or `swap` (vLLM v0's other
  mode): a preempted request's KV blocks are copied to host memory and back (policies/swap.py);
- `swap_space`: GiB of host memory per instance for swapped-out KV (vLLM v0: 4 GiB per GPU);
- `host_prefix_cache_gib`: GiB of host memory per instance holding prefix-cache blocks evicted
  from the GPU, promoted back on a hit (sim/kv_tiers.py); needs `enable_prefix_caching`;
- `remote_prefix_cache_gib`: GiB of a remote KV store per instance below the host tier.

They run on `vllm_v0` and `sarathi` on the cost-model backend. Refused, with the field named:
swap or tiers on `vllm` (V1 preempts by recomputation only; its offloading is not modelled)
and `lacb`, in disagg pools, on the real torch backend, on HF static batches and with a
calibrated cost model (whose executors do not price the copies).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from sim.errors import ConfigError

PREEMPTION_MODES = ("recompute", "swap")
GIB = 2**30  # bytes per GiB


def check_kv_tier_params(config: Any) -> None:
    """ConfigError naming the first KV tier field of a PagedConfig that is out of range."""
    if config.preemption_mode not in PREEMPTION_MODES:
        raise ConfigError("preemption_mode", config.preemption_mode,
                          f"one of {', '.join(PREEMPTION_MODES)}")
    for name in ("swap_space", "host_prefix_cache_gib", "remote_prefix_cache_gib"):
        value = getattr(config, name)
        if not (isinstance(value, (int, float)) and 0 <= value < math.inf):
            raise ConfigError(name, value, "must be a finite number of GiB >= 0")
    if config.preemption_mode == "swap" and config.swap_space <= 0:
        raise ConfigError("swap_space", config.swap_space, "must be > 0 GiB with "
                          "preemption_mode: swap (the host memory swapped KV goes to)")
    if config.host_prefix_cache_gib > 0 and not config.enable_prefix_caching:
        raise ConfigError("host_prefix_cache_gib", config.host_prefix_cache_gib,
                          "a host prefix tier holds prefix-cache blocks: set "
                          "enable_prefix_caching: true")
    if config.remote_prefix_cache_gib > 0 and config.host_prefix_cache_gib <= 0:
        raise ConfigError("remote_prefix_cache_gib", config.remote_prefix_cache_gib,
                          "the remote tier sits below the host tier: set "
                          "host_prefix_cache_gib > 0")


def _get(config: Any, name: str, default: object) -> Any:
    """A field of a policy config, or a key of a mapping of its parameters."""
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def uses_kv_tiers(config: Any) -> bool:
    """Whether a policy config (or a mapping of its parameters) turns swap or a prefix tier
    on."""
    host = _get(config, "host_prefix_cache_gib", 0)
    return (_get(config, "preemption_mode", "recompute") == "swap"
            or (isinstance(host, (int, float)) and host > 0))


def tier_field(config: Any) -> tuple[str, object]:
    """The (field, value) that turned KV tiers on, for errors."""
    if _get(config, "preemption_mode", "recompute") == "swap":
        return "preemption_mode", "swap"
    return "host_prefix_cache_gib", _get(config, "host_prefix_cache_gib", 0)


def refuse_kv_tiers(config: Any, why: str) -> None:
    """ConfigError naming the KV tier field a policy that has none turned on, with `why`."""
    if uses_kv_tiers(config):
        name, value = tier_field(config)
        raise ConfigError(name, value, why)


def check_kv_tiers_cluster(config: Any, cluster: Any, where: str) -> None:
    """ConfigError when a policy turns KV tiers on where their copies are not priced: the real
    backend, HF static batches, a calibrated cost model (`where`: e.g. policies[0].params)."""
    if not uses_kv_tiers(config):
        return
    name, value = tier_field(config)
    if cluster.backend == "real":
        why = "the real torch backend keeps its KV on the GPU only; use backend: sim"
    elif dict(cluster.engine).get("kind") == "hf_static":
        why = "HF static batches keep contiguous KV, no paged blocks to swap or cache"
    elif "calibration" in cluster.cost_model:
        why = ("a calibrated cost model does not price KV copies between tiers; use the "
               "roofline or stage cost models")
    else:
        return
    raise ConfigError(f"{where}.{name}", value, why)


def gib_blocks(gib: float, block_size: int, kv_bytes_per_token: float) -> int:
    """KV blocks of `block_size` tokens that `gib` GiB hold."""
    return int(gib * GIB // (block_size * kv_bytes_per_token))
