"""Θ, the memory a Magnus batch may plan to fill: in KV tokens, or in bytes as the engine counts.

The paper's Θ is the available memory. On the paged engine a batch's memory is its KV cache, so
the check is size x (L(B) + G'(B)) <= Θ x the smallest instance's KV capacity (tokens). On the
HF static-batch engine (`sim/cluster/hf_static.py`) the prefill also holds every position's logits and a
layer's attention scores, often more than the KV itself for long prompts; sizing batches by KV
tokens alone there makes them fail in the prefill. `memory_check: engine` (the default) counts
the batch's peak bytes as that engine does, on every instance that reports an engine memory
model; `memory_check: kv_tokens` keeps the token count (the first increment's behaviour).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from sim.cluster.hf_static import HFStaticExecutor, HFStaticMemory
from sim.core.executor import InstanceInfo
from sim.util.errors import check_fraction, check_positive

MEMORY_CHECKS = ("engine", "kv_tokens")


class BatchMemory(Protocol):
    """Whether a padded batch fits the memory a batch may plan to fill (Θ)."""

    def fits(self, size: int, longest_prompt: int, longest_gen: int) -> bool: ...


@dataclass(frozen=True)
class KVTokenMemory:
    """Θ in KV tokens: size x (L(B) + G(B)) <= capacity."""

    capacity_tokens: int  # Θ x the smallest instance's KV capacity, tokens

    def __post_init__(self) -> None:
        check_positive("capacity_tokens", self.capacity_tokens)

    def fits(self, size: int, longest_prompt: int, longest_gen: int) -> bool:
        return size * (longest_prompt + longest_gen) <= self.capacity_tokens


@dataclass(frozen=True)
class EngineMemory:
    """Θ in bytes: the batch's peak (prefill or last decode iteration) on every instance."""

    engines: tuple[HFStaticMemory, ...]  # one memory model per distinct instance kind
    fraction: float = 1.0  # Θ as a share of each engine's free memory

    def __post_init__(self) -> None:
        if not self.engines:
            raise ValueError("EngineMemory needs at least one engine memory model")
        check_fraction("memory_fraction", self.fraction)

    def fits(self, size: int, longest_prompt: int, longest_gen: int) -> bool:
        return all(m.batch_peak_bytes(size, longest_prompt, longest_gen)
                   <= self.fraction * m.free_bytes for m in self.engines)


def batch_memory(instances: Sequence[InstanceInfo], fraction: float,
                 check: str = "engine") -> BatchMemory:
    """Θ for a cluster: bytes when `check` is engine and every instance's engine reports a
    memory model, else KV tokens of the smallest instance."""
    models = [i.engine.memory if isinstance(i.engine, HFStaticExecutor) else None
              for i in instances]
    if check == "engine" and models and all(m is not None for m in models):
        return EngineMemory(tuple(dict.fromkeys(models)), fraction)  # type: ignore[arg-type]
    capacity = min(i.kv_capacity_tokens for i in instances)
    return KVTokenMemory(max(1, int(fraction * capacity)))
