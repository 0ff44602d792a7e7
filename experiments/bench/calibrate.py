"""Calibrate the cost model's engine terms and frontend latency from a real serving benchmark.

    servesim calibrate RESULT.json [RESULT2.json ...] [--out FILE]      (= bench-calibrate)
    python -m experiments.bench.calibrate RESULT.json [RESULT2.json ...] --model llama-2-7b
        --gpu A100-80GB [--tp 1] [--policy vllm] [--param max_num_seqs=256 ...]
        [--cost-model roofline|stage] [--stage-params FILE.json]
        [--fit step_overhead_s,per_seq_overhead_s] [--max-evals 40] [--ttft-weight 0.1]
        [--format vllm|sglang] [--seed N] [--out FILE]

`--cost-model stage` (default) fits the stage model's host terms cpu_step_s and cpu_per_seq_s
(add sampler_fixed_s / sampler_per_seq_s with --fit), on top of the GPU's parameters or of
`--stage-params FILE` (`python -m experiments.fidelity.fit_gpu`); `--cost-model roofline` fits the
roofline's step_overhead_s and per_seq_overhead_s. Both fit `frontend_s` too (sim/cost/frontend.py:
the TTFT outside the engine) unless --fit leaves it out.

RESULT files come from `vllm bench serve --save-result --save-detailed` or SGLang's
`bench_serving --output-file F --output-details` (`traces/bench_results.py`); several runs (say
one per request rate) are fitted together. Prints, per file, the errors of the simulated mean,
p50 and p99 of TTFT, TPOT, ITL and E2E before and after (sim/fit/bench_metrics.py), then per-request
errors, and writes a calibration file (experiments/bench/calibration_file.py; default
<first result's name>.calibration.json here) that a config uses as it is:
`cluster.cost_model: {calibration: FILE}`, or `servesim run --calibration FILE`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from experiments.bench.calibration_file import (calibration_dict, fitted_options,
                                                write_calibration)
from policies.registry import policy_factory
from sim.cluster.spec import ClusterSpec
from sim.fit.bench_fit import (DEFAULT_FIT, FIT_PARAMS, STAGE_DEFAULT_FIT, STAGE_FIT_PARAMS,
                           TTFT_WEIGHT, BenchFit, fit_bench)
from sim.fit.bench_metrics import error_table, format_tables, measured_table, simulated_table
from sim.fit.bench_replay import replay_run, usable_rows
from sim.util.errors import ConfigError, TraceError
from traces.bench_results import BenchResult, read_bench_result

OUT_SUFFIX = ".calibration.json"  # default --out: <first result's stem> + this, here


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """`key=value` pairs, each value read as YAML (256 -> int, true -> bool)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--param", item, "must be key=value")
        out[key.strip()] = yaml.safe_load(value)
    return out


def format_table(fit: BenchFit) -> str:
    """Before / after per-request errors, one row each (percent)."""
    head = (f"{'per-req':8}{'TTFT med|e|':>12}{'p90|e|':>9}{'bias':>8}{'mean':>8}"
            f"{'TPOT med|e|':>13}{'p90|e|':>9}{'bias':>8}{'mean':>8}{'unfin':>7}")
    rows = [head]
    for name, s in (("before", fit.before), ("after", fit.after)):
        rows.append(f"{name:8}{s.ttft_median_abs:>12.1%}{s.ttft_p90_abs:>9.1%}"
                    f"{s.ttft_bias:>+8.1%}{s.ttft_mean_bias:>+8.1%}{s.tpot_median_abs:>13.1%}"
                    f"{s.tpot_p90_abs:>9.1%}{s.tpot_bias:>+8.1%}{s.tpot_mean_bias:>+8.1%}"
                    f"{s.num_unfinished:>7}")
    return "\n".join(rows)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.bench.calibrate",
                                description="Fit cost-model overheads to a serving benchmark.")
    p.add_argument("results", nargs="+", help="vLLM / SGLang detailed benchmark result files")
    p.add_argument("--model", default="llama-2-7b", help="built-in model or HF config path")
    p.add_argument("--gpu", default="A100-80GB", help="built-in GPU name")
    p.add_argument("--tp", type=int, default=1, help="tensor parallelism of the server")
    p.add_argument("--policy", default="vllm", help="the simulated policy, as the server "
                   "scheduled (default vllm: today's vLLM V1; vllm_v0 for vLLM < 0.8)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="policy parameter as the server ran, e.g. max_num_seqs=256")
    p.add_argument("--cost-model", choices=("roofline", "stage"), default="stage",
                   help="the cost model whose engine terms are fitted (default stage)")
    p.add_argument("--stage-params", default=None, metavar="FILE", help="stage parameter JSON "
                   "(python -m experiments.fidelity.fit_gpu) the stage fit starts from")
    p.add_argument("--fit", default=None,
                   help=f"comma-separated fields; roofline: among {', '.join(FIT_PARAMS)} "
                   f"(default {','.join(DEFAULT_FIT)}); stage: among "
                   f"{', '.join(STAGE_FIT_PARAMS)} (default {','.join(STAGE_DEFAULT_FIT)})")
    p.add_argument("--max-evals", type=int, default=40, help="simulations allowed (each runs "
                   "every result file)")
    p.add_argument("--ttft-weight", type=float, default=TTFT_WEIGHT, help="weight of the TTFT "
                   "residuals against the decode-time ones (sim/fit/bench_fit.py)")
    p.add_argument("--format", choices=("vllm", "sglang"), default=None,
                   help="result layout (default: guessed from the keys)")
    p.add_argument("--seed", type=int, default=None, help="seed of the rebuilt send schedule "
                   "when a file has no start_times (default: the tool's default --seed)")
    p.add_argument("--out", default=None, help=f"calibration JSON to write (default: the first "
                   f"result's name + {OUT_SUFFIX}, in the current folder)")
    return p


def usable_results(results: Sequence[BenchResult]) -> list[tuple[BenchResult, dict[str, int]]]:
    """Each result with only its physically consistent requests (sim.fit.bench_replay.usable_rows:
    duration from the file, arrivals measured or rebuilt), and what was dropped for which
    reason; ConfigError naming the file when none of its requests is usable."""
    out = []
    for r in results:
        duration = r.summary.get("duration")
        kept, dropped = usable_rows(r.trace, duration if duration and duration > 0 else None,
                                    r.arrivals == "measured")
        if kept.empty:
            raise ConfigError("results", r.source, f"none of its {len(r.trace)} requests is "
                              f"usable: {drop_text(dropped)}")
        out.append((dataclasses.replace(r, trace=kept), dropped))
    return out


def drop_text(dropped: Mapping[str, int]) -> str:
    """'2 latency below TTFT; 1 ...': the dropped requests per reason."""
    return "; ".join(f"{n} {reason}" for reason, n in dropped.items())


def cost_model_options(args: argparse.Namespace) -> dict[str, Any]:
    """`cluster.cost_model` of the fitted cluster: {kind: roofline} or {kind: stage[, params]}."""
    if args.cost_model == "roofline":
        if args.stage_params is not None:
            raise ConfigError("--stage-params", args.stage_params, "only with --cost-model stage")
        return {"kind": "roofline"}
    return {"kind": "stage", **({"params": args.stage_params} if args.stage_params else {})}


def metric_tables(results: Sequence[BenchResult], cluster: ClusterSpec, policy: Any,
                  fit: BenchFit) -> list[dict[str, Any]]:
    """Per result: its measured latency distributions and the errors of the simulated ones
    with the cluster's own cost model (before) and the fitted one (after)."""
    out = []
    for r in results:
        gaps = r.itls.loc[r.itls["bench_index"].isin(r.trace["bench_index"]), "gap_s"]
        measured = measured_table(r.trace, gaps.to_numpy())
        runs = [replay_run(r.trace, cluster, policy, over) for over in (None, fit.overrides)]
        before, after = (error_table(measured, simulated_table(x.records, x.summary))
                         for x in runs)
        out.append({"source": r.source, "measured": measured, "before": before,
                    "after": after})
    return out


def default_out(results: Sequence[str]) -> Path:
    """<first result's stem>.calibration.json in the current folder."""
    return Path(Path(results[0]).name.split(".")[0] + OUT_SUFFIX)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cluster = ClusterSpec(model=args.model, gpu=args.gpu, tensor_parallel=args.tp,
                              cost_model=cost_model_options(args))
        params = parse_params(args.param)
        screened = usable_results([read_bench_result(f, fmt=args.format, seed=args.seed)
                                   for f in args.results])
        results = [r for r, _ in screened]
        fields = None if args.fit is None else [f.strip() for f in args.fit.split(",")
                                                if f.strip()]
        policy = policy_factory(args.policy, params)
        fit = fit_bench([r.trace for r in results], cluster, policy, fields, args.max_evals,
                        ttft_weight=args.ttft_weight)
        metrics = metric_tables(results, cluster, policy, fit)
    except (ConfigError, TraceError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report(screened, metrics, fit, cluster)
    data = calibration_dict(fit, results, cluster, args.policy, params, metrics)
    for run, (_, dropped) in zip(data["runs"], screened):
        if dropped:  # requests left out of the fit, per reason
            run["dropped"] = dropped
    try:
        out = write_calibration(args.out or default_out(args.results), data)
    except OSError as exc:
        print(f"error: --out={args.out or default_out(args.results)}: cannot write the "
              f"calibration: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"-> {out}  (use it as cluster.cost_model: {{calibration: {out}}}, or "
          f"servesim run --calibration {out} --workload {args.results[0]})")
    return 0


def report(screened: Sequence[tuple[BenchResult, Mapping[str, int]]],
           metrics: Sequence[Mapping[str, Any]], fit: BenchFit, cluster: ClusterSpec) -> None:
    """Per result: what was read and dropped, its before / after distribution errors; then the
    per-request errors and the fitted options."""
    for (r, dropped), m in zip(screened, metrics):
        print(f"{r.source}: {r.format}, {len(r.trace)} requests ({r.num_failed} failed), "
              f"arrivals {r.arrivals}")
        if dropped:
            print(f"warning: {r.source}: dropped {sum(dropped.values())} of "
                  f"{len(r.trace) + sum(dropped.values())} requests: {drop_text(dropped)}",
                  file=sys.stderr)
        print(format_tables(m["measured"], [("before", m["before"]), ("after", m["after"])]))
    print(format_table(fit))
    print(f"cost_model: {json.dumps(fitted_options(cluster, fit))}  ({fit.num_evaluations} "
          f"evaluations; {fit.message})")


if __name__ == "__main__":
    sys.exit(main())
