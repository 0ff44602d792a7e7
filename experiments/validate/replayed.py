"""Check a calibration against real replays recorded earlier, on a machine without a GPU.

    python -m experiments.validate.replayed CONFIG REPLAYED_DIR --calibration FILE [--out DIR]
        [--set key=value ...]

REPLAYED_DIR is the OUT of an earlier `python -m experiments.validate` (or the GPU check's
OUT/validate): its validation.json names the engine's KV capacity and block size, and each
runs/<label>__real/ folder holds the replay's summary, records, steps and engine_steps.parquet.
CONFIG (with the same --set overrides) rebuilds the same trace slice and policies. Every policy
of the config with a recorded replay is simulated with each calibrated model of
`validate.kinds` and compared exactly as `experiments.validate.main` compares a fresh replay; the
files go to --out (default results/validate/<name>_replayed/). A recorded replay of another
request count than the config's slice is refused, naming both.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from experiments.config.experiment import ExperimentConfig, PolicyEntry
from experiments.files.exit_status import exit_status
from experiments.validate.compare import (Collected, EngineInfo, RealReplay, compare_replay,
                                          write_validation)
from experiments.validate.main import (ValidateOptions, finish, load_validation_config,
                                  policy_entries, validation_trace)
from sim.util.errors import ConfigError


def recorded_engine(replayed: Path, calibration: Path) -> EngineInfo:
    """The engine of the recorded validation (its validation.json), with the context limit
    of the calibration's model."""
    from sim.measured.calibrated import load_calibrated_executor
    from sim.util.jsonfile import read_json_object

    summary = read_json_object(replayed / "validation.json", "REPLAYED_DIR", "validation")
    for key in ("kv_capacity_tokens", "block_size"):
        if not isinstance(summary.get(key), int) or summary[key] <= 0:
            raise ConfigError(f"REPLAYED_DIR/validation.json: {key}", summary.get(key),
                              "a positive integer (written by experiments.validate.main)")
    limit = load_calibrated_executor(calibration, None, summary["kv_capacity_tokens"],
                                     summary["block_size"]).max_model_len
    return EngineInfo(str(summary.get("engine", "?")), str(summary.get("attention_backend", "?")),
                      summary["kv_capacity_tokens"], summary["block_size"], int(limit))


def recorded_replay(run_dir: Path, entry: PolicyEntry, num_requests: int) -> RealReplay:
    """One policy's recorded replay, checked against the config's slice."""
    from real.step_log import ENGINE_STEPS, read_engine_steps

    records = pd.read_parquet(run_dir / "records.parquet")
    if len(records) != num_requests:
        raise ConfigError(f"{run_dir}/records.parquet", len(records),
                          f"requests recorded; the config's slice has {num_requests}")
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    timing = run_dir / "host_timing.json"
    wall = json.loads(timing.read_text(encoding="utf-8")).get("wall_s", 0.0) \
        if timing.is_file() else 0.0
    return RealReplay(entry.label, entry.name, entry.params, summary, records,
                      pd.read_parquet(run_dir / "steps.parquet"),
                      read_engine_steps(run_dir / ENGINE_STEPS, run_dir.name), (),
                      float(wall or 0.0))


def run_replayed(cfg: ExperimentConfig, opts: ValidateOptions, replayed: Path, out: Path,
                 calibration: Path) -> dict[str, Any]:
    """The validation of `calibration` on the recorded replays; writes OUT."""
    start = time.perf_counter()
    if not (replayed / "runs").is_dir():
        raise FileNotFoundError(f"REPLAYED_DIR={str(replayed)!r}: no runs/ folder (the OUT of "
                                f"python -m experiments.validate)")
    engine = recorded_engine(replayed, calibration)
    trace = validation_trace(cfg, opts)
    out.mkdir(parents=True, exist_ok=True)
    got = Collected()
    for entry in policy_entries(cfg, opts):
        run_dir = replayed / "runs" / f"{entry.label}__real"
        if not run_dir.is_dir():
            got.failures[entry.label] = f"no recorded replay: {run_dir}"
            print(f"{entry.label}: {got.failures[entry.label]}", file=sys.stderr)
            continue
        real = recorded_replay(run_dir, entry, len(trace))
        got.add(compare_replay(real, trace, engine, calibration, opts.kinds, cfg.seeds[0], out))
    return write_validation(cfg.name, engine, len(trace), calibration, got, out, start,
                            {"replayed_from": str(replayed)})


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.validate.replayed",
                                description="Check a calibration on recorded real replays.")
    p.add_argument("config", help="the YAML config the replays were validated with")
    p.add_argument("replayed", help="OUT of an earlier experiments.validate.main run")
    p.add_argument("--calibration", required=True, help="calibration file to check")
    p.add_argument("--out", help="output directory (default results/validate/<name>_replayed/)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    return exit_status(lambda: replayed_command(args))


def replayed_command(args: argparse.Namespace) -> int:
    """The check the command line names; its report and exit status."""
    cfg, opts = load_validation_config(args.config, args.overrides)
    out = Path(args.out) if args.out else Path("results") / "validate" / f"{cfg.name}_replayed"
    return finish(run_replayed(cfg, opts, Path(args.replayed), out, Path(args.calibration)), out)


if __name__ == "__main__":
    sys.exit(main())
