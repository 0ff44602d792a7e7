"""Run a sweep from a YAML config: every policy x request rate x seed, results written as they land.

    python -m experiments.run CONFIG [--set key.path=value ...] [--out DIR] [--list] [--no-progress]
    python -m experiments.run CONFIG --capacity    (capacity search instead, experiments/capacity.py)
    python -m experiments.run CONFIG --backend real (replay on the torch engine, real/)

Each run writes OUT/runs/<label>__rate<r>__seed<s>/ (records.parquet, steps.parquet,
instances.parquet, events.parquet, summary.json, config.json) and rewrites OUT/summary.csv and
OUT/summary.json the moment it finishes. OUT defaults to results/<config name>/.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Sequence

import yaml
from tqdm import tqdm

from experiments.config import ExperimentConfig, experiment_from_dict
from experiments.config_checks import rebase
from experiments.report import catalogue, format_table, run_line, write_json, write_summaries
from experiments.sweep import (check_jobs, expand, finished_row, iter_outputs, persist,
                               preload, record_failures)
from experiments.workload import trace_path
from sim.cluster import ClusterSpec, build_executors
from sim.errors import ConfigError, TraceError


# ---- config loading and --set overrides ---------------------------------------------------
def load_config(path: str | Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read a YAML config, apply `key.path=value` overrides, then resolve and validate it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError("config", str(path), f"not valid YAML: {exc}") from None
    raw = apply_overrides(raw if raw is not None else {}, overrides)
    return experiment_from_dict(raw, path.stem)


def apply_overrides(raw: Any, overrides: Sequence[str]) -> Any:
    """A copy of `raw` with each `a.b.0.c=value` (value parsed as YAML) assigned."""
    raw = copy.deepcopy(raw)
    for text in overrides:
        key_path, sep, value_text = text.partition("=")
        if not sep or not key_path.strip():
            raise ConfigError("--set", text, "expected key.path=value")
        try:
            value = yaml.safe_load(value_text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {key_path}", value_text, f"not valid YAML: {exc}") from None
        keys = re.sub(r"\[(\d+)\]", r".\1", key_path.strip()).split(".")
        node = raw
        for depth, key in enumerate(keys[:-1]):
            node = _child(node, key, ".".join(keys[: depth + 1]))
        _assign(node, keys[-1], value, key_path)
    return raw


def _index(node: list, key: str, where: str) -> int:
    if not key.isdigit() or int(key) >= len(node):
        raise ConfigError(f"--set {where}", key, f"not an index of a list of {len(node)}")
    return int(key)


def _child(node: Any, key: str, where: str) -> Any:
    """`node[key]`, creating an empty mapping for a missing or empty key of a mapping."""
    if isinstance(node, list):
        return node[_index(node, key, where)]
    if not isinstance(node, dict):
        raise ConfigError(f"--set {where}", node, "cannot descend into a non-mapping value")
    if node.get(key) is None:
        node[key] = {}
    return node[key]


def _assign(node: Any, key: str, value: Any, where: str) -> None:
    if isinstance(node, list):
        node[_index(node, key, where)] = value
    elif isinstance(node, dict):
        node[key] = value
    else:
        raise ConfigError(f"--set {where}", node, "cannot set a key of a non-mapping value")


# ---- the sweep ------------------------------------------------------------------------------
def check_cluster(spec: ClusterSpec, where: str = "cluster") -> None:
    """Build the executors once so that cost-model errors surface before any run."""
    try:
        if spec.backend == "real":  # building loads a model: check its options only
            from real.options import check_real_cluster
            check_real_cluster(spec)
        else:
            build_executors(spec)
    except ConfigError as err:
        raise rebase(where, err) from None


def run_sweep(cfg: ExperimentConfig, out_dir: Path, *, progress: bool = True, jobs: int = 1,
              use_ray: bool = False) -> list[dict]:
    """Run every (rate, seed, policy) not already finished; persist each run as it lands."""
    check_jobs(jobs)
    specs = expand(cfg)
    check_cluster(cfg.cluster)
    for i, entry in enumerate(cfg.policies):
        check_cluster(cfg.cluster_for(entry), f"policies[{i}].cluster")
    preload(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in (out_dir / "runs").glob(".*.tmp-*"):  # left by an interrupted sweep
        shutil.rmtree(stale, ignore_errors=True)
    experiment = experiment_record(cfg)
    write_json(out_dir / "config.json", experiment)
    rows: dict[str, dict] = {}
    todo = []
    for spec in specs:
        row = finished_row(out_dir, cfg, spec)
        if row is None:
            todo.append(spec)
        else:
            rows[spec.name] = row
    if rows:
        tqdm.write(f"{len(rows)} of {len(specs)} runs already finished: skipped")
    failures = []
    with tqdm(total=len(specs), initial=len(rows), desc=cfg.name, unit="run",
              disable=None if progress else True) as bar:
        for out in iter_outputs(cfg, todo, jobs, use_ray, progress):
            bar.update(1)
            if out.result is None:
                failures.append(out)
                tqdm.write(f"{out.spec.name}: FAILED: {out.error}")
                record_failures(out_dir, failures)
                continue
            row = persist(out_dir, cfg, out, experiment)
            rows[out.spec.name] = row
            write_summaries(out_dir, [rows[s.name] for s in specs if s.name in rows])
            tqdm.write(run_line(row, out.wall_s))
    record_failures(out_dir, failures)
    if failures:
        raise SweepFailures(failures)
    return [rows[s.name] for s in specs if s.name in rows]


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
    parser.add_argument("--capacity", action="store_true", help="search each policy's highest "
                        "rate meeting the config's slo: (see python -m experiments.capacity -h)")
    args = parser.parse_args(argv)
    if not args.list and args.config is None:
        parser.error("a CONFIG file is required (or --list)")
    if args.backend is not None:
        args.overrides.append(f"cluster.backend={args.backend}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        print(catalogue())
        return 0
    if args.capacity:
        from experiments.capacity import main as capacity_main
        return capacity_main([args.config, *(f"--set={o}" for o in args.overrides),
                              *([f"--out={args.out}"] if args.out else []),
                              *(["--no-progress"] if args.no_progress else [])])
    try:
        cfg = load_config(args.config, args.overrides)
        out_dir = Path(args.out) if args.out else Path("results") / cfg.name
        rows = run_sweep(cfg, out_dir, progress=not args.no_progress, jobs=args.jobs,
                         use_ray=args.ray)
    except (ConfigError, TraceError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SweepFailures as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; finished runs are already written", file=sys.stderr)
        return 130
    table = format_table(rows, [entry.label for entry in cfg.policies])
    (out_dir / "table.txt").write_text(table + "\n", encoding="utf-8")
    print(f"\n{cfg.name}: {len(rows)} runs -> {out_dir}\n{table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
