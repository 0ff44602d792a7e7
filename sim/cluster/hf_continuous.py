"""Iteration-level Steps on the HF static-batch engine, run as an HF-transformers continuous batcher
runs them (the Magnus paper's CCB baseline; sim/cluster/hf_static.py is the engine).

A Step with decode rows (one new token over a non-empty cache) is a running batch, held as one
contiguous padded KV tensor; its other rows (more than one new token, or an empty cache) join it
in this Step. Iteration 1 then costs, in order:
  decode     the decode rows' forward, padded to their longest cache:
             decode rows x (longest decode cache + 1) tokens read `kv_passes` times;
  prefill    the joiners' own padded forward: joiners x the longest joiner prompt (its logits and
             score matrix, as a static batch's prefill), with its own host overhead;
  re-layout  the joiners' KV and the running tensor copied into one new padded tensor of
             rows x L tokens, L the longest sequence after the iteration: read + write in HBM.
From iteration 2 on every row decodes one token, padded to L, L + 1, ... (the static engine's
decode iterations). Memory at iteration 1 is the new tensor, rows x L x KV bytes (the torch.cat
copy of one layer included), plus the joiners' prefill peak: an upper bound of both the prefill
(the running tensor is smaller than the new one) and the re-layout done layer by layer. At
iteration k it is rows x (L + k - 1) tokens. A Step without decode rows is a static batch (every
row a padded prefill of the same shape) and is not modelled here; its times are unchanged.
Rows leaving the batch are not charged: the tensor is sliced to the remaining rows and trimmed to
their longest sequence for free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sim.core.executor import Step, StepResult, modelled_result


class PaddedEngineMemory(Protocol):
    """The engine's memory numbers this module needs (sim.cluster.hf_static.HFStaticMemory)."""

    free_bytes: float  # bytes for KV and activations
    kv_bytes_per_token: float  # bytes per cached token, the torch.cat copy of a layer included

    def prefill_peak_bytes(self, rows: int, prompt: int, context: int = 0) -> float: ...


class PaddedEngine(Protocol):
    """The engine's times this module needs (sim.cluster.hf_static.HFStaticExecutor)."""

    @property
    def memory(self) -> PaddedEngineMemory: ...

    def prefill_seconds(self, rows: int, prompt: int, context: int = 0) -> float: ...

    def decode_times(self, rows: int, first_context: int, iterations: int) -> np.ndarray: ...

    def kv_copy_seconds(self, rows: int, length: int) -> float: ...


@dataclass(frozen=True, slots=True)
class MixedShape:
    """A Step of a running batch with joiners, as the padded engine sees it."""

    num_decode: int  # rows decoding one token over their cache (at least 1)
    decode_context: int  # tokens cached by the longest decode row before the step
    num_join: int  # rows prefilled this step and joining the running batch (0: none)
    join_prompt: int  # tokens computed by the longest joiner (0 when none join)
    join_context: int  # tokens cached by the longest joiner before the step (0 for new requests)

    @property
    def num_rows(self) -> int:
        """Rows of the padded tensor after the step's first iteration."""
        return self.num_decode + self.num_join

    @property
    def longest(self) -> int:
        """Tokens a row of the padded tensor holds after the first iteration (L)."""
        return max(self.decode_context + 1, self.join_context + self.join_prompt)


def mixed_shape(step: Step) -> MixedShape | None:
    """The running batch and joiners of `step`; None when no row decodes (a static batch)."""
    decode_ctx = [c for n, c in zip(step.num_new_tokens, step.num_context_tokens)
                  if n == 1 and c > 0]
    if not decode_ctx:
        return None
    joins = [(n, c) for n, c in zip(step.num_new_tokens, step.num_context_tokens)
             if n != 1 or c == 0]
    return MixedShape(len(decode_ctx), max(decode_ctx), len(joins),
                      max((n for n, _ in joins), default=0),
                      max((c for _, c in joins), default=0))


def first_iteration_seconds(engine: PaddedEngine, shape: MixedShape) -> float:
    """Seconds of iteration 1: the decode rows' forward, then (with joiners) the joiners'
    padded prefill and the re-layout of the merged tensor."""
    seconds = float(engine.decode_times(shape.num_decode, shape.decode_context, 1)[0])
    if shape.num_join:
        seconds += engine.prefill_seconds(shape.num_join, shape.join_prompt, shape.join_context)
        seconds += engine.kv_copy_seconds(shape.num_rows, shape.longest)
    return seconds


def mixed_iteration_times(engine: PaddedEngine, shape: MixedShape, iterations: int) -> np.ndarray:
    """Seconds of each of `iterations` iterations: iteration 1, then padded decodes of all rows
    over L, L + 1, ... cached tokens."""
    out = np.empty(iterations)
    out[0] = first_iteration_seconds(engine, shape)
    if iterations > 1:
        out[1:] = engine.decode_times(shape.num_rows, shape.longest, iterations - 1)
    return out


def first_iteration_peak_bytes(memory: PaddedEngineMemory, shape: MixedShape) -> float:
    """Peak bytes of iteration 1: the merged padded tensor, plus the joiners' prefill peak."""
    peak = shape.num_rows * shape.longest * memory.kv_bytes_per_token
    if shape.num_join:
        peak += memory.prefill_peak_bytes(shape.num_join, shape.join_prompt, shape.join_context)
    return peak


def mixed_first_oom_iteration(memory: PaddedEngineMemory, shape: MixedShape,
                              iterations: int) -> int:
    """1-based iteration whose peak memory first exceeds the free memory, 0 if none."""
    if first_iteration_peak_bytes(memory, shape) > memory.free_bytes:
        return 1
    last = int(memory.free_bytes // (shape.num_rows * memory.kv_bytes_per_token))  # tokens a row
    return 0 if shape.longest + iterations - 1 <= last else last - shape.longest + 2


def execute_mixed(engine: PaddedEngine, shape: MixedShape, iterations: int,
                  until_s: float = math.inf) -> StepResult:
    """The StepResult of a running batch with joiners: cut at `until_s`, or failing at the first
    iteration that does not fit."""
    oom_at = mixed_first_oom_iteration(engine.memory, shape, iterations)
    times = mixed_iteration_times(engine, shape, oom_at or iterations)
    return modelled_result(np.cumsum(times), until_s, oom_at)
