"""Test factories: requests, traces and a linear-cost executor with analytic step times."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.executor import Step, StepResult, truncate_ends


@dataclass
class LinearExecutor:
    """Step time = base_s + per_token_s * computed tokens + per_ctx_s * context tokens."""

    capacity: int = 10_000  # KV tokens
    base_s: float = 0.01  # seconds per iteration
    per_token_s: float = 1e-4  # seconds per computed token
    per_ctx_s: float = 0.0  # seconds per context token read
    name: str = "linear"

    @property
    def kv_capacity_tokens(self) -> int:
        return self.capacity

    def iteration_times(self, step: Step) -> np.ndarray:
        n, b = step.num_iterations, step.num_seqs
        first_ctx = sum(step.num_context_tokens)
        tokens = np.full(n, b, dtype=np.float64)
        tokens[0] = step.num_first_tokens
        ctx = np.empty(n)
        ctx[0] = first_ctx
        if n > 1:
            ctx[1:] = first_ctx + step.num_first_tokens + b * np.arange(n - 1)
        return self.base_s + self.per_token_s * tokens + self.per_ctx_s * ctx

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        times = self.iteration_times(step)
        ends = np.cumsum(times)
        over = [i for i in range(1, step.num_iterations + 1)
                if step.kv_tokens_after(i) > self.capacity]
        if over:
            i = over[0]
            return StepResult(float(ends[i - 1]), ends[: i - 1], oom=True)
        ends = truncate_ends(ends, until_s)
        return StepResult(float(ends[-1]), ends)


def make_trace(rows: list[tuple[float, int, int]]) -> pd.DataFrame:
    """A trace from (arrival_s, prompt_tokens, output_tokens) rows."""
    return pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens"])


def random_trace(rng: np.random.Generator, n: int, rate: float = 5.0,
                 max_prompt: int = 200, max_output: int = 50) -> pd.DataFrame:
    """A small random trace for property tests."""
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    return make_trace([(float(a), int(p), int(o)) for a, p, o in zip(
        arrivals, rng.integers(1, max_prompt + 1, n), rng.integers(1, max_output + 1, n))])
