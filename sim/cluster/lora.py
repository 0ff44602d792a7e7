"""Multi-LoRA serving: adapter slots on the GPU, their load cost and their per-step cost.

`cluster.lora` turns it on (vLLM's `--enable-lora --max-loras --max-lora-rank`):

    cluster: {lora: {max_loras: 4, max_lora_rank: 16, target_modules: all}}

- **Memory.** vLLM keeps `max_loras` GPU slots, each sized for a rank-`max_lora_rank` adapter;
  they come out of the KV budget. An adapter of rank r over the adapted linear layers holds
  r * (d_in + d_out) fp16 weights per layer (A: d_in x r, B: r x d_out), in every block.
- **Load.** An adapter that is not resident is copied from host memory over the cluster's host
  link (`cluster.kv_host_link`) before the step that first runs it: latency + bytes / bandwidth,
  each GPU copying its 1 / tp share over its own link, one adapter after the other.
- **Step cost** (Punica's SGMV / S-LoRA's MBGMM: the rows are grouped by adapter and each
  distinct adapter is one segment): segment a with t_a tokens costs the roofline
      max(2 * r * D * L * t_a / tp / (peak * compute_eff), bytes_a / tp / (HBM * memory_eff))
  with D = sum of d_in + d_out over the adapted layers of a block, L blocks and bytes_a its
  weights (read once per iteration). So a decode iteration with k distinct adapters costs k
  adapter reads: k * bytes / (tp * HBM * memory_eff). Rows without an adapter (id -1) cost
  nothing. The segments' times add to each iteration of the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from sim.core.executor import Step
from sim.cost.deployment import ACT_DTYPE_BYTES, DeploymentSpec
from sim.memory.kv_transfer import Link
from sim.util.errors import ConfigError

NO_ADAPTER = -1  # `Step.lora_ids` entry of a row served by the base model
TARGET_MODULES = ("attention", "all")  # q, k, v, o | those and the MLP's gate, up, down
MAX_LORA_RANK = 512  # a sanity bound (vLLM allows 8..512)


@dataclass(frozen=True)
class LoraSpec:
    """`cluster.lora`: the instance's adapter slots and the adapters' shape."""

    max_loras: int = 4  # adapters resident on the GPU at once (slots)
    max_lora_rank: int = 16  # rank r of the adapters (each slot holds one of this rank)
    target_modules: str = "all"  # attention: q, k, v, o | all: those and gate, up, down

    def __post_init__(self) -> None:
        for name, value, top in (("max_loras", self.max_loras, 1024),
                                 ("max_lora_rank", self.max_lora_rank, MAX_LORA_RANK)):
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
                raise ConfigError(f"cluster.lora.{name}", value, f"must be an int in [1, {top}]")
        if self.target_modules not in TARGET_MODULES:
            raise ConfigError("cluster.lora.target_modules", self.target_modules,
                              f"one of {', '.join(TARGET_MODULES)}")


def lora_spec(options: Mapping[str, Any]) -> LoraSpec | None:
    """The LoraSpec of `cluster.lora` (None when empty: LoRA off)."""
    if not options:
        return None
    known = {"max_loras", "max_lora_rank", "target_modules"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"cluster.lora.{unknown[0]}", options[unknown[0]],
                          f"unknown; known: {', '.join(sorted(known))}")
    return LoraSpec(**options)


def adapted_dims(deployment: DeploymentSpec, target_modules: str) -> int:
    """D: sum of d_in + d_out over the adapted linear layers of one block."""
    m = deployment.model
    d, q, kv = m.hidden_size, m.num_attention_heads * m.head_dim, m.num_kv_heads * m.head_dim
    dims = (d + q) + 2 * (d + kv) + (q + d)  # q, k, v, o
    if target_modules == "all":
        dims += (3 if m.gated_mlp else 2) * (d + m.intermediate_size)  # (gate,) up, down
    return dims


@dataclass(frozen=True, slots=True)
class LoraCost:
    """What one instance's adapters cost: memory, loads and the per-iteration segments."""

    spec: LoraSpec  # slots, rank, adapted modules
    dims_per_layer: int  # D: sum of d_in + d_out over a block's adapted layers
    num_layers: int  # transformer blocks
    tensor_parallel: int  # GPUs each adapter is split over
    link: Link  # host memory -> GPU link adapters load over (one per GPU)
    flops_per_s: float  # effective tensor FLOP/s of one GPU
    bytes_per_s: float  # effective HBM bytes/s of one GPU

    @property
    def adapter_bytes(self) -> float:
        """fp16 bytes of one rank-r adapter (all GPUs together)."""
        return self.spec.max_lora_rank * self.dims_per_layer * self.num_layers * ACT_DTYPE_BYTES

    @property
    def slot_bytes_per_gpu(self) -> float:
        """Bytes per GPU the `max_loras` slots reserve."""
        return self.spec.max_loras * self.adapter_bytes / self.tensor_parallel

    def flops_per_token(self) -> float:
        """2 * r * D * L: FLOPs of one token through its adapter (all GPUs together)."""
        return 2.0 * self.spec.max_lora_rank * self.dims_per_layer * self.num_layers

    def load_seconds(self, num_loads: int) -> float:
        """Seconds of `num_loads` adapter copies host -> GPU, one after the other."""
        if num_loads <= 0:
            return 0.0
        return num_loads * self.link.seconds(self.adapter_bytes / self.tensor_parallel)

    def segment_seconds(self, num_tokens: int) -> float:
        """Roofline time of one adapter's segment of `num_tokens` tokens in one iteration."""
        tp = self.tensor_parallel
        return max(self.flops_per_token() * num_tokens / tp / self.flops_per_s,
                   self.adapter_bytes / tp / self.bytes_per_s)

    def iteration_seconds(self, step: Step) -> tuple[float, float]:
        """(first iteration, each later iteration) seconds of the step's adapter segments."""
        first: dict[int, int] = {}
        rows: dict[int, int] = {}
        for lid, n in zip(step.lora_ids, step.num_new_tokens):
            if lid != NO_ADAPTER:
                first[lid] = first.get(lid, 0) + n
                rows[lid] = rows.get(lid, 0) + 1
        return (sum(self.segment_seconds(t) for t in first.values()),
                sum(self.segment_seconds(t) for t in rows.values()))


def build_lora(deployment: DeploymentSpec, options: Mapping[str, Any], link: Link,
               compute_efficiency: float, memory_efficiency: float) -> LoraCost | None:
    """The LoraCost of `cluster.lora` on the deployment (None when LoRA is off)."""
    spec = lora_spec(options)
    if spec is None:
        return None
    gpu = deployment.gpu
    cost = LoraCost(spec, adapted_dims(deployment, spec.target_modules),
                    deployment.model.num_layers, deployment.tensor_parallel, link,
                    gpu.peak_tensor_flops * compute_efficiency,
                    gpu.hbm_bandwidth * memory_efficiency)
    if cost.slot_bytes_per_gpu >= deployment.kv_bytes_per_gpu:
        raise ConfigError("cluster.lora.max_loras", spec.max_loras,
                          f"{cost.slot_bytes_per_gpu / 2**30:.2f} GiB of adapter slots per GPU "
                          f"leave no KV room next to {deployment.name}")
    return cost
