"""Fidelity report: predicted vs measured time of every profiled shape.

    python -m experiments.fidelity PROFILE_DIR [PROFILE_DIR ...] [--model llama-2-7b]
        [--gpu A100-80GB] [--cost-model roofline|stage|profile] [--calibration FILE]
        [--attention flashinfer|flash_attention] [--out DIR]

Each PROFILE_DIR is a Vidur-layout profile folder (e.g. ../shared/data/profiles;
sim/measured/profile_tables.py lists the layouts). Without --model / --gpu, every (GPU, model) profile
the folders hold whose GPU and model the simulator knows is reported, each with its own
per-regime table and files under OUT/<gpu>__<model>/ (others are listed as skipped, with why);
OUT/summary.csv then holds every report's rows. For each TP degree in the tables the chosen
cost model's stages
(sim/cost/stage_times.py) are compared with the measured dense layers, attention rows, all-reduces and
composed layer times (experiments/fidelity/rows.py). Prints median |error|, p90 |error| and the
signed bias (median of predicted / measured - 1) per GPU, model, TP, stage and regime, with the
median and p90 |error| the best non-decreasing curve through the measured rows reaches (the
data's own floor, experiments/fidelity/floor.py), and writes DIR/rows.csv, DIR/summary.csv,
DIR/summary.json and DIR/fidelity.png.

Cost models: `stage` (the simulator's default, sim/cost/stage_model.py with the GPU's parameters;
its attention terms those of the kernel the profile's attention.csv names in Vidur's
`attention_backend` column, or of `--attention`, sim/cost/attention_kernels.py),
`roofline` (sim/cost/roofline_stages.py; --calibration applies a `python -m real.calibrate` file's
fitted CostModelConfig, and implies --cost-model roofline), `profile` (the tables themselves,
sim/measured/profile_cost_model.py, falling back to the roofline; a sanity check).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from experiments.fidelity.floor import monotone_errors
from experiments.fidelity.models import stages_factory
from experiments.fidelity.rows import REGIMES, all_rows
from sim.hardware.gpus import get_gpu
from sim.measured.profile_tables import load_profiles
from sim.models.catalog import get_model
from sim.util.errors import ConfigError, TraceError

GROUP_KEYS = ("gpu", "model", "tp", "stage", "regime")  # one summary row per group
STAGE_ORDER = ("dense", "attention", "allreduce", "step", "layers_no_attn")


def summarize(rows: pd.DataFrame) -> pd.DataFrame:
    """Median / p90 |error| and signed bias (median error) per GPU, model, TP, stage, regime,
    and the same two figures of the best non-decreasing curve through the measured rows
    (`monotone_*`, experiments/fidelity/floor.py; NaN for stages without one size)."""
    columns = [*GROUP_KEYS, "n", "median_abs_error", "p90_abs_error", "bias",
               "monotone_median_abs_error", "monotone_p90_abs_error"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    rows = rows.assign(monotone_abs_error=monotone_errors(rows))
    out = (rows.groupby(list(GROUP_KEYS), sort=False)
           .agg(n=("error", "size"), median_abs_error=("abs_error", "median"),
                p90_abs_error=("abs_error", _p90),
                bias=("error", "median"),
                monotone_median_abs_error=("monotone_abs_error", "median"),
                monotone_p90_abs_error=("monotone_abs_error", _p90))
           .reset_index())
    out["_s"] = out["stage"].map({s: i for i, s in enumerate(STAGE_ORDER)})
    out["_r"] = out["regime"].map({r: i for i, r in enumerate(REGIMES)})
    return out.sort_values(["gpu", "model", "_s", "tp", "_r"]).drop(columns=["_s", "_r"])


def _p90(values: pd.Series) -> float:
    values = values.dropna()
    return float(np.quantile(values, 0.9)) if len(values) else float("nan")


def _pct(value: float) -> str:
    return "-" if not np.isfinite(value) else f"{100 * value:.1f}%"


def markdown(summary: pd.DataFrame) -> str:
    """The summary as a markdown table (errors in percent; the last column is what the best
    non-decreasing curve through the measured rows reaches, "-" where a stage has none)."""
    lines = ["| stage | TP | regime | n | median abs err | p90 abs err | bias | "
             "monotone floor: median / p90 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in summary.itertuples(index=False):
        lines.append(f"| {r.stage} | {r.tp} | {r.regime} | {r.n} | "
                     f"{100 * r.median_abs_error:.1f}% | {100 * r.p90_abs_error:.1f}% | "
                     f"{100 * r.bias:+.1f}% | {_pct(r.monotone_median_abs_error)} / "
                     f"{_pct(r.monotone_p90_abs_error)} |")
    return "\n".join(lines)


def plot(rows: pd.DataFrame, path: Path, title: str) -> Path:
    """Predicted vs measured, log-log, one panel per stage, one colour per regime."""
    import matplotlib.pyplot as plt

    stages = [s for s in STAGE_ORDER if s in set(rows["stage"])] or ["none"]
    fig, axes = plt.subplots(1, len(stages), figsize=(4.2 * len(stages), 4.2), squeeze=False)
    colours = dict(zip(REGIMES, ("tab:blue", "tab:purple", "tab:green", "tab:olive",
                                 "tab:red")))
    for ax, stage in zip(axes[0], stages):
        part = rows[rows["stage"] == stage] if "stage" in rows else rows
        for reg in [r for r in REGIMES if r in set(part["regime"])]:
            group = part[part["regime"] == reg]
            ax.scatter(group["measured_s"] * 1e3, group["predicted_s"] * 1e3, s=8,
                       label=reg, color=colours.get(reg, "grey"), alpha=0.7)
        if len(part):
            lo = float(min(part["measured_s"].min(), part["predicted_s"].min())) * 1e3
            hi = float(max(part["measured_s"].max(), part["predicted_s"].max())) * 1e3
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_title(stage)
        ax.set_xlabel("measured (ms)")
        ax.set_ylabel("predicted (ms)")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_report(profile_dir: str | Path, model: str | None = "llama-2-7b",
               gpu: str | None = "A100-80GB",
               cost_model: str | None = None, calibration: str | None = None,
               out: str | Path | None = None, attention: str | None = None) -> dict[str, Any]:
    """Build the rows and summary; write them (and the figure) under `out` when given.
    `cost_model` None: roofline with a calibration file (it holds roofline fields), else stage."""
    if cost_model is None:
        cost_model = "roofline" if calibration else "stage"
    elif calibration and cost_model != "roofline":
        raise ConfigError("--calibration", calibration, f"a real.calibrate file sets roofline "
                          f"fields: only with --cost-model roofline (not {cost_model})")
    spec, gpu_spec = get_model(model), get_gpu(gpu)
    tables = load_profiles(profile_dir, model=model, gpu=gpu)
    stages_for, used = stages_factory(cost_model, spec, gpu_spec, tables, calibration,
                                      attention)
    rows = all_rows(tables, stages_for, spec)
    if not rows.empty:
        rows.insert(0, "model", spec.name)
        rows.insert(0, "gpu", gpu_spec.name)
    summary = summarize(rows)
    result = {"profile_dir": str(profile_dir), "profile_model": tables.model,
              "profile_gpu": tables.gpu, "attention_backend": tables.attention_backend,
              "model": spec.name, "gpu": gpu_spec.name,
              "cost_model": used, "calibration": calibration, "rows": rows,
              "summary": summary}
    if out is not None:
        write_report(result, Path(out))
    return result


def write_report(result: dict[str, Any], out: Path) -> None:
    """rows.csv, summary.csv, summary.json and fidelity.png under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    result["rows"].to_csv(out / "rows.csv", index=False)
    result["summary"].to_csv(out / "summary.csv", index=False)
    meta = {k: v for k, v in result.items() if k not in ("rows", "summary")}
    meta["summary"] = result["summary"].to_dict(orient="records")
    (out / "summary.json").write_text(json.dumps(meta, indent=2, default=float) + "\n",
                                      encoding="utf-8")
    plot(result["rows"], out / "fidelity.png",
         f"{result['model']} on {result['gpu']}: {result['cost_model']} vs measured")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.fidelity",
                                description=__doc__.split("\n")[0])
    p.add_argument("profile_dirs", nargs="+", metavar="profile_dir",
                   help="Vidur-layout profile folders")
    p.add_argument("--model", default=None, help="one model (default: every profiled one)")
    p.add_argument("--gpu", default=None, help="one GPU (default: every profiled one)")
    p.add_argument("--cost-model", default=None, choices=("roofline", "stage", "profile"),
                   help="default stage (roofline with --calibration)")
    p.add_argument("--calibration", default=None, help="real.calibrate JSON (roofline)")
    p.add_argument("--attention", default=None, metavar="KERNEL",
                   help="the stage model's attention kernel set: flashinfer (the default "
                   "set) or flash_attention (default: the one the profile's attention.csv "
                   "names, else the GPU's own)")
    p.add_argument("--out", default="results/fidelity", help="output folder")
    return p.parse_args(argv)


def profiles_to_report(folders: Sequence[str], model: str | None, gpu: str | None
                       ) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(folder, model, gpu) of each report, and the profiles skipped with why. A named
    --model / --gpu picks it in every folder; otherwise every profile whose GPU and model are
    known (the simulator's names or aliases) is reported."""
    from sim.measured.profile_layout import list_profiles

    reports, skipped = [], []
    for folder in folders:
        if model is not None and gpu is not None:
            reports.append((folder, model, gpu))
            continue
        for gpu_dir, model_dir in list_profiles(Path(folder)):
            if (gpu is not None and get_gpu(gpu).name != _known(get_gpu, gpu_dir)) or \
                    (model is not None and get_model(model).name != _known(get_model,
                                                                          model_dir)):
                continue
            names = (_known(get_gpu, gpu_dir), _known(get_model, model_dir))
            if None in names:
                skipped.append(f"{folder}: {gpu_dir}/{model_dir} (unknown "
                               f"{'GPU' if names[0] is None else 'model'})")
                continue
            reports.append((folder, names[1], names[0]))
    return reports, skipped


def _known(getter, name: str) -> str | None:
    """The simulator's canonical name for a profile folder's GPU or model, or None."""
    for candidate in (name, name.split("/")[-1]):
        try:
            return getter(candidate).name
        except ConfigError:
            continue
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        reports, skipped = profiles_to_report(args.profile_dirs, args.model, args.gpu)
        if not reports:
            raise ConfigError("profile_dir", args.profile_dirs, "no profile of a known GPU and "
                              "model there" + (f"; skipped: {'; '.join(skipped)}"
                                               if skipped else ""))
        many = len(reports) > 1
        results, used = [], set()
        for folder, model, gpu in reports:
            sub = _subfolder(args.out, model, gpu, used) if many else args.out
            result = run_report(folder, model, gpu, args.cost_model, args.calibration, sub,
                                args.attention)
            results.append(result)
            print(f"\n{result['model']} on {result['gpu']} ({folder}: {result['profile_gpu']}/"
                  f"{result['profile_model']}), cost model: {result['cost_model']}")
            print(markdown(result["summary"]))
    except (ConfigError, TraceError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in skipped:
        print(f"skipped: {line}")
    if many:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        pd.concat([r["summary"] for r in results]).to_csv(Path(args.out) / "summary.csv",
                                                          index=False)
        print(f"wrote {len(results)} reports under {args.out}/<gpu>__<model>/ and "
              f"{args.out}/summary.csv")
    else:
        print(f"wrote {args.out}/rows.csv, summary.csv, summary.json, fidelity.png")
    return 0


def _subfolder(out: str, model: str, gpu: str, used: set[str]) -> Path:
    """OUT/<gpu>__<model>, numbered when two folders hold the same pair."""
    safe = [part.replace("/", "_").replace(" ", "_") for part in (gpu, model)]
    name, n = f"{safe[0]}__{safe[1]}", 2
    while name in used:
        name, n = f"{safe[0]}__{safe[1]}__{n}", n + 1
    used.add(name)
    return Path(out) / name


if __name__ == "__main__":
    sys.exit(main())
