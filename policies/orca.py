"""`orca`: ORCA iteration-level scheduling with selective batching (Yu et al., OSDI 2022).

Every iteration the scheduler may add waiting requests and drop finished ones; requests are not
padded (selective batching runs attention per request). Admission is FCFS per instance, limited by
`max_batch_size` and by KV memory: ORCA reserves, for each admitted request, space for its prompt
plus `max_tokens` generated tokens, so memory, not only batch size, limits the batch. A request
asking for more than `max_tokens` outputs, or whose reservation exceeds an instance's memory, is
rejected. Each arriving request is routed to one instance (`router`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sim.core.emit import emit_batch
from sim.core.executor import Step, StepResult
from sim.core.request import EXCEEDS_MAX_TOKENS, Request
from sim.util.errors import check_positive

from policies.base import Policy, PolicyConfig
from policies.cancel import cancel_orca
from policies.registry import register_policy
from policies.routing import InstanceLoad, build_router, check_router


@dataclass(frozen=True)
class OrcaConfig(PolicyConfig):
    max_batch_size: int = 32  # requests per iteration (at most)
    max_tokens: int = 2048  # output tokens reserved per request (ORCA's max-length reservation)
    router: str = "least_requests"  # how arrivals are spread over instances

    def __post_init__(self) -> None:
        check_positive("max_batch_size", self.max_batch_size)
        check_positive("max_tokens", self.max_tokens)
        check_router(self.router)


@dataclass
class _Instance:
    waiting: deque[Request] = field(default_factory=deque)  # routed here, not admitted
    running: list[Request] = field(default_factory=list)  # admitted, in batch order
    reserved: int = 0  # KV tokens reserved by running requests


@register_policy("orca")
class OrcaPolicy(Policy):
    Config = OrcaConfig
    config: OrcaConfig
    supports_cancel = True  # client timeouts (policies/cancel.py)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.state = [_Instance() for _ in self.instances]
        self.router = build_router(self.config.router, len(self.instances))

    def reservation(self, request: Request) -> int:
        """KV tokens reserved for a request: its prompt plus `max_tokens`."""
        return request.num_prompt_tokens + self.config.max_tokens

    def add_request(self, request: Request, now: float) -> bool:
        if request.target_output_tokens > self.config.max_tokens:
            request.reject(now, f"output_tokens={request.target_output_tokens} > max_tokens="
                                f"{self.config.max_tokens}", EXCEEDS_MAX_TOKENS)
            return False
        fits = [i for i, info in enumerate(self.instances)
                if info.kv_capacity_tokens >= self.needed_tokens(i, request)]
        if not fits:
            need = min(self.needed_tokens(i, request) for i in range(len(self.instances)))
            return not self.reject_if_too_large(request, need, now)
        loads = [InstanceLoad(i, self.state[i].waiting, self.state[i].running,
                              self.state[i].reserved, self.instances[i].kv_capacity_tokens)
                 for i in fits]
        self.state[self.router.route(request, loads)].waiting.append(request)
        return True

    def needed_tokens(self, instance_id: int, request: Request) -> int:
        """KV tokens `request` needs on an instance where it runs alone (its reservation)."""
        return self.reservation(request)

    def admit_waiting(self, instance_id: int, now: float) -> None:
        """Move waiting requests into the running batch, FCFS, while their reservations fit."""
        s = self.state[instance_id]
        cap = self.instances[instance_id].kv_capacity_tokens
        while s.waiting and len(s.running) < self.config.max_batch_size:
            need = self.reservation(s.waiting[0])
            if s.reserved + need > cap:
                break
            r = s.waiting.popleft()
            r.mark_scheduled(now, instance_id)
            s.running.append(r)
            s.reserved += need

    def next_step(self, instance_id: int, now: float) -> Step | None:
        self.admit_waiting(instance_id, now)
        s = self.state[instance_id]
        if not s.running:
            return None
        run = s.running
        return Step(instance_id, tuple([r.request_id for r in run]),
                    tuple([r.num_prompt_tokens + r.num_output_tokens - r.num_computed_tokens
                           for r in run]),
                    tuple([r.num_computed_tokens for r in run]), (True,) * len(run),
                    num_iterations=min([r.target_output_tokens - r.num_output_tokens
                                        for r in run]))

    def update(self, step: Step, result: StepResult, now: float) -> list[Request]:
        if result.oom:
            raise RuntimeError(f"orca step ran out of KV memory on instance {step.instance_id}: "
                               "its reservation should make this impossible")
        s = self.state[step.instance_id]
        finished = emit_batch(s.running, now - result.duration_s, result.iteration_ends_s,
                              self.recorder.gaps)
        if finished:
            s.running = [r for r in s.running if r.finish_s != r.finish_s]  # NaN: running
            s.reserved -= sum(self.reservation(r) for r in finished)
        return finished

    def num_reserved_kv_tokens(self, instance_id: int) -> int:
        return self.state[instance_id].reserved

    def cancel(self, request: Request, now: float) -> None:
        cancel_orca(self, request)
