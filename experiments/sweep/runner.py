"""Resumable, parallel sweeps: expand a config into runs, execute them, persist each at once.

Each run is identified by a stable hash of its resolved config (workload, cluster, policy and
parameters, rate, seed, caps, SLO), the trace file's content, the result schema version and the
simulator's version. Workers (a local process pool, or Ray tasks on a cluster) only simulate and
return their results; the driver writes every finished run into its own directory atomically (a
temporary directory renamed into place), so an interrupted or crashed run never corrupts another,
and rerunning the sweep skips every run whose directory holds the same hash and whose files open
(experiments/files/resume.py). Failures are recorded in OUT/failures.json and reported at the end.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pandas as pd
from tqdm import tqdm

from experiments.bench.vllm_bench import BenchOptions, write_bench
from experiments.config.classes import identity as classes_identity
from experiments.config.experiment import ExperimentConfig, PolicyEntry
from experiments.files.host_files import add_phases
from experiments.files.outdir import replace_dir, run_dir, temp_dir, writing
from experiments.files.resume import (RESULT_SCHEMA_VERSION, NotReusable, file_digest,
                                referenced_files, reusable_summary, simulator_version)
from experiments.report.results import (add_written_phases, plain, run_id, summary_row,
                                        table_rows, write_json, write_run)
from experiments.sweep.pool import completed
from experiments.sweep.summaries import add_summaries
from experiments.sweep.workload import WORKLOAD_NOTE, build_workload, load_base_trace, trace_path
from sim.engine.simulate import RunResult
from sim.metrics.summary import instance_settings
from sim.util.errors import ConfigError, TraceError

STREAMED_FILE = ".{}.{}-{}.parquet"  # <run>, <table>, <pid>: streamed, in the sweep's steps dir
STREAMED = ("steps", "records", "events")  # tables an inline run streams to files there


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
    trace_digest: str | None = None  # '<bytes>:<blake2b>' of the trace file the worker read


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
        workload["trace"]["content"] = file_digest(workload["trace"]["resolved_path"])
    cluster = dataclasses.asdict(cfg.cluster_for(spec.entry))
    cluster["files"] = referenced_files(cluster)
    return plain({"workload": workload, "cluster": cluster,
                  "policy": spec.entry.name, "params": dataclasses.asdict(spec.resolved),
                  "rate": spec.rate, "seed": spec.seed, "max_requests": cfg.max_requests,
                  "duration_s": cfg.duration_s, "slo": cfg.slo,
                  "result_schema": RESULT_SCHEMA_VERSION, "simulator": simulator_version(),
                  **classes_identity(cfg.classes_for(spec.entry),
                                     cfg.admission_for(spec.entry))})


def run_hash(cfg: ExperimentConfig, spec: RunSpec, identity: dict | None = None) -> str:
    """A stable 16-hex-digit hash of the run's identity (computed when not given)."""
    identity = run_identity(cfg, spec) if identity is None else identity
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_finished(out_dir: Path, cfg: ExperimentConfig, spec: RunSpec) -> tuple[dict | None, str]:
    """(summary row, "") of a run already on disk with the same hash whose files open;
    (None, why it is not reused) otherwise, the reason "" when no run directory exists."""
    path = run_dir(out_dir, spec.name)
    if not path.exists():
        return None, ""
    identity = run_identity(cfg, spec)
    try:
        summary = reusable_summary(path, run_hash(cfg, spec, identity), identity)
    except NotReusable as why:
        return None, str(why)
    summary = {k: (float("nan") if v is None else v) for k, v in summary.items()}
    return summary_row(spec.entry.label, spec.entry.name, spec.rate, spec.seed, summary), ""


def finished_row(out_dir: Path, cfg: ExperimentConfig, spec: RunSpec) -> dict | None:
    """The summary row of a reusable finished run on disk (check_finished), else None."""
    return check_finished(out_dir, cfg, spec)[0]


# ---- the worker side ------------------------------------------------------------------------
# per-process cache: id(cfg) -> (digest of the trace file as read, its requests)
_BASE_TRACES: dict[int, tuple[str | None, pd.DataFrame | None]] = {}


def preload(cfg: ExperimentConfig) -> None:
    """Load (and so validate) the sweep's trace once, before any run; forked workers inherit it."""
    _BASE_TRACES.clear()
    _BASE_TRACES[id(cfg)] = _load(cfg)


def _load(cfg: ExperimentConfig) -> tuple[str | None, pd.DataFrame | None]:
    """The trace file's digest (taken before reading it) and its requests; (None, None) when
    the workload is synthetic."""
    if cfg.workload.trace is None:
        return None, load_base_trace(cfg)
    digest = file_digest(trace_path(cfg.workload.trace))
    return digest, load_base_trace(cfg)


def simulate_run(cfg: ExperimentConfig, spec: RunSpec,
                 on_done: Callable[[int], None] | None = None,
                 steps_dir: Path | None = None) -> RunOutput:
    """Build the run's workload and simulate it; errors come back as data, never raised.
    With `steps_dir` (a directory the driver reads too) the run streams its steps, records and
    events to hidden parquet files there, which `persist` moves into the run's directory."""
    start = time.perf_counter()
    num_requests = 0
    digest = None
    paths = {} if steps_dir is None else {
        f"{table}_path": steps_dir / STREAMED_FILE.format(spec.name, table, os.getpid())
        for table in STREAMED}
    try:
        key = id(cfg)
        if key not in _BASE_TRACES:
            _BASE_TRACES.clear()
            _BASE_TRACES[key] = _load(cfg)
        digest, base = _BASE_TRACES[key]
        trace = build_workload(cfg, base, spec.rate, spec.seed, spec.entry)
        num_requests = len(trace)
        if num_requests == 0:
            raise TraceError(spec.name, "the workload has no requests (check duration_s / "
                                        "max_requests)")
        workload_s = time.perf_counter() - start
        result = _simulate(cfg, spec, trace, on_done, paths)
        add_phases(result.host_timing, workload=workload_s)
        if WORKLOAD_NOTE in trace.attrs:  # a cap that bound while generating the workload
            result.summary[WORKLOAD_NOTE] = trace.attrs[WORKLOAD_NOTE]
        return RunOutput(spec, result, num_requests, time.perf_counter() - start,
                         trace_digest=digest)
    except Exception as exc:  # noqa: BLE001 - a failed run is recorded, the sweep goes on
        for path in paths.values():
            path.unlink(missing_ok=True)
        return RunOutput(spec, None, num_requests, time.perf_counter() - start,
                         f"{type(exc).__name__}: {exc}", traceback.format_exc(), digest)


def _simulate(cfg: ExperimentConfig, spec: RunSpec, trace: pd.DataFrame,
              on_done: Callable[[int], None] | None,
              paths: dict[str, Path] | None = None) -> RunResult:
    from experiments.config.backend import build_executors
    from policies.simulate import simulate
    from sim.cluster.frontend_run import frontend_kwargs
    from sim.cost.overhead import overhead_kwargs

    cluster = cfg.cluster_for(spec.entry)
    replay = simulate
    if cluster.backend == "real":  # the torch engine; the clock advances by measured times
        from real.replay import replay
    closed = cfg.workload.max_concurrency  # passed only when set (open loop otherwise)
    loop = {} if closed is None else {"max_concurrency": closed}
    if paths and cluster.backend != "real":  # steps_path, records_path, events_path
        loop.update(paths)
    admission = cfg.admission_for(spec.entry)
    if admission is not None:  # passed only when set (checked: backend sim)
        loop["admission"] = admission
    result = replay(trace, spec.entry.name, spec.entry.params, build_executors(cluster),
                    seed=spec.seed, on_done=on_done, max_model_len=cluster.max_model_len,
                    **overhead_kwargs(cluster), **frontend_kwargs(cluster), **loop)
    add_summaries(cfg, spec.entry, cluster, result)
    return result


# ---- the driver side ------------------------------------------------------------------------
def persist(out_dir: Path, cfg: ExperimentConfig, out: RunOutput,
            experiment: dict[str, Any]) -> dict:
    """Write a finished run into a new hidden directory in OUT/runs, rename it onto
    OUT/runs/<name>/ and return its summary row."""
    assert out.result is not None
    spec = out.spec
    final = run_dir(out_dir, spec.name)
    identity = run_identity(cfg, spec)
    check_trace_unchanged(cfg, identity, out)
    tmp = temp_dir(final.parent, spec.name)  # new, exclusively created: nothing planted
    try:
        write_run(tmp, out.result, {
            "experiment": experiment,
            "run": {"label": spec.entry.label, "policy": spec.entry.name,
                    "hash": run_hash(cfg, spec, identity), "identity": identity,
                    "files": table_rows(out.result),
                    "params": dataclasses.asdict(spec.resolved),
                    "instance_settings": instance_settings(out.result.instances),
                    "rate": spec.rate,
                    "seed": spec.seed, "num_requests": out.num_requests,
                    "cluster": dataclasses.asdict(cfg.cluster_for(spec.entry))}},
                  {"wall_s": out.wall_s})  # measured: host_timing.json, not config.json
        start = time.perf_counter()
        write_bench(tmp, BenchOptions(), out.result.record_columns())  # vllm bench serve's JSON
        add_written_phases(tmp, bench=time.perf_counter() - start)
        replace_dir(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # left only when writing failed
    return summary_row(spec.entry.label, spec.entry.name, spec.rate, spec.seed,
                       out.result.summary)


def check_trace_unchanged(cfg: ExperimentConfig, identity: dict, out: RunOutput) -> None:
    """TraceError when the worker read a different trace file version than the one on disk."""
    expected = (identity["workload"].get("trace") or {}).get("content")
    if out.trace_digest is not None and out.trace_digest != expected:
        assert cfg.workload.trace is not None
        raise TraceError(trace_path(cfg.workload.trace),
                         f"changed while the sweep ran ({out.spec.name} read content "
                         f"{out.trace_digest}, the file now has {expected}); rerun the sweep")


def record_failures(out_dir: Path, failures: list[RunOutput]) -> None:
    """OUT/failures.json: every failed run with its error and traceback (removed when none)."""
    path = out_dir / "failures.json"
    with writing(path):
        if not failures:
            path.unlink(missing_ok=True)
            return
        write_json(path, [{"run": f.spec.name, "error": f.error, "traceback": f.traceback}
                          for f in failures])


def iter_outputs(cfg: ExperimentConfig, specs: list[RunSpec], jobs: int, use_ray: bool,
                 progress: bool, steps_dir: Path | None = None) -> Iterator[RunOutput]:
    """Run `specs` inline, in a process pool, or on Ray; yield outputs as they complete.
    Inline runs stream their steps to files in `steps_dir`; pool workers and Ray tasks still
    return frames (pickled back, as before)."""
    if use_ray:
        from experiments.sweep.ray_backend import ray_outputs
        yield from ray_outputs(simulate_run, cfg, specs)
    elif jobs <= 1:
        for spec in specs:
            with tqdm(total=None, desc=spec.name, unit="req", leave=False,
                      disable=None if progress else True) as bar:
                yield simulate_run(cfg, spec, on_done=bar.update, steps_dir=steps_dir)
    else:
        yield from completed(simulate_run, [(cfg, spec) for spec in specs], jobs)


def check_jobs(jobs: int) -> None:
    if jobs < 1:
        raise ConfigError("--jobs", jobs, "must be >= 1")
