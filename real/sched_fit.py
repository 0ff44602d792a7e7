"""Fit the scheduling overhead (`sim.cost.overhead`) to measured scheduler host times; torch-free.

The engine loop (`sim.engine.simulation`) times every Step's `policy.next_step` + `policy.update` with
`time.perf_counter` into the steps table's `policy_host_s` column; a real replay (`python -m
experiments.run CONFIG --backend real`, `real.replay`) writes it to `runs/<run>/host_timing.parquet`
(a measurement, kept out of steps.parquet: experiments/files/host_files.py; a run's steps.parquet given
here is read from the host_timing.parquet beside it, and older runs' steps.parquet still hold the
column). `fit_scheduling` fits `host = fixed_s + per_request_s * num_seqs` by least squares; `python
-m real.calibrate --scheduling STEPS.parquet ... --out FILE.json` stores the result as FILE.json's
`scheduling_overhead` section, which a cluster uses as `scheduling_overhead: {calibration:
FILE.json, mode: serial | async}`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError
from sim.util.jsonfile import read_json_object

COLUMNS = ("num_seqs", "num_iterations", "policy_host_s")
HOST_FILE = "host_timing.parquet"  # a run's measured host time per step
MIN_SINGLE = 20  # single-iteration steps needed to fit on them alone
OUTLIER_MADS = 3.0  # residuals beyond this many robust sigmas are dropped before the refit


def read_steps(paths: Sequence[str | Path]) -> pd.DataFrame:
    """The measured steps (num_seqs, policy_host_s) of one or more steps.parquet files."""
    frames = []
    for path in paths:
        if not Path(path).is_file():
            raise ConfigError("--scheduling", str(path), "no such steps file")
        df = pd.read_parquet(path) if str(path).endswith(".parquet") else pd.read_csv(path)
        beside = Path(path).with_name(HOST_FILE)
        if "policy_host_s" not in df.columns and beside.is_file():
            df = pd.read_parquet(beside)  # the run's measured host times
        missing = [c for c in COLUMNS if c not in df.columns]
        if missing:
            raise ConfigError("--scheduling", str(path), f"has no {', '.join(missing)} column "
                              f"(a run's {HOST_FILE}, or an older run's steps.parquet)")
        frames.append(df[list(COLUMNS)])
    steps = pd.concat(frames, ignore_index=True)
    return steps[steps["num_seqs"] > 0]


def _least_squares(b: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """`y ~ fixed + per_request * b` with both coefficients >= 0."""
    (fixed, per_request), *_ = np.linalg.lstsq(np.column_stack((np.ones_like(b), b)), y,
                                               rcond=None)
    if per_request < 0 or np.ptp(b) == 0:  # no measurable growth with the batch
        return float(y.mean()), 0.0
    if fixed < 0:  # through the origin
        return 0.0, float((b @ y) / (b @ b))
    return float(fixed), float(per_request)


def fit_scheduling(steps: pd.DataFrame) -> dict[str, Any]:
    """Least-squares `fixed_s + per_request_s * num_seqs` of `policy_host_s` (both >= 0).

    One scheduler invocation stands for one iteration, so single-iteration Steps are used when
    there are enough of them (a multi-iteration Step's update covers several iterations). Steps
    whose residual exceeds OUTLIER_MADS robust sigmas (the OS preempting the process, garbage
    collection) are dropped and the rest refitted."""
    single = steps[steps["num_iterations"] == 1]
    used = single if len(single) >= MIN_SINGLE else steps
    if len(used) < 2:
        raise ConfigError("--scheduling", len(used), "needs at least 2 measured steps")
    b = used["num_seqs"].to_numpy(dtype=np.float64)
    y = used["policy_host_s"].to_numpy(dtype=np.float64)
    fixed, per_request = _least_squares(b, y)
    res = y - (fixed + per_request * b)
    mad = 1.4826 * float(np.median(np.abs(res - np.median(res))))
    keep = np.abs(res - np.median(res)) <= OUTLIER_MADS * mad if mad > 0 else b == b
    if keep.sum() >= 2:
        fixed, per_request = _least_squares(b[keep], y[keep])
    stats = _fit_stats(b, y, fixed + per_request * b, keep)
    stats["single_iteration_steps_only"] = len(used) < len(steps)
    return {"fixed_s": fixed, "per_request_s": per_request, "per_token_s": 0.0, "fit": stats}


def _fit_stats(b: np.ndarray, y: np.ndarray, pred: np.ndarray, keep: np.ndarray
               ) -> dict[str, Any]:
    """What the fit saw and how well it explains the inliers."""
    yk, pk = y[keep], pred[keep]
    ss_tot = float(((yk - yk.mean()) ** 2).sum())
    return {"num_steps": len(y), "num_outliers": int((~keep).sum()),
            "mean_host_s": float(y.mean()), "median_host_s": float(np.median(y)),
            "p99_host_s": float(np.percentile(y, 99)), "mean_num_seqs": float(b.mean()),
            "max_num_seqs": int(b.max()),
            "r2_inliers": 1.0 - float(((yk - pk) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0,
            "median_abs_rel_error": float(np.median(np.abs(pred - y) / np.maximum(y, 1e-12)))}


def add_scheduling(out: str | Path, steps_paths: Sequence[str | Path]) -> dict[str, Any]:
    """Fit the steps and write the fit into calibration JSON `out` (created or updated)."""
    out = Path(out)
    section = fit_scheduling(read_steps(steps_paths))
    section["fit"]["steps_files"] = [str(p) for p in steps_paths]
    data = (read_json_object(out, "--out", "calibration") if out.is_file()
            else {"version": 1})
    data["scheduling_overhead"] = section
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return section
