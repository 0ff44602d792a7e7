"""Fit one GPU's stage-model parameters from your own per-operator profile.

    python -m experiments.fidelity.fit_gpu PROFILE_DIR --model llama-2-7b --gpu A100-80GB --out params.json
        [--profile-model meta-llama/Llama-2-7b-hf] [--profile-gpu a100] [--topology dgx]

Starts from the GPU's current parameters (`sim.cost.gpu_params.stage_params_for`), refits every stage
the profile measures at TP 1 (`sim.fit.stage_fit.fit_from_profile_dir`: GEMMs and small kernels from
mlp.csv, attention from attention.csv, all-reduce from network/all_reduce.csv), keeps the rest
(the sampler), prints the median |error| before and after on the profile's own rows
(`sim.fit.stage_eval`) and writes a JSON usable as `cluster.cost_model: {kind: stage, params:
params.json}`, with the default host preset's terms (`sim/cost/host_presets.py`: no profile row
measures an engine's host work).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from sim.cost.cost_model import DeploymentSpec
from sim.cost.gpu_params import get_stage_gpu, stage_params_for
from sim.cost.host_presets import DEFAULT_HOST, apply_host
from sim.cost.stage_model import StageCostModel
from sim.cost.stage_params import StageParams
from sim.cost.stage_params_config import params_to_dict
from sim.fit.stage_eval import compare, summarize
from sim.fit.stage_fit import fit_from_profile_dir
from sim.hardware.gpus import GPUSpec
from sim.measured.profile_tables import ProfileTables, load_profiles
from sim.models.catalog import ModelSpec, resolve_model
from sim.util.errors import ConfigError, TraceError

FORMAT = "servesim.stage_params"  # the written file's `format`
FORMAT_VERSION = 1  # bumped when its layout changes


def _tps(tables: ProfileTables, model: ModelSpec, gpu: GPUSpec) -> tuple[int, ...]:
    """The profile's TP degrees at which the model can be deployed on the GPU."""
    ok = []
    for tp in tables.tensor_parallel_degrees:
        try:
            DeploymentSpec(model, gpu, tp, activation_reserve_bytes=0)
        except ConfigError:
            continue
        ok.append(tp)
    return tuple(ok)


def error_summary(tables: ProfileTables, model: ModelSpec, gpu: GPUSpec,
                  params: StageParams) -> pd.DataFrame:
    """Per (kind, tp, regime): rows, median |error|, bias, p90 of `params` on the profile."""
    tps = _tps(tables, model, gpu)
    if not tps:
        raise ConfigError("profiles", tables.source, f"no TP degree of the profile fits "
                          f"{model.name} on {gpu.name}")

    def stages_for(tp: int) -> StageCostModel:
        return StageCostModel(DeploymentSpec(model, gpu, tp, activation_reserve_bytes=0), params)

    network = tables.network if not tables.network.empty else None
    rows = compare(stages_for, tables.dense, tables.attention, network,
                   hidden_bytes=model.hidden_size * 2.0, tps=tps)
    return summarize(rows)


def before_after(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """The two summaries side by side, keyed by (kind, tp, regime)."""
    keys = ["kind", "tp", "regime"]
    return before.merge(after, on=keys + ["rows"], suffixes=("_before", "_after"))


def format_table(table: pd.DataFrame) -> str:
    """Median |error| / bias before and after, one line per (kind, tp, regime), percent."""
    lines = [f"{'kind':10}{'tp':>3} {'regime':13}{'rows':>5}{'before med|e|':>15}{'bias':>8}"
             f"{'after med|e|':>14}{'bias':>8}"]
    for r in table.itertuples(index=False):
        lines.append(f"{r.kind:10}{r.tp:>3} {r.regime:13}{r.rows:>5}{r.median_abs_before:>15.1%}"
                     f"{r.bias_before:>+8.1%}{r.median_abs_after:>14.1%}{r.bias_after:>+8.1%}")
    return "\n".join(lines)


def result_dict(fitted: StageParams, table: pd.DataFrame, tables: ProfileTables,
                args: argparse.Namespace, gpu: GPUSpec) -> dict[str, Any]:
    """The JSON written by --out."""
    return {
        "format": FORMAT, "version": FORMAT_VERSION,
        "source": {"profiles": str(Path(args.profiles).resolve()), "profile_model": tables.model,
                   "profile_gpu": tables.gpu, "model": args.model, "gpu": gpu.name,
                   "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "start": f"sim.cost.gpu_params.stage_params_for({gpu.name!r})",
                   "kept": "sampler_*; allreduce too when the profile has no all_reduce rows",
                   "host": f"{DEFAULT_HOST} (sim/cost/host_presets.py: cpu_*, allreduce_launch_s, "
                           f"the small-message all-reduce and attn_decode_floor_s are the "
                           f"preset's; no profile row measures an engine's host work)"},
        "errors": table.to_dict(orient="records"),
        "stage_params": params_to_dict(fitted),
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.fidelity.fit_gpu",
                                description="Fit a GPU's stage-model parameters from a profile.")
    p.add_argument("profiles", help="profile folder in Vidur's layout (see docs/fidelity.md)")
    p.add_argument("--model", default="llama-2-7b", help="the profiled model (built-in or HF "
                   "config path)")
    p.add_argument("--gpu", default="A100-80GB", help="the GPU whose parameters are refitted")
    p.add_argument("--profile-model", default=None, help="model folder in the profile "
                   "(default: --model)")
    p.add_argument("--profile-gpu", default=None, help="GPU folder in the profile "
                   "(default: --gpu)")
    p.add_argument("--out", default=None, help="parameter JSON to write")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        model, gpu = resolve_model(args.model), get_stage_gpu(args.gpu)
        start = stage_params_for(gpu)
        names = (args.profile_model or args.model, args.profile_gpu or args.gpu)
        fitted = fit_from_profile_dir(args.profiles, start, model, gpu, *names)
        tables = load_profiles(args.profiles, model=names[0], gpu=names[1])
        table = before_after(error_summary(tables, model, gpu, start),
                             error_summary(tables, model, gpu, fitted))
    except (ConfigError, TraceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{tables.source}: {tables.model} on {tables.gpu}, TP {tables.tensor_parallel_degrees}"
          f"; fitted from {gpu.name}'s current parameters")
    print(format_table(table))
    if args.out:  # the set a simulation uses by default: the fit under today's host terms
        data = result_dict(apply_host(fitted, DEFAULT_HOST, gpu), table, tables, args, gpu)
        Path(args.out).write_text(json.dumps(data, indent=2) + "\n")
        print(f"-> {args.out}  (use: cluster.cost_model: {{kind: stage, params: {args.out}}})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
