"""Probes of a capacity search: one simulation per (policy, rate, seed), run in rounds.

Every (policy, seed) pair has its own `RateSearch`. A round asks every unfinished search for its
next rates (the doubling lookahead fills idle workers when there are fewer searches than
`jobs`), simulates them in a process pool (experiments/pool.py) or in this process (jobs 1),
prints one line per finished probe, then records the outcomes in order: the rates and results
of every search are the same for any number of jobs.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import pandas as pd

from experiments.capacity_search import RateSearch, SearchConfig
from experiments.config import ExperimentConfig
from experiments.executors import build_executors
from experiments.pool import completed
from experiments.workload import build_workload
from policies.simulate import simulate
from sim.errors import TraceError
from sim.overhead import overhead_kwargs
from sim.slo import SLO, slo_summary, slo_violations

PROBE_KEYS = ("num_requests", "completed", "rejected", "failed", "num_length_capped",
              "request_throughput", "request_goodput", "slo_attainment", "p90_ttft_s",
              "p99_itl_s", "p99_tpot_s", "p99_e2e_s",
              "mean_normalized_latency_s")  # summary metrics kept for every probe
Key = tuple[int, int]  # (index of the policy entry, seed)


def probe(cfg: ExperimentConfig, index: int, slo: SLO, base: pd.DataFrame | None,
          rate: float, seed: int) -> dict[str, Any]:
    """Simulate policy entry `index` at `rate` req/s with `seed`; its capacity_probes.csv row."""
    start = time.perf_counter()
    entry = cfg.policies[index]
    cluster = cfg.cluster_for(entry)
    replay = simulate
    if cluster.backend == "real":  # the torch engine, as experiments.run replays it
        from real.replay import replay
    trace = build_workload(cfg, base, rate, seed, entry)
    if len(trace) == 0:
        raise TraceError(entry.label, "the workload has no requests")
    limit = cfg.workload.max_concurrency  # closed loop, as the sweep runs it
    admission = cfg.admission_for(entry)  # admission control, as the sweep runs it
    res = replay(trace, entry.name, entry.params, build_executors(cluster), seed=seed,
                 max_model_len=cluster.max_model_len, **overhead_kwargs(cluster),
                 **({} if limit is None else {"max_concurrency": limit}),
                 **({} if admission is None else {"admission": admission}))
    extra = slo_summary(res.records, res.summary, slo)
    summary = {**res.summary, **extra, "request_goodput": extra["goodput"]}
    missed = slo_violations(summary, slo)
    return {"label": entry.label, "policy": entry.name, "index": index, "seed": seed,
            "rate": rate, "meets_slo": not missed, "missed": "; ".join(missed),
            **{k: summary.get(k, math.nan) for k in PROBE_KEYS},
            "wall_s": time.perf_counter() - start}


def probe_line(row: Mapping[str, Any]) -> str:
    """One progress line: 'vllm seed 0 @ 4 req/s: attainment 0.93, goodput 3.7 req/s, p90
    TTFT 0.12 s, p99 TPOT 0.041 s -> pass'."""
    def num(key: str, fmt: str) -> str:
        value = row.get(key)
        return "-" if value is None or not math.isfinite(float(value)) else format(value, fmt)

    verdict = "pass" if row["meets_slo"] else f"FAIL ({row['missed']})"
    return (f"probe {row['label']} seed {row['seed']} @ {row['rate']:.4g} req/s: attainment "
            f"{num('slo_attainment', '.3f')}, goodput {num('request_goodput', '.3g')} req/s, "
            f"p90 TTFT {num('p90_ttft_s', '.3g')} s, p99 TPOT {num('p99_tpot_s', '.3g')} s, "
            f"p99 TBT {num('p99_itl_s', '.3g')} s -> {verdict} ({row['wall_s']:.1f} s wall)")


def _results(calls: Sequence[tuple], jobs: int) -> Iterator[dict[str, Any]]:
    if jobs <= 1 or len(calls) <= 1:
        return (probe(*call) for call in calls)
    return completed(probe, calls, min(jobs, len(calls)))


def run_searches(cfg: ExperimentConfig, slo: SLO, base: pd.DataFrame | None,
                 search: SearchConfig, jobs: int = 1, progress: bool = True,
                 on_round: Callable[[dict[Key, RateSearch], list[dict[str, Any]]], None]
                 | None = None) -> dict[Key, RateSearch]:
    """Every policy's search for every seed; `on_round(searches, rows)` after each round with
    the probe rows the searches used (in policy, seed, probe order)."""
    searches = {(i, seed): RateSearch(search) for i in range(len(cfg.policies))
                for seed in cfg.seeds}
    while active := {key: s for key, s in searches.items() if not s.done}:
        ahead = max(1, jobs // len(active))
        asked = {key: s.next_rates(ahead) for key, s in active.items()}
        calls = [(cfg, i, slo, base, rate, seed) for (i, seed), rates in asked.items()
                 for rate in rates]
        done: dict[tuple[int, int, float], dict[str, Any]] = {}
        for row in _results(calls, jobs):
            if progress:
                print(probe_line(row), flush=True)
            done[(row["index"], row["seed"], row["rate"])] = row
        used = []
        for key, rates in asked.items():
            rows = [done[(*key, rate)] for rate in rates]
            kept = searches[key].record([(r["rate"], r["meets_slo"]) for r in rows])
            used += rows[:len(kept)]
        if on_round is not None:
            on_round(searches, used)
    return searches
