"""Capacity search: each policy's highest request rate whose SLO (`slo:`) is met.

    python -m experiments.capacity CONFIG [--set key.path=value ...] [--out DIR] [--jobs N]
        [--min-rate R] [--max-rate R] [--rel-tol F] [--max-probes N]
        [--seed-aggregate min|mean] [--no-progress]
    python -m experiments.capacity --plot-only OUT
    python -m experiments.run CONFIG --capacity

The SLO is either DistServe's attainment form (`slo: {ttft_ms: 200, tpot_ms: 50, attainment:
0.9}`: at least 90% of ALL requests meet every per-request bound; rejected and failed requests
count as misses) or the percentile form (`slo: {ttft_p90_s: 2, tbt_p99_s: 0.2}`: every bound on
the run's percentiles holds and no request failed); see sim/slo.py. As Vidur-Search and
Sarathi-Serve's capacity experiments do, the workload is re-timed with Poisson arrivals at each
probed rate (synthetic workloads are drawn at it; traces need `retime: poisson` or `scale`), so
`request_rates` is not needed (and ignored when given). Each seed is searched on its own:
doubling from `--min-rate` until a probe fails, then bisection until the bracket is within
`--rel-tol`; a policy's capacity is the minimum over its seeds (`--seed-aggregate mean`: the
mean), with every seed's capacity, the min, mean and spread (max - min) reported. `--jobs N`
runs probes in N processes (results do not depend on N); each finished probe prints a line.

OUT/capacity.csv and capacity.json: one row per policy, rewritten as each finishes, with
`request_goodput` (req/s meeting every SLO) and `slo_attainment` averaged over the seeds at
each seed's capacity; OUT/capacity_probes.csv: every probe the searches used; OUT/capacity.png:
attainment and goodput against rate (experiments/capacity_plot.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from experiments.capacity_probe import Key, PROBE_KEYS, run_searches
from experiments.capacity_search import Capacity, RateSearch, SearchConfig, search_capacity
from experiments.checks import check_cluster
from experiments.config import ExperimentConfig, experiment_from_dict
from experiments.config_load import apply_overrides, load_yaml_file
from experiments.outdir import ResultsWriteError, prepare_out_dir
from experiments.report import write_csv, write_json
from experiments.workload import load_base_trace
from sim.errors import ConfigError, TraceError
from sim.slo import SLO

__all__ = ["Capacity", "CapacityExperiment", "PROBE_KEYS", "SearchConfig", "load_capacity_config",
           "main", "run_capacity", "search_capacity"]
SEED_AGGREGATES = ("min", "mean")  # how a policy's capacity is read from its seeds'


@dataclass(frozen=True)
class CapacityExperiment(ExperimentConfig):
    """An experiment config read for a capacity search: the search picks the rates, so
    `request_rates` may be left out (rates that are given are checked, then ignored)."""

    def _check_rates(self) -> None:
        if self.request_rates:
            super()._check_rates()


def load_capacity_config(path: str | Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """experiments.config_load.load_config, read as a CapacityExperiment."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    raw = apply_overrides(load_yaml_file(path) or {}, overrides)
    return experiment_from_dict(raw, path.stem, cls=CapacityExperiment)


def check_retimable(cfg: ExperimentConfig) -> SLO:
    """The config's SLO; ConfigError when it has none or its trace cannot be re-timed."""
    if cfg.slo is None:
        raise ConfigError("slo", None, "capacity search needs latency targets, e.g. slo: "
                                       "{ttft_ms: 200, tpot_ms: 50, attainment: 0.9}")
    if cfg.workload.trace is not None and cfg.workload.trace.retime == "none":
        raise ConfigError("workload.trace.retime", "none", "capacity search re-times the "
                                                           "trace: use poisson or scale")
    return cfg.slo


def run_capacity(cfg: ExperimentConfig, out_dir: Path, search: SearchConfig = SearchConfig(),
                 *, progress: bool = True, jobs: int = 1,
                 seed_aggregate: str = "min") -> list[dict[str, Any]]:
    """Search every policy's capacity for every seed; write the results as each policy
    finishes, and OUT/capacity.png at the end."""
    slo = check_retimable(cfg)
    if seed_aggregate not in SEED_AGGREGATES:
        raise ConfigError("--seed-aggregate", seed_aggregate, "must be min or mean")
    if jobs < 1:
        raise ConfigError("--jobs", jobs, "must be >= 1")
    for i, entry in enumerate(cfg.policies):
        entry.resolve(f"policies[{i}]")
        check_cluster(cfg.cluster_for(entry), f"policies[{i}].cluster")
    base = load_base_trace(cfg)
    out_dir = prepare_out_dir(out_dir)
    results: dict[int, dict[str, Any]] = {}
    probes: list[dict[str, Any]] = []

    def on_round(searches: dict[Key, RateSearch], rows: list[dict[str, Any]]) -> None:
        probes.extend(rows)
        for i, entry in enumerate(cfg.policies):
            mine = {seed: searches[(i, seed)] for seed in cfg.seeds}
            if i not in results and all(s.done for s in mine.values()):
                results[i] = policy_result(cfg, i, slo, mine, probes, seed_aggregate)
                if progress:
                    print(result_line(results[i]), flush=True)
        write_results(out_dir, [results[i] for i in sorted(results)], probes)

    run_searches(cfg, slo, base, search, jobs, progress, on_round)
    ordered = [results[i] for i in sorted(results)]
    write_plot(out_dir)
    return ordered


def policy_result(cfg: ExperimentConfig, index: int, slo: SLO, searches: dict[int, RateSearch],
                  probes: list[dict[str, Any]], aggregate: str) -> dict[str, Any]:
    """One policy's row of capacity.csv / capacity.json from its seeds' searches."""
    entry = cfg.policies[index]
    caps = {seed: s.result.capacity_rps for seed, s in searches.items()}
    values = list(caps.values())
    mine = [p for p in probes if p["index"] == index]
    at_capacity = [p for p in mine if p["meets_slo"] and p["rate"] == caps[p["seed"]]]

    def mean_at_capacity(key: str) -> float:
        return sum(p[key] for p in at_capacity) / len(at_capacity) if at_capacity else math.nan

    return {"label": entry.label, "policy": entry.name,
            "capacity_rps": min(values) if aggregate == "min" else sum(values) / len(values),
            "seed_aggregate": aggregate, "capacity_min_rps": min(values),
            "capacity_mean_rps": sum(values) / len(values),
            "capacity_spread_rps": max(values) - min(values),
            **{f"capacity_seed{seed}_rps": cap for seed, cap in caps.items()},
            "failing_rps": min(s.result.failing_rps for s in searches.values()),
            "request_goodput": mean_at_capacity("request_goodput"),
            "slo_attainment": mean_at_capacity("slo_attainment"),
            "num_probes": len(mine), "slo": slo.describe(),
            "max_rejected": max((p["rejected"] for p in mine), default=0),
            "max_length_capped": max((p["num_length_capped"] for p in mine), default=0),
            "wall_s": sum(p["wall_s"] for p in mine)}


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
    from experiments.capacity_plot import plot_results

    return plot_results(out_dir)


def result_line(row: dict[str, Any]) -> str:
    upper = "-" if math.isinf(row["failing_rps"]) else f"{row['failing_rps']:.3g}"
    line = (f"{row['label']}: capacity {row['capacity_rps']:.3g} req/s ({row['seed_aggregate']} "
            f"over seeds; spread {row['capacity_spread_rps']:.3g}; fails at {upper}; "
            f"{row['num_probes']} probes, {row['wall_s']:.1f} s simulating)")
    if row.get("max_rejected") or row.get("max_length_capped"):
        counted = "counted as misses" if "attainment" in row["slo"] else "not counted"
        line += (f"; warning: up to {row['max_rejected']} requests rejected and "
                 f"{row['max_length_capped']} cut per probe (rejections {counted} against the "
                 f"SLO; see capacity_probes.csv)")
    return line


def format_table(results: list[dict[str, Any]]) -> str:
    """The printed table: capacity (the chosen aggregate), every seed, min / mean / spread,
    goodput and attainment at capacity."""
    if not results:
        return "(no policies)"
    aggregate = results[0]["seed_aggregate"]
    frame = pd.DataFrame([{k: v for k, v in r.items() if k != "slo"} for r in results])
    seeds = [c for c in frame.columns if c.startswith("capacity_seed")]
    heads = {"label": "policy", "capacity_rps": f"capacity ({aggregate} over seeds)",
             **{c: c.removeprefix("capacity_").removesuffix("_rps") for c in seeds},
             "capacity_min_rps": "min", "capacity_mean_rps": "mean",
             "capacity_spread_rps": "spread", "failing_rps": "fails at",
             "request_goodput": "goodput", "slo_attainment": "attainment",
             "num_probes": "probes"}
    table = frame[list(heads)].rename(columns=heads)
    return "(rates and goodput in req/s)\n" + table.to_string(index=False, float_format="%.4g")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m experiments.capacity",
                                     description="Highest request rate meeting the SLO.")
    parser.add_argument("config", nargs="?", help="YAML experiment config with an slo: section")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config field (repeatable)")
    parser.add_argument("--out", help="output directory (default: results/<config name>/)")
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="probes in parallel in a local process pool (default 1; the "
                        "results do not depend on it)")
    parser.add_argument("--seed-aggregate", choices=SEED_AGGREGATES, default="min",
                        help="a policy's capacity from its seeds' (default min)")
    parser.add_argument("--plot-only", metavar="OUT", default=None,
                        help="redraw OUT/capacity.png from a finished search and exit")
    parser.add_argument("--no-progress", action="store_true",
                        help="print nothing per probe or policy")
    defaults = SearchConfig()
    for name, kind in (("min_rate", float), ("max_rate", float), ("rel_tol", float),
                       ("max_probes", int)):
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind,
                            default=getattr(defaults, name),
                            help=f"default {getattr(defaults, name)}")
    args = parser.parse_args(argv)
    if args.config is None and args.plot_only is None:
        parser.error("a CONFIG file is required (or --plot-only OUT)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.plot_only is not None:
            print(write_plot(Path(args.plot_only)))
            return 0
        cfg = load_capacity_config(args.config, args.overrides)
        search = SearchConfig(args.min_rate, args.max_rate, args.rel_tol, args.max_probes)
        out_dir = Path(args.out) if args.out else Path("results") / cfg.name
        results = run_capacity(cfg, out_dir, search, progress=not args.no_progress,
                               jobs=args.jobs, seed_aggregate=args.seed_aggregate)
    except (ConfigError, TraceError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ResultsWriteError as exc:
        print(f"error: {exc} (the policies finished before it are on disk)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; finished policies are already written", file=sys.stderr)
        return 130
    describe = cfg.slo.describe() if cfg.slo else {}
    print(f"\n{cfg.name}: capacity under {describe} -> {out_dir}\n{format_table(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
