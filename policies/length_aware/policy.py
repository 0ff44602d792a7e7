"""`lacb`: length-aware continuous batching, the direction the Magnus paper leaves as future work.

`vllm`'s iteration-level engine over a paged KV cache (`policies/vllm.py`, `policies/paged.py`):
prefill-first steps with at most `max_num_batched_tokens` prompt tokens, decode steps that jump
over the iterations in which the batch cannot change, on-demand block growth and preemption of
the most recently admitted request by recomputation. What changes is admission
(`admission.py`), driven by Magnus' generation-length predictor (`lengths.py`):

- each arriving request's output length is predicted once (semantic, input-length or oracle);
- waiting requests are tried shortest predicted remaining work first; preempted requests and
  those waiting longer than `max_wait_s` go first and are never overtaken (starvation bound);
- a request is admitted only when the free blocks, less what running requests have reserved and
  not yet taken, hold its prompt + `kv_margin` x predicted output. Blocks are still allocated
  lazily; a request that outgrows its prediction grows on demand, preempting when short.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from sim.core.executor import InstanceInfo, Step, StepResult
from sim.core.request import Request
from sim.records.recorder import Recorder

from policies.length_aware.admission import (Ordering, admission_order, outstanding_blocks,
                                             reservation_tokens)
from policies.length_aware.config import LacbConfig
from policies.magnus.embedding import Embedder
from policies.magnus.length_service import LearningSettings, LengthService
from policies.paged import PagedInstance
from policies.registry import register_policy
from policies.vllm import VllmPolicy


@register_policy("lacb")
class LacbPolicy(VllmPolicy):
    Config = LacbConfig
    config: LacbConfig
    supports_cancel = False  # its reservations and predictor do not follow cancellations yet

    def __init__(self, config: LacbConfig, instances: Sequence[InstanceInfo],
                 recorder: Recorder, rng: np.random.Generator,
                 embedder: Embedder | None = None) -> None:
        super().__init__(config, instances, recorder, rng)
        cfg = self.config
        learning = LearningSettings(cfg.predictor_retrain_period_s, cfg.predictor_error_tokens,
                                    cfg.predictor_error_fraction, cfg.retrain_delay_s,
                                    cfg.max_learning_samples)
        self.lengths = LengthService(cfg.predictor, learning, rng, recorder, embedder)
        self.ordering = Ordering(cfg.prompt_weight, cfg.aging_tokens_per_s, cfg.max_wait_s)

    # ---- the policy interface -----------------------------------------------------------
    def add_request(self, request: Request, now: float) -> bool:
        self.lengths.poll(now)
        self.lengths.predict(request)
        return super().add_request(request, now)

    def next_step(self, instance_id: int, now: float) -> Step | None:
        self.lengths.poll(now)
        return super().next_step(instance_id, now)

    def update(self, step: Step, result: StepResult, now: float) -> list[Request]:
        self.lengths.poll(now)
        done = super().update(step, result, now)
        self.lengths.observe(done)
        return done

    def num_reserved_kv_tokens(self, instance_id: int) -> int:
        s = self.state[instance_id]
        b = s.blocks
        held = b.num_used_blocks + s.num_pending_blocks
        planned = held + outstanding_blocks(b, s.running, self.config.kv_margin)
        return min(b.num_total_blocks, planned) * b.block_size

    # ---- admission ------------------------------------------------------------------------
    def available_blocks(self, s: PagedInstance) -> int:
        """Free blocks not reserved by running requests (may be negative after outgrowth)."""
        return s.blocks.num_free_blocks - outstanding_blocks(s.blocks, s.running,
                                                             self.config.kv_margin)

    def admit_prefills(self, s: PagedInstance, instance_id: int, now: float) -> list[Request]:
        """Admit waiting requests in `admission_order` while sequences, the prefill token budget
        and unreserved blocks allow; a blocking request that does not fit stops admission."""
        cfg, b = self.config, s.blocks
        if not s.waiting or len(s.running) >= cfg.max_num_seqs:
            return []
        available = self.available_blocks(s)
        admitted: list[Request] = []
        num_tokens = 0
        for r, blocking in admission_order(s.waiting, now, self.ordering):
            if len(s.running) >= cfg.max_num_seqs:
                break
            need = b.blocks_for(reservation_tokens(r, cfg.kv_margin, b.capacity_tokens))
            keep = b.watermark_blocks if s.running else 0  # an empty instance keeps none
            over_budget = bool(admitted) and num_tokens + r.num_new_tokens > \
                cfg.max_num_batched_tokens
            if over_budget or need > available - keep:
                if blocking:
                    break
                continue
            num_tokens += r.num_new_tokens  # before admission: a prefix-cache hit lowers it
            s.waiting.remove(r)
            s.waiting.appendleft(r)
            admitted.append(self.admit(s, instance_id, now))  # paged.py's: blocks, running
            available -= need
        return admitted
