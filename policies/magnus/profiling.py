"""Offline profiling of batch serving times on the training split (the paper's estimator data).

Magnus trains its batch-time estimator offline: the training requests are batched and the
batches' serving times measured on the engine before serving starts. Here the training split is
cut into queue snapshots of `chunk` requests in a seeded random order; each snapshot is batched
by the WMA assembler with the *true* generation lengths (what a profiling run observes) and Θ, and
each batch is timed on the engine (`HFStaticExecutor.batch_seconds`). Batches that would run out
of memory are skipped. Only engines a policy can time offline are profiled (`sim.cluster.hf_static`).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from sim.cluster.hf_static import HFStaticExecutor
from sim.core.request import Request

from policies.magnus.batcher import AdaptiveBatcher
from policies.magnus.estimator import BatchSample
from policies.magnus.memory import BatchMemory


def profile_batches(lengths: Sequence[tuple[int, int]], executor: HFStaticExecutor,
                    memory: BatchMemory, threshold: float, aggregate: str = "max",
                    max_batch_size: int | None = None, chunk: int = 64,
                    max_requests: int = 2000,
                    rng: np.random.Generator | None = None) -> list[BatchSample]:
    """Timed batches of training requests given as (prompt tokens, true output tokens)."""
    order = np.arange(len(lengths))
    if rng is not None:
        order = rng.permutation(order)
    order = order[:max_requests]
    samples: list[BatchSample] = []
    for start in range(0, len(order), chunk):
        batcher = AdaptiveBatcher(memory, threshold, aggregate, max_batch_size)
        for i in order[start:start + chunk]:
            prompt, output = lengths[int(i)]
            batcher.insert(Request(int(i), 0.0, prompt, output), prompt, output)
        for b in batcher.batches:
            seconds = executor.batch_seconds(b.size, b.max_prompt, b.max_predicted)
            if math.isfinite(seconds):
                samples.append(BatchSample(b.size, b.max_prompt, b.max_predicted, seconds))
    return samples
