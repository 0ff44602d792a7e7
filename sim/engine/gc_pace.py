"""Cyclic garbage collection paced for the simulation loop.

A run allocates millions of short-lived containers (steps, batches, events) that reference
counting frees at once; almost none form cycles. CPython's default thresholds (700, 10, 10)
still traverse the young generation every 700 allocations, about 8% of a long run's time
(benchmarks/scale.py). `paced_gc` raises the thresholds for the duration of a run and restores
the caller's afterwards: cycles are still collected, only less often. Results do not depend on
it (collection never changes a live object).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

RUN_THRESHOLDS = (100_000, 50, 1000)  # allocations before a gen-0 collection; gen-1, gen-2 ratios


@contextmanager
def paced_gc(thresholds: tuple[int, int, int] = RUN_THRESHOLDS) -> Iterator[None]:
    """Run the body with `thresholds` (never lower than the caller's own), then restore them."""
    before = gc.get_threshold()
    if before[0] == 0:  # the caller turned automatic collection off: leave it off
        yield
        return
    gc.set_threshold(*(max(a, b) for a, b in zip(thresholds, before)))
    try:
        yield
    finally:
        gc.set_threshold(*before)
