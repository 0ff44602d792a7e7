"""Magnus' adaptive batch assembler: each arrival joins the queued batch it wastes least in.

A new request is tried in every open queued batch; it joins the one whose WMA after insertion is
smallest (earliest batch on ties) if that WMA is below the threshold Φ, and otherwise opens a
new batch. A batch that would exceed the memory Θ (`memory.py`: size * (L(B) + G'(B)) KV
tokens, or the engine's peak bytes) or the batch-size cap (GLP) cannot take it (infinite WMA).
Halves of a batch split after an OOM are queued sealed: they take no new requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sim.core.request import Request
from sim.util.errors import check_positive

from policies.magnus.memory import BatchMemory, KVTokenMemory
from policies.magnus.wma import wma_after_insert


@dataclass(eq=False)
class QueuedBatch:
    """A batch waiting in the queue, with the lengths the assembler reasons about."""

    batch_id: int  # creation order (breaks ties)
    requests: list[Request] = field(default_factory=list)  # in arrival order
    prompt_tokens: list[int] = field(default_factory=list)  # per request: tokens
    predicted_tokens: list[int] = field(default_factory=list)  # per request: tokens (G')
    sealed: bool = False  # an OOM-split half: takes no new requests

    def add(self, request: Request, prompt_tokens: int, predicted_tokens: int) -> None:
        self.requests.append(request)
        self.prompt_tokens.append(prompt_tokens)
        self.predicted_tokens.append(predicted_tokens)

    @property
    def size(self) -> int:
        return len(self.requests)

    @property
    def arrival_s(self) -> float:
        """Arrival of its oldest request, seconds."""
        return min(r.arrival_s for r in self.requests)

    @property
    def max_prompt(self) -> int:
        """L(B), tokens."""
        return max(self.prompt_tokens)

    @property
    def max_predicted(self) -> int:
        """G'(B), tokens."""
        return max(self.predicted_tokens)


class AdaptiveBatcher:
    """The queue of open batches and the WMA insertion rule."""

    def __init__(self, capacity_tokens: int | BatchMemory, threshold: float,
                 aggregate: str = "max", max_batch_size: int | None = None) -> None:
        check_positive("threshold", threshold)
        self.memory: BatchMemory = KVTokenMemory(capacity_tokens) \
            if isinstance(capacity_tokens, int) else capacity_tokens  # Θ
        self.threshold = threshold  # Φ, token reads
        self.aggregate = aggregate  # "max" or "sum" over a batch's requests
        self.max_batch_size = max_batch_size  # None: no cap (ABP, Magnus)
        self.batches: list[QueuedBatch] = []  # queued, in creation order
        self._next_id = 0  # id of the next batch

    def _new_batch(self, sealed: bool = False) -> QueuedBatch:
        batch = QueuedBatch(self._next_id, sealed=sealed)
        self._next_id += 1
        self.batches.append(batch)
        return batch

    def best_batch(self, prompt_tokens: int, predicted_tokens: int
                   ) -> tuple[QueuedBatch | None, float]:
        """The open batch with the smallest WMA after insertion, and that WMA."""
        best, best_wma = None, math.inf
        for batch in self.batches:
            if batch.sealed:
                continue
            wma = wma_after_insert(np.array(batch.prompt_tokens), np.array(batch.predicted_tokens),
                                   prompt_tokens, predicted_tokens, self.memory,
                                   self.aggregate, self.max_batch_size)
            if wma < best_wma:
                best, best_wma = batch, wma
        return best, best_wma

    def insert(self, request: Request, prompt_tokens: int, predicted_tokens: int) -> QueuedBatch:
        """Place a request (Algorithm: join the least-wasting batch below Φ, else a new one)."""
        batch, wma = self.best_batch(prompt_tokens, predicted_tokens)
        if batch is None or wma >= self.threshold:
            batch = self._new_batch()
        batch.add(request, prompt_tokens, predicted_tokens)
        return batch

    def requeue(self, requests: list[Request]) -> QueuedBatch:
        """Queue `requests` as one sealed batch (half of an OOM-split batch)."""
        batch = self._new_batch(sealed=True)
        for r in requests:
            batch.add(r, r.num_prompt_tokens, int(r.predicted_output_tokens))
        return batch

    def remove(self, batch: QueuedBatch) -> None:
        self.batches.remove(batch)

    def __len__(self) -> int:
        return len(self.batches)
