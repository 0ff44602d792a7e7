"""`servesim run --workload BENCH.json [--calibration FILE] [CONFIG]`: a benchmark's own requests.

`--workload BENCH.json` (a `vllm bench serve --save-detailed` result, or SGLang's) replaces the
config's workload with `workload: {trace: {path: BENCH.json, format: vllm_bench}}`
(traces/bench_trace.py): the benchmark's requests at their recorded (or redrawn) arrivals, and
no request_rates. With `--request-rate R[,R...]` they are re-timed instead, sent as `vllm bench
serve` sends them (`retime: vllm`: Gamma gaps of the benchmark's burstiness, or `--burstiness`,
the last send at n / rate, seeded by `--seed`), with the benchmark's `max_concurrency` as
`workload.max_concurrency`: a prediction at other rates.
`--calibration FILE` (`servesim calibrate`) sets `cluster.cost_model: {calibration: FILE}` and
the cluster's model, GPU and tensor parallelism it was fitted for. Without CONFIG the run is
that cluster under the policy the calibration names (else `vllm`), named after the benchmark.

After the sweep, each run at the benchmark's own arrivals is compared with it: measured mean,
p50 and p99 of TTFT, TPOT, ITL and E2E against the simulation's (sim/fit/bench_metrics.py); each
run at another rate prints its prediction beside the benchmark's measured values.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from experiments.config.experiment import ExperimentConfig, experiment_from_dict
from experiments.config.load import apply_overrides, load_yaml_file
from sim.fit.bench_metrics import error_table, format_tables, measured_table, simulated_table
from sim.measured.calibration_file import read_calibration
from sim.util.errors import ConfigError
from traces.bench_results import BenchResult, read_bench_result
from traces.bench_trace import FORMAT, bench_note

DEFAULT_POLICY = "vllm"  # the policy of a run without CONFIG or a calibration naming one


def add_bench_run_flags(parser: argparse.ArgumentParser) -> None:
    """--workload and --calibration on `python -m experiments.run`'s parser."""
    group = parser.add_argument_group("a serving benchmark's requests (experiments/bench/run.py)")
    group.add_argument("--workload", default=None, metavar="BENCH.json",
                       help="replay a vllm bench serve --save-detailed result's own requests "
                       "(CONFIG optional); with --request-rate, at other rates")
    group.add_argument("--calibration", default=None, metavar="FILE",
                       help="a servesim calibrate file: cluster.cost_model, model, GPU and TP")


def uses_bench(args: argparse.Namespace) -> bool:
    """True when --workload or --calibration is given (CONFIG then optional with --workload)."""
    return args.workload is not None or args.calibration is not None


def load_run_config(args: argparse.Namespace) -> ExperimentConfig:
    """The experiment of `args`: CONFIG (or, with --workload, none), then --workload and
    --calibration, then the `--set` and vllm bench flag overrides (`args.overrides`)."""
    if args.config is None and args.workload is None:
        raise ConfigError("config", None, "a CONFIG file is required (or --workload BENCH.json)")
    raw: Any = {} if args.config is None else (load_yaml_file(_config_file(args.config)) or {})
    if not isinstance(raw, dict):
        raise ConfigError("config", args.config, "must be a YAML mapping")
    name = Path(args.config).stem if args.config else Path(args.workload).name.split(".")[0]
    if args.calibration is not None:
        apply_calibration(raw, args.calibration, own_policy=args.config is None)
    if args.workload is not None:
        apply_workload(raw, read_bench_result(args.workload), args)
    raw.setdefault("policies", [DEFAULT_POLICY])
    return experiment_from_dict(apply_overrides(raw, args.overrides), name)


def _config_file(path: str) -> Path:
    if not Path(path).is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    return Path(path)


def apply_calibration(raw: dict, path: str, own_policy: bool) -> None:
    """`raw`'s cluster set to the calibration's (and its policy when `own_policy`)."""
    data = read_calibration(path, "--calibration")  # names a file of another kind
    cluster = raw.setdefault("cluster", {})
    if not isinstance(cluster, dict):
        raise ConfigError("cluster", cluster, "must be a mapping")
    cluster["cost_model"] = {"calibration": str(path)}
    fitted = data.get("cluster")
    if isinstance(fitted, dict):  # servesim calibrate: the deployment it was fitted for
        cluster.update({k: fitted[k] for k in ("model", "gpu", "tensor_parallel") if k in fitted})
    if own_policy and isinstance(data.get("policy"), str):
        raw["policies"] = [{"name": data["policy"], "params": data.get("policy_params") or {}}]


def apply_workload(raw: dict, bench: BenchResult, args: argparse.Namespace) -> None:
    """`raw`'s workload set to the benchmark's requests: as recorded, or re-timed at
    --request-rate with its burstiness and concurrency limit."""
    trace: dict[str, Any] = {"path": bench.source, "format": FORMAT}
    workload: dict[str, Any] = {"trace": trace}
    if args.request_rate is None:
        raw["request_rates"] = []
    else:
        trace["retime"] = "vllm"
        trace["burstiness"] = float(args.burstiness) if args.burstiness is not None \
            else bench.burstiness  # --burstiness is checked by the bench flags
        if bench.max_concurrency is not None:
            workload["max_concurrency"] = bench.max_concurrency
    raw["workload"] = workload


def bench_source(cfg: ExperimentConfig) -> str | None:
    """The benchmark file the config's workload replays, if it is one."""
    trace = cfg.workload.trace
    if trace is None or trace.path is None:
        return None
    if trace.format == FORMAT:
        return trace.path
    from traces.registry import infer_format

    return trace.path if trace.format is None and infer_format(trace.path) == FORMAT else None


def comparison(cfg: ExperimentConfig, out_dir: Path, rows: Sequence[dict]) -> list[str]:
    """Lines comparing each run with the benchmark it replays ([] for another workload)."""
    source = bench_source(cfg)
    if source is None or not rows:
        return []
    bench = read_bench_result(source)
    measured = measured_table(bench.trace, bench.itls["gap_s"].to_numpy())
    lines = [f"\nbenchmark {bench_note(bench)}"]
    for row in rows:
        run = out_dir / "runs" / str(row["run"])
        records = pd.read_parquet(run / "records.parquet")
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        simulated = simulated_table(records, summary)
        rate = row.get("rate")
        if rate is None or rate != rate:  # NaN: the benchmark's own arrivals
            lines.append(f"{row['run']}: simulated vs measured, the benchmark's own requests "
                         f"and arrivals (error = simulated / measured - 1)")
            lines.append(format_tables(measured, [("error", error_table(measured, simulated))]))
        else:
            lines.append(f"{row['run']}: prediction at {rate:g} req/s (sent as vllm bench serve "
                         f"sends, seed {row['seed']}) beside the benchmark's measured values")
            lines.append(_prediction(measured, simulated))
    return lines


def _prediction(measured: dict, simulated: dict) -> str:
    """measured and predicted ms per metric and statistic."""
    rows = [f"{'metric':8}{'stat':6}{'measured':>12}{'predicted':>12}"]
    for m, by_stat in measured.items():
        for s, value in by_stat.items():
            rows.append(f"{m.upper() if s == 'mean' else '':8}{s:6}{value * 1e3:>9.1f} ms"
                        f"{simulated[m][s] * 1e3:>9.1f} ms")
    return "\n".join(rows)
