"""Wasted memory access (WMA) of a padded static batch, Magnus' batching objective.

For a batch B with longest input L(B) and longest generation G(B), a request p with input
length L(p) and generation length G(p) wastes
  WMA_gen(p)  = G(p) * (L(B) - L(p))              its padding, read at each of its iterations
  WMA_wait(p) = sum_{g=G(p)}^{G(B)} (g + L(B))     the padded context of its idle slot, read
                                                 from its last token until the batch ends
and WMA(B) = max over p of WMA_gen(p) + WMA_wait(p) (issue 4; `aggregate="sum"` sums instead).
Predicted generation lengths G'(p) stand in for G(p). Units: token reads. A batch whose KV
footprint size * (L(B) + G(B)) exceeds the KV capacity (or, given a `BatchMemory`, whose peak
bytes exceed Θ: `memory.py`) has infinite WMA.
"""

from __future__ import annotations

import math

import numpy as np

from policies.magnus.memory import BatchMemory


def request_wma(prompt: np.ndarray, gen: np.ndarray) -> np.ndarray:
    """WMA_gen + WMA_wait of every request of one batch (token reads)."""
    prompt = np.asarray(prompt, dtype=np.float64)
    gen = np.asarray(gen, dtype=np.float64)
    longest_prompt, longest_gen = prompt.max(), gen.max()
    wasted_gen = gen * (longest_prompt - prompt)
    terms = longest_gen - gen + 1.0  # iterations g = G(p) .. G(B)
    wasted_wait = terms * ((gen + longest_gen) / 2.0 + longest_prompt)
    return wasted_gen + wasted_wait


def batch_wma(prompt: np.ndarray, gen: np.ndarray, aggregate: str = "max") -> float:
    """WMA of a batch: max (or sum) of its requests' WMA, token reads."""
    per_request = request_wma(prompt, gen)
    return float(per_request.max() if aggregate == "max" else per_request.sum())


def batch_kv_tokens(size: int, longest_prompt: int, longest_gen: int) -> int:
    """KV tokens a padded batch holds at its last iteration: size * (L(B) + G(B))."""
    return size * (longest_prompt + longest_gen)


def wma_after_insert(prompt: np.ndarray, gen: np.ndarray, new_prompt: int, new_gen: int,
                     capacity_tokens: int | BatchMemory, aggregate: str = "max",
                     max_batch_size: int | None = None) -> float:
    """WMA of a batch after adding a request; inf when the batch would not fit the memory
    (`capacity_tokens`: Θ in KV tokens, or a `BatchMemory`) or be over `max_batch_size`."""
    size = len(prompt) + 1
    if max_batch_size is not None and size > max_batch_size:
        return math.inf
    longest_prompt = max(int(np.max(prompt)) if len(prompt) else 0, new_prompt)
    longest_gen = max(int(np.max(gen)) if len(gen) else 0, new_gen)
    if isinstance(capacity_tokens, int):
        if batch_kv_tokens(size, longest_prompt, longest_gen) > capacity_tokens:
            return math.inf
    elif not capacity_tokens.fits(size, longest_prompt, longest_gen):
        return math.inf
    return batch_wma(np.append(prompt, new_prompt), np.append(gen, new_gen), aggregate)
