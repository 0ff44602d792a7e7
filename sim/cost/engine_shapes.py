"""The attention shapes an engine runs, and the ones it runs for the first time (torch-free).

Some attention kernels build a plan the first time they see a shape (torch's sdpa on CUDA picks
and plans a kernel per shape; cuDNN builds an execution graph): measured on an H100 with torch
2.11, each new shape cost about 40 ms of host time, once per engine process. An engine that pads
a decode batch to its longest context (block-rounded) sees a decode shape per (decode rows,
padded length), and a prefill shape per chunk (tokens, keys, whether it attends to cached
context). `ShapeCache` remembers the shapes an engine has run, so a model can charge
`EngineTimeParams.new_shape_s` for each new one in the iteration that first runs it. Engines with
plan-free kernels (the paged Triton kernels, CUDA graphs captured at start-up) set
`shape_granularity` to 0 and never pay it.
"""

from __future__ import annotations

from typing import Hashable, Iterable

import numpy as np

from sim.core.executor import Step

ShapeKey = tuple[Hashable, ...]
WARMUP_PROMPT_TOKENS = 64  # tokens of each warm-up request's prompt (real/executor.py)


def warmup_step(kv_capacity_tokens: int, iterations: int) -> Step:
    """The Step a real engine warms up with before serving: two throwaway prompts, then
    `iterations - 1` decodes (its shapes are run before any request)."""
    prompt = max(1, min(WARMUP_PROMPT_TOKENS, kv_capacity_tokens // 4 - iterations))
    return Step(0, (-1, -2), (prompt, prompt), (0, 0), (True, True),
                num_iterations=max(iterations, 1))


def _ceil_to(x: float, granularity: int) -> int:
    return int(-(-int(x) // granularity) * granularity)


def iteration_shapes(step: Step, num_iterations: int, granularity: int
                     ) -> list[tuple[int, ShapeKey]]:
    """(iteration, shape) pairs of the first `num_iterations` iterations: every shape of the
    first iteration, then each later iteration whose padded decode length changes (later
    iterations decode every row, the longest at its KV + j; in between, the shape repeats)."""
    if granularity <= 0 or not step.num_seqs or num_iterations < 1:
        return []
    n = np.asarray(step.num_new_tokens, dtype=np.int64)
    c = np.asarray(step.num_context_tokens, dtype=np.int64)
    dec = n == 1
    out: list[tuple[int, ShapeKey]] = []
    if dec.any():
        out.append((0, ("decode", int(dec.sum()), _ceil_to((c + n)[dec].max(), granularity))))
    out += [(0, ("prefill", int(q), int(q + ctx), bool(ctx > 0)))
            for q, ctx in zip(n[~dec].tolist(), c[~dec].tolist())]
    if num_iterations > 1:
        top, b, g = int((c + n).max()), len(n), granularity
        first_len = _ceil_to(top + 1, g)
        out.append((1, ("decode", b, first_len)))
        for length in range(first_len + g, _ceil_to(top + num_iterations - 1, g) + 1, g):
            out.append((length - g + 1 - top, ("decode", b, length)))  # first j reaching it
    return out


class ShapeCache:
    """The attention shapes one engine process has run."""

    def __init__(self, granularity: int, seen: Iterable[ShapeKey] = ()) -> None:
        self.granularity = granularity  # tokens shapes are padded to; 0: shapes cost nothing
        self.seen: set[ShapeKey] = set(seen)  # shapes run so far

    @classmethod
    def after_warmup(cls, granularity: int, kv_capacity_tokens: int, iterations: int,
                     seen: Iterable[ShapeKey] = ()) -> "ShapeCache":
        """The shapes of an engine that has run its warm-up (and `seen`)."""
        cache = cls(granularity, seen)
        if iterations > 0:
            cache.record(warmup_step(kv_capacity_tokens, iterations), iterations)
        return cache

    def new_per_iteration(self, step: Step, num_iterations: int) -> np.ndarray:
        """How many shapes each iteration would run for the first time (nothing recorded)."""
        counts = np.zeros(num_iterations)
        if self.granularity <= 0:
            return counts
        fresh: set[ShapeKey] = set()
        for j, key in iteration_shapes(step, num_iterations, self.granularity):
            if key not in self.seen and key not in fresh:
                fresh.add(key)
                counts[j] += 1
        return counts

    def record(self, step: Step, num_iterations: int) -> int:
        """Mark the shapes of the first `num_iterations` iterations as run; returns how many
        were new."""
        new = 0
        for _, key in iteration_shapes(step, num_iterations, self.granularity):
            if key not in self.seen:
                self.seen.add(key)
                new += 1
        return new
