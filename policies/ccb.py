"""`ccb`: conservative continuous batching, the baseline of the Magnus paper (Cheng et al. 2024).

Iteration-level scheduling (ORCA's): requests join and leave the running batch at any iteration,
without padding. Admission is conservative about memory: each admitted request reserves KV for
its prompt plus the maximum generation length `max_gen_tokens`, so a running batch can never run
out of memory, at the price of memory that is reserved but mostly never used. Requests asking for
more than `max_gen_tokens` outputs are rejected. The scheduling is ORCA's (`policies/orca.py`);
only the names and defaults differ: the batch is limited by memory, not by a small batch size.

On the HF static-batch engine (`cluster.engine: {kind: hf_static}`, the paper's engine) the
batch is a padded tensor and a join step also holds the joiners' prefill, so the reservation is
counted in that layout (policies/ccb_padded.py): rows x the longest reserved sequence (prompt +
`max_gen_tokens`, at most the model's context) plus the joiners' prefill peak, in the engine's
bytes. On the paged engine it is ORCA's sum of prompt + `max_gen_tokens` (unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.core.executor import Step, StepResult
from sim.core.request import Request
from sim.util.errors import check_positive

from policies.base import PolicyConfig
from policies.ccb_padded import PaddedReservation, padded_reservation
from policies.orca import OrcaPolicy
from policies.registry import register_policy
from policies.routing import check_router


@dataclass(frozen=True)
class CCBConfig(PolicyConfig):
    max_gen_tokens: int = 2048  # output tokens reserved per request (and the most it may ask)
    max_batch_size: int = 256  # requests per iteration (at most); memory binds first
    router: str = "least_requests"  # how arrivals are spread over instances

    def __post_init__(self) -> None:
        check_positive("max_gen_tokens", self.max_gen_tokens)
        check_positive("max_batch_size", self.max_batch_size)
        check_router(self.router)

    @property
    def max_tokens(self) -> int:
        """ORCA's name for the reserved generation length (tokens)."""
        return self.max_gen_tokens


@register_policy("ccb")
class CCBPolicy(OrcaPolicy):
    Config = CCBConfig  # type: ignore[assignment]
    config: CCBConfig  # type: ignore[assignment]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.padded: list[PaddedReservation | None] = [  # None: the paged engine's reservation
            padded_reservation(info, self.config.max_gen_tokens) for info in self.instances]
        self.held_by_joiners = [False] * len(self.instances)  # per instance: the head waits
        # only for this step's joiners' prefill (the padded engine), so the step is 1 iteration

    def needed_tokens(self, instance_id: int, request: Request) -> int:
        pad = self.padded[instance_id]
        if pad is None:
            return self.reservation(request)
        return pad.alone_tokens(request.num_prompt_tokens)

    def admit_waiting(self, instance_id: int, now: float) -> None:
        """FCFS while rows x the longest reserved sequence plus the joiners' prefill peak fit
        (the padded engine); ORCA's admission on the paged engine."""
        pad = self.padded[instance_id]
        if pad is None:
            return super().admit_waiting(instance_id, now)
        s = self.state[instance_id]
        rows = len(s.running)
        longest = max((pad.sequence(r.num_prompt_tokens) for r in s.running), default=0)
        joiners = longest_prompt = 0
        self.held_by_joiners[instance_id] = False
        while s.waiting and rows < self.config.max_batch_size:
            prompt = s.waiting[0].num_prompt_tokens
            seq, top = max(longest, pad.sequence(prompt)), max(longest_prompt, prompt)
            if not pad.fits(rows + 1, seq, joiners + 1, top):
                # fits once this step's joiners run: admitted at the next iteration
                self.held_by_joiners[instance_id] = pad.fits(rows + 1, seq, 1, prompt)
                break
            r = s.waiting.popleft()
            r.mark_scheduled(now, instance_id)
            s.running.append(r)
            rows, longest, joiners, longest_prompt = rows + 1, seq, joiners + 1, top
        s.reserved = rows * longest

    def next_step(self, instance_id: int, now: float) -> Step | None:
        step = super().next_step(instance_id, now)
        if step is not None and self.held_by_joiners[instance_id]:
            return replace(step, num_iterations=1)  # decide again when they have joined
        return step

    def update(self, step: Step, result: StepResult, now: float) -> list[Request]:
        finished = super().update(step, result, now)
        pad = self.padded[step.instance_id]
        if pad is not None and finished:
            s = self.state[step.instance_id]
            s.reserved = pad.reserved_tokens(r.num_prompt_tokens for r in s.running)
        return finished
