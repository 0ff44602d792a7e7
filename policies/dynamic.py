"""`dynamic`: dynamic batching as in Triton Inference Server and DJL Serving.

Requests wait in one FCFS queue that any idle instance draws from. A batch is dispatched when
`batch_size` requests wait, or when the oldest has waited `max_batch_delay_ms`, whichever comes
first (Triton's `max_queue_delay_microseconds`, DJL Serving's `max_batch_delay`); it then runs as
a padded static batch to its longest generation, exactly as `vanilla` runs it (OOM handling
included). An idle instance whose queue is not yet ready asks the engine to wake it when the
oldest request's delay expires (`next_wakeup_s`).

`max_batch_delay_ms: null` never times out: only full batches run, and the last partial one when
the arrival stream ends (`drain`). That is static batching with a fixed batch size, TensorFlow
Serving's batcher without a timeout; a delay of 0 is `vanilla` (dispatch whatever waits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.core.executor import Step
from sim.util.errors import ConfigError, check_positive

from policies.base import PolicyConfig
from policies.registry import register_policy
from policies.vanilla import ON_OOM, VanillaPolicy

TIME_EPS_S = 1e-9  # seconds: a wake-up this close to the deadline counts as reaching it


@dataclass(frozen=True)
class DynamicConfig(PolicyConfig):
    batch_size: int = 8  # requests per batch (at most); a full batch is dispatched at once
    max_batch_delay_ms: float | None = 100.0  # milliseconds the oldest waits; None: no timeout
    on_oom: str = "fail"  # "fail": requests of an OOM batch fail; "split": halve and retry

    def __post_init__(self) -> None:
        check_positive("batch_size", self.batch_size)
        delay = self.max_batch_delay_ms
        if delay is not None and not (0 <= delay < math.inf):
            raise ConfigError("max_batch_delay_ms", delay,
                              "must be a finite number >= 0, or null for no timeout")
        if self.on_oom not in ON_OOM:
            raise ConfigError("on_oom", self.on_oom, f"must be one of {ON_OOM}")


@register_policy("dynamic")
class DynamicPolicy(VanillaPolicy):
    """Vanilla's static batches, dispatched on size or on the oldest request's delay."""

    Config = DynamicConfig  # type: ignore[assignment]
    config: DynamicConfig  # type: ignore[assignment]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.drained_s = math.inf  # when the arrival stream ended (seconds); inf until then

    def deadline_s(self) -> float:
        """When the waiting requests must run even if the batch is not full (absolute seconds):
        the oldest's arrival plus the delay; without a timeout, the end of the arrivals."""
        delay = self.config.max_batch_delay_ms
        if not self.queue:
            return math.inf
        if delay is None:
            return self.drained_s
        return self.queue[0].arrival_s + delay / 1000.0

    def ready(self, now: float) -> bool:
        """Whether the waiting requests may run as a batch now."""
        return len(self.queue) >= self.config.batch_size or now >= self.deadline_s() - TIME_EPS_S

    def next_step(self, instance_id: int, now: float) -> Step | None:
        if not self.retry and not self.ready(now):
            return None
        return super().next_step(instance_id, now)

    def next_wakeup_s(self, instance_id: int, now: float) -> float:
        deadline = self.deadline_s()
        return deadline if deadline > now else math.inf

    def drain(self, now: float) -> None:
        self.drained_s = now
