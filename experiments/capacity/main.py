"""Capacity search: each policy's highest request rate whose SLO (`slo:`) is met.

    python -m experiments.capacity CONFIG [--set key.path=value ...] [--out DIR] [--jobs N]
        [--min-rate R] [--max-rate R] [--rel-tol F] [--max-probes N]
        [--seed-aggregate min|mean] [--no-progress]
        [--warmup-frac F] [--drain-frac F] [--steady-tol F] [--probe-s S] [--probe-kv X]
    python -m experiments.capacity --plot-only OUT
    python -m experiments.run CONFIG --capacity

The SLO is either DistServe's attainment form (`slo: {ttft_s: 0.2, tpot_s: 0.05, attainment:
0.9}`: at least 90% of ALL requests meet every per-request bound; rejected and failed requests
count as misses) or the percentile form (`slo: {ttft_p90_s: 2, tbt_p99_s: 0.2}`: every bound on
the run's percentiles holds and no request failed); see sim/metrics/slo.py. As Vidur-Search and
Sarathi-Serve's capacity experiments do, the workload is re-timed with Poisson arrivals at each
probed rate (synthetic workloads are drawn at it; traces need `retime: poisson` or `scale`), so
`request_rates` is not needed (and ignored when given). Each seed is searched on its own:
doubling from `--min-rate` until a probe fails, then bisection until the bracket is within
`--rel-tol`; a policy's capacity is the minimum over its seeds (`--seed-aggregate mean`: the
mean), with every seed's capacity, the min, mean and spread (max - min) reported. `--jobs N`
runs probes in N processes (results do not depend on N); each finished probe prints a line.

Steady state (sim/metrics/steady.py): a probe's SLO reads only its measured requests (those arriving in
the first `--warmup-frac` and the last `--drain-frac` of its arrival window are excluded), and a
probe whose delivered rate falls short of the offered one, or whose requests in the system keep
growing, by more than `--steady-tol` of the offered rate is not steady and FAILS the SLO (an
overloaded system is not capacity), with a warning. A probe holds the configured requests, or
more when needed to span `--probe-s` seconds and offer `--probe-kv` times the cluster's KV
capacity in tokens (experiments/capacity/probe_length.py). Both rules are printed and written with the
results. With class SLOs (`classes: {NAME: {slo: ...}}`) a rate passes only when every class
meets its own (experiments/capacity/classes.py).

OUT/capacity.csv and capacity.json: one row per policy, rewritten as each finishes, with
`request_goodput` (req/s meeting every SLO), `slo_attainment`, `usd_per_m_output_tokens` and
`j_per_output_token` (sim/cluster/run_cost.py) averaged over the seeds at each seed's capacity, the
delivered rate there and the rules; OUT/capacity_probes.csv: every
probe the searches used, with `steady` and `steady_reason`; OUT/capacity.png: attainment and
goodput against rate (experiments/capacity/plot.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from experiments.capacity.args import (SEED_AGGREGATES, parse_args, parse_rates,
                                       search_from_args, settings_from_args)
from experiments.capacity.bisect import Capacity, RateSearch, SearchConfig, search_capacity
from experiments.capacity.classes import check_class_slos, own_class_slos
from experiments.capacity.probe import STOPPED, Key, PROBE_KEYS, ProbeSettings, run_searches
from experiments.capacity.probe_length import ProbeRule
from experiments.capacity.rates import format_rates, run_rates
from experiments.capacity.table import format_table, result_line, unsteady_warnings
from experiments.config.experiment import ExperimentConfig, experiment_from_dict
from experiments.config.load import apply_overrides, load_yaml_file
from experiments.config.preflight import check_cluster
from experiments.files.exit_status import exit_status
from experiments.files.outdir import prepare_out_dir
from experiments.report.results import write_csv, write_json
from experiments.sweep.workload import load_base_trace
from sim.metrics.slo import SLO
from sim.metrics.steady import SteadyRule
from sim.util.errors import ConfigError

__all__ = ["Capacity", "CapacityExperiment", "PROBE_KEYS", "ProbeRule", "ProbeSettings",
           "SearchConfig", "SteadyRule", "format_table", "load_capacity_config", "main",
           "run_capacity", "search_capacity"]
@dataclass(frozen=True)
class CapacityExperiment(ExperimentConfig):
    """An experiment config read for a capacity search: the search picks the rates, so
    `request_rates` may be left out (rates that are given are checked, then ignored)."""

    def _check_rates(self) -> None:
        if self.request_rates:
            super()._check_rates()


def load_capacity_config(path: str | Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """experiments.config.load.load_config, read as a CapacityExperiment."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    raw = apply_overrides(load_yaml_file(path) or {}, overrides)
    return experiment_from_dict(raw, path.stem, cls=CapacityExperiment)


def check_retimable(cfg: ExperimentConfig) -> SLO | None:
    """The config's SLO (None when only classes have SLOs); ConfigError when there is none at
    all or its trace cannot be re-timed."""
    if cfg.slo is None and not any(own_class_slos(cfg, i) for i in range(len(cfg.policies))):
        raise ConfigError("slo", None, "capacity search needs latency targets, e.g. slo: "
                                       "{ttft_s: 0.2, tpot_s: 0.05, attainment: 0.9}")
    if cfg.workload.trace is not None and cfg.workload.trace.retime == "none":
        raise ConfigError("workload.trace.retime", "none", "capacity search re-times the "
                                                           "trace: use poisson or scale")
    return cfg.slo


def run_capacity(cfg: ExperimentConfig, out_dir: Path, search: SearchConfig = SearchConfig(),
                 *, progress: bool = True, jobs: int = 1, seed_aggregate: str = "min",
                 settings: ProbeSettings = ProbeSettings(),
                 use_ray: bool = False) -> list[dict[str, Any]]:
    """Search every policy's capacity for every seed (probes as Ray tasks with `use_ray`);
    write the results as each policy finishes, and OUT/capacity.png at the end. The rules (`rules(settings)`, and which class
    SLOs are checked) are printed first when `progress`."""
    if seed_aggregate not in SEED_AGGREGATES:
        raise ConfigError("--seed-aggregate", seed_aggregate, "must be min or mean")
    slo, base = prepare(cfg, search.min_rate, jobs, settings, progress)
    out_dir = prepare_out_dir(out_dir)
    results: dict[int, dict[str, Any]] = {}
    probes: list[dict[str, Any]] = []

    def on_round(searches: dict[Key, RateSearch], rows: list[dict[str, Any]]) -> None:
        probes.extend(rows)
        for i, entry in enumerate(cfg.policies):
            mine = {seed: searches[(i, seed)] for seed in cfg.seeds}
            if i not in results and all(s.done for s in mine.values()):
                results[i] = policy_result(cfg, i, slo, mine, probes, seed_aggregate)
                results[i].update(zip(("steady_rule", "probe_rule"), rules(settings)))
                if progress:
                    print(result_line(results[i]), flush=True)
        write_results(out_dir, [results[i] for i in sorted(results)], probes)

    run_searches(cfg, slo, base, search, jobs, progress, on_round, settings, use_ray)
    ordered = [results[i] for i in sorted(results)]
    write_plot(out_dir)
    return ordered


def prepare(cfg: ExperimentConfig, rate: float, jobs: int, settings: ProbeSettings,
            progress: bool) -> tuple[SLO | None, pd.DataFrame | None]:
    """Check everything a probe needs before any runs (ConfigError naming the field), load
    the trace once; print the rules and which class SLOs are checked when `progress`. The
    experiment's SLO and the trace's requests (None: synthetic)."""
    slo = check_retimable(cfg)
    if jobs < 1:
        raise ConfigError("--jobs", jobs, "must be >= 1")
    for i, entry in enumerate(cfg.policies):
        entry.resolve(f"policies[{i}]")
        check_cluster(cfg.cluster_for(entry), f"policies[{i}].cluster")
    base = load_base_trace(cfg)
    notes = check_class_slos(cfg, base, rate)
    if progress:
        print("\n".join([*rules(settings), *notes]), flush=True)
    return slo, base


def policy_result(cfg: ExperimentConfig, index: int, slo: SLO | None,
                  searches: dict[int, RateSearch], probes: list[dict[str, Any]],
                  aggregate: str) -> dict[str, Any]:
    """One policy's row of capacity.csv / capacity.json from its seeds' searches."""
    entry = cfg.policies[index]
    caps = {seed: s.result.capacity_rps for seed, s in searches.items()}
    values = list(caps.values())
    mine = [p for p in probes if p["index"] == index]
    at_capacity = [p for p in mine if p["meets_slo"] and p["rate"] == caps[p["seed"]]]
    unsteady = sorted((p for p in mine if not p["steady"] and p["steady_reason"] != STOPPED),
                      key=lambda p: p["rate"])  # a probe stopped early was not judged on it

    def mean_at_capacity(key: str) -> float:
        return sum(p[key] for p in at_capacity) / len(at_capacity) if at_capacity else math.nan

    return {"label": entry.label, "policy": entry.name,
            "capacity_rps": min(values) if aggregate == "min" else sum(values) / len(values),
            "delivered_rps": mean_at_capacity("delivered_rps"),
            "seed_aggregate": aggregate, "capacity_min_rps": min(values),
            "capacity_mean_rps": sum(values) / len(values),
            "capacity_spread_rps": max(values) - min(values),
            **{f"capacity_seed{seed}_rps": cap for seed, cap in caps.items()},
            "failing_rps": min(s.result.failing_rps for s in searches.values()),
            "request_goodput": mean_at_capacity("request_goodput"),
            "slo_attainment": mean_at_capacity("slo_attainment"),
            "usd_per_m_output_tokens": mean_at_capacity("usd_per_m_output_tokens"),
            "j_per_output_token": mean_at_capacity("j_per_output_token"),
            "probe_requests": mean_at_capacity("num_requests"),
            "steady_at_capacity": all(p["steady"] for p in at_capacity),
            "unsteady_probes": len(unsteady),
            "lowest_unsteady_rps": unsteady[0]["rate"] if unsteady else math.nan,
            "unsteady_reason": unsteady[0]["steady_reason"] if unsteady else "",
            "num_probes": len(mine), "slo": describe_slo(cfg, index, slo),
            "max_rejected": max((p["rejected"] for p in mine), default=0),
            "max_length_capped": max((p["num_length_capped"] for p in mine), default=0),
            "wall_s": sum(p["wall_s"] for p in mine)}


def describe_slo(cfg: ExperimentConfig, index: int, slo: SLO | None) -> dict[str, Any]:
    """The SLO a policy's probes were judged by: the experiment's, or with class SLOs
    {"classes": {name: bounds}} (each class's own, else the experiment's)."""
    own = own_class_slos(cfg, index)
    if not own:
        return {} if slo is None else slo.describe()
    classes = cfg.classes_for(cfg.policies[index])
    return {"classes": {name: (spec.slo or slo).describe() for name, spec in classes.items()
                        if (spec.slo or slo) is not None}}


def rules(settings: ProbeSettings) -> tuple[str, str]:
    """The steady-state rule and the probe-length rule, one line each."""
    return settings.steady.describe(), settings.length.describe()


def write_results(out_dir: Path, results: list[dict[str, Any]],
                  probes: list[dict[str, Any]]) -> None:
    """OUT/capacity.csv, OUT/capacity.json and OUT/capacity_probes.csv, rewritten whole and
    atomically (ResultsWriteError naming the file when the OS refuses)."""
    write_csv(out_dir / "capacity.csv",
              pd.DataFrame([{k: v for k, v in r.items() if k != "slo"} for r in results]))
    write_json(out_dir / "capacity.json", results)
    order = sorted(range(len(probes)), key=lambda j: (probes[j]["index"], probes[j]["seed"], j))
    write_csv(out_dir / "capacity_probes.csv",
              pd.DataFrame([{k: v for k, v in probes[j].items() if k != "index"}
                            for j in order]))


def write_plot(out_dir: Path) -> Path:
    """OUT/capacity.png from OUT/capacity_probes.csv and capacity.json."""
    from experiments.capacity.plot import plot_results

    return plot_results(out_dir)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return exit_status(lambda: capacity_command(args),
                       written="the policies finished before it are on disk",
                       interrupted="interrupted; finished policies are already written")


def capacity_command(args: argparse.Namespace) -> int:
    """The capacity search (or --rates table, or --plot-only) the command line names."""
    if args.plot_only is not None:
        print(write_plot(Path(args.plot_only)))
        return 0
    cfg = load_capacity_config(args.config, args.overrides)
    settings = settings_from_args(args)
    out_dir = Path(args.out) if args.out else Path("results") / cfg.name
    if args.rates is not None:
        rates = parse_rates(args.rates)
        slo, base = prepare(cfg, rates[0], args.jobs, settings, not args.no_progress)
        table = format_rates(run_rates(cfg, slo, base, rates, out_dir, settings,
                                       jobs=args.jobs, progress=not args.no_progress))
    else:
        search = search_from_args(args)
        results = run_capacity(cfg, out_dir, search, progress=not args.no_progress,
                               jobs=args.jobs, seed_aggregate=args.seed_aggregate,
                               settings=settings, use_ray=args.ray)
        table = format_table(results)
    describe = cfg.slo.describe() if cfg.slo else "the class SLOs"
    print(f"\n{cfg.name}: capacity under {describe} -> {out_dir}\n{table}")
    print("\n".join(rules(settings)))
    for line in [] if args.rates is not None else unsteady_warnings(results):
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
