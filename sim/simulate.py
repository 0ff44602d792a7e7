"""One simulation run from plain inputs: a trace, executors, and a policy factory.

`run_simulation` takes a `sim.policy.PolicyFactory`, so sim/ needs nothing from policies/;
`policies.simulate.simulate(trace, "vllm", params, executors)` resolves a policy name into one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import pandas as pd

from sim.engine import InstanceStats, Simulation
from sim.executor import Executor, InstanceInfo
from sim.limits import resolve_max_model_len
from sim.metrics import instance_frame, records_frame, summarize
from sim.overhead import SchedulingOverhead
from sim.policy import PolicyFactory
from sim.record_log import RecordLog
from sim.recorder import Recorder, StepLog
from sim.request_source import TraceRequests


@dataclass
class RunResult:
    """Everything a run produced: flat per-request and per-step records plus a summary."""

    records: pd.DataFrame  # one row per request (sim.metrics.RECORD_COLUMNS and latencies)
    steps: pd.DataFrame  # one row per executed Step (sim.recorder.STEP_COLUMNS)
    instances: pd.DataFrame  # one row per instance
    events: pd.DataFrame  # scheduler events (OOM, preemption, retraining...)
    summary: dict[str, float]  # run-level metrics


def run_simulation(trace: pd.DataFrame, make_policy: PolicyFactory,
                   executors: Sequence[Executor], *,
                   on_done: Callable[[int], None] | None = None,
                   overhead: SchedulingOverhead | None = None,
                   max_model_len: int | None = None,
                   max_concurrency: int | None = None) -> RunResult:
    """Replay `trace` through the policy `make_policy` builds, on one executor per instance,
    with the scheduler CPU time `overhead` models (sim.overhead) before each iteration, if
    given. Prompts longer than `max_model_len` (default: the model's context) are rejected and
    outputs cut where prompt + output reach it (sim/limits.py). With `max_concurrency` N at
    most N requests are in the system at once (closed loop, sim/engine.py)."""
    limit = resolve_max_model_len(executors, max_model_len)
    requests = TraceRequests(trace)  # built as they arrive, dropped when final
    recorder = Recorder(records=RecordLog())
    infos = [InstanceInfo(i, ex.kv_capacity_tokens, getattr(ex, "name", ""),
                          getattr(ex, "has_draft", False)) for i, ex in enumerate(executors)]
    policy = make_policy(infos, recorder)
    stats: list[InstanceStats] = Simulation(requests, policy, executors, recorder,
                                            on_done=on_done, overhead=overhead,
                                            max_model_len=limit,
                                            max_concurrency=max_concurrency).run()
    records = records_frame(recorder.records.columns())
    summary = summarize(records, recorder, stats)
    steps = recorder.steps_frame()
    recorder.step_log = StepLog()  # its folded columns are in `steps` now: free them
    return RunResult(records, steps, instance_frame(stats, summary["duration_s"]),
                     recorder.events_frame(), summary)
