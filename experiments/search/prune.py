"""Pruning before any simulation: each candidate kept, or dropped with its reason.

In order, a candidate is pruned when
- `memory`: its cluster's executors do not build (the weights leave no room for KV on its
  GPUs, or a parallelism the model does not divide); the reason is the ConfigError's text;
- `invalid`: its experiment config is refused otherwise (e.g. a batch cap its scheduler
  refuses, a disagg pool that cannot be built); the reason is the ConfigError's text;
- `slo_bound`: a zero-load latency lower bound of the median request already misses the SLO
  (experiments/search/bounds.py), so no rate meets it.
Kept candidates carry their bounds too (search.csv shows them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from experiments.config.backend import build_executors
from experiments.config.experiment import cluster_from_dict
from experiments.search.bounds import LatencyBounds, latency_bounds
from experiments.search.candidates import Candidate
from experiments.search.config import SearchExperiment
from sim.util.errors import ConfigError

PRUNE_REASONS = ("memory", "invalid", "slo_bound")  # why a candidate is not simulated


@dataclass(frozen=True)
class Screened:
    """A candidate after pruning."""

    candidate: Candidate  # the candidate
    pruned: str  # "" when kept, else one of PRUNE_REASONS
    reason: str  # why it was pruned ("" when kept)
    bounds: LatencyBounds | None = None  # its zero-load latency bounds (None: not built)


def median_lengths(search: SearchExperiment) -> tuple[int, int]:
    """(median prompt tokens, median output tokens) of the workload as one probe draws it
    (the first seed, at 1 req/s: the lengths do not depend on the rate)."""
    from experiments.sweep.workload import build_workload, load_base_trace

    cfg = search.experiment([{"name": "vllm", "cluster": {"gpu": search.space.gpus[0]}}])
    trace = build_workload(cfg, load_base_trace(cfg), 1.0, cfg.seeds[0])
    return (int(pd.Series(trace["prompt_tokens"]).median()),
            int(pd.Series(trace["output_tokens"]).median()))


def screen(search: SearchExperiment, candidate: Candidate, median_prompt: int) -> Screened:
    """One candidate through the three rules, in order."""
    try:
        cluster = cluster_from_dict({**search.shared.get("cluster", {}), **candidate.cluster})
    except ConfigError as err:
        return Screened(candidate, "invalid", str(err))
    try:
        executors = build_executors(cluster)
    except ConfigError as err:  # a pipeline of what it does not model is refused, not full
        why = "invalid" if err.field == "cluster.pipeline_parallel" else "memory"
        return Screened(candidate, why, str(err))
    if cluster.pipeline_parallel > 1:
        refused = pipeline_refusal(candidate, executors, median_prompt)
        if refused:
            return Screened(candidate, "invalid", refused)
    try:
        cfg = search.experiment([candidate.entry()], name=candidate.label)
    except ConfigError as err:
        return Screened(candidate, "invalid", str(err))
    bounds = latency_bounds(executors, median_prompt)
    if math.isinf(bounds.ttft_s) or math.isinf(bounds.tpot_s):
        return Screened(candidate, "memory", f"the median prompt ({median_prompt} tokens) does "
                        f"not fit the KV cache of one instance", bounds)
    assert cfg.slo is not None  # SearchExperiment requires one
    missed = bounds.violations(cfg.slo)
    if missed:
        return Screened(candidate, "slo_bound", "; ".join(missed), bounds)
    return Screened(candidate, "", "", bounds)


def pipeline_refusal(candidate: Candidate, executors: Sequence, median_prompt: int) -> str:
    """Why the candidate's policy cannot run on a pipeline ("" when it can): one request
    through it (a policy of static batches is refused at its first step)."""
    from policies.simulate import simulate

    trace = pd.DataFrame([(0.0, max(1, median_prompt), 2)],
                         columns=["arrival_s", "prompt_tokens", "output_tokens"])
    try:
        simulate(trace, candidate.policy, dict(candidate.params), executors)
    except ConfigError as err:
        return str(err)
    return ""


def prune(search: SearchExperiment, candidates: Sequence[Candidate],
          median_prompt: int) -> list[Screened]:
    """Every candidate screened, in order."""
    return [screen(search, c, median_prompt) for c in candidates]


def pruned_counts(screened: Sequence[Screened]) -> dict[str, int]:
    """How many were pruned for each reason (reasons with none left out)."""
    counts = {reason: sum(s.pruned == reason for s in screened) for reason in PRUNE_REASONS}
    return {reason: n for reason, n in counts.items() if n}
