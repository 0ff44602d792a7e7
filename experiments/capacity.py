"""Capacity search: each policy's highest request rate whose latency targets (`slo:`) are met.

    python -m experiments.capacity CONFIG [--set key.path=value ...] [--out DIR]
        [--min-rate R] [--max-rate R] [--rel-tol F] [--max-probes N] [--no-progress]
    python -m experiments.run CONFIG --capacity

As Vidur-Search and Sarathi-Serve's capacity experiments do, the workload is re-timed with
Poisson arrivals at each probed rate (synthetic workloads are drawn at the rate; trace workloads
need `retime: poisson` or `scale`), every seed must meet the SLO, and the rate is found by
doubling from `--min-rate` until a probe fails, then bisecting until the bracket is within
`--rel-tol`. Results go to OUT/capacity.csv and OUT/capacity.json (one row per policy, rewritten
as each policy finishes) and OUT/capacity_probes.csv (every simulated rate).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from experiments.checks import check_cluster
from experiments.config import ExperimentConfig, PolicyEntry
from experiments.config_load import load_config
from experiments.executors import build_executors
from experiments.outdir import ResultsWriteError, prepare_out_dir
from experiments.report import write_csv, write_json
from experiments.workload import build_workload, load_base_trace
from policies.simulate import simulate
from sim.errors import ConfigError, TraceError, check_positive
from sim.overhead import overhead_kwargs
from sim.slo import SLO, slo_summary, slo_violations

PROBE_KEYS = ("completed", "rejected", "failed", "num_length_capped",
              "request_throughput", "p90_ttft_s",
              "p99_itl_s", "p99_tpot_s", "p99_e2e_s", "mean_normalized_latency_s",
              "goodput", "slo_attainment")  # summary metrics kept for every probe


@dataclass(frozen=True)
class SearchConfig:
    """How the rate is searched."""

    min_rate: float = 0.25  # req/s: the first probe; doubled while the SLO holds
    max_rate: float = 1024.0  # req/s: the search stops here even if the SLO still holds
    rel_tol: float = 0.05  # stop when (first failing - last passing) <= rel_tol * first failing
    max_probes: int = 24  # simulated rates per policy (at most)

    def __post_init__(self) -> None:
        check_positive("min_rate", self.min_rate)
        if not (self.min_rate <= self.max_rate < math.inf):
            raise ConfigError("max_rate", self.max_rate, "must be finite and >= min_rate")
        if not 0 < self.rel_tol < 1:
            raise ConfigError("rel_tol", self.rel_tol, "must be in (0, 1)")
        check_positive("max_probes", self.max_probes)


@dataclass
class Capacity:
    """One policy's result: the highest passing rate and the bracket's failing end."""

    capacity_rps: float  # req/s: highest probed rate meeting the SLO (0 if none did)
    failing_rps: float  # req/s: lowest probed rate missing it (inf if none did)
    probes: list[tuple[float, bool]] = field(default_factory=list)  # (rate, met) in probe order


def search_capacity(meets: Callable[[float], bool], search: SearchConfig) -> Capacity:
    """Doubling then bisection over the rate for the highest one where `meets(rate)` holds."""
    out = Capacity(0.0, math.inf)

    def probe(rate: float) -> bool:
        ok = meets(rate)
        out.probes.append((rate, ok))
        if ok:
            out.capacity_rps = max(out.capacity_rps, rate)
        else:
            out.failing_rps = min(out.failing_rps, rate)
        return ok

    rate = search.min_rate
    while probe(rate) and rate < search.max_rate and len(out.probes) < search.max_probes:
        rate = min(2 * rate, search.max_rate)
    while (out.failing_rps < math.inf and len(out.probes) < search.max_probes
           and out.failing_rps - out.capacity_rps > search.rel_tol * out.failing_rps):
        probe((out.capacity_rps + out.failing_rps) / 2)
    return out


def probe_runs(cfg: ExperimentConfig, entry: PolicyEntry, slo: SLO, base: pd.DataFrame | None,
               rows: list[dict[str, Any]]) -> Callable[[float], bool]:
    """`meets(rate)`: simulate every seed at `rate`; True when all meet the SLO. Each run's
    metrics are appended to `rows`."""

    cluster = cfg.cluster_for(entry)
    replay = simulate
    if cluster.backend == "real":  # the torch engine, as experiments.run replays it
        from real.replay import replay

    def meets(rate: float) -> bool:
        for seed in cfg.seeds:
            trace = build_workload(cfg, base, rate, seed)
            if len(trace) == 0:
                raise TraceError(entry.label, "the workload has no requests")
            res = replay(trace, entry.name, entry.params, build_executors(cluster), seed=seed,
                         max_model_len=cluster.max_model_len, **overhead_kwargs(cluster))
            summary = {**res.summary, **slo_summary(res.records, res.summary, slo)}
            missed = slo_violations(summary, slo)
            if summary["failed"]:  # given up mid-run (OOM): never a rate the policy sustains
                missed.append(f"failed={summary['failed']} requests")
            rows.append({"label": entry.label, "policy": entry.name, "rate": rate,
                         "seed": seed, "meets_slo": not missed, "missed": "; ".join(missed),
                         **{k: summary.get(k, math.nan) for k in PROBE_KEYS}})
            if missed:
                return False
        return True

    return meets


def check_retimable(cfg: ExperimentConfig) -> SLO:
    """The config's SLO; ConfigError when it has none or its trace cannot be re-timed."""
    if cfg.slo is None:
        raise ConfigError("slo", None, "capacity search needs latency targets, e.g. "
                                       "slo: {ttft_p90_s: 2.0, tbt_p99_s: 0.2}")
    if cfg.workload.trace is not None and cfg.workload.trace.retime == "none":
        raise ConfigError("workload.trace.retime", "none", "capacity search re-times the "
                                                           "trace: use poisson or scale")
    return cfg.slo


def run_capacity(cfg: ExperimentConfig, out_dir: Path, search: SearchConfig = SearchConfig(),
                 *, progress: bool = True) -> list[dict[str, Any]]:
    """Search every policy's capacity; write the results as each policy finishes."""
    slo = check_retimable(cfg)
    for i, entry in enumerate(cfg.policies):
        entry.resolve(f"policies[{i}]")
        check_cluster(cfg.cluster_for(entry), f"policies[{i}].cluster")
    base = load_base_trace(cfg)
    out_dir = prepare_out_dir(out_dir)
    results: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []
    for entry in cfg.policies:
        start = time.perf_counter()
        found = search_capacity(probe_runs(cfg, entry, slo, base, probes), search)
        mine = [p for p in probes if p["label"] == entry.label]
        results.append({"label": entry.label, "policy": entry.name,
                        "capacity_rps": found.capacity_rps, "failing_rps": found.failing_rps,
                        "num_probes": len(found.probes), "slo": slo.bounds(),
                        "max_rejected": max((p["rejected"] for p in mine), default=0),
                        "max_length_capped": max((p["num_length_capped"] for p in mine),
                                                 default=0),
                        "wall_s": time.perf_counter() - start})
        write_results(out_dir, results, probes)
        if progress:
            print(result_line(results[-1]), flush=True)
    return results


def write_results(out_dir: Path, results: list[dict[str, Any]],
                  probes: list[dict[str, Any]]) -> None:
    """OUT/capacity.csv, OUT/capacity.json and OUT/capacity_probes.csv, rewritten whole and
    atomically (ResultsWriteError naming the file when the OS refuses)."""
    write_csv(out_dir / "capacity.csv",
              pd.DataFrame([{k: v for k, v in r.items() if k != "slo"} for r in results]))
    write_json(out_dir / "capacity.json", results)
    write_csv(out_dir / "capacity_probes.csv", pd.DataFrame(probes))


def result_line(row: dict[str, Any]) -> str:
    upper = "-" if math.isinf(row["failing_rps"]) else f"{row['failing_rps']:.3g}"
    line = (f"{row['label']}: capacity {row['capacity_rps']:.3g} req/s (fails at {upper}; "
            f"{row['num_probes']} probes, {row['wall_s']:.1f} s wall)")
    if row.get("max_rejected") or row.get("max_length_capped"):
        line += (f"; warning: up to {row['max_rejected']} requests rejected and "
                 f"{row['max_length_capped']} cut per probe (not counted against the SLO; see "
                 f"capacity_probes.csv)")
    return line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m experiments.capacity",
                                     description="Highest request rate meeting the SLO.")
    parser.add_argument("config", help="YAML experiment config with an slo: section")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config field (repeatable)")
    parser.add_argument("--out", help="output directory (default: results/<config name>/)")
    parser.add_argument("--no-progress", action="store_true", help="print nothing per policy")
    defaults = SearchConfig()
    for name, kind in (("min_rate", float), ("max_rate", float), ("rel_tol", float),
                       ("max_probes", int)):
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind,
                            default=getattr(defaults, name),
                            help=f"default {getattr(defaults, name)}")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        search = SearchConfig(args.min_rate, args.max_rate, args.rel_tol, args.max_probes)
        out_dir = Path(args.out) if args.out else Path("results") / cfg.name
        results = run_capacity(cfg, out_dir, search, progress=not args.no_progress)
    except (ConfigError, TraceError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ResultsWriteError as exc:
        print(f"error: {exc} (the policies finished before it are on disk)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; finished policies are already written", file=sys.stderr)
        return 130
    table = pd.DataFrame(results)[["label", "capacity_rps", "failing_rps", "num_probes"]]
    print(f"\n{cfg.name}: capacity under {cfg.slo.bounds() if cfg.slo else {}} -> "
          f"{out_dir}\n{table.to_string(index=False)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
