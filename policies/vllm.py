"""`vllm_v0`: continuous batching over a paged KV cache (PagedAttention; Kwon et al., SOSP 2023).

Follows vLLM v0's default scheduler, per instance: when waiting requests can be admitted (FCFS,
at most `max_num_seqs` running, at most `max_num_batched_tokens` prompt tokens per step, blocks
for the whole prompt free above the watermark), a prefill step of just those requests runs;
otherwise every running request decodes one token, preempting the most recently admitted by
recomputation when blocks run out (see `policies/paged.py`). Prefill steps are one iteration;
decode steps jump over as many iterations as cannot change the batch.

A prompt longer than `max_num_batched_tokens` is rejected (vLLM's prompt limit). A preempted
request recomputes its prompt and outputs in one prefill; when that exceeds the budget it runs
as the step's only prefill (vLLM's `max_model_len <= max_num_batched_tokens` rules this out).
With `preemption_mode: swap` a preempted request's KV goes to host memory and comes back ahead
of new prompts (policies/swap.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.executor import Step
from sim.core.request import EXCEEDS_BATCH_TOKENS, Request
from sim.util.errors import check_positive

from policies.paged import PagedConfig, PagedInstance, PagedPolicy
from policies.paged_classes import PagedClasses, check_classes_config
from policies.registry import register_policy
from policies.swap import v0_swap_step


@dataclass(frozen=True)
class VllmConfig(PagedConfig):
    max_num_batched_tokens: int = 8192  # prompt tokens per prefill step (at most)
    scheduling_policy: str = "fcfs"  # fcfs | priority: waiting order, preemption victim
    priority_aging_s: float | None = None  # seconds per priority level gained waiting; None: none

    def __post_init__(self) -> None:
        super().__post_init__()
        check_classes_config(self)
        check_positive("max_num_batched_tokens", self.max_num_batched_tokens)


@register_policy("vllm_v0")
class VllmPolicy(PagedClasses, PagedPolicy):
    Config = VllmConfig
    config: VllmConfig

    def add_request(self, request: Request, now: float) -> bool:
        if request.num_prompt_tokens > self.config.max_num_batched_tokens:
            request.reject(now, f"prompt_tokens={request.num_prompt_tokens} > "
                                f"max_num_batched_tokens={self.config.max_num_batched_tokens}",
                           EXCEEDS_BATCH_TOKENS)
            return False
        return super().add_request(request, now)

    def admit_prefills(self, s: PagedInstance, instance_id: int, now: float) -> list[Request]:
        """Admit waiting requests FCFS while sequences, the token budget and blocks allow."""
        admitted: list[Request] = []
        num_tokens = 0
        while s.waiting and self.can_admit(s):
            need = s.waiting[0].num_new_tokens
            if admitted and num_tokens + need > self.config.max_num_batched_tokens:
                break
            admitted.append(self.admit(s, instance_id, now))
            num_tokens += need
        return admitted

    def prefill_step(self, s: PagedInstance, instance_id: int, now: float) -> Step | None:
        """A step prefilling every request admitted now; None when none can be."""
        admitted = self.admit_prefills(s, instance_id, now)
        if not admitted:
            return None
        return self.make_step(s, instance_id, admitted, [r.num_new_tokens for r in admitted])

    def next_step(self, instance_id: int, now: float) -> Step | None:
        s = self.state[instance_id]
        if s.swap is not None:  # preemption_mode: swap (policies/swap.py)
            return v0_swap_step(self, s, instance_id, now)
        prefill = self.prefill_step(s, instance_id, now) if s.waiting else None
        if prefill is not None:
            return prefill
        d = self.grow_decode_batch(s, now)
        if d.requests:
            return self.decode_step(s, instance_id, d.requests, d.ids, d.held)
        if s.waiting:  # a preemption may have freed blocks
            return self.prefill_step(s, instance_id, now)
        return None
