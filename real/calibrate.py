"""Fit the simulator's cost models to a profile and save them as a calibration file.

    python -m real.calibrate PROFILE.csv [--model M] [--gpu G|measured] --out FILE.json
        [--steps RUN_DIR [RUN_DIR ...]] [--folds 5]
    python -m real.calibrate [PROFILE.csv] --scheduling STEPS.parquet [...] --out FILE.json

Writes FILE.json (the profiled deployment, the fitted `CostModelConfig`, the fitted engine model
`EngineTimeParams` (`real/calibrate_engine.py`), fit errors) and
FILE.learned.json (the learned correction model as plain JSON trees: no pickle, so loading a
shared calibration never runs code). The simulator loads it by name:
`cluster.cost_model: {calibration: FILE.json, kind: roofline | learned}`. `--gpu` takes a
`sim.hardware.gpus` GPU for the roofline's peaks, or `measured` (the default on CPU): the peaks
measured when profiling. fp32 weights (CPU) are modelled as fp16 bytes; the fitted memory
efficiency absorbs the factor. `--steps` adds the steps real replays ran (run folders of
`experiments.validate.main`, e.g. OUT/runs/orca__real) to the engine model's fit and reports each
step's error from a fit that never saw it (`--folds`). `--scheduling` fits the scheduler's measured host time per step
(`real/sched_fit.py`) into FILE.json's `scheduling_overhead` section (alone: added to FILE.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from sim.cost.cost_model import DeploymentSpec, RooflineCostModel
from sim.hardware.gpus import GPUSpec, get_gpu
from sim.measured.calibrated import FEATURES
from sim.measured.learned_trees import FORMAT
from sim.models.catalog import ModelSpec
from sim.util.errors import ConfigError
from sim.util.jsonfile import read_json_object

ROOFLINE_DTYPES = {"fp32": "fp16", "fp16": "fp16", "bf16": "bf16"}  # engine -> roofline dtype


def read_profile(path: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A profile CSV and its JSON sidecar."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"profile not found: {path}")
    meta_path = path.with_suffix(".json")
    meta = read_json_object(meta_path, "PROFILE.json", "profile sidecar") \
        if meta_path.is_file() else {}
    return pd.read_csv(path), meta


def device_spec(gpu: str | None, meta: dict[str, Any]) -> GPUSpec:
    """A sim.hardware.gpus GPU by name, or a spec from the peaks measured while profiling."""
    if gpu not in (None, "measured"):
        return get_gpu(gpu)
    if "peak_flops" not in meta:
        raise ConfigError("--gpu", gpu, "the profile has no measured peaks; name a GPU")
    name = f"{meta.get('device_name', meta.get('device', 'device'))}-measured"
    return GPUSpec(name, float(2**40), meta["peak_bandwidth"], meta["peak_flops"],
                   meta["peak_flops"], 1e9, 0.0)


def model_spec(model: str | None, meta: dict[str, Any]) -> ModelSpec:
    """The model named on the command line, else the one the profile recorded."""
    if model is not None:
        from real.spec import resolve_real_model

        return resolve_real_model(model).spec
    if "model" not in meta:
        raise ConfigError("--model", model, "the profile does not name its model; pass --model")
    try:
        return ModelSpec(**meta["model"])
    except (TypeError, ValueError) as exc:
        raise ConfigError("--model", meta["model"], f"the profile's model is invalid: {exc}") \
            from None


def calibrate(profile: pd.DataFrame, meta: dict[str, Any], model: ModelSpec, device: GPUSpec,
              out: str | Path, learned: bool = True, steps: Sequence[str | Path] = (),
              folds: int = 5) -> dict[str, Any]:
    """Fit the models, write FILE.json (+ FILE.learned.json); returns the JSON content."""
    from real.calibrate_engine import engine_section
    from real.fit import export_trees, fit_learned, fit_roofline

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    dtype = ROOFLINE_DTYPES.get(meta.get("dtype", "fp16"), "fp16")
    deployment = DeploymentSpec(model, device, weight_dtype=dtype, kv_dtype=dtype,
                                activation_reserve_bytes=0)
    config, roof_stats = fit_roofline(profile, deployment)
    data: dict[str, Any] = {
        "version": 1, "model": dataclasses.asdict(model), "device": dataclasses.asdict(device),
        "weight_dtype": dtype, "kv_dtype": dtype, "engine_dtype": meta.get("dtype"),
        "kv_capacity_tokens": int(meta.get("kv_capacity_tokens", 2**20)),
        "block_size": int(meta.get("block_size", 16)),
        "roofline": dataclasses.asdict(config), "learned": None,
        "engine": engine_section(profile, meta, model, device, steps, folds),
        "fit": {"num_rows": len(profile), "roofline": roof_stats},
        "profile": {k: meta.get(k) for k in ("device", "device_name", "dtype",
                                             "attention_backend", "torch", "num_threads")}}
    if learned:
        regressor, stats = fit_learned(profile, RooflineCostModel(deployment, config))
        learned_path = out.with_suffix(".learned.json")
        learned_path.write_text(json.dumps(export_trees(regressor)) + "\n", encoding="utf-8")
        data["learned"] = {"path": learned_path.name, "format": FORMAT,
                           "regressor": type(regressor).__name__,
                           "target": "log(measured / roofline)", "features": list(FEATURES)}
        data["fit"]["learned"] = stats
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return data


def calibrate_file(profile_path: str | Path, out: str | Path, model: str | None = None,
                   gpu: str | None = None, learned: bool = True,
                   steps: Sequence[str | Path] = (), folds: int = 5) -> dict[str, Any]:
    """`calibrate` from a profile CSV path."""
    profile, meta = read_profile(profile_path)
    if gpu is None and meta.get("device", "cpu") != "cpu":
        gpu = meta.get("device_name")  # e.g. "NVIDIA H200" -> sim.hardware.gpus's H200
    return calibrate(profile, meta, model_spec(model, meta), device_spec(gpu, meta), out,
                     learned, steps, folds)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m real.calibrate",
                                description="Fit cost models to a real-engine profile.")
    p.add_argument("profile", nargs="?", help="PROFILE.csv written by python -m real.profile")
    p.add_argument("--model", default=None, help="model (default: the profile's)")
    p.add_argument("--gpu", default=None, help="a sim.hardware.gpus GPU name, or measured")
    p.add_argument("--out", required=True, help="calibration JSON to write")
    p.add_argument("--no-learned", action="store_true", help="fit the roofline only")
    p.add_argument("--steps", nargs="+", metavar="RUN_DIR", default=(), help="run folders of "
                   "real replays (experiments.validate.main's OUT/runs/<policy>__real): fit the "
                   "engine model on their steps too, and report held-out errors")
    p.add_argument("--folds", type=int, default=5, help="folds of the held-out check over "
                   "--steps (default 5; 0: none)")
    p.add_argument("--scheduling", nargs="+", metavar="STEPS", help="host_timing.parquet "
                   "(or steps.parquet) files of (real) runs: fit the scheduling overhead to "
                   "their policy_host_s")
    args = p.parse_args(argv)
    if args.profile is None and not args.scheduling:
        p.error("a PROFILE.csv, or --scheduling STEPS.parquet, is required")
    try:
        if args.profile is not None:
            data = calibrate_file(args.profile, args.out, args.model, args.gpu,
                                  not args.no_learned, args.steps, args.folds)
        if args.scheduling:
            from real.sched_fit import add_scheduling
            print(f"scheduling_overhead: {json.dumps(add_scheduling(args.out, args.scheduling))}")
    except (ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.profile is None:
        print(f"-> {args.out}")
        return 0
    from real.calibrate_engine import format_engine_fit

    fit = data["fit"]
    print(f"roofline: {json.dumps(data['roofline'])}")
    for kind in ("roofline", "learned"):
        if kind in fit:
            print(f"{kind} fit on {fit['num_rows']} steps: " + ", ".join(
                f"{k} {v:.3f}" for k, v in fit[kind].items()))
    print("\n".join(format_engine_fit(data["engine"])))
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
