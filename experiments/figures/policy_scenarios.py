"""The published directions of docs/policies.md, as scenarios: a cluster, a workload at a Poisson
rate, the policies compared and an SLO each. experiments/figures/policies.py draws them on 1000
requests per run; tests/test_directions.py checks them on smaller workloads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from experiments.capacity.main import Capacity, SearchConfig, search_capacity
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.metrics.slo import SLO, meets_slo, slo_summary
from traces.synthetic import LENGTH_PRESETS, LengthDist, SyntheticConfig, synthetic_trace

Workload = Callable[[float, int, int], pd.DataFrame]  # (rate req/s, requests, seed) -> trace
LONG_PROMPTS = (LengthDist("lognormal", mean=2048.0, cv=0.5, min_tokens=256, max_tokens=4096),
                LengthDist("lognormal", mean=128.0, cv=0.8, max_tokens=1024))  # (prompt, output)


def preset_workload(prompt: LengthDist, output: LengthDist) -> Workload:
    """Poisson arrivals with the given length distributions."""
    def draw(rate: float, n: int, seed: int) -> pd.DataFrame:
        return synthetic_trace(SyntheticConfig(rate_per_s=rate, num_requests=n, prompt=prompt,
                                               output=output), seed)
    return draw


@dataclass(frozen=True)
class Scenario:
    """Policies compared on one cluster and workload, under one SLO."""

    title: str  # figure title
    cluster: ClusterSpec  # the served model and GPU
    workload: Workload  # the requests at a rate
    policies: Mapping[str, tuple[str, dict[str, Any]]]  # label -> (policy name, params)
    slo: SLO  # what the capacity search must meet
    rates: tuple[float, ...] = ()  # req/s swept in the figure
    executors: list = field(default_factory=list, compare=False)  # built once, shared

    def run(self, label: str, rate: float, num_requests: int, seed: int = 0) -> dict[str, float]:
        """One simulation's summary, with goodput and whether it met the SLO."""
        if not self.executors:
            self.executors.extend(build_executors(self.cluster))
        name, params = self.policies[label]
        res = simulate(self.workload(rate, num_requests, seed), name, params, self.executors,
                       seed=seed)
        return {**res.summary, **slo_summary(res.records, res.summary, self.slo)}

    def capacity(self, label: str, num_requests: int,
                 search: SearchConfig = SearchConfig(min_rate=0.125, rel_tol=0.05)) -> Capacity:
        """The highest rate meeting the SLO (bisection, see experiments/capacity/main.py)."""
        return search_capacity(
            lambda rate: meets_slo(self.run(label, rate, num_requests), self.slo), search)


ROOFLINE = {"kind": "roofline"}  # cost model these figures were drawn with (docs/fidelity.md)
ORCA_MAX = ("orca", {"max_batch_size": 256, "max_tokens": 2048})  # the vLLM paper's Orca (Max)
SHAREGPT = preset_workload(*LENGTH_PRESETS["sharegpt"])
PAGED = Scenario(  # the vLLM paper's setting: a 13B model on one A100-40GB, ShareGPT lengths
    "vLLM vs Orca (Max): llama-2-13b, A100-40GB, ShareGPT lengths",
    ClusterSpec(model="llama-2-13b", gpu="A100-40GB", cost_model=ROOFLINE), SHAREGPT,
    {"vllm_v0": ("vllm_v0", {}), "orca-max": ORCA_MAX}, SLO(normalized_latency_mean_s=0.05),
    (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0))
PAGED_80GB = Scenario(  # memory is plentiful: the gap narrows
    "vLLM vs Orca (Max): llama-2-7b, A100-80GB, ShareGPT lengths",
    ClusterSpec(model="llama-2-7b", gpu="A100-80GB", cost_model=ROOFLINE), SHAREGPT,
    {"vllm_v0": ("vllm_v0", {}), "orca-max": ORCA_MAX}, SLO(normalized_latency_mean_s=0.05),
    (2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 20.0))
CHUNKED = Scenario(
    "Sarathi-Serve vs vLLM: llama-2-7b, A100-80GB, prompts ~2k tokens",
    ClusterSpec(model="llama-2-7b", gpu="A100-80GB", cost_model=ROOFLINE),
    preset_workload(*LONG_PROMPTS),
    {"vllm_v0": ("vllm_v0", {}), "sarathi": ("sarathi", {"token_budget": 512})},
    SLO(ttft_p90_s=2.0, tbt_p99_s=0.1), (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0))
DYNAMIC = Scenario(
    "Dynamic vs static batching: llama-2-7b, A100-80GB, Alpaca lengths, batches of 8",
    ClusterSpec(model="llama-2-7b", gpu="A100-80GB", cost_model=ROOFLINE),
    preset_workload(*LENGTH_PRESETS["alpaca"]),
    {"static (full batches)": ("dynamic", {"batch_size": 8, "max_batch_delay_ms": None}),
     "dynamic (100 ms)": ("dynamic", {"batch_size": 8, "max_batch_delay_ms": 100.0}),
     "vanilla (greedy)": ("vanilla", {"batch_size": 8})},
    SLO(e2e_p99_s=10.0), (0.25, 0.5, 1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0))
QUANT_GPU, QUANT_MODEL, QUANT_SEQ = "V100-32GB", "llama-2-7b", (512, 512)  # prompt, output tokens


def quantized_run(weight_dtype: str, batch_size: int,
                  num_requests: int | None = None) -> dict[str, float]:
    """`vanilla` (OOM batches split) on requests of QUANT_SEQ tokens all waiting at t=0
    (default: four full batches)."""
    num_requests = 4 * batch_size if num_requests is None else num_requests
    cluster = ClusterSpec(model=QUANT_MODEL, gpu=QUANT_GPU, weight_dtype=weight_dtype,
                          cost_model=ROOFLINE)
    trace = pd.DataFrame({"arrival_s": np.zeros(num_requests),
                          "prompt_tokens": QUANT_SEQ[0], "output_tokens": QUANT_SEQ[1]})
    executors = build_executors(cluster)
    res = simulate(trace, "vanilla", {"batch_size": batch_size, "on_oom": "split"}, executors)
    return {**res.summary, "kv_capacity_tokens": executors[0].kv_capacity_tokens}
