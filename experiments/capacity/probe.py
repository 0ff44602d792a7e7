"""Probes of a capacity search: one simulation per (policy, rate, seed), run in rounds.

Every (policy, seed) pair has its own `RateSearch`. A round asks every unfinished search for its
next rates (the doubling lookahead fills idle workers when there are fewer searches than
`jobs`), simulates them in a process pool (experiments/sweep/pool.py) or in this process (jobs 1),
prints one line per finished probe, then records the outcomes in order: the rates and results
of every search are the same for any number of jobs.

A probe holds as many requests as experiments/capacity/probe_length.py's rule asks, is judged on its
measured requests (warm-up and drain excluded, sim/metrics/measured_slo.py) and checked for steady state
(sim/metrics/steady.py): it meets the SLO only when it is steady too. One that meets the SLO but is not
steady (its queue still filling when the arrivals stop) reruns with twice the requests, up to
`max_doublings` times. Its row keeps `steady`, `steady_reason`, `offered_rps`, `delivered_rps`,
`queue_growth_rps`, `measured_requests`, `probe_doublings`, the SLO metrics of its measured
requests (`slo_attainment`, `request_goodput`, `p90_ttft_s`, ...; with class SLOs each class's
`class.<name>.slo_attainment`) and the attainment of all its requests (`all_slo_attainment`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import pandas as pd

from experiments.capacity.bisect import RateSearch, SearchConfig
from experiments.capacity.classes import class_verdicts, own_class_slos, probe_slos
from experiments.capacity.probe_length import ProbeRule, probe_workload
from experiments.config.backend import build_executors
from experiments.config.experiment import ExperimentConfig
from experiments.sweep.pool import completed
from policies.simulate import simulate
from sim.cluster.frontend_run import frontend_kwargs
from sim.cluster.run_cost import run_cost_summary
from sim.cost.overhead import overhead_kwargs
from sim.engine.simulate import RunResult
from sim.engine.verdict import SloWatch, VerdictReached
from sim.metrics.class_metrics import class_labels
from sim.metrics.measured_slo import measured_latencies, measured_records, measured_run, \
    measured_violations
from sim.metrics.slo import SLO, slo_summary
from sim.metrics.steady import SteadyRule, measured_window, steady_summary
from sim.util.errors import ConfigError, TraceError

PROBE_KEYS = ("num_requests", "completed", "rejected", "failed", "num_length_capped",
              "request_throughput", "request_goodput", "slo_attainment", "p90_ttft_s",
              "p99_itl_s", "p99_tpot_s", "p99_e2e_s",
              "mean_normalized_latency_s", "usd_per_m_output_tokens",
              "j_per_output_token")  # metrics kept for every probe (SLO ones: measured; cost
# and energy over the whole probe, sim/cluster/run_cost.py)
STEADY_KEYS = ("offered_rps", "delivered_rps", "queue_growth_rps",
               "measured_requests")  # the steady-state check's figures kept for every probe
Key = tuple[int, int]  # (index of the policy entry, seed)
STOPPED = "stopped early (the SLO verdict was certain)"  # steady_reason of a stopped probe


@dataclass(frozen=True)
class ProbeSettings:
    """How every probe is built and judged."""

    steady: SteadyRule = field(default_factory=SteadyRule)  # measured window, steady check
    length: ProbeRule = field(default_factory=ProbeRule)  # requests a probe holds at least
    early_stop: bool = False  # stop a probe once it certainly misses the SLO (its row keeps
    # the verdict, not the metrics; sim/engine/verdict.py)

    def __post_init__(self) -> None:
        if not isinstance(self.early_stop, bool):
            raise ConfigError("early_stop", self.early_stop, "must be true or false")


def probe(cfg: ExperimentConfig, index: int, slo: SLO | None, base: pd.DataFrame | None,
          rate: float, seed: int, settings: ProbeSettings = ProbeSettings()) -> dict[str, Any]:
    """Simulate policy entry `index` at `rate` req/s with `seed`; its capacity_probes.csv row.
    It meets the SLO when it is steady and its measured requests (warm-up and drain excluded)
    meet the SLO (with class SLOs: every class its own). One that meets the SLO but is not
    steady reruns with twice the requests, up to `settings.length.max_doublings` times."""
    start = time.perf_counter()
    entry = cfg.policies[index]
    cluster = cfg.cluster_for(entry)
    replay = simulate
    if cluster.backend == "real":  # the torch engine, as experiments.run replays it
        from real.replay import replay
    limit = cfg.workload.max_concurrency  # closed loop, as the sweep runs it
    admission = cfg.admission_for(entry)  # admission control, as the sweep runs it
    loop = {**({} if limit is None else {"max_concurrency": limit}),
            **({} if admission is None else {"admission": admission})}
    row: dict[str, Any] = {}
    for doubling in range(settings.length.max_doublings + 1):
        executors = build_executors(cluster)
        kv_tokens = sum(int(e.kv_capacity_tokens) for e in executors)
        trace, note = probe_workload(cfg, base, rate, seed, entry, settings.length, kv_tokens,
                                     doubling)
        if len(trace) == 0:
            raise TraceError(entry.label, "the workload has no requests")
        if row and len(trace) <= row["num_requests"]:
            break  # it cannot be lengthened: the last verdict stands
        watch = slo_watch(cfg, index, slo, trace, settings, cluster.backend, limit)
        try:
            res = replay(trace, entry.name, entry.params, executors, seed=seed,
                         max_model_len=cluster.max_model_len, **overhead_kwargs(cluster),
                         **frontend_kwargs(cluster), **loop,
                         **({} if watch is None else {"watch": watch}))
        except VerdictReached as stop:
            row = stopped_row(stop, len(trace), note, doubling)
            break
        res.summary.update(run_cost_summary(cluster, res.records, res.instances,
                                            res.summary["duration_s"]))
        row = {**judge(cfg, index, slo, res, settings.steady), "probe_note": note,
               "probe_doublings": doubling}
        if row["steady"] or row["missed"]:
            break  # steady, or missing the SLO already: a longer probe changes nothing
    if not row["steady"] and not row["missed"]:
        row["missed"] = (f"not steady after {row['num_requests']} requests: "
                         f"{row['steady_reason']}")
    return {"label": entry.label, "policy": entry.name, "index": index, "seed": seed,
            "rate": rate, **row, "meets_slo": row["steady"] and not row["missed"],
            "wall_s": time.perf_counter() - start}


def slo_watch(cfg: ExperimentConfig, index: int, slo: SLO | None, trace: pd.DataFrame,
              settings: ProbeSettings, backend: str, limit: int | None) -> SloWatch | None:
    """The early stop of a probe (None when off): the simulator, an attainment-form SLO of
    the whole workload (no class SLOs), an open loop, and measured requests to judge."""
    if not settings.early_stop or backend != "sim" or limit is not None or slo is None \
            or slo.attainment is None or own_class_slos(cfg, index):
        return None
    arrivals = trace["arrival_s"].to_numpy(dtype=float)
    start, end = measured_window(arrivals, settings.steady)
    num = 0 if math.isnan(start) else int(((arrivals >= start) & (arrivals < end)).sum())
    if not num:
        return None
    ttft, e2e = slo.ttft_s, slo.e2e_s
    return SloWatch(start, end, num, float(slo.attainment), ttft, e2e,
                    check_s=ttft or e2e or 1.0)


def stopped_row(stop: VerdictReached, num_requests: int, note: str,
                doubling: int) -> dict[str, Any]:
    """The row of a probe stopped once it certainly missed: the verdict, no metrics."""
    nan = math.nan
    return {"missed": f"certain before the end: {stop.reason}", "steady": False,
            "steady_reason": STOPPED,
            **{k: nan for k in STEADY_KEYS}, **{k: nan for k in PROBE_KEYS},
            "num_requests": num_requests, "all_slo_attainment": nan, "probe_note": note,
            "probe_doublings": doubling}


def judge(cfg: ExperimentConfig, index: int, slo: SLO | None, res: RunResult,
          rule: SteadyRule) -> dict[str, Any]:
    """A probe's metrics: steady state, why the measured requests miss the SLO (`missed`,
    "" when they meet it; per class with class SLOs), and the all-requests attainment."""
    steady = steady_summary(res.records, rule)
    labels = class_labels(res.records)
    slos = probe_slos(cfg, index, () if labels is None else set(labels))
    rows, window = measured_records(res.records, rule)
    p99_itl = float(res.summary.get("p99_itl_s", math.nan))
    if slos is None:
        assert slo is not None
        run = measured_run(res.records, res.summary, slo, rule)
        missed, extra = measured_violations(run, slo), {}
        good, judged = run["num_good"], run["num_measured"]
        all_attainment = slo_summary(res.records, res.summary, slo)["slo_attainment"]
    else:
        extra, missed = class_verdicts(rows, window, slos, p99_itl)
        good, judged = extra.pop("num_good"), extra.pop("num_judged")
        all_attainment = math.nan
    summary = {**res.summary, **measured_latencies(rows), "p99_itl_s": p99_itl,
               "request_goodput": good / window if window > 0 else math.nan,
               "slo_attainment": good / judged if judged else math.nan}
    return {"missed": "; ".join(missed),
            "steady": steady["steady"] == 1.0,  # NaN (undetermined) is not steady
            "steady_reason": steady["steady_reason"],
            **{k: steady[k] for k in STEADY_KEYS},
            **{k: summary.get(k, math.nan) for k in PROBE_KEYS},
            "all_slo_attainment": all_attainment, **extra}


def probe_line(row: Mapping[str, Any]) -> str:
    """One progress line: 'probe vllm seed 0 @ 4 req/s, 4000 requests: delivered 3.98 req/s,
    attainment 0.93, goodput 3.7 req/s, p90 TTFT 0.12 s, ... -> pass'."""
    def num(key: str, fmt: str) -> str:
        value = row.get(key)
        return "-" if value is None or not math.isfinite(float(value)) else format(value, fmt)

    verdict = "pass" if row["meets_slo"] else f"FAIL ({row['missed']})"
    steady = "" if row["steady"] or row["steady_reason"] == STOPPED else "NOT STEADY, "
    doubled = row.get("probe_doublings") or 0
    size = f"{row['num_requests']} requests" + (f" (doubled {doubled}x)" if doubled else "")
    return (f"probe {row['label']} seed {row['seed']} @ {row['rate']:.4g} req/s, {size}: {steady}"
            f"delivered {num('delivered_rps', '.4g')} req/s, attainment "
            f"{num('slo_attainment', '.3f')}, goodput {num('request_goodput', '.3g')} req/s, "
            f"p90 TTFT {num('p90_ttft_s', '.3g')} s, p99 TPOT {num('p99_tpot_s', '.3g')} s, "
            f"p99 TBT {num('p99_itl_s', '.3g')} s -> {verdict} ({row['wall_s']:.1f} s wall)")


def probe_task(cfg: ExperimentConfig, rest: tuple) -> dict[str, Any]:
    """`probe(cfg, *rest)`: one Ray task (the config shipped once, by reference)."""
    return probe(cfg, *rest)


def probe_results(calls: Sequence[tuple], jobs: int,
                  use_ray: bool = False) -> Iterator[dict[str, Any]]:
    """The rows of `probe(*call)` for every call: as Ray tasks (`use_ray`, as they finish;
    experiments/sweep/ray_backend.py), in this process (jobs 1, in order) or in a pool (as they
    finish)."""
    if use_ray and calls:
        from experiments.sweep.ray_backend import ray_outputs

        return ray_outputs(probe_task, calls[0][0], [call[1:] for call in calls])
    if jobs <= 1 or len(calls) <= 1:
        return (probe(*call) for call in calls)
    return completed(probe, calls, min(jobs, len(calls)))


def run_searches(cfg: ExperimentConfig, slo: SLO | None, base: pd.DataFrame | None,
                 search: SearchConfig, jobs: int = 1, progress: bool = True,
                 on_round: Callable[[dict[Key, RateSearch], list[dict[str, Any]]], None]
                 | None = None,
                 settings: ProbeSettings = ProbeSettings(),
                 use_ray: bool = False) -> dict[Key, RateSearch]:
    """Every policy's search for every seed; `on_round(searches, rows)` after each round with
    the probe rows the searches used (in policy, seed, probe order). With `use_ray` the probes
    run as Ray tasks (a Ray cluster beyond one machine)."""
    searches = {(i, seed): RateSearch(search) for i in range(len(cfg.policies))
                for seed in cfg.seeds}
    while active := {key: s for key, s in searches.items() if not s.done}:
        ahead = max(1, jobs // len(active))
        asked = {key: s.next_rates(ahead) for key, s in active.items()}
        calls = [(cfg, i, slo, base, rate, seed, settings) for (i, seed), rates in asked.items()
                 for rate in rates]
        done: dict[tuple[int, int, float], dict[str, Any]] = {}
        for row in probe_results(calls, jobs, use_ray):
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
