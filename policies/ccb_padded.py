"""CCB's conservative reservation counted in the HF engine's padded layout (sim/cluster/hf_continuous.py).

On the HF static-batch engine a running batch is one contiguous KV tensor whose rows are all as
long as its longest sequence, and a join step also holds the joiners' prefill (logits, scores).
A row never grows past its prompt + `max_gen_tokens`, nor past the model's context (the simulator
cuts outputs there), so no tensor row grows past the longest such reserved sequence among the
running rows. Reserving rows x that sequence x KV bytes, plus the prefill peak of the rows that
join in the step, bounds every iteration's peak as the engine counts it: a conservative batch
never runs out of memory. Counted in bytes (`HFStaticMemory`) per instance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from sim.cluster.hf_static import HFStaticExecutor, HFStaticMemory
from sim.core.executor import InstanceInfo
from sim.util.errors import check_positive


@dataclass(frozen=True)
class PaddedReservation:
    """Rows x the longest reserved sequence, plus the joiners' prefill peak, in the engine's
    bytes."""

    memory: HFStaticMemory  # the instance's engine memory model (free bytes, bytes per token)
    max_model_len: int  # tokens no sequence grows past (the model's context)
    max_gen_tokens: int  # output tokens reserved per request

    def __post_init__(self) -> None:
        check_positive("max_model_len", self.max_model_len)
        check_positive("max_gen_tokens", self.max_gen_tokens)

    def sequence(self, prompt_tokens: int) -> int:
        """Tokens reserved for one row: prompt + max_gen_tokens, at most the model's context."""
        return min(self.max_model_len, prompt_tokens + self.max_gen_tokens)

    def peak_bytes(self, rows: int, longest_sequence: int, joiners: int,
                   longest_joiner_prompt: int) -> float:
        """Bytes reserved: the padded tensor at its longest, plus the joiners' prefill peak."""
        kv = rows * longest_sequence * self.memory.kv_bytes_per_token
        if not joiners:
            return kv
        return kv + self.memory.prefill_peak_bytes(joiners, longest_joiner_prompt)

    def fits(self, rows: int, longest_sequence: int, joiners: int,
             longest_joiner_prompt: int) -> bool:
        """Whether the reservation fits the engine's free memory."""
        return self.peak_bytes(rows, longest_sequence, joiners,
                               longest_joiner_prompt) <= self.memory.free_bytes

    def alone_tokens(self, prompt_tokens: int) -> int:
        """A request's reservation alone (it joins an empty batch), in KV tokens rounded up:
        at most the instance's `kv_capacity_tokens` exactly when it fits alone."""
        alone = self.peak_bytes(1, self.sequence(prompt_tokens), 1, prompt_tokens)
        return math.ceil(alone / self.memory.kv_bytes_per_token)

    def reserved_tokens(self, prompt_tokens: Iterable[int]) -> int:
        """Padded KV tokens reserved by running rows of these prompts (rows x longest)."""
        sequences = [self.sequence(p) for p in prompt_tokens]
        return len(sequences) * max(sequences, default=0)


def padded_reservation(info: InstanceInfo, max_gen_tokens: int) -> PaddedReservation | None:
    """The padded reservation of an instance on the HF static-batch engine, None elsewhere."""
    engine = info.engine
    if not isinstance(engine, HFStaticExecutor):
        return None
    return PaddedReservation(engine.memory, engine.max_model_len, max_gen_tokens)
