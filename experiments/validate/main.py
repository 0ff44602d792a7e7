"""Validate the calibrated simulator against the real engine on the same trace slice and policies.

    python -m experiments.validate CONFIG [--out DIR] [--calibration FILE] [--set key=value ...]

CONFIG is an experiment config (the format of experiments/run.py) whose cluster describes the
real engine (`backend: real`, options under `real:`), plus a `validate:` section:

    validate:
      clip_prompt_tokens: 256      # cap each request's prompt (short CPU runs); null: no cap
      clip_output_tokens: 32       # cap each request's outputs; null: no cap
      profile: {quick: true, reps: 3}   # grid timed on the same engine before the runs
      calibration: null            # an existing calibration file instead (skips profiling)
      kinds: [roofline, learned, engine]   # calibrated models to validate
      all_policies: false          # also run every other registered policy (default params)

For each policy the trace is replayed on the real engine (clock advanced by measured step times)
and simulated with each calibrated model at the engine's KV capacity and block size. OUT (default
results/validate/<name>/) gets profile.csv/.json, calibration.json (+ .learned.json),
runs/<label>__{real,roofline,learned,engine}/ (real runs also hold engine_steps.parquet: every
Step as the engine ran it, for `python -m real.calibrate --steps`), metric_errors.csv,
step_errors.csv, validation.json, step_scatter.png (simulated vs measured step time) and
latency_cdf.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from experiments.config.checks import mapping
from experiments.config.experiment import ExperimentConfig, PolicyEntry, experiment_from_dict
from experiments.config.load import load_yaml_file
from experiments.files.exit_status import exit_status
from experiments.files.outdir import writing
from experiments.report.results import write_run
from experiments.run import apply_overrides
from experiments.sweep.workload import build_workload, load_base_trace
from experiments.validate.compare import (Collected, EngineInfo, RealReplay, compare_replay,
                                          write_validation)
from sim.util.errors import ConfigError, TraceError, check_positive
from sim.util.field_types import check_fields
from sim.util.schema import build

KINDS = ("roofline", "learned", "engine")


@dataclass(frozen=True)
class ValidateOptions:
    """The `validate:` section of a config."""

    clip_prompt_tokens: int | None = None  # tokens, cap on each prompt (None: no cap)
    clip_output_tokens: int | None = None  # tokens, cap on each request's outputs
    profile: dict[str, Any] = field(default_factory=dict)  # {quick: bool, reps: int}
    calibration: str | None = None  # existing calibration file (skips profiling)
    kinds: tuple[str, ...] = KINDS  # calibrated models to compare
    all_policies: bool = False  # add every registered policy not listed, default params

    def __post_init__(self) -> None:
        for name in ("clip_prompt_tokens", "clip_output_tokens"):
            if getattr(self, name) is not None:
                check_positive(f"validate.{name}", getattr(self, name))
        unknown = set(self.profile) - {"quick", "reps"}
        if unknown:
            raise ConfigError("validate.profile", dict(self.profile), "known keys: quick, reps")
        check_fields(ProfileOptions, "validate.profile", self.profile)
        if "reps" in self.profile:
            check_positive("validate.profile.reps", self.profile["reps"])
        if not self.kinds:
            raise ConfigError("validate.kinds", list(self.kinds),
                              f"list at least one of {', '.join(KINDS)}")
        for kind in self.kinds:
            if kind not in KINDS:
                raise ConfigError("validate.kinds", kind, f"one of {', '.join(KINDS)}")


@dataclass(frozen=True)
class ProfileOptions:
    """The types of `validate.profile` (the profiling run's options)."""

    quick: bool = False  # the small grid
    reps: int = 3  # timed runs per shape


def load_validation_config(path: str | Path, overrides: Sequence[str] = ()
                           ) -> tuple[ExperimentConfig, ValidateOptions]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    raw = apply_overrides(load_yaml_file(path) or {}, overrides)
    raw = mapping("config", raw)
    section = mapping("validate", raw.pop("validate", None))
    if isinstance(section.get("kinds"), list):
        section["kinds"] = tuple(section["kinds"])
    options = build(ValidateOptions, "validate", section)  # keys and types checked, named
    return experiment_from_dict(raw, path.stem), options


def validation_trace(cfg: ExperimentConfig, opts: ValidateOptions) -> pd.DataFrame:
    """The config's workload (first rate and seed), prompts and outputs clipped."""
    trace = build_workload(cfg, load_base_trace(cfg), cfg.rates()[0], cfg.seeds[0])
    if len(trace) == 0:
        raise TraceError(cfg.name, "the workload has no requests")
    trace = trace.copy()
    if opts.clip_prompt_tokens:
        trace["prompt_tokens"] = trace["prompt_tokens"].clip(upper=opts.clip_prompt_tokens)
    if opts.clip_output_tokens:
        trace["output_tokens"] = trace["output_tokens"].clip(upper=opts.clip_output_tokens)
    return trace


def policy_entries(cfg: ExperimentConfig, opts: ValidateOptions) -> list[PolicyEntry]:
    entries = list(cfg.policies)
    if opts.all_policies:
        from policies.registry import policy_names

        listed = {e.name for e in entries}
        entries += [PolicyEntry(name, name, _real_defaults(name)) for name in policy_names()
                    if name not in listed]
    return entries


def _real_defaults(name: str) -> dict[str, Any]:
    """Default params a policy can run with on the real engine, whose KV is per request:
    prefix caching (on by default in vllm, as in vLLM) is turned off."""
    from policies.registry import get_policy

    fields = {f.name for f in dataclasses.fields(get_policy(name).Config)}
    return {"enable_prefix_caching": False} if "enable_prefix_caching" in fields else {}


def calibrate_engine(executor: Any, opts: ValidateOptions, out: Path) -> Path:
    """Profile the engine and fit both models; returns the calibration file."""
    from real.calibrate import calibrate_file
    from real.profile import profile_executor, profile_meta, write_profile

    frame = profile_executor(executor, bool(opts.profile.get("quick", False)),
                             int(opts.profile.get("reps", 3)))
    csv = write_profile(frame, profile_meta(executor), out / "profile.csv")
    calibrate_file(csv, out / "calibration.json", learned="learned" in opts.kinds)
    return out / "calibration.json"


def validate_policy(entry: PolicyEntry, trace: pd.DataFrame, executor: Any, calibration: Path,
                    opts: ValidateOptions, seed: int, out: Path) -> dict[str, Any]:
    """Replay one policy on the engine and simulate it with each calibrated model."""
    from real.replay import replay

    seen = tuple(executor.shapes.seen)  # shapes the engine had planned before this replay
    start = time.perf_counter()
    real = replay(trace, entry.name, entry.params, [executor], seed=seed)
    wall = time.perf_counter() - start
    step_log = list(executor.step_log or [])
    run_dir = out / "runs" / f"{entry.label}__real"
    write_run(run_dir, real, {"policy": entry.name, "params": entry.params,
                              "engine": executor.name}, {"wall_s": wall})
    write_engine_steps(run_dir, step_log)
    measured = RealReplay(entry.label, entry.name, entry.params, real.summary, real.records,
                          real.steps, step_log, seen, wall)
    return compare_replay(measured, trace, engine_info(executor), calibration, opts.kinds,
                          seed, out)


def engine_info(executor: Any) -> EngineInfo:
    """The real executor's description, capacity and limits."""
    return EngineInfo(executor.name, executor.attention_backend, executor.kv_capacity_tokens,
                      executor.block_size, executor.max_model_len)


def write_engine_steps(run_dir: Path, step_log: Sequence[Any]) -> None:
    """The replay's Steps as the engine ran them (real/step_log.py), beside its steps.parquet."""
    from real.step_log import ENGINE_STEPS, StepSample, samples_frame

    samples = [StepSample(e.step, len(e.iteration_ends_s), e.duration_s, e.iteration_ends_s,
                          e.new_shapes, run_dir.name, e.synced) for e in step_log]
    with writing(run_dir / ENGINE_STEPS):
        samples_frame(samples).to_parquet(run_dir / ENGINE_STEPS, index=False)


def check_calibration(calibration: str | None, opts: ValidateOptions) -> None:
    """ConfigError naming `--calibration` or `validate.calibration` unless the calibration to
    use, when one is given, is a calibration file (checked before the engine runs)."""
    from sim.measured.calibration_file import read_calibration

    if calibration is not None:
        read_calibration(calibration, "--calibration")
    elif opts.calibration is not None:
        read_calibration(opts.calibration, "validate.calibration")


def run_validation(cfg: ExperimentConfig, opts: ValidateOptions, out: Path,
                   calibration: str | None = None) -> dict[str, Any]:
    """The whole validation; writes OUT and returns what validation.json holds."""
    from experiments.config.backend import build_executors

    start = time.perf_counter()
    check_calibration(calibration, opts)
    out.mkdir(parents=True, exist_ok=True)
    trace = validation_trace(cfg, opts)
    executor = build_executors(dataclasses.replace(cfg.cluster, backend="real"))[0]
    executor.step_log = []  # keep every step the engine runs, with its measured times
    cal = Path(calibration or opts.calibration or calibrate_engine(executor, opts, out))
    got = Collected()
    for entry in policy_entries(cfg, opts):
        try:
            got.add(validate_policy(entry, trace, executor, cal, opts, cfg.seeds[0], out))
        except Exception as exc:  # one policy failing must not lose the others' results
            got.failures[entry.label] = f"{type(exc).__name__}: {exc}"
            print(f"{entry.label}: failed: {got.failures[entry.label]}", file=sys.stderr)
    return write_validation(cfg.name, engine_info(executor), len(trace), cal, got, out, start)


def format_report(summary: dict[str, Any]) -> str:
    """Metric and step-time errors as two small tables."""
    metrics = pd.DataFrame(summary["metrics"])
    steps = pd.DataFrame(summary["steps"])
    lines = [f"{summary['name']}: {summary['num_requests']} requests on {summary['engine']}"]
    if not metrics.empty:
        table = metrics.pivot_table(index=["policy", "kind"], columns="metric",
                                    values="rel_error", sort=False)
        lines += ["relative error of each metric (sim - real) / real:",
                  table.to_string(float_format=lambda v: f"{v:+.3f}")]
    if not steps.empty:
        cols = ["policy", "kind", "match", "n", "median_abs_rel_err", "p90_abs_rel_err"]
        lines += ["step-time absolute relative error:",
                  steps[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}")]
    lines += pace_lines(summary.get("host_pace", []))
    return "\n".join(lines)


def pace_lines(paces: Sequence[dict[str, Any]]) -> list[str]:
    """Measured / modelled time of eager and graph iterations per policy, with drift notes."""
    from real.host_pace import drift_note

    lines = ["host pace, measured / engine model (median [p10, p90]):"] if paces else []
    for p in paces:
        cells = [f"{k} {p[k]['median']:.2f} [{p[k]['p10']:.2f}, {p[k]['p90']:.2f}] "
                 f"n={p[k]['n']}" for k in ("eager", "graph") if p[k].get("n")]
        lines.append(f"  {p['policy']}: " + "; ".join(cells))
        note = drift_note(p)
        if note:
            lines.append(f"  {p['policy']}: {note}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.validate",
                                description="Validate the calibrated simulator on the real engine.")
    p.add_argument("config", help="YAML experiment config with a validate: section")
    p.add_argument("--out", help="output directory (default results/validate/<name>/)")
    p.add_argument("--calibration", help="use this calibration file instead of profiling")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    return exit_status(lambda: validate_command(args))


def validate_command(args: argparse.Namespace) -> int:
    """The validation the command line names; its report and exit status."""
    cfg, opts = load_validation_config(args.config, args.overrides)
    out = Path(args.out) if args.out else Path("results") / "validate" / cfg.name
    return finish(run_validation(cfg, opts, out, args.calibration), out)


def finish(summary: dict[str, Any], out: Path) -> int:
    """Write OUT/report.txt, print it, and the exit status: 1 when a policy failed."""
    report = format_report(summary)
    (out / "report.txt").write_text(report + "\n", encoding="utf-8")
    print(f"{report}\n-> {out}")
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
