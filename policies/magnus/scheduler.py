"""Which queued batch an idle instance runs next: HRRN (Magnus) or FCFS (GLP, ABP).

HRRN runs the batch with the highest response ratio (W + T) / T, where W is how long its oldest
request has waited and T its estimated serving time. Issue 4 words it as W / T: the ratio is
that plus one, so the order is the same. Ties go to the batch whose oldest request arrived
first, then to the older batch. FCFS runs batches in order of their oldest request.
"""

from __future__ import annotations

from typing import Callable, Sequence

from policies.magnus.batcher import QueuedBatch


def response_ratio(waiting_s: float, service_s: float) -> float:
    """(waiting + service) / service."""
    return (waiting_s + service_s) / service_s


def pick_hrrn(batches: Sequence[QueuedBatch], now: float,
              estimate_s: Callable[[QueuedBatch], float]) -> QueuedBatch:
    """The batch with the highest response ratio at `now` (ties: earliest arrival)."""
    def key(b: QueuedBatch) -> tuple[float, float, int]:
        ratio = response_ratio(max(now - b.arrival_s, 0.0), estimate_s(b))
        return (-ratio, b.arrival_s, b.batch_id)

    return min(batches, key=key)


def pick_fcfs(batches: Sequence[QueuedBatch]) -> QueuedBatch:
    """The batch whose oldest request arrived first."""
    return min(batches, key=lambda b: (b.arrival_s, b.batch_id))
