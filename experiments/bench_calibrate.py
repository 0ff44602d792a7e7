"""Calibrate the cost model's engine terms from a real serving benchmark.

    python -m experiments.bench_calibrate RESULT.json [RESULT2.json ...] --model llama-2-7b
        --gpu A100-80GB [--tp 1] [--policy vllm] [--param max_num_seqs=256 ...]
        [--cost-model roofline|stage] [--stage-params FILE.json]
        [--fit step_overhead_s,per_seq_overhead_s] [--max-evals 40] [--ttft-weight 0.1]
        [--format vllm|sglang] [--seed N] [--out FILE]

`--cost-model roofline` (default) fits the roofline's step_overhead_s and per_seq_overhead_s;
`--cost-model stage` fits the stage model's host terms cpu_step_s and cpu_per_seq_s (add
sampler_fixed_s / sampler_per_seq_s with --fit), on top of the GPU's parameters or of
`--stage-params FILE` (`python -m experiments.fit_gpu`), and writes
`cost_model: {kind: stage, cpu_step_s: ..., cpu_per_seq_s: ...}`.

RESULT files come from `vllm bench serve --save-result --save-detailed` or SGLang's
`bench_serving --output-file F --output-details` (`traces/bench_results.py`); several runs (say
one per request rate) are fitted together. Prints the error before and after and writes a JSON
whose `cost_model` object is usable as `cluster.cost_model: {...}` in a config.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from policies.registry import policy_factory
from sim.bench_fit import (DEFAULT_FIT, FIT_PARAMS, STAGE_DEFAULT_FIT, STAGE_FIT_PARAMS,
                           TTFT_WEIGHT, BenchFit, fit_bench)
from sim.bench_replay import usable_rows
from sim.cluster import ClusterSpec
from sim.errors import ConfigError, TraceError
from traces.bench_results import BenchResult, read_bench_result

FORMAT = "servesim.bench_calibration"  # the written file's `format`
FORMAT_VERSION = 1  # bumped when its layout changes


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """`key=value` pairs, each value read as YAML (256 -> int, true -> bool)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--param", item, "must be key=value")
        out[key.strip()] = yaml.safe_load(value)
    return out


def calibration_dict(fit: BenchFit, results: Sequence[BenchResult], cluster: ClusterSpec,
                     policy: str, params: dict[str, Any]) -> dict[str, Any]:
    """The JSON written by --out."""
    return {
        "format": FORMAT, "version": FORMAT_VERSION,
        "cost_model": {**cluster.cost_model, **fit.overrides},
        "model": cluster.model, "gpu": cluster.gpu, "tensor_parallel": cluster.tensor_parallel,
        "policy": policy, "policy_params": params,
        "runs": [{"source": r.source, "format": r.format, "arrivals": r.arrivals,
                  "num_requests": len(r.trace), "num_failed": r.num_failed,
                  "request_rate": None if r.request_rate == float("inf") else r.request_rate,
                  "max_concurrency": r.max_concurrency} for r in results],
        "before": fit.before.as_dict(), "after": fit.after.as_dict(),
        "num_evaluations": fit.num_evaluations, "optimizer": fit.message,
    }


def format_table(fit: BenchFit) -> str:
    """Before / after errors, one row each (percent)."""
    head = (f"{'':8}{'TTFT med|e|':>12}{'p90|e|':>9}{'bias':>8}{'mean':>8}"
            f"{'TPOT med|e|':>13}{'p90|e|':>9}{'bias':>8}{'mean':>8}{'unfin':>7}")
    rows = [head]
    for name, s in (("before", fit.before), ("after", fit.after)):
        rows.append(f"{name:8}{s.ttft_median_abs:>12.1%}{s.ttft_p90_abs:>9.1%}"
                    f"{s.ttft_bias:>+8.1%}{s.ttft_mean_bias:>+8.1%}{s.tpot_median_abs:>13.1%}"
                    f"{s.tpot_p90_abs:>9.1%}{s.tpot_bias:>+8.1%}{s.tpot_mean_bias:>+8.1%}"
                    f"{s.num_unfinished:>7}")
    return "\n".join(rows)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.bench_calibrate",
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
                   "(python -m experiments.fit_gpu) the stage fit starts from")
    p.add_argument("--fit", default=None,
                   help=f"comma-separated fields; roofline: among {', '.join(FIT_PARAMS)} "
                   f"(default {','.join(DEFAULT_FIT)}); stage: among "
                   f"{', '.join(STAGE_FIT_PARAMS)} (default {','.join(STAGE_DEFAULT_FIT)})")
    p.add_argument("--max-evals", type=int, default=40, help="simulations allowed (each runs "
                   "every result file)")
    p.add_argument("--ttft-weight", type=float, default=TTFT_WEIGHT, help="weight of the TTFT "
                   "residuals against the decode-time ones (sim/bench_fit.py)")
    p.add_argument("--format", choices=("vllm", "sglang"), default=None,
                   help="result layout (default: guessed from the keys)")
    p.add_argument("--seed", type=int, default=None, help="seed of the rebuilt send schedule "
                   "when a file has no start_times (default: the tool's default --seed)")
    p.add_argument("--out", default=None, help="calibration JSON to write")
    return p


def usable_results(results: Sequence[BenchResult]) -> list[tuple[BenchResult, dict[str, int]]]:
    """Each result with only its physically consistent requests (sim.bench_replay.usable_rows:
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
        fit = fit_bench([r.trace for r in results], cluster, policy_factory(args.policy, params),
                        fields, args.max_evals, ttft_weight=args.ttft_weight)
    except (ConfigError, TraceError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r, dropped in screened:
        print(f"{r.source}: {r.format}, {len(r.trace)} requests ({r.num_failed} failed), "
              f"arrivals {r.arrivals}")
        if dropped:
            print(f"warning: {r.source}: dropped {sum(dropped.values())} of "
                  f"{len(r.trace) + sum(dropped.values())} requests: {drop_text(dropped)}",
                  file=sys.stderr)
    print(format_table(fit))
    print(f"cost_model: {json.dumps({**cluster.cost_model, **fit.overrides})}  "
          f"({fit.num_evaluations} "
          f"evaluations; {fit.message})")
    if args.out:
        data = calibration_dict(fit, results, cluster, args.policy, params)
        for run, (_, dropped) in zip(data["runs"], screened):
            if dropped:  # requests left out of the fit, per reason
                run["dropped"] = dropped
        Path(args.out).write_text(json.dumps(data, indent=2) + "\n")
        print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
