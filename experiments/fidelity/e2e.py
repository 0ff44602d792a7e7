"""End-to-end fidelity: predicted vs measured engine step times from a public benchmark table.

    python -m experiments.fidelity.e2e PERF_CSV [--cost-model stage|roofline]
        [--set FIELD=VALUE] [--model NAME=MODEL] [--gpu NAME=GPU] [--out DIR]

PERF_CSV is a table of measured end-to-end step times in splitwise-sim's layout
(`data/perf_model.csv` of github.com/Mutinifni/splitwise-sim: vLLM on A100 / H100): one row per
measurement with `model`, `hardware`, `tensor_parallel`, `prompt_size`, `batch_size`,
`token_size`, `prompt_time` and `token_time` (milliseconds). Repeated measurements of a shape are
reduced to their median. Each shape is predicted by the cost model of `cluster.cost_model` kind
`--cost-model` on the matching deployment:

  decode   one iteration of `batch_size` sequences at the mid-output context
           (prompt_size + token_size / 2 tokens each), compared with `token_time`;
  prefill  one step computing the `batch_size` prompts together, compared with `prompt_time`.

`--set` overrides a field of the cost model (a StageParams field for stage, e.g.
`cpu_launch_per_layer_s=5.5e-4`; a CostModelConfig field for roofline). `--model` / `--gpu` map the table's names to built-in names or local HF config / GPU files
(splitwise's `llama2-70b`, `a100-80gb` and `h100-80gb` are known); rows whose model or GPU is not
mapped are counted and skipped, never guessed. Rows without a model or hardware name, with
counts that are not integers >= 1 or with times that are not finite in (0, 1 hour] are dropped
and counted per reason (stderr); a table with no usable row is an error naming the column.
Prints median signed error per (model, GPU, TP, regime: prefill, decode b <= 8,
decode b >= 16) and writes DIR/rows.csv and DIR/summary.csv.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from sim.cluster.cost_model_choice import build_cost_model
from sim.cost.cost_model import DeploymentSpec
from sim.hardware.gpu_file import resolve_gpu
from sim.models.catalog import resolve_model
from sim.util.errors import ConfigError

COLUMNS = ("model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size",
           "prompt_time", "token_time")  # required columns of PERF_CSV (times in ms)
KNOWN_MODELS = {"llama2-70b": "llama-2-70b", "llama2-13b": "llama-2-13b",
                "llama2-7b": "llama-2-7b"}  # table name -> built-in model
KNOWN_GPUS = {"a100-80gb": "A100-80GB", "h100-80gb": "H100-80GB",
              "a100-40gb": "A100-40GB"}  # table name -> built-in GPU (power-capped rows: none)
SHAPE = ["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
INTEGERS = ("tensor_parallel", "prompt_size", "batch_size", "token_size")  # counts, each >= 1
MAX_STEP_MS = 3.6e6  # ms: no engine step of a served model takes an hour (measured: 5-5000 ms)


def read_perf_table(path: str | Path) -> pd.DataFrame:
    """The measured shapes (median over repeats) of the usable rows (read_perf_rows)."""
    return read_perf_rows(path)[0]


def read_perf_rows(path: str | Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """The measured shapes (median over repeats) of the rows with a model and hardware name,
    integer counts >= 1 and finite times in (0, MAX_STEP_MS] ms, and how many other rows each
    reason dropped; ConfigError naming the file and column when none is usable."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as err:
        raise ConfigError("perf_csv", str(path), f"cannot be read as CSV: {err}") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"perf_csv.{missing[0]}", str(path),
                          f"missing column; the table needs {', '.join(COLUMNS)}")
    keep, dropped, first = np.ones(len(frame), dtype=bool), {}, None
    for column, reason, bad in _row_checks(frame):
        hit = keep & bad
        if hit.any():
            dropped[f"{column} {reason}"] = int(hit.sum())
            keep &= ~hit
            first = first or (column, reason, int(np.argmax(hit)))
    if not keep.any():
        column, reason, row = first or ("model", "missing", 0)
        value = frame[column].iloc[row] if len(frame) else None
        value = value.item() if isinstance(value, np.generic) else value
        raise ConfigError(f"perf_csv.{column}", value, f"row {row} of {path}: {reason}; none of "
                          f"its {len(frame)} rows is usable ({_drop_text(dropped)})")
    usable = frame[keep].astype({c: np.int64 for c in INTEGERS})
    usable = usable.astype({c: np.float64 for c in ("prompt_time", "token_time")})
    table = usable.groupby(SHAPE, as_index=False)[["prompt_time", "token_time"]].median()
    return table, dropped


def _row_checks(frame: pd.DataFrame) -> list[tuple[str, str, np.ndarray]]:
    """(column, reason, rows failing) of every check of read_perf_rows, in order; the numeric
    columns are converted in `frame` (a non-number becomes NaN)."""
    checks = []
    for column in ("model", "hardware"):
        text = frame[column].astype("string").str.strip()
        checks.append((column, "empty (no name)", (text.isna() | (text == "")).to_numpy(
            dtype=bool, na_value=True)))
    for column in COLUMNS[2:]:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
        v = frame[column].to_numpy(dtype=np.float64)
        if column in INTEGERS:
            checks.append((column, "not an integer >= 1",
                           ~(np.isfinite(v) & (v >= 1) & (v == np.round(v)))))
        else:
            checks.append((column, f"not a finite number of ms in (0, {MAX_STEP_MS:g}]",
                           ~((v > 0) & (v <= MAX_STEP_MS))))
    return checks


def _drop_text(dropped: Mapping[str, int]) -> str:
    return "; ".join(f"{n} with {reason}" for reason, n in dropped.items())


def _mapping(pairs: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, target = pair.partition("=")
        if not sep or not name or not target:
            raise ConfigError(flag, pair, "must be NAME=TARGET")
        out[name] = target
    return out


def _overrides(pairs: Sequence[str]) -> dict[str, float]:
    out = {}
    for field, text in _mapping(pairs, "--set").items():
        try:
            out[field] = float(text)
        except ValueError:
            raise ConfigError(f"--set {field}", text, "must be a number") from None
        if not math.isfinite(out[field]):
            raise ConfigError(f"--set {field}", text, "must be a finite number")
    return out


def predict_rows(table: pd.DataFrame, options: Mapping[str, Any], models: Mapping[str, str],
                 gpus: Mapping[str, str]) -> tuple[pd.DataFrame, list[str]]:
    """One row per measured shape and regime with predicted and measured seconds; and the
    table's (model, GPU) pairs skipped for want of a mapping."""
    rows, skipped = [], []
    for (name, hw, tp), group in table.groupby(["model", "hardware", "tensor_parallel"]):
        if name not in models or hw not in gpus:
            skipped.append(f"{name} on {hw}")
            continue
        dep = DeploymentSpec(resolve_model(models[name]), resolve_gpu(gpus[hw]), int(tp))
        cost = build_cost_model(dep, options)
        for r in group.itertuples(index=False):
            b, p, kv = int(r.batch_size), int(r.prompt_size), int(r.prompt_size + r.token_size // 2)
            decode = cost.iteration_times_from_sums(b, b * kv, b * kv, b, b, b)[0]
            prefill = cost.iteration_times_from_sums(b * p, 0, 0, b * p * p, b, b)[0]
            if not (math.isfinite(decode) and math.isfinite(prefill)):
                raise ConfigError("--set", dict(options), (
                    f"the cost model predicts {decode!r} s (decode) and {prefill!r} s (prefill) "
                    f"for {name} on {hw} at TP {tp}, batch {b}, prompt {p}: not finite"))
            base = {"model": name, "gpu": hw, "tp": int(tp), "batch_size": b, "prompt_tokens": p,
                    "output_tokens": int(r.token_size)}
            rows.append({**base, "regime": "decode b <= 8" if b <= 8 else "decode b >= 16",
                         "measured_s": r.token_time / 1e3, "predicted_s": float(decode)})
            rows.append({**base, "regime": "prefill", "measured_s": r.prompt_time / 1e3,
                         "predicted_s": float(prefill)})
    out = pd.DataFrame(rows)
    if not out.empty:
        out["rel_err"] = out["predicted_s"] / out["measured_s"] - 1.0
    return out, sorted(set(skipped))


def summarize(rows: pd.DataFrame) -> pd.DataFrame:
    """Median signed and absolute error per (model, GPU, TP, regime)."""
    g = rows.assign(abs_err=rows["rel_err"].abs()).groupby(["model", "gpu", "tp", "regime"])
    return pd.DataFrame({"rows": g.size(), "median_bias": g["rel_err"].median(),
                         "median_abs": g["abs_err"].median()}).reset_index()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.fidelity.e2e",
                                description=__doc__.split("\n")[0])
    p.add_argument("perf_csv", help="measured step times (splitwise-sim's perf_model.csv layout)")
    p.add_argument("--cost-model", default="stage", choices=("stage", "roofline"))
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a cost-model field (a number), e.g. cpu_step_s=4e-3")
    p.add_argument("--model", action="append", default=[], metavar="NAME=MODEL",
                   help="map a table model name to a built-in model or config.json path")
    p.add_argument("--gpu", action="append", default=[], metavar="NAME=GPU",
                   help="map a table hardware name to a built-in GPU or GPU file")
    p.add_argument("--out", default="results/fidelity_e2e", help="output folder")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        table, dropped = read_perf_rows(args.perf_csv)
        models = {**KNOWN_MODELS, **_mapping(args.model, "--model")}
        gpus = {**KNOWN_GPUS, **_mapping(args.gpu, "--gpu")}
        options = {"kind": args.cost_model, **_overrides(args.set)}
        rows, skipped = predict_rows(table, options, models, gpus)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if dropped:
        print(f"warning: {args.perf_csv}: dropped {sum(dropped.values())} rows: "
              f"{_drop_text(dropped)}", file=sys.stderr)
    for pair in skipped:
        print(f"skipped {pair}: no --model / --gpu mapping")
    if rows.empty:
        print("no rows could be predicted", file=sys.stderr)
        return 1
    summary = summarize(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows.to_csv(out / "rows.csv", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    print(summary.to_string(index=False, float_format=lambda v: f"{v:+.3f}"))
    decode = rows[rows["regime"] != "prefill"]
    print(f"{args.cost_model}: decode median |error| {decode['rel_err'].abs().median():.1%} "
          f"(bias {decode['rel_err'].median():+.1%}) over {len(decode)} shapes; wrote "
          f"{out / 'rows.csv'}, {out / 'summary.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
