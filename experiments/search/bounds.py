"""Latency lower bounds of a deployment at zero load, from the cost model alone (no simulation).

- TTFT >= the prefill of the workload's median prompt alone: one step of the prefill instance
  (a colocated instance, or a disagg unit's first instance, its prefill pool) computing the
  whole prompt with an empty KV cache. Queueing, chunking and the KV transfer only add to it.
- TPOT (and every gap between tokens) >= one decode iteration at batch 1 whose context is the
  median prompt, on the decode instance (the colocated one, or a disagg unit's last one): a
  request's context only grows while it decodes, and a batch only grows the step.

At least half of the requests have a prompt >= the median, so when a bound passes an SLO
bound, at least half of the requests miss it even at zero load: no rate meets an SLO that
asks for 50% or more of the requests (attainment >= 0.5, any percentile >= p50). The SLO's
TTFT bounds are `ttft_s` / `ttft_p90_s`, its per-token ones `tpot_s`, `tpot_p99_s`, `tbt_s`,
`tbt_p99_s` (sim/metrics/slo.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Sequence

from sim.core.executor import Step
from sim.metrics.slo import SLO

TTFT_FIELDS = ("ttft_s", "ttft_p90_s")  # SLO bounds a TTFT lower bound is compared with
TOKEN_FIELDS = ("tpot_s", "tpot_p99_s", "tbt_s", "tbt_p99_s")  # bounds a decode step is


@dataclass(frozen=True)
class LatencyBounds:
    """A deployment's zero-load latency lower bounds for the median request."""

    ttft_s: float  # seconds: prefill of the median prompt alone (inf: it does not fit in KV)
    tpot_s: float  # seconds per token: one batch-1 decode iteration at the median context

    def violations(self, slo: SLO) -> list[str]:
        """Why the bounds already miss `slo` ('' bounds: they do not)."""
        out = []
        for fields, value, what in ((TTFT_FIELDS, self.ttft_s, "TTFT"),
                                    (TOKEN_FIELDS, self.tpot_s, "time per output token")):
            for name in fields:
                bound = getattr(slo, name)
                if bound is not None and value > bound:
                    out.append(f"{what} >= {value * 1e3:.4g} ms at zero load (median request) "
                               f"> slo.{name} {bound * 1e3:.4g} ms")
        return out


def step_seconds(executor: Any, new_tokens: int, context_tokens: int) -> float:
    """Seconds of one single-request step (inf when its KV does not fit); a pipeline's
    virtual instance times it through its stages, all free (sim/cluster/pipeline.py)."""
    bind = getattr(executor, "bind_clock", None)
    if bind is not None:
        bind(SimpleNamespace(now=0.0))  # an idle pipeline at time 0
    result = executor.execute(Step(0, (0,), (new_tokens,), (context_tokens,), (True,)))
    return math.inf if result.oom else float(result.duration_s)


def latency_bounds(executors: Sequence[Any], median_prompt: int) -> LatencyBounds:
    """The bounds of a unit whose first executor prefills and last one decodes (the same one
    for a colocated instance)."""
    prompt = max(1, int(median_prompt))
    return LatencyBounds(step_seconds(executors[0], prompt, 0),
                         step_seconds(executors[-1], 1, prompt))
