"""Scheduling overhead: host CPU time the scheduler spends before each model iteration.

Every model iteration needs one scheduler invocation (a multi-iteration Step is one invocation
per iteration, as the engine it stands for would run). Its CPU time is
`fixed_s + per_request_s * requests + per_token_s * new tokens` of that iteration.

- `serial`: the CPU time precedes the iteration's GPU time; the GPU idles meanwhile.
- `async` (vLLM async scheduling, AIAK's "zero token gap"): iteration i is scheduled while
  iteration i-1 runs on the GPU, so the GPU waits only max(0, cpu_i - gpu_{i-1}) before
  iteration i; the first iteration after the instance was idle pays its CPU time in full.

`OverheadClock` (one per instance) turns an executor's GPU iteration ends into wall-clock ends
and cuts them at the next arrival exactly as `sim.executor.modelled_result` does, so jumping over
decode runs stays exact. A cluster names it as `scheduling_overhead:` (see `build_overhead`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from sim.errors import ConfigError
from sim.executor import Executor, Step, StepResult, modelled_result
from sim.jsonfile import read_json_object

MODES = ("serial", "async")  # CPU before GPU | CPU overlapped with the previous iteration
WHERE = "cluster.scheduling_overhead"


@dataclass(frozen=True)
class SchedulingOverhead:
    """Modelled scheduler CPU time per model iteration."""

    fixed_s: float = 0.0  # seconds per scheduler invocation (= per model iteration)
    per_request_s: float = 0.0  # seconds per scheduled request, per iteration
    per_token_s: float = 0.0  # seconds per scheduled new token, per iteration
    mode: str = "serial"  # serial | async

    def __post_init__(self) -> None:
        for name in ("fixed_s", "per_request_s", "per_token_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise ConfigError(f"{WHERE}.{name}", value, "must be a finite number >= 0 "
                                                            "(seconds)")
        if self.mode not in MODES:
            raise ConfigError(f"{WHERE}.mode", self.mode, f"one of {', '.join(MODES)}")

    @property
    def is_zero(self) -> bool:
        """No scheduler time at all: the engine runs exactly as without an overhead."""
        return self.fixed_s == 0 and self.per_request_s == 0 and self.per_token_s == 0

    def iteration_cpu_s(self, step: Step, num_iterations: int) -> np.ndarray:
        """Scheduler seconds before each of the step's first `num_iterations` iterations."""
        b = step.num_seqs
        later = self.fixed_s + (self.per_request_s + self.per_token_s) * b
        cpu = np.full(num_iterations, later, dtype=np.float64)
        cpu[0] = self.fixed_s + self.per_request_s * b + self.per_token_s * step.num_first_tokens
        return cpu


class OverheadClock:
    """One instance's wall clock under a scheduling overhead (keeps the last GPU iteration)."""

    __slots__ = ("config", "prev_gpu_s")

    def __init__(self, config: SchedulingOverhead) -> None:
        self.config = config  # the modelled overhead
        self.prev_gpu_s = 0.0  # GPU seconds of the instance's last iteration; 0 after idling

    def idle(self) -> None:
        """The instance went idle: the next iteration's scheduling overlaps nothing."""
        self.prev_gpu_s = 0.0

    def run(self, executor: Executor, step: Step, until_s: float
            ) -> tuple[StepResult, float, float]:
        """Run `step` untruncated on `executor`, add scheduler time, cut at `until_s`.

        Returns the wall-clock StepResult, the scheduler CPU seconds of the iterations that ran
        and the seconds of them the GPU sat idle waiting (the exposed part)."""
        gpu_result = executor.execute(step, math.inf)
        ends = gpu_result.iteration_ends_s
        oom_at = len(ends) + 1 if gpu_result.oom else 0
        if oom_at:  # the failed iteration's GPU time ends at duration_s
            ends = np.append(ends, gpu_result.duration_s)
        gpu = np.diff(ends, prepend=0.0)
        cpu = self.config.iteration_cpu_s(step, len(ends))
        if self.config.mode == "serial":
            gaps = cpu
        else:
            before = np.concatenate(((self.prev_gpu_s,), gpu[:-1]))
            gaps = np.maximum(cpu - before, 0.0)
        result = modelled_result(np.cumsum(gaps + gpu), until_s, oom_at)
        ran = result.num_iterations + (1 if result.oom else 0)
        self.prev_gpu_s = float(gpu[ran - 1])
        return result, float(cpu[:ran].sum()), float(gaps[:ran].sum())


def build_overhead(raw: Mapping[str, Any] | None, backend: str = "sim"
                   ) -> SchedulingOverhead | None:
    """The overhead a cluster's `scheduling_overhead:` mapping names; None when empty.

    Keys: the `SchedulingOverhead` fields, and `calibration: FILE` (a `python -m real.calibrate`
    JSON with a `scheduling_overhead` section) whose numbers the other keys override."""
    if not raw:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(WHERE, raw, "must be a mapping (fixed_s, per_request_s, per_token_s, "
                                      "mode, calibration)")
    if backend == "real":
        raise ConfigError(WHERE, dict(raw), "the real backend's scheduling time is real, not "
                                            "modelled: drop it with backend: real")
    known = {f.name for f in fields(SchedulingOverhead)}
    for key in raw:
        if key not in known and key != "calibration":
            raise ConfigError(f"{WHERE}.{key}", raw[key], f"unknown key; known: "
                              f"{', '.join(sorted(known | {'calibration'}))}")
    values = dict(raw)
    if "calibration" in values:
        values = {**calibrated_overhead(values.pop("calibration")), **values}
    return SchedulingOverhead(**values)


def calibrated_overhead(path: object) -> dict[str, float]:
    """fixed_s / per_request_s / per_token_s from a calibration file's `scheduling_overhead`
    (JSON read as data: a missing, binary or malformed file is a ConfigError naming it)."""
    where = f"{WHERE}.calibration"
    if not isinstance(path, (str, Path)):
        raise ConfigError(where, path, "not a calibration file: must be a path")
    data = read_json_object(path, where, "calibration file")
    section = data.get("scheduling_overhead")
    if not isinstance(section, Mapping):
        raise ConfigError(where, path, "has no scheduling_overhead section (fit one with "
                                       "python -m real.calibrate --scheduling STEPS.parquet)")
    out = {}
    for key in ("fixed_s", "per_request_s", "per_token_s"):
        value = section.get(key)
        if key in section and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{where}.scheduling_overhead.{key}", value,
                              f"must be a number of seconds (in {path})")
        if key in section:
            out[key] = float(value)
    return out


def overhead_kwargs(cluster: Any) -> dict[str, SchedulingOverhead]:
    """`{"overhead": ...}` for `policies.simulate.simulate` when a ClusterSpec names a non-zero
    scheduling overhead, else {} (so a real replay, which refuses one, gets nothing)."""
    overhead = build_overhead(cluster.scheduling_overhead, cluster.backend)
    return {} if overhead is None or overhead.is_zero else {"overhead": overhead}
