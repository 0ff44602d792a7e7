"""Replay a trace on real executors through the simulator's own engine loop and policies.

The SimPy clock advances by each step's measured duration, so a run takes the compute time of
its steps, never the trace's idle gaps. Policies account KV themselves and need not name the
requests whose KV a real engine should drop: `KVReleasingPolicy` adds them to the next Step of
their instance as `freed_request_ids` (requests that finished, failed, moved, or were reset to
no computed tokens by a preemption or an OOM retry). It changes nothing the policy sees.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from policies.prefix_caching import check_prefix_caching_backend
from sim.core.executor import Executor, Step, StepResult, info_of
from sim.core.request import Request
from sim.engine.limits import resolve_max_model_len
from sim.engine.simulate import RunResult
from sim.engine.simulation import Simulation
from sim.engine.trace_rows import class_columns, requests_from_trace, trace_columns
from sim.metrics.class_metrics import class_summary
from sim.metrics.host_timing import host_summary
from sim.metrics.summary import instance_frame, request_records, summarize
from sim.records.recorder import Recorder


class KVReleasingPolicy:
    """Wraps a policy; stamps `freed_request_ids` on its Steps for a real backend."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner  # the wrapped policy
        self._requests: dict[int, Request] = {}  # every request seen, by id
        self._held: dict[int, set[int]] = {}  # instance -> requests that may hold KV there

    def __getattr__(self, name: str) -> Any:  # name, config, recorder... of the inner policy
        if name == "inner":  # not set yet (e.g. while copying): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def add_request(self, request: Request, now: float) -> bool:
        self._requests[request.request_id] = request
        return self.inner.add_request(request, now)

    def next_step(self, instance_id: int, now: float) -> Step | None:
        step = self.inner.next_step(instance_id, now)
        if step is None:
            return None
        held = self._held.setdefault(instance_id, set())
        stale = sorted(rid for rid in held if self._dropped(self._requests[rid], instance_id))
        held.difference_update(stale)
        held.update(step.request_ids)
        if not stale:
            return step
        freed = tuple(dict.fromkeys(step.freed_request_ids + tuple(stale)))
        return dataclasses.replace(step, freed_request_ids=freed)

    @staticmethod
    def _dropped(r: Request, instance_id: int) -> bool:
        """The policy no longer keeps this request's KV on the instance."""
        return r.is_finished or r.num_computed_tokens == 0 or r.instance_id != instance_id

    def update(self, step: Step, result: StepResult, now: float) -> list[Request]:
        return self.inner.update(step, result, now)

    def num_reserved_kv_tokens(self, instance_id: int) -> int:
        return self.inner.num_reserved_kv_tokens(instance_id)

    def next_wakeup_s(self, instance_id: int, now: float) -> float:
        return self.inner.next_wakeup_s(instance_id, now)

    def drain(self, now: float) -> None:
        self.inner.drain(now)


def replay(trace: pd.DataFrame, policy_name: str, policy_params: Mapping[str, Any] | None,
           executors: Sequence[Executor], *, seed: int = 0,
           on_done: Callable[[int], None] | None = None,
           max_model_len: int | None = None,
           max_concurrency: int | None = None) -> RunResult:
    """`policies.simulate.simulate` on real executors (each reset first), open or closed loop."""
    from policies.registry import build_policy

    for ex in executors:
        reset = getattr(ex, "reset", None)
        if reset is not None:
            reset()
    limit = resolve_max_model_len(executors, max_model_len)
    requests = requests_from_trace(trace)
    recorder = Recorder()
    infos = [info_of(ex, i) for i, ex in enumerate(executors)]
    inner = build_policy(policy_name, policy_params, infos, recorder, seed)
    check_prefix_caching_backend(inner.config, "real", "policy_params")
    policy = KVReleasingPolicy(inner)
    stats = Simulation(requests, policy, executors, recorder, on_done=on_done,  # type: ignore
                       max_model_len=limit, max_concurrency=max_concurrency).run()
    records = request_records(requests, class_columns(trace_columns(trace)))
    summary = summarize(records, recorder, stats)
    summary.update(class_summary(records, summary["duration_s"]))
    return RunResult(records, recorder.steps_frame(),
                     instance_frame(stats, summary["duration_s"]), recorder.events_frame(),
                     summary, host_summary(stats))
