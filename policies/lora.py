"""Multi-LoRA scheduling for the paged policies (`vllm_v0`, `sarathi`): adapters per request,
adapter slots per instance, batching by adapter (vLLM v0's LoRA scheduler; Punica, S-LoRA).

With `lora_adapters` = N > 0, every request uses one of N adapters: its `lora_id` (trace column
`lora_id`), or, when the trace has none, one drawn on arrival from the policy's seeded generator,
adapter i with probability proportional to (i + 1)^-`lora_zipf` (0: uniform). The instance
(`cluster.lora`, sim/cluster/lora.py) has `max_loras` GPU slots:

- **Admission.** A waiting request may be admitted when its adapter is resident, a slot is free,
  or a resident adapter no running request uses can be evicted (LRU). Otherwise it waits and the
  first admissible request behind it goes first (vLLM v0 skips it and keeps it at the queue's
  head); each pass-over counts in its `num_lora_waits` and the run's `lora_waits`, and its
  `extra["lora_wait"]` says why. So the running batch never holds more than `max_loras` distinct
  adapters, and a request never runs without its adapter resident.
- **Loads.** Admitting a request whose adapter is not resident loads it (evicting the least
  recently used unpinned adapter when the slots are full); the next Step carries the loads
  (`Step.num_lora_loads`) and pays them (sim/cluster/lora.py). The run counts `lora_loads` and
  `lora_evictions`.
- **Steps** carry each row's adapter (`Step.lora_ids`), so the executor prices one segment per
  distinct adapter.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Sequence

import numpy as np

from sim.core.executor import InstanceInfo
from sim.core.request import Request
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError

MAX_ADAPTERS = 1_000_000  # adapters; a sanity bound


def check_lora_params(num_adapters: int, zipf: float, preemption_mode: str) -> None:
    """Validate a paged policy's `lora_adapters` and `lora_zipf`."""
    if (not isinstance(num_adapters, int) or isinstance(num_adapters, bool)
            or not 0 <= num_adapters <= MAX_ADAPTERS):
        raise ConfigError("lora_adapters", num_adapters, f"must be an int in [0, {MAX_ADAPTERS}]")
    if not isinstance(zipf, (int, float)) or isinstance(zipf, bool) or not 0 <= zipf < 100:
        raise ConfigError("lora_zipf", zipf, "must be a number in [0, 100)")
    if num_adapters and preemption_mode != "recompute":
        raise ConfigError("preemption_mode", preemption_mode, "LoRA adapters need recompute: "
                          "swapped-in requests would skip the adapter-slot check")


class LoraSlots:
    """One instance's resident adapters, least recently used first."""

    def __init__(self, max_loras: int) -> None:
        self.max_loras = max_loras  # adapter slots on the GPU
        self.resident: OrderedDict[int, None] = OrderedDict()  # adapter ids, LRU first
        self.pending_loads = 0  # adapters loaded for the next step

    def can_place(self, adapter: int, pinned: set[int]) -> bool:
        """Whether `adapter` is resident or can get a slot without evicting a pinned one."""
        if adapter < 0 or adapter in self.resident or len(self.resident) < self.max_loras:
            return True
        return any(a not in pinned for a in self.resident)

    def acquire(self, adapter: int, pinned: set[int]) -> tuple[bool, bool]:
        """Make `adapter` resident and most recently used: (loaded, evicted one)."""
        if adapter < 0:
            return False, False
        if adapter in self.resident:
            self.resident.move_to_end(adapter)
            return False, False
        evicted = len(self.resident) >= self.max_loras
        if evicted:
            victim = next(a for a in self.resident if a not in pinned)
            del self.resident[victim]
        self.resident[adapter] = None
        self.pending_loads += 1
        return True, evicted


def pinned_adapters(requests: Iterable[Request]) -> set[int]:
    """Adapters the given (running) requests use."""
    return {r.lora_id for r in requests if r.lora_id >= 0}


class LoraScheduler:
    """A paged policy's adapter assignment, admission check and step annotation."""

    def __init__(self, num_adapters: int, zipf: float, rng: np.random.Generator,
                 recorder: Recorder, instances: Sequence[InstanceInfo]) -> None:
        weights = np.arange(1, num_adapters + 1, dtype=np.float64) ** -float(zipf)
        self.popularity = weights / weights.sum()  # probability of adapter i
        self.rng = rng  # the policy's seeded generator
        self.recorder = recorder  # run counters
        self.slots = [LoraSlots(info.max_loras) for info in instances]  # per instance

    def assign(self, r: Request) -> None:
        """Give `r` an adapter when the trace gave it none."""
        if r.lora_id < 0:
            r.lora_id = int(self.rng.choice(len(self.popularity), p=self.popularity))

    def count(self, name: str, n: int = 1) -> None:
        c = self.recorder.counters
        c[name] = c.get(name, 0) + n

    def pick(self, slots: LoraSlots, waiting: Any, running: list[Request]) -> bool:
        """Put the first waiting request whose adapter can be placed at the queue's head (the
        others keep their order); False when there is none."""
        pinned = pinned_adapters(running)
        for j, r in enumerate(waiting):
            if slots.can_place(r.lora_id, pinned):
                if j:
                    del waiting[j]
                    waiting.appendleft(r)
                return True
            r.num_lora_waits += 1
            self.count("lora_waits")
            r.extra["lora_wait"] = (f"adapter {r.lora_id} not resident; all {slots.max_loras} "
                                    f"slots hold adapters of running requests")
        return False

    def acquire(self, slots: LoraSlots, r: Request, running: list[Request]) -> None:
        """Make the admitted request's adapter resident (a load for the next step)."""
        loaded, evicted = slots.acquire(r.lora_id, pinned_adapters(running))
        if loaded:
            self.count("lora_loads")
        if evicted:
            self.count("lora_evictions")

    @staticmethod
    def annotate(slots: LoraSlots, batch: Sequence[Request]) -> dict[str, Any]:
        """The Step fields of a batch: each row's adapter and the pending loads (then reset)."""
        ids = tuple([r.lora_id for r in batch])
        missing = [a for a in ids if a >= 0 and a not in slots.resident]
        if missing:
            raise RuntimeError(f"LoRA adapters {missing} run without being resident")
        loads, slots.pending_loads = slots.pending_loads, 0
        return {"lora_ids": ids, "num_lora_loads": loads}


def build_lora_scheduler(num_adapters: int, zipf: float, rng: np.random.Generator,
                         recorder: Recorder, instances: Sequence[InstanceInfo],
                         policy: Any) -> LoraScheduler | None:
    """The policy's LoRA scheduler (None when `lora_adapters` is 0); every instance needs
    adapter slots (`cluster.lora`), and the policy must admit through `can_admit` / `admit`."""
    if num_adapters == 0:
        return None
    if hasattr(policy, "admit_chunk"):
        raise ConfigError("lora_adapters", num_adapters, f"{type(policy).__name__} admits "
                          f"requests its own way; LoRA runs on vllm_v0 and sarathi")
    for info in instances:
        if info.max_loras < 1:
            raise ConfigError("lora_adapters", num_adapters,
                              f"instance {info.instance_id} ({info.name or 'unnamed'}) has no "
                              f"adapter slots; set cluster.lora (e.g. {{max_loras: 4}})")
    recorder.add_record_columns(("lora_id", "num_lora_waits"))
    return LoraScheduler(num_adapters, zipf, rng, recorder, instances)
