"""The KV memory tier parameters of the paged policies, and the combinations refused.

`PagedConfig` (policies/paged.py) has four fields, all off by default:

- `preemption_mode`: `recompute` (vLLM's default, and all V1 has) or `swap` (vLLM v0's other
  mode): a preempted request's KV blocks are copied to host memory and back (policies/swap.py);
- `swap_space`: GiB of host memory per instance for swapped-out KV (vLLM v0: 4 GiB per GPU);
- `host_prefix_cache_gib`: GiB of host memory per instance holding prefix-cache blocks evicted
  from the GPU, promoted back on a hit (sim/memory/kv_tiers.py); needs `enable_prefix_caching`;
- `remote_prefix_cache_gib`: GiB of a remote KV store per instance below the host tier.

They run on `vllm_v0` and `sarathi` on the cost-model backend, and the prefix tiers on `vllm`
too, as vLLM V1's KV connectors run them (policies/vllm_offload.py): there
`kv_offloading_backend` picks the connector (`native`: the OffloadingConnector, a host tier,
asynchronous loads; `lmcache`: LMCacheConnectorV1, a host and optionally a remote tier, loads
in the step) and `kv_offloading_size` (vLLM's `--kv-offloading-size`) is another name for
`host_prefix_cache_gib`. Refused, with the field named: swap on `vllm` (V1 preempts by
recomputation only; its equivalent is a host tier), a remote tier on `vllm` without lmcache,
swap or tiers on `lacb`, in disagg pools, on the real torch backend, on HF static batches and
with a calibrated cost model (whose executors do not price the copies).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from sim.util.errors import ConfigError

PREEMPTION_MODES = ("recompute", "swap")
OFFLOADING_BACKENDS = ("native", "lmcache")  # vLLM's --kv-offloading-backend values
GIB = 2**30  # bytes per GiB


def check_kv_tier_params(config: Any) -> None:
    """ConfigError naming the first KV tier field of a PagedConfig that is out of range."""
    if config.preemption_mode not in PREEMPTION_MODES:
        raise ConfigError("preemption_mode", config.preemption_mode,
                          f"one of {', '.join(PREEMPTION_MODES)}")
    for name in ("swap_space", "host_prefix_cache_gib", "remote_prefix_cache_gib"):
        check_gib(name, getattr(config, name))
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


def check_gib(name: str, value: object) -> None:
    """ConfigError unless `value` is a finite number of GiB >= 0."""
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 <= value < math.inf):
        raise ConfigError(name, value, "must be a finite number of GiB >= 0")


def resolve_offloading_size(config: Any) -> None:
    """`vllm`'s `kv_offloading_size` (vLLM's name) into `host_prefix_cache_gib`, before the tier
    fields are checked; ConfigError naming it when it is bad or contradicts the other."""
    size, host = config.kv_offloading_size, config.host_prefix_cache_gib
    check_gib("kv_offloading_size", size)
    if size > 0 and host > 0 and size != host:
        raise ConfigError("kv_offloading_size", size, f"is vLLM's name for "
                          f"host_prefix_cache_gib={host}: set one of them")
    if size > 0:
        object.__setattr__(config, "host_prefix_cache_gib", float(size))


def check_v1_offload(config: Any) -> None:
    """ConfigError naming the first KV tier field `vllm` (vLLM V1) cannot run as set."""
    if config.kv_offloading_backend not in OFFLOADING_BACKENDS:
        raise ConfigError("kv_offloading_backend", config.kv_offloading_backend,
                          "one of native (vLLM's OffloadingConnector), lmcache "
                          "(LMCacheConnectorV1)")
    if config.preemption_mode == "swap":
        raise ConfigError("preemption_mode", "swap", "vLLM V1 has no swap: it preempts by "
                          "recomputation. Its equivalent is CPU offloading: set "
                          "host_prefix_cache_gib (vLLM's --kv-offloading-size), and a preempted "
                          "request reloads its offloaded blocks from host memory instead of "
                          "recomputing them")
    if config.remote_prefix_cache_gib > 0 and config.kv_offloading_backend != "lmcache":
        raise ConfigError("remote_prefix_cache_gib", config.remote_prefix_cache_gib,
                          "a remote store below the host tier is LMCache's: set "
                          "kv_offloading_backend: lmcache (vLLM's native OffloadingConnector "
                          "has a CPU tier only)")


def _get(config: Any, name: str, default: object) -> Any:
    """A field of a policy config, or a key of a mapping of its parameters."""
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def uses_kv_tiers(config: Any) -> bool:
    """Whether a policy config (or a mapping of its parameters) turns swap or a prefix tier
    on."""
    sizes = (_get(config, "host_prefix_cache_gib", 0), _get(config, "kv_offloading_size", 0))
    return (_get(config, "preemption_mode", "recompute") == "swap"
            or any(isinstance(v, (int, float)) and v > 0 for v in sizes))


def tier_field(config: Any) -> tuple[str, object]:
    """The (field, value) that turned KV tiers on, for errors."""
    if _get(config, "preemption_mode", "recompute") == "swap":
        return "preemption_mode", "swap"
    host = _get(config, "host_prefix_cache_gib", 0)
    alias = _get(config, "kv_offloading_size", 0)
    if not (isinstance(host, (int, float)) and host > 0) and isinstance(alias, (int, float)) \
            and alias > 0:
        return "kv_offloading_size", alias
    return "host_prefix_cache_gib", host


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
