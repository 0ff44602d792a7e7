"""Run a sweep from a YAML config: every policy x request rate x seed, results written as they land.

    python -m experiments.run CONFIG [--set key.path=value ...] [--out DIR] [--list] [--no-progress]
    python -m experiments.run CONFIG --capacity    (capacity search instead, experiments/capacity/main.py)
    python -m experiments.run CONFIG --backend real (replay on the torch engine, real/)
    python -m experiments.run --workload BENCH.json [--calibration FILE] [CONFIG]
                                            (a benchmark's own requests, experiments/bench/run.py)

Each run writes OUT/runs/<label>__rate<r>__seed<s>/ (records.parquet, steps.parquet,
instances.parquet, events.parquet, summary.json, config.json) and rewrites OUT/summary.csv and
OUT/summary.json the moment it finishes; both are rebuilt from the intact runs on disk when the
sweep starts. One sweep at a time holds OUT (OUT/.sweep.lock), and OUT holds one sweep's results
(a sweep of another name is refused). OUT defaults to results/<config name>/. docs/sweeps.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from tqdm import tqdm

from experiments.bench.flags import add_bench_flags, bench_overrides
from experiments.bench.run import add_bench_run_flags, comparison, load_run_config, uses_bench
from experiments.config.experiment import ExperimentConfig
from experiments.config.load import apply_overrides, load_config  # noqa: F401 (re-exported)
from experiments.config.preflight import check_cluster  # noqa: F401 (re-exported)
from experiments.files.exit_status import exit_status
from experiments.files.outdir import (ResultsWriteError, check_dir_name, prepare_out_dir,
                                remove_stale, runs_dir, temp_dir)
from experiments.files.outlock import locked
from experiments.report.classes import format_class_table
from experiments.report.results import (bad_fraction, catalogue, format_table, rebuild_summaries,
                                rejection_warnings, run_line, write_json, write_summaries,
                                write_text)
from experiments.report.steady import rule_line as steady_rule_line, steady_warnings
from experiments.sweep.runner import (RunSpec, check_finished, check_jobs, expand, iter_outputs,
                               persist, preload, record_failures)
from experiments.sweep.workload import trace_path
from sim.util.errors import ConfigError


# ---- the sweep ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Session:
    """A sweep that holds its results folder (experiments/files/outlock.py)."""

    out_dir: Path  # the resolved results folder, locked by this sweep
    specs: list[RunSpec]  # every run of the config, in order
    experiment: dict[str, Any]  # the resolved experiment, as in OUT/config.json
    steps_dir: Path  # a private hidden folder in OUT/runs that inline runs stream steps to


def run_sweep(cfg: ExperimentConfig, out_dir: Path, *, progress: bool = True, jobs: int = 1,
              use_ray: bool = False, source: str | Path | None = None) -> list[dict]:
    """Run every (rate, seed, policy) not already finished; persist each run as it lands.
    `source` (the config file) is recorded in OUT for the error a second sweep gets."""
    with sweep_session(cfg, out_dir, jobs, source) as session:
        return sweep_runs(cfg, session, progress=progress, jobs=jobs, use_ray=use_ray)


@contextmanager
def sweep_session(cfg: ExperimentConfig, out_dir: Path, jobs: int = 1,
                  source: str | Path | None = None) -> Iterator[Session]:
    """Check the config, then hold OUT for the block: locked (a second sweep is refused by
    name), refused when it holds another sweep's results, cleaned of what an interrupted sweep
    left, with OUT/config.json written."""
    check_jobs(jobs)
    specs = expand(cfg)
    check_cluster(cfg.cluster)
    for i, entry in enumerate(cfg.policies):
        check_cluster(cfg.cluster_for(entry), f"policies[{i}].cluster")
        check_dir_name(f"policies[{i}].label", entry.label)
    preload(cfg)
    out_dir = prepare_out_dir(out_dir)
    with locked(out_dir) as lock:
        lock.claim(cfg.name, source)  # refused when OUT holds another sweep's results
        remove_stale(out_dir)
        experiment = experiment_record(cfg)
        write_json(out_dir / "config.json", experiment)
        steps_dir = temp_dir(runs_dir(out_dir), "steps")
        try:
            yield Session(out_dir, specs, experiment, steps_dir)
        finally:
            shutil.rmtree(steps_dir, ignore_errors=True)
            lock.settle()  # the record keeps no pid, host or time once the sweep is done


def sweep_runs(cfg: ExperimentConfig, session: Session, *, progress: bool = True,
               jobs: int = 1, use_ray: bool = False) -> list[dict]:
    """Reuse the intact finished runs, rebuild the summaries from them, run the rest and
    persist each as it lands (the summaries rewritten each time)."""
    out_dir, specs = session.out_dir, session.specs
    rows, todo = resume(out_dir, cfg, specs)
    rebuild_summaries(out_dir, ordered(specs, rows))
    failures = []
    with tqdm(total=len(specs), initial=len(rows), desc=cfg.name, unit="run",
              disable=None if progress else True) as bar, \
            closing(iter_outputs(cfg, todo, jobs, use_ray, progress,
                                 session.steps_dir)) as outputs:
        for done, out in enumerate(outputs, start=len(rows) + 1):
            bar.update(1)
            count = f"[{done}/{len(specs)}]"  # the bar is off without a terminal
            if out.result is None:
                failures.append(out)
                log(f"{count} {out.spec.name}: FAILED: {out.error}")
                record_failures(out_dir, failures)
                continue
            rows[out.spec.name] = persist(out_dir, cfg, out, session.experiment)
            write_summaries(out_dir, ordered(specs, rows))
            log(f"{count} {run_line(rows[out.spec.name], out.wall_s)}")
    record_failures(out_dir, failures)
    if failures:
        raise SweepFailures(failures)
    return ordered(specs, rows)


def ordered(specs: list[RunSpec], rows: dict[str, dict]) -> list[dict]:
    """The rows of `specs` that have one, in spec order."""
    return [rows[s.name] for s in specs if s.name in rows]


def log(message: str) -> None:
    """One plain progress line on stdout, flushed at once: a pipe (CI, nohup, Ray, a notebook)
    is block-buffered, and the tqdm bar is off there. tqdm.write keeps a live bar intact."""
    tqdm.write(message)
    sys.stdout.flush()


def resume(out_dir: Path, cfg: ExperimentConfig,
           specs: list[RunSpec]) -> tuple[dict[str, dict], list[RunSpec]]:
    """({name: summary row} of the finished runs on disk that are reused, the runs to do);
    prints one line for each run directory that is not reused, saying why."""
    rows: dict[str, dict] = {}
    todo: list[RunSpec] = []
    for spec in specs:
        row, why = check_finished(out_dir, cfg, spec)
        if row is None:
            todo.append(spec)
            if why:
                log(f"{spec.name}: not reused: {why}")
        else:
            rows[spec.name] = row
    if rows:
        log(f"{len(rows)} of {len(specs)} runs already finished: skipped")
    return rows, todo


class SweepFailures(RuntimeError):
    """Some runs raised; the others finished and are on disk."""

    def __init__(self, failures: list) -> None:
        self.failures = failures
        lines = [f"  {f.spec.name}: {f.error}" for f in failures]
        super().__init__(f"{len(failures)} run(s) failed (details in failures.json):\n"
                         + "\n".join(lines))


def experiment_record(cfg: ExperimentConfig) -> dict[str, Any]:
    """The resolved experiment as a JSON-able dict (with the trace file's path)."""
    record = dataclasses.asdict(cfg)
    if cfg.workload.trace is not None:
        record["workload"]["trace"]["resolved_path"] = trace_path(cfg.workload.trace)
    return record


# ---- command line ---------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m experiments.run",
                                     description="Run a policy x rate x seed sweep.")
    parser.add_argument("config", nargs="?", help="YAML experiment config")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config field, e.g. "
                        "policies.0.params.batch_size=16 (value parsed as YAML); repeatable")
    parser.add_argument("--out", help="output directory (default: results/<config name>/)")
    parser.add_argument("--list", action="store_true",
                        help="list policies, models, GPUs and trace formats, then exit")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="runs in parallel in a local process pool (default 1)")
    parser.add_argument("--ray", action="store_true", help="run on Ray (RAY_ADDRESS or local)")
    parser.add_argument("--backend", choices=("sim", "real"), default=None,
                        help="override cluster.backend: sim (cost model) or real (torch engine)")
    parser.add_argument("--strict", nargs="?", type=float, const=0.0, default=None,
                        metavar="FRACTION", help="exit 1 when any run rejected or failed more "
                        "than FRACTION of its requests (default 0: any); results are still "
                        "written")
    parser.add_argument("--capacity", action="store_true", help="search each policy's highest "
                        "rate meeting the config's slo: (see python -m experiments.capacity -h; "
                        "its flags, e.g. --steady-tol or --min-rate, pass through)")
    vllm = parser.add_argument_group(
        "vLLM benchmark conventions", "each run also writes bench.json, the JSON of `vllm bench "
        "serve --save-result` (same keys, latencies in ms; experiments/bench/vllm_bench.py)")
    vllm.add_argument("--percentile-metrics", default=None, metavar="M,M",
                      help="metrics given mean/median/std/percentile keys: ttft,tpot,itl,e2el "
                      "(default: all four)")
    vllm.add_argument("--metric-percentiles", default=None, metavar="P,P",
                      help="percentiles of those metrics, e.g. 50,90,99 (the default)")
    vllm.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                      help="SLOs in ms for request_goodput (completed requests meeting all of "
                      "them per second), e.g. --goodput ttft:200 tpot:50 e2el:20000")
    add_bench_flags(vllm)  # --request-rate, --burstiness, ... (experiments/bench/flags.py)
    add_bench_run_flags(parser)  # --workload BENCH.json, --calibration FILE
    args, args.capacity_flags = parser.parse_known_args(argv)
    if args.capacity_flags and not args.capacity:
        parser.error(f"unrecognized arguments: {' '.join(args.capacity_flags)}")
    from experiments.bench.vllm_bench import parse_options
    try:
        args.bench = parse_options(args.percentile_metrics, args.metric_percentiles,
                                   args.goodput)
    except ConfigError as exc:
        parser.error(str(exc))
    if not args.list and args.config is None and args.workload is None:
        parser.error("a CONFIG file is required (or --list, or --workload BENCH.json)")
    if args.capacity and uses_bench(args):
        parser.error("--workload / --calibration: not with --capacity (put the benchmark in "
                     "the CONFIG: workload: {trace: {path: BENCH.json}})")
    if args.strict is not None and not 0 <= args.strict <= 1:
        parser.error(f"--strict={args.strict}: a fraction of requests in [0, 1]")
    if args.backend is not None:
        args.overrides.append(f"cluster.backend={args.backend}")
    try:  # vllm bench serve flags as overrides, after the --set ones
        config = None if args.list or args.workload else args.config  # --workload: bench_run
        args.overrides.extend(bench_overrides(args, config, args.overrides))
    except ConfigError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        print(catalogue())
        return 0
    if args.capacity:
        from experiments.capacity.main import main as capacity_main
        return capacity_main([args.config, *(f"--set={o}" for o in args.overrides),
                              *([f"--out={args.out}"] if args.out else []),
                              *(["--no-progress"] if args.no_progress else []),
                              f"--jobs={args.jobs}", *args.capacity_flags])
    return exit_status(lambda: sweep_command(args), failures=(SweepFailures,),
                       written="the runs finished before it are on disk",
                       interrupted="interrupted; finished runs are already written")


def sweep_command(args: argparse.Namespace) -> int:
    """The sweep the command line names: runs, table, warnings; the exit status."""
    cfg = load_run_config(args) if uses_bench(args) else load_config(args.config, args.overrides)
    out_dir = Path(args.out) if args.out else Path("results") / cfg.name
    with sweep_session(cfg, out_dir, args.jobs, args.config) as session:
        rows = sweep_runs(cfg, session, progress=not args.no_progress, jobs=args.jobs,
                          use_ray=args.ray)
        status = report(args, cfg, session.out_dir, rows)  # still holding OUT
        for line in comparison(cfg, session.out_dir, rows):  # a benchmark workload
            print(line)
        return status


def report(args: argparse.Namespace, cfg: ExperimentConfig, out_dir: Path,
           rows: list[dict]) -> int:
    """Every run's bench.json with this command's options, OUT/table.txt, the table and
    warnings printed; the exit status (1 when a file cannot be written, or by --strict)."""
    from experiments.bench.vllm_bench import rewrite_bench
    try:  # every run's bench.json with this command's --percentile-metrics/... (reused too)
        rows = rewrite_bench(out_dir, rows, args.bench)
        if args.bench.goodput:
            write_summaries(out_dir, rows)
        labels = [entry.label for entry in cfg.policies]
        table = format_table(rows, labels)
        classes = format_class_table(rows, labels)  # "" without request classes
        if classes:
            table = f"{table}\n\n{classes}"
        table = f"{table}\n{steady_rule_line()}"
        warnings = rejection_warnings(rows) + steady_warnings(rows)
        write_text(out_dir / "table.txt", "\n".join([table, *warnings]) + "\n")
    except ResultsWriteError as exc:
        print(f"error: {exc} (every run is on disk)", file=sys.stderr)
        return 1
    print(f"\n{cfg.name}: {len(rows)} runs -> {out_dir}\n{table}")
    for line in warnings:
        print(line, file=sys.stderr)
    return strict_status(rows, args.strict)


def strict_status(rows: Sequence[dict], threshold: float | None) -> int:
    """1 (with a message) when `--strict` is set and a run rejected or failed more than
    `threshold` of its requests; else 0."""
    if threshold is None:
        return 0
    over = [row for row in rows if bad_fraction(row) > threshold]
    for row in over:
        print(f"error: --strict={threshold:g}: {row['run']} rejected or failed "
              f"{bad_fraction(row):.1%} of its requests", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
