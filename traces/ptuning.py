"""Seeded P-tuning requests (RTP-LLM's P-tuning KV reuse): every request of a task starts with
that task's learned soft prompt of `prefix_tokens` virtual tokens.

Requests arrive as a Poisson process at rate_per_s (inf: every request at 0); each picks a task
t of `num_tasks` with probability proportional to (t + 1) ** -task_zipf (0: uniform) and has

    prompt_tokens = prefix_tokens + its own input (`input`),  output_tokens from `output`.

The prefix is the same in every request of a task, so prefix caching reuses it like a system
prompt: its granules (`block_tokens` each, `traces/content_ids.py`) have the task's ids in
every request of the task, the rest of a prompt is private to the request. With KV blocks of B
tokens and B a multiple of `block_tokens`, a request whose task's prefix is cached reuses
floor(prefix_tokens / B) x B tokens (at most its prompt - 1). The soft prompt is priced as
prompt tokens (P-tuning v1: virtual tokens run through every layer like real ones). Each
request carries `app` (`task<t>`), `task` (t) and `prefix_tokens`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError
from traces.arrivals import arrivals
from traces.content_ids import STREAM_STRIDE, stream_ids
from traces.lengths import LENGTH_PRESETS, LengthDist
from traces.schema import validate_trace


@dataclass(frozen=True)
class PTuningConfig:
    """A P-tuning workload (module docstring)."""

    rate_per_s: float = 1.0  # requests per second (Poisson); inf: every request at 0
    num_requests: int = 1000  # requests
    num_tasks: int = 4  # tasks, each with its own soft prompt
    prefix_tokens: int = 128  # virtual tokens of each task's soft prompt
    task_zipf: float = 0.0  # task popularity: P(t) ~ (t + 1) ** -task_zipf (0: uniform)
    input: LengthDist = LENGTH_PRESETS["sharegpt"][0]  # tokens of a request after the prefix
    output: LengthDist = LENGTH_PRESETS["sharegpt"][1]  # tokens of each answer
    block_tokens: int = 16  # tokens per content id (granule)

    def __post_init__(self) -> None:
        if not 0 < self.rate_per_s <= math.inf:
            raise ConfigError("ptuning.rate_per_s", self.rate_per_s, "must be > 0")
        for name in ("num_requests", "num_tasks", "prefix_tokens", "block_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"ptuning.{name}", value, "must be an int >= 1")
        if isinstance(self.task_zipf, bool) or not 0 <= self.task_zipf < math.inf:
            raise ConfigError("ptuning.task_zipf", self.task_zipf, "must be finite and >= 0")
        for name in ("input", "output"):
            if not isinstance(getattr(self, name), LengthDist):
                raise ConfigError(f"ptuning.{name}", getattr(self, name), "must be a LengthDist")

    @property
    def task_weights(self) -> np.ndarray:
        """Probability of each task: (t + 1) ** -task_zipf, normalized."""
        w = np.arange(1, self.num_tasks + 1, dtype=np.float64) ** -float(self.task_zipf)
        return w / w.sum()


def ptuning_trace(cfg: PTuningConfig, seed: int) -> pd.DataFrame:
    """A validated trace of `cfg`'s requests; the same seed gives the same frame. Task t's
    prefix ids start at (t + 1) x STREAM_STRIDE, request i's own at (num_tasks + i + 1) x it."""
    rng = np.random.default_rng(seed)
    n = cfg.num_requests
    times = arrivals(cfg.rate_per_s, n, rng=rng)
    tasks = rng.choice(cfg.num_tasks, size=n, p=cfg.task_weights)
    prompts = cfg.prefix_tokens + cfg.input.sample(n, rng)
    outputs = cfg.output.sample(n, rng)
    ids = [stream_ids(cfg.block_tokens, int(p), (cfg.num_tasks + i + 1) * STREAM_STRIDE,
                      cfg.prefix_tokens, (int(t) + 1) * STREAM_STRIDE)
           for i, (p, t) in enumerate(zip(prompts.tolist(), tasks.tolist()))]
    df = pd.DataFrame({"arrival_s": times, "prompt_tokens": prompts, "output_tokens": outputs,
                       "app": [f"task{t}" for t in tasks.tolist()], "task": tasks,
                       "prefix_tokens": cfg.prefix_tokens, "block_ids": ids,
                       "block_tokens": cfg.block_tokens})
    return validate_trace(df, f"ptuning(seed={seed})")
