"""Scheduling overhead: host CPU time the engine loop spends before each model iteration.

Every model iteration needs one pass of the engine loop on the host (a multi-iteration Step is
one pass per iteration, as the engine it stands for would run). Its host time has four parts,
after the split Vidur measured (schedule / prepare inputs / process outputs, docs/overhead.md):

- schedule: `fixed_s + per_request_s * requests + per_token_s * new tokens`;
- output: `output_fixed_s + output_per_request_s` per sampled row (copy the sampled ids back,
  check the stop conditions, append them to the sequences);
- detokenize: `detokenize_per_request_s` per sampled row (turn the new token into text, stream it);
- prepare: `prepare_fixed_s + prepare_per_request_s * requests` (concatenate the last iteration's
  sampled tokens into the inputs, build the metadata, copy them host -> device).

- `serial`: all host time precedes the iteration's GPU time; the GPU idles meanwhile.
- `async` (vLLM's async scheduling and async output processing, AIAK's asynchronous execution):
  while iteration i-1 is on the GPU the host schedules iteration i and processes and
  detokenizes the outputs of iteration i-2 (a finished request is seen one iteration late).
  Only prepare needs iteration i-1's sampled tokens, so it alone runs between the two: the GPU
  waits `max(0, schedule_i + output_i + detokenize_i - gpu_{i-1}) + prepare_i` before iteration
  i; the first iteration after the instance was idle pays everything in full.
- `tokenizer: pipelined` (AIAK's multi-process tokenizer): detokenize runs in its own process,
  off the loop.
- `slots: static` (AIAK's static slots): each request keeps a fixed slot, so the scheduler
  touches only the requests that joined or left since the last step (`per_request_s` is paid
  for those alone); the stop check runs on the GPU and the inputs are built there from the slots
  (no output or prepare host time: no stop check, token concatenation or host -> device copy).

`OverheadClock` (one per instance) turns an executor's GPU iteration ends into wall-clock ends
and cuts them at the next arrival exactly as `sim.core.executor.modelled_result` does, so jumping over
decode runs stays exact. A cluster names it as `scheduling_overhead:` (see `build_overhead`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from sim.core.executor import Executor, Step, StepResult, modelled_result
from sim.util.errors import ConfigError
from sim.util.jsonfile import read_json_object

MODES = ("serial", "async")  # host time before the GPU | overlapped with the previous iteration
TOKENIZERS = ("inline", "pipelined")  # detokenize in the engine loop | in its own process
SLOTS = ("dynamic", "static")  # global rescheduling, host-built inputs | AIAK's static slots
WHERE = "cluster.scheduling_overhead"
SECONDS = ("fixed_s", "per_request_s", "per_token_s", "detokenize_per_request_s",
           "prepare_fixed_s", "prepare_per_request_s", "output_fixed_s", "output_per_request_s")


@dataclass(frozen=True)
class SchedulingOverhead:
    """Modelled host time of the engine loop per model iteration (the module docstring)."""

    fixed_s: float = 0.0  # seconds per scheduler invocation (= per model iteration)
    per_request_s: float = 0.0  # seconds per scheduled request, per iteration
    per_token_s: float = 0.0  # seconds per scheduled new token, per iteration
    mode: str = "serial"  # serial | async
    detokenize_per_request_s: float = 0.0  # seconds per sampled row, per iteration
    prepare_fixed_s: float = 0.0  # seconds per iteration building inputs from the last tokens
    prepare_per_request_s: float = 0.0  # seconds per scheduled request, per iteration (H2D too)
    output_fixed_s: float = 0.0  # seconds per iteration processing the sampled outputs
    output_per_request_s: float = 0.0  # seconds per sampled row (D2H, stop check, append)
    tokenizer: str = "inline"  # inline | pipelined (detokenize off the engine loop)
    slots: str = "dynamic"  # dynamic | static (incremental scheduling, inputs built on the GPU)

    def __post_init__(self) -> None:
        for name in SECONDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise ConfigError(f"{WHERE}.{name}", value, "must be a finite number >= 0 "
                                                            "(seconds)")
        for name, known in (("mode", MODES), ("tokenizer", TOKENIZERS), ("slots", SLOTS)):
            if getattr(self, name) not in known:
                raise ConfigError(f"{WHERE}.{name}", getattr(self, name),
                                  f"one of {', '.join(known)}")

    @property
    def is_zero(self) -> bool:
        """No host time at all: the engine runs exactly as without an overhead."""
        return all(getattr(self, name) == 0 for name in SECONDS)

    def iteration_host_s(self, step: Step, num_iterations: int, changed: int | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
        """(overlappable, between-iterations) host seconds before each of the first
        `num_iterations` iterations: schedule + output + detokenize, and prepare (output and
        prepare are zero with static slots). `changed` defaults to every scheduled request."""
        b, n = step.num_seqs, num_iterations
        sampled = np.full(n, float(b))
        sampled[0] = sum(step.samples)
        touched = np.full(n, float(b))
        if self.slots == "static":  # later iterations of a Step change no slot
            touched[:] = 0.0
            touched[0] = b if changed is None else changed
        tokens = np.full(n, float(b))
        tokens[0] = step.num_first_tokens
        overlap = self.fixed_s + self.per_request_s * touched + self.per_token_s * tokens
        if self.tokenizer == "inline":
            overlap = overlap + self.detokenize_per_request_s * sampled
        if self.slots == "static":
            return overlap, np.zeros(n)
        overlap = overlap + self.output_fixed_s + self.output_per_request_s * sampled
        return overlap, np.full(n, self.prepare_fixed_s + self.prepare_per_request_s * b)


class OverheadClock:
    """One instance's wall clock under a scheduling overhead (keeps the last GPU iteration and
    the requests it ran)."""

    __slots__ = ("config", "prev_gpu_s", "prev_ids")

    def __init__(self, config: SchedulingOverhead) -> None:
        self.config = config  # the modelled overhead
        self.prev_gpu_s = 0.0  # GPU seconds of the instance's last iteration; 0 after idling
        self.prev_ids: frozenset[int] = frozenset()  # requests of the last step; none after idling

    def idle(self) -> None:
        """The instance went idle: the next iteration's host work overlaps nothing, and every
        request it schedules takes a fresh slot."""
        self.prev_gpu_s = 0.0
        self.prev_ids = frozenset()

    def run(self, executor: Executor, step: Step, until_s: float
            ) -> tuple[StepResult, float, float]:
        """Run `step` untruncated on `executor`, add the host time, cut at `until_s`.

        Returns the wall-clock StepResult, the engine-loop host seconds of the iterations that
        ran and the seconds of them the GPU sat idle waiting (the exposed part)."""
        gpu_result = executor.execute(step, math.inf)
        ends = gpu_result.iteration_ends_s
        oom_at = len(ends) + 1 if gpu_result.oom else 0
        if oom_at:  # the failed iteration's GPU time ends at duration_s
            ends = np.append(ends, gpu_result.duration_s)
        gpu = np.diff(ends, prepend=0.0)
        ids = frozenset(step.request_ids)
        overlap, between = self.config.iteration_host_s(step, len(ends),
                                                        len(ids ^ self.prev_ids))
        if self.config.mode == "serial":
            gaps = overlap + between
        else:
            before = np.concatenate(((self.prev_gpu_s,), gpu[:-1]))
            gaps = np.maximum(overlap - before, 0.0) + between
        result = modelled_result(np.cumsum(gaps + gpu), until_s, oom_at)
        ran = result.num_iterations + (1 if result.oom else 0)
        self.prev_gpu_s = float(gpu[ran - 1])
        self.prev_ids = ids
        return result, float((overlap + between)[:ran].sum()), float(gaps[:ran].sum())


def build_overhead(raw: Mapping[str, Any] | None, backend: str = "sim"
                   ) -> SchedulingOverhead | None:
    """The overhead a cluster's `scheduling_overhead:` mapping names; None when empty.

    Keys: the `SchedulingOverhead` fields, and `calibration: FILE` (a `python -m real.calibrate`
    JSON with a `scheduling_overhead` section) whose numbers the other keys override."""
    if not raw:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(WHERE, raw, "must be a mapping of SchedulingOverhead fields "
                                      "(fixed_s, per_request_s, mode, ...) or calibration")
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
