"""Steps as an engine ran them: written by replays, read back to fit and check time models.

`engine_steps.parquet` (written beside a real run's `steps.parquet`) holds one row per Step the
engine ran: its per-request chunks (request ids, new and context tokens, samples), the
iterations it was asked for and completed, whether it watched for arrivals, the measured
iteration ends and duration, and how many attention shapes it ran for the first time. A run
recorded before that file existed is read from its `steps.parquet`, `records.parquet` and
`config.json` instead: the policy is driven again over the run's own requests with each Step
answered by its measured duration (`RecordedExecutor`), which reproduces the schedule exactly for
a deterministic policy; every Step is checked against the recorded one (requests, new and
context tokens, iterations) and any divergence is an error naming the step. Torch-free.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from sim.core.executor import Step, StepResult
from sim.cost.engine_shapes import ShapeCache
from sim.util.errors import ConfigError

ENGINE_STEPS = "engine_steps.parquet"


@dataclass(frozen=True)
class StepSample:
    """One Step the engine ran, and what it measured."""

    step: Step  # the Step as asked (its rows; num_iterations as asked)
    num_iterations: int  # iterations that completed
    duration_s: float  # seconds the Step took
    iteration_ends_s: np.ndarray | None  # seconds from the start, each completed iteration
    new_shapes: np.ndarray  # attention shapes run for the first time, per completed iteration
    run: str  # the run it came from (a label)
    synced: bool = False  # the engine waited for each iteration's end (it watched arrivals)


def samples_frame(samples: Sequence[StepSample]) -> pd.DataFrame:
    """The rows of engine_steps.parquet."""
    return pd.DataFrame({
        "request_ids": [list(s.step.request_ids) for s in samples],
        "num_new_tokens": [list(s.step.num_new_tokens) for s in samples],
        "num_context_tokens": [list(s.step.num_context_tokens) for s in samples],
        "samples": [[bool(x) for x in s.step.samples] for s in samples],
        "num_iterations_asked": [s.step.num_iterations for s in samples],
        "num_iterations": [s.num_iterations for s in samples],
        "stop_on_arrival": [s.step.stop_on_arrival for s in samples],
        "duration_s": [s.duration_s for s in samples],
        "iteration_ends_s": [[] if s.iteration_ends_s is None else s.iteration_ends_s.tolist()
                             for s in samples],
        "new_shapes": [s.new_shapes.astype(int).tolist() for s in samples],
        "synced": [bool(s.synced) for s in samples]})


def read_engine_steps(path: Path, run: str) -> list[StepSample]:
    """StepSamples from an engine_steps.parquet file."""
    frame = pd.read_parquet(path)
    out = []
    for row in frame.itertuples(index=False):
        step = Step(0, tuple(int(x) for x in row.request_ids),
                    tuple(int(x) for x in row.num_new_tokens),
                    tuple(int(x) for x in row.num_context_tokens),
                    tuple(bool(x) for x in row.samples),
                    num_iterations=int(row.num_iterations_asked),
                    stop_on_arrival=bool(row.stop_on_arrival))
        ends = np.asarray(row.iteration_ends_s, dtype=np.float64)
        out.append(StepSample(step, int(row.num_iterations), float(row.duration_s),
                              ends if len(ends) else None,
                              np.asarray(row.new_shapes, dtype=np.float64), run,
                              bool(getattr(row, "synced", False))))
    return out


class RecordedExecutor:
    """Answers each Step with the next recorded step's duration and iterations, after checking
    that the policy asked for the recorded batch."""

    def __init__(self, steps: pd.DataFrame, kv_capacity_tokens: int, max_model_len: int,
                 run: str) -> None:
        self.steps = steps  # the run's steps.parquet
        self.kv_capacity_tokens = kv_capacity_tokens  # tokens, as the engine had
        self.max_model_len = max_model_len  # tokens, the engine's context limit
        self.name = f"recorded {run}"  # label
        self.run = run  # label of the samples
        # (step, completed iterations, seconds, whether the engine watched for an arrival)
        self.log: list[tuple[Step, int, float, bool]] = []

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        i = len(self.log)
        if i >= len(self.steps):
            raise ConfigError("--steps", self.run, f"the policy asked for a step {i} after the "
                              f"{len(self.steps)} the run recorded")
        row = self.steps.iloc[i]
        got = (step.num_seqs, step.num_first_tokens, sum(step.num_context_tokens))
        want = (int(row.num_seqs), int(row.num_new_tokens), int(row.num_context_tokens))
        k = int(row.num_iterations)
        if got != want or k > step.num_iterations:
            raise ConfigError("--steps", self.run, f"step {i}: the policy asked for (requests, "
                              f"new tokens, context tokens) = {got} with {step.num_iterations} "
                              f"iterations, the run recorded {want} with {k}: the schedule "
                              f"cannot be reproduced (another policy seed, KV capacity or "
                              f"context limit?)")
        duration = float(row.duration_s)
        self.log.append((step, k, duration, until_s != math.inf))
        return StepResult(duration, np.linspace(duration / k, duration, k), bool(row.oom))


def reconstruct_run(run_dir: Path, kv_capacity_tokens: int, max_model_len: int,
                    seed: int = 0) -> list[tuple[Step, int, float, bool]]:
    """The Steps of a recorded run, by driving its policy again over its own requests."""
    from policies.simulate import simulate  # policies sit above real's torch-free helpers

    steps = pd.read_parquet(run_dir / "steps.parquet")
    records = pd.read_parquet(run_dir / "records.parquet").sort_values("request_id")
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    if "policy" not in config:
        raise ConfigError("--steps", str(run_dir), "its config.json names no policy")
    trace = pd.DataFrame({"arrival_s": records["arrival_s"].to_numpy(),
                          "prompt_tokens": records["prompt_tokens"].to_numpy(),
                          "output_tokens": records["requested_output_tokens"].to_numpy()})
    ex = RecordedExecutor(steps, kv_capacity_tokens, max_model_len, run_dir.name)
    simulate(trace, config["policy"], config.get("params") or {}, [ex], seed=seed,
             max_model_len=max_model_len)
    if len(ex.log) != len(steps):
        raise ConfigError("--steps", str(run_dir), f"the policy ran {len(ex.log)} steps, the "
                          f"run recorded {len(steps)}")
    return ex.log


def run_samples(run_dirs: Sequence[Path], kv_capacity_tokens: int, max_model_len: int,
                granularity: int, warmup_iterations: int = 2) -> list[StepSample]:
    """Every Step of the runs, in order. Runs without engine_steps.parquet are reconstructed
    and taken as one engine process in the order given (as experiments.validate.main runs its
    policies on one engine), after the engine's warm-up, to count first-run shapes."""
    cache = ShapeCache.after_warmup(granularity, kv_capacity_tokens, warmup_iterations)
    out: list[StepSample] = []
    for run_dir in map(Path, run_dirs):
        if not run_dir.is_dir():
            raise ConfigError("--steps", str(run_dir), "is not a run folder")
        if (run_dir / ENGINE_STEPS).is_file():
            out += read_engine_steps(run_dir / ENGINE_STEPS, run_dir.name)
            continue
        for step, k, duration, synced in reconstruct_run(run_dir, kv_capacity_tokens,
                                                         max_model_len):
            fresh = cache.new_per_iteration(step, k)
            cache.record(step, k)
            out.append(StepSample(step, k, duration, None, fresh, run_dir.name, synced))
    return out


def describe(samples: Sequence[StepSample]) -> dict[str, Any]:
    """Counts per run (for reports)."""
    runs: dict[str, int] = {}
    for s in samples:
        runs[s.run] = runs.get(s.run, 0) + 1
    return runs
