"""Resumable, parallel sweeps: expand a config into runs, execute them, persist each at once.

Each run is identified by a stable hash of its resolved config (workload, cluster, policy and
parameters, rate, seed, caps, SLO). Workers (a local process pool, or Ray tasks on a cluster) only
simulate and return their results; the driver writes every finished run into its own directory
atomically (a temporary directory renamed into place), so an interrupted or crashed run never
corrupts another, and rerunning the sweep skips every run whose directory holds the same hash.
Failures are recorded with their error in OUT/failures.json and reported at the end.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import shutil
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pandas as pd
from tqdm import tqdm

from experiments.config import ExperimentConfig, PolicyEntry
from experiments.report import plain, run_id, summary_row, write_json, write_run
from experiments.workload import build_workload, load_base_trace, trace_path
from sim.errors import ConfigError, TraceError
from sim.simulate import RunResult


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep."""

    entry: PolicyEntry  # policy, label and parameters as configured
    resolved: Any  # the policy's validated Config dataclass
    rate: float | None  # req/s; None for a trace replayed as is
    seed: int  # workload and policy seed

    @property
    def name(self) -> str:
        return run_id(self.entry.label, self.rate, self.seed)


@dataclass
class RunOutput:
    """What a worker sends back: the run's results, or its error."""

    spec: RunSpec
    result: RunResult | None  # None when the run failed
    num_requests: int  # requests in the run's workload
    wall_s: float  # seconds the simulation took
    error: str | None = None  # "Type: message" of a failed run
    traceback: str | None = None


def expand(cfg: ExperimentConfig) -> list[RunSpec]:
    """Every (rate, seed, policy) of the config, in that nesting order."""
    resolved = [(e, e.resolve(f"policies[{i}]")) for i, e in enumerate(cfg.policies)]
    return [RunSpec(entry, res, rate, seed)
            for rate in cfg.rates() for seed in cfg.seeds for entry, res in resolved]


def run_identity(cfg: ExperimentConfig, spec: RunSpec) -> dict[str, Any]:
    """Everything that determines a run's results (and nothing that does not, like labels)."""
    workload = dataclasses.asdict(cfg.workload)
    if cfg.workload.trace is not None:
        workload["trace"]["resolved_path"] = trace_path(cfg.workload.trace)
    return plain({"workload": workload, "cluster": dataclasses.asdict(cfg.cluster_for(spec.entry)),
                  "policy": spec.entry.name, "params": dataclasses.asdict(spec.resolved),
                  "rate": spec.rate, "seed": spec.seed, "max_requests": cfg.max_requests,
                  "duration_s": cfg.duration_s, "slo": cfg.slo})


def run_hash(cfg: ExperimentConfig, spec: RunSpec) -> str:
    """A stable 16-hex-digit hash of the run's resolved config."""
    text = json.dumps(run_identity(cfg, spec), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def finished_row(out_dir: Path, cfg: ExperimentConfig, spec: RunSpec) -> dict | None:
    """The summary row of a run already on disk with the same hash, else None."""
    run_dir = out_dir / "runs" / spec.name
    try:
        config = json.loads((run_dir / "config.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if config.get("run", {}).get("hash") != run_hash(cfg, spec):
        return None
    summary = {k: (float("nan") if v is None else v) for k, v in summary.items()}
    return summary_row(spec.entry.label, spec.entry.name, spec.rate, spec.seed, summary)


# ---- the worker side ------------------------------------------------------------------------
_BASE_TRACES: dict[int, pd.DataFrame | None] = {}  # per-process cache of loaded base traces


def preload(cfg: ExperimentConfig) -> None:
    """Load (and so validate) the sweep's trace once, before any run; forked workers inherit it."""
    _BASE_TRACES.clear()
    _BASE_TRACES[id(cfg)] = load_base_trace(cfg)


def simulate_run(cfg: ExperimentConfig, spec: RunSpec,
                 on_done: Callable[[int], None] | None = None) -> RunOutput:
    """Build the run's workload and simulate it; errors come back as data, never raised."""
    start = time.perf_counter()
    num_requests = 0
    try:
        key = id(cfg)
        if key not in _BASE_TRACES:
            _BASE_TRACES.clear()
            _BASE_TRACES[key] = load_base_trace(cfg)
        trace = build_workload(cfg, _BASE_TRACES[key], spec.rate, spec.seed)
        num_requests = len(trace)
        if num_requests == 0:
            raise TraceError(spec.name, "the workload has no requests (check duration_s / "
                                        "max_requests)")
        result = _simulate(cfg, spec, trace, on_done)
        return RunOutput(spec, result, num_requests, time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - a failed run is recorded, the sweep goes on
        return RunOutput(spec, None, num_requests, time.perf_counter() - start,
                         f"{type(exc).__name__}: {exc}", traceback.format_exc())


def _simulate(cfg: ExperimentConfig, spec: RunSpec, trace: pd.DataFrame,
              on_done: Callable[[int], None] | None) -> RunResult:
    from sim.cluster import build_executors
    from sim.overhead import overhead_kwargs
    from sim.simulate import simulate
    from sim.slo import slo_summary

    cluster = cfg.cluster_for(spec.entry)
    replay = simulate
    if cluster.backend == "real":  # the torch engine; the clock advances by measured times
        from real.replay import replay
    result = replay(trace, spec.entry.name, spec.entry.params, build_executors(cluster),
                    seed=spec.seed, on_done=on_done, **overhead_kwargs(cluster))
    if cfg.slo is not None:
        result.summary.update(slo_summary(result.records, result.summary, cfg.slo))
    return result


# ---- the driver side ------------------------------------------------------------------------
def persist(out_dir: Path, cfg: ExperimentConfig, out: RunOutput,
            experiment: dict[str, Any]) -> dict:
    """Write a finished run atomically into OUT/runs/<name>/ and return its summary row."""
    assert out.result is not None
    spec = out.spec
    runs = out_dir / "runs"
    tmp = runs / f".{spec.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    write_run(tmp, out.result, {
        "experiment": experiment,
        "run": {"label": spec.entry.label, "policy": spec.entry.name, "hash": run_hash(cfg, spec),
                "params": dataclasses.asdict(spec.resolved), "rate": spec.rate, "seed": spec.seed,
                "num_requests": out.num_requests, "wall_s": out.wall_s,
                "cluster": dataclasses.asdict(cfg.cluster_for(spec.entry))}})
    final = runs / spec.name
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return summary_row(spec.entry.label, spec.entry.name, spec.rate, spec.seed,
                       out.result.summary)


def record_failures(out_dir: Path, failures: list[RunOutput]) -> None:
    """OUT/failures.json: every failed run with its error and traceback (removed when none)."""
    path = out_dir / "failures.json"
    if not failures:
        path.unlink(missing_ok=True)
        return
    write_json(path, [{"run": f.spec.name, "error": f.error, "traceback": f.traceback}
                      for f in failures])


def iter_outputs(cfg: ExperimentConfig, specs: list[RunSpec], jobs: int, use_ray: bool,
                 progress: bool) -> Iterator[RunOutput]:
    """Run `specs` inline, in a process pool, or on Ray; yield outputs as they complete."""
    if use_ray:
        from experiments.ray_backend import ray_outputs
        yield from ray_outputs(cfg, specs)
    elif jobs <= 1:
        for spec in specs:
            with tqdm(total=None, desc=spec.name, unit="req", leave=False,
                      disable=None if progress else True) as bar:
                yield simulate_run(cfg, spec, on_done=bar.update)
    else:
        yield from _pool_outputs(cfg, specs, jobs)


def _pool_outputs(cfg: ExperimentConfig, specs: list[RunSpec], jobs: int) -> Iterator[RunOutput]:
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        pending = {pool.submit(simulate_run, cfg, spec) for spec in specs}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield fut.result()


def check_jobs(jobs: int) -> None:
    if jobs < 1:
        raise ConfigError("--jobs", jobs, "must be >= 1")
