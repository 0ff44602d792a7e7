"""Which waiting requests `lacb` tries to admit, in what order, and how much KV each reserves.

Order: requests preempted by recomputation first (in queue order, as vLLM does), then requests
that have waited longer than `max_wait_s` (oldest first), then the rest by predicted remaining
work, smallest first. Requests of the first two groups *block*: when one does not fit, nothing
behind it is admitted, so memory drains towards it and its wait is bounded. The rest are tried
in turn and skipped when they do not fit (backfilling).

Work = `prompt_weight` x tokens still to prefill + predicted outputs still to generate (at least
1). Aging subtracts `aging_tokens_per_s` x the time waited; since every waiting request ages at
the same rate, the order by work - a (now - arrival) equals the order by work + a x arrival, which
does not change while requests wait.

A request reserves KV for its prompt plus `kv_margin` x its predicted output (at least its known
tokens + 1; at most the instance's cache). Blocks are allocated lazily (vLLM's on-demand growth);
the reservation is bookkeeping: an admission must fit in the free blocks minus what the running
requests have reserved but not yet taken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from sim.core.request import Request
from sim.memory.block_manager import BlockManager


@dataclass(frozen=True)
class Ordering:
    """How waiting requests are ranked."""

    prompt_weight: float = 1.0  # weight of a prompt token vs an output token in the work
    aging_tokens_per_s: float = 0.0  # work forgiven per second of waiting, tokens/s
    max_wait_s: float | None = None  # seconds after which a request goes first and blocks


def remaining_work(r: Request, prompt_weight: float) -> float:
    """Predicted tokens still to compute: weighted prefill + outputs still to generate."""
    outputs = max(1.0, float(r.predicted_output_tokens) - r.num_output_tokens)
    return prompt_weight * r.num_new_tokens + outputs


def priority_key(r: Request, o: Ordering) -> tuple[float, float, int]:
    """Sort key of a fresh waiting request (smaller goes first); constant while it waits."""
    return (remaining_work(r, o.prompt_weight) + o.aging_tokens_per_s * r.arrival_s,
            r.arrival_s, r.request_id)


def admission_order(waiting: Iterable[Request], now: float,
                    o: Ordering) -> list[tuple[Request, bool]]:
    """(request, blocks) pairs in the order admission tries them."""
    preempted: list[Request] = []
    starving: list[Request] = []
    fresh: list[Request] = []
    for r in waiting:
        if r.num_preemptions:
            preempted.append(r)
        elif o.max_wait_s is not None and now - r.arrival_s > o.max_wait_s:
            starving.append(r)
        else:
            fresh.append(r)
    starving.sort(key=lambda r: (r.arrival_s, r.request_id))
    fresh.sort(key=lambda r: priority_key(r, o))
    return [(r, True) for r in preempted + starving] + [(r, False) for r in fresh]


def planned_tokens(r: Request, kv_margin: float) -> int:
    """Prompt + margin x predicted outputs (at least one output), tokens."""
    predicted = max(1.0, float(r.predicted_output_tokens))
    return r.num_prompt_tokens + math.ceil(kv_margin * predicted)


def reservation_tokens(r: Request, kv_margin: float, capacity_tokens: int) -> int:
    """KV tokens a waiting `r` must find free to be admitted: its plan, at least its known
    tokens + 1, at most `capacity_tokens`."""
    return min(capacity_tokens, max(r.num_tokens + 1, planned_tokens(r, kv_margin)))


def outstanding_blocks(blocks: BlockManager, running: Iterable[Request], kv_margin: float) -> int:
    """Blocks the running requests have reserved but not yet taken (0 for a request that has
    outgrown its plan: it grows on demand from the free blocks)."""
    cap = blocks.capacity_tokens
    total = 0
    for r in running:
        want = blocks.blocks_for(min(cap, planned_tokens(r, kv_margin)))
        total += max(0, want - blocks.blocks_for(blocks.num_tokens(r.request_id)))
    return total
