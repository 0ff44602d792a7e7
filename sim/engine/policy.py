"""The policy interface: the scheduler side of the engine loop, beside `Step` in the ground floor.

The engine calls `add_request` on each arrival, `next_step` whenever an instance is idle, and
`update` with the executor's result when a step ends. A policy that holds work back (a batching
delay) names the time it wants an idle instance woken with `next_wakeup_s`, and `drain` tells it
that no request will arrive any more. A policy owns its queues and KV accounting;
it never sees time advance except through these calls, so the same policy drives the SimPy cost
model and the real torch engine. Concrete policies live in `policies/` (re-exported by
`policies.base`); `sim/` only ever sees this interface and a `PolicyFactory`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from sim.core.executor import InstanceInfo, Step, StepResult
from sim.core.request import Request
from sim.records.recorder import Recorder


@dataclass(frozen=True)
class PolicyConfig:
    """Base of every policy's frozen, validated parameter set."""


class Policy(ABC):
    """A scheduling policy serving one cluster of instances."""

    name: ClassVar[str] = ""  # set by @register_policy
    supports_cancel: ClassVar[bool] = False  # whether `cancel` works (client timeouts)
    Config: ClassVar[type[PolicyConfig]] = PolicyConfig  # the policy's parameter dataclass

    def __init__(self, config: PolicyConfig, instances: Sequence[InstanceInfo],
                 recorder: Recorder, rng: np.random.Generator) -> None:
        self.config = config
        self.instances = list(instances)
        self.recorder = recorder
        self.rng = rng

    @abstractmethod
    def add_request(self, request: Request, now: float) -> bool:
        """Take an arriving request; return False when it is rejected (and mark it so)."""

    @abstractmethod
    def next_step(self, instance_id: int, now: float) -> Step | None:
        """The next Step for an idle instance, or None when it has nothing to run."""

    @abstractmethod
    def update(self, step: Step, result: StepResult, now: float) -> list[Request]:
        """Apply a finished step (ended at `now`); return requests that reached a final state."""

    def instance_settings(self, instance_id: int) -> dict[str, Any]:
        """Settings the policy resolved for one instance (e.g. `vllm`'s batch limits from its
        GPU); they become columns of the run's instances table. None by default."""
        return {}

    @abstractmethod
    def num_reserved_kv_tokens(self, instance_id: int) -> int:
        """KV tokens reserved or allocated on the instance now (never above its capacity)."""

    def next_wakeup_s(self, instance_id: int, now: float) -> float:
        """After `next_step` returned None: the absolute time (seconds, > now) at which the idle
        instance should ask again even if nothing arrives or ends; math.inf for never."""
        return math.inf

    def drain(self, now: float) -> None:
        """No request will arrive after `now`: release anything held back for more arrivals."""

    def cancel(self, request: Request, now: float) -> None:
        """Its client gave up: forget `request`, queued or admitted but not part of a step in
        flight, and free its KV (the engine then marks it cancelled, sim/engine/timeouts.py). Only a
        policy with `supports_cancel` implements it; the engine refuses timeouts for others."""
        raise NotImplementedError(f"policy {self.name!r} cannot cancel requests")

    # ---- helpers shared by policies ---------------------------------------------------
    @property
    def max_kv_capacity(self) -> int:
        """The largest KV capacity of any instance, in tokens."""
        return max(i.kv_capacity_tokens for i in self.instances)

    def reject_if_too_large(self, request: Request, needed_tokens: int, now: float) -> bool:
        """Reject (and return True) when `needed_tokens` can never fit on any instance."""
        if needed_tokens <= self.max_kv_capacity:
            return False
        request.reject(now, f"needs {needed_tokens} KV tokens > capacity "
                            f"{self.max_kv_capacity}")
        return True


# builds the run's policy for its instances and recorder (policies.registry.policy_factory)
PolicyFactory = Callable[[Sequence[InstanceInfo], Recorder], Policy]
