"""KV copies between memory tiers (GPU, host memory, a remote KV store) and what they cost.

Two sides of one seam. A paged policy with KV tiers on (policies/kv_tiers.py) adds up, per
instance, the KV a step must copy before its forward: swapped-out requests' blocks (GPU -> host),
swapped-in requests' blocks and host-tier prefix hits (host -> GPU), remote-tier prefix hits
(remote -> GPU). `KVMoves.attach` puts those token counts on the Step (`num_swap_in_tokens`,
`num_swap_out_tokens`, `num_remote_in_tokens`) and the run's byte totals in the recorder's
counters. The cost executor turns them into time with `TierLinks.seconds`: each direction is one
blocking copy of latency + bytes / bandwidth, paid in the step's first iteration and one after
the other (vLLM v0 runs swap-in, then swap-out, before the model forward). Each GPU of a
tensor-parallel instance holds its shard of the KV and copies it over its own link, so the
bytes per link are the instance's divided by its GPUs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sim.core.executor import Step
from sim.memory.kv_transfer import Link, link_preset

DEFAULT_HOST_LINK = "pcie4_host"  # GPU <-> host memory: PCIe 4.0 x16, ~25 GB/s effective
DEFAULT_REMOTE_LINK = "ethernet_100g"  # remote KV store -> GPU: 100 Gb/s (12.5 GB/s)


@dataclass(frozen=True)
class TierLinks:
    """The links an instance's KV tiers copy over, and the KV size they copy."""

    host: Link  # GPU <-> host memory (swap, host prefix tier), one direction
    remote: Link  # remote KV store -> GPU
    kv_bytes_per_token: float  # bytes of KV per token of the served model (all GPUs together)
    num_links: int = 1  # GPUs of the instance: each copies its KV shard over its own link

    def __post_init__(self) -> None:
        if not self.kv_bytes_per_token >= 0 or self.num_links < 1:
            raise ValueError(f"TierLinks: kv_bytes_per_token={self.kv_bytes_per_token} must be "
                             f">= 0 and num_links={self.num_links} >= 1")

    def seconds(self, step: Step) -> float:
        """Seconds of the step's blocking KV copies: host -> GPU, GPU -> host, remote -> GPU,
        each latency + bytes per link / bandwidth when it moves anything."""
        per_link = self.kv_bytes_per_token / self.num_links  # bytes per token on one link
        total = 0.0
        if step.num_swap_in_tokens:
            total += self.host.seconds(step.num_swap_in_tokens * per_link)
        if step.num_swap_out_tokens:
            total += self.host.seconds(step.num_swap_out_tokens * per_link)
        if step.num_remote_in_tokens:
            total += self.remote.seconds(step.num_remote_in_tokens * per_link)
        return total

    def host_load_seconds(self, num_tokens: int) -> float:
        """Seconds of one copy of `num_tokens` tokens' KV from host memory to the GPUs
        (latency + bytes per link / bandwidth): an asynchronous load of vLLM V1's offloading
        connector (policies/vllm_offload.py)."""
        return self.host.seconds(num_tokens * self.kv_bytes_per_token / self.num_links)


def tier_links(deployment: Any, host: str = DEFAULT_HOST_LINK,
               remote: str = DEFAULT_REMOTE_LINK) -> TierLinks:
    """The TierLinks of a `sim.cost.cost_model.DeploymentSpec` over the named link presets
    (sim/memory/kv_transfer.py LINKS; ConfigError naming cluster.kv_host_link / kv_remote_link)."""
    from sim.cost.cost_model import kv_dtype_bytes

    per_token = float(deployment.model.kv_bytes_per_token(kv_dtype_bytes(deployment.kv_dtype)))
    return TierLinks(link_preset(host, "cluster.kv_host_link"),
                     link_preset(remote, "cluster.kv_remote_link"), per_token,
                     deployment.tensor_parallel)


@dataclass
class KVMoves:
    """One instance's pending KV copies for its next step, and the run's byte totals."""

    kv_bytes_per_token: float  # bytes of KV per token of the instance's model
    counters: dict[str, float] = field(default_factory=dict)  # the run's totals (Recorder)
    swap_in_tokens: int = 0  # pending host -> GPU copies, tokens (whole blocks)
    swap_out_tokens: int = 0  # pending GPU -> host copies, tokens
    remote_in_tokens: int = 0  # pending remote -> GPU copies, tokens

    def count(self, counter: str, num_tokens: int) -> None:
        """Add `num_tokens` tokens' bytes to the run's total `counter` (bytes)."""
        self.counters[counter] = self.counters.get(counter, 0.0) + \
            num_tokens * self.kv_bytes_per_token

    def attach(self, step: Step) -> Step:
        """`step` carrying the pending copies (they are then paid); the same step if none."""
        if not (self.swap_in_tokens or self.swap_out_tokens or self.remote_in_tokens):
            return step
        moved = dataclasses.replace(step, num_swap_in_tokens=self.swap_in_tokens,
                                    num_swap_out_tokens=self.swap_out_tokens,
                                    num_remote_in_tokens=self.remote_in_tokens)
        self.swap_in_tokens = self.swap_out_tokens = self.remote_in_tokens = 0
        return moved
