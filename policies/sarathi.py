"""`sarathi`: chunked prefills with stall-free batching (Sarathi-Serve; Agrawal et al., OSDI 2024).

Every iteration has a token budget (`token_budget`). Running decodes are scheduled first, one
token each, so a long prompt never stalls them; prefill chunks of partially prefilled requests,
then of newly admitted waiting requests, fill what is left of the budget. A chunk that does not
reach the end of its request's known tokens samples nothing. KV is paged and preemption is by
recomputation, exactly as in `vllm` (`policies/paged.py`): admission allocates blocks for the
whole prompt (vLLM v0's chunked prefill does too) and decodes grow on demand. When no prefill is
pending, decode-only steps jump over as many iterations as cannot change the batch. With
`preemption_mode: swap` preempted requests' KV goes to host memory; they come back after the
running requests' chunks, before new prompts (policies/swap.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.executor import Step
from sim.util.errors import ConfigError, check_positive

from policies.paged import PagedConfig, PagedPolicy
from policies.paged_classes import PagedClasses, check_classes_config
from policies.registry import register_policy
from policies.swap import num_queued, one_iteration, swap_in


@dataclass(frozen=True)
class SarathiConfig(PagedConfig):
    token_budget: int = 512  # tokens per iteration: decodes plus prefill chunks
    scheduling_policy: str = "fcfs"  # fcfs | priority: waiting order, preemption victim
    priority_aging_s: float | None = None  # seconds per priority level gained waiting; None: none

    def __post_init__(self) -> None:
        super().__post_init__()
        check_classes_config(self)
        check_positive("token_budget", self.token_budget)
        if self.token_budget < self.max_num_seqs:
            raise ConfigError("token_budget", self.token_budget,
                              f"must be >= max_num_seqs={self.max_num_seqs} so that every "
                              f"running decode fits an iteration")


@register_policy("sarathi")
class SarathiPolicy(PagedClasses, PagedPolicy):
    Config = SarathiConfig
    config: SarathiConfig

    def next_step(self, instance_id: int, now: float) -> Step | None:
        s = self.state[instance_id]
        queued = num_queued(s)
        d = self.grow_decode_batch(s, now)
        decodes, grown = d.requests, (d.ids, d.held)  # ids, held tokens of those grown
        prefills: list = []
        chunks: list[int] = []
        budget = self.config.token_budget - len(decodes) * self.decode_width  # k + 1 verifying
        chosen = {r.request_id for r in decodes}
        for r in s.running:  # partially prefilled requests, in admission order
            if budget <= 0:
                break
            if r.request_id not in chosen:
                prefills.append(r)
                chunks.append(min(r.num_new_tokens, budget))
                budget -= chunks[-1]
        preempted = num_queued(s) > queued
        if s.swap is not None and not preempted:  # swapped requests next (policies/swap.py)
            more, swapped, budget = swap_in(self, s, instance_id, now, budget)
            decodes += more
            grown = (None, None) if more else grown
            prefills += [r for r, _ in swapped]
            chunks += [n for _, n in swapped]
        while budget > 0 and s.waiting and self.can_admit(s):
            r = self.admit(s, instance_id, now)
            prefills.append(r)
            chunks.append(min(r.num_new_tokens, budget))
            budget -= chunks[-1]
        if not decodes and not prefills:
            return None
        if not prefills:
            step = self.decode_step(s, instance_id, decodes, *grown)
            swapped_out = s.swap is not None and s.swap.swapped
            return one_iteration(s, step) if preempted and swapped_out else step
        return self.make_step(s, instance_id, decodes + prefills,
                              [1] * len(decodes) + chunks, num_decodes=len(decodes))
