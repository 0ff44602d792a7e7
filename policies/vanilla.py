"""`vanilla`: static batching as in TensorFlow Serving / Triton.

FCFS from one queue that any idle instance draws from: an idle instance takes up to `batch_size`
waiting requests, pads every prompt to the longest, and decodes until the longest generation ends.
A batch whose KV (batch x (longest prompt + longest generation)) exceeds the instance's memory runs
out of memory mid-generation; the time until the failure is lost and the OOM is counted. Its
requests then fail (`on_oom: fail`) or the batch is split in two halves that go back to the head
of the queue (`on_oom: split`, the recovery Magnus uses).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from sim.core.executor import Step, StepResult
from sim.core.request import Request
from sim.util.errors import ConfigError, check_positive

from policies.base import Policy, PolicyConfig
from policies.registry import register_policy
from policies.static_batch import (fail_static_batch, finish_static_batch, reset_for_retry,
                                   split_batch, static_step, static_tokens_per_request)

ON_OOM = ("fail", "split")


@dataclass(frozen=True)
class VanillaConfig(PolicyConfig):
    batch_size: int = 8  # requests per static batch (at most)
    on_oom: str = "fail"  # "fail": requests of an OOM batch fail; "split": halve and retry

    def __post_init__(self) -> None:
        check_positive("batch_size", self.batch_size)
        if self.on_oom not in ON_OOM:
            raise ConfigError("on_oom", self.on_oom, f"must be one of {ON_OOM}")


@register_policy("vanilla")
class VanillaPolicy(Policy):
    Config = VanillaConfig
    config: VanillaConfig

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.queue: deque[Request] = deque()
        self.retry: deque[list[Request]] = deque()  # halves of OOM-split batches, run first
        self.running: dict[int, list[Request]] = {}  # instance -> batch in flight
        self.reserved: dict[int, int] = {}  # instance -> KV tokens the batch will touch

    def add_request(self, request: Request, now: float) -> bool:
        if self.reject_if_too_large(request, request.num_prompt_tokens + 1, now):
            return False
        self.queue.append(request)
        return True

    def next_step(self, instance_id: int, now: float) -> Step | None:
        if self.retry:
            batch = self.retry.popleft()
        elif self.queue:
            batch = [self.queue.popleft()
                     for _ in range(min(self.config.batch_size, len(self.queue)))]
        else:
            return None
        self.running[instance_id] = batch
        step = static_step(instance_id, batch, now)
        self.reserved[instance_id] = min(step.kv_tokens_after(step.num_iterations),
                                         self.instances[instance_id].kv_capacity_tokens)
        return step

    def update(self, step: Step, result: StepResult, now: float) -> list[Request]:
        batch = self.running.pop(step.instance_id)
        self.reserved[step.instance_id] = 0
        if not result.oom:
            return finish_static_batch(batch, result, now, self.recorder)
        m = result.num_iterations
        self.recorder.event(now, "oom", -1, f"batch of {len(batch)} on instance "
                                            f"{step.instance_id} after {m} iterations")
        wasted = static_tokens_per_request(step.num_new_tokens[0], m)  # per request
        if self.config.on_oom == "split" and len(batch) > 1:
            reset_for_retry(batch, wasted)
            first, second = split_batch(batch)
            self.retry.extendleft((second, first))
            return []
        fail_static_batch(batch, wasted, now, f"out of KV memory in its static batch of "
                                              f"{len(batch)} after {m} iterations")
        return batch

    def num_reserved_kv_tokens(self, instance_id: int) -> int:
        return self.reserved.get(instance_id, 0)
