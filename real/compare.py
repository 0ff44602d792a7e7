"""Errors of a simulated run against a real one (torch-free; used by experiments.validate.main).

Three comparisons:
  metrics     TTFT, TPOT and E2E (mean and p99), request and token throughput of the two runs;
  by order    step durations of the two runs matched by order (the schedules may diverge once
              times differ, so `same_shape` says how many matched steps had equal batches);
  same shape  each step the real engine ran, re-timed by the calibrated model: the model's error
              on exactly the measured shapes, per step and per iteration.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

METRICS = ("mean_ttft_s", "p99_ttft_s", "mean_tpot_s", "p99_tpot_s", "mean_e2e_s", "p99_e2e_s",
           "request_throughput", "output_throughput", "total_token_throughput")


def rel_error(sim: float, real: float) -> float:
    """(sim - real) / real; NaN when undefined."""
    if not (math.isfinite(sim) and math.isfinite(real)) or real == 0:
        return math.nan
    return (sim - real) / real


def metric_errors(real: Mapping[str, float], sim: Mapping[str, float]) -> list[dict[str, Any]]:
    """One row per metric: real value, simulated value, relative error."""
    return [{"metric": m, "real": float(real[m]), "sim": float(sim[m]),
             "rel_error": rel_error(float(sim[m]), float(real[m]))} for m in METRICS]


def abs_rel_stats(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """Count, median and p90 of |predicted - measured| / measured."""
    ok = measured > 0
    err = np.abs(predicted[ok] - measured[ok]) / measured[ok]
    if not len(err):
        return {"n": 0, "median_abs_rel_err": math.nan, "p90_abs_rel_err": math.nan}
    return {"n": int(len(err)), "median_abs_rel_err": float(np.median(err)),
            "p90_abs_rel_err": float(np.percentile(err, 90))}


def step_errors_by_order(real_steps: pd.DataFrame, sim_steps: pd.DataFrame) -> dict[str, float]:
    """Step durations matched by order, with the share of matched steps of equal shape."""
    n = min(len(real_steps), len(sim_steps))
    r, s = real_steps.iloc[:n], sim_steps.iloc[:n]
    stats: dict[str, float] = abs_rel_stats(s["duration_s"].to_numpy(), r["duration_s"].to_numpy())
    same = ((r["num_seqs"].to_numpy() == s["num_seqs"].to_numpy())
            & (r["num_new_tokens"].to_numpy() == s["num_new_tokens"].to_numpy())
            & (r["num_iterations"].to_numpy() == s["num_iterations"].to_numpy()))
    stats.update({"real_steps": len(real_steps), "sim_steps": len(sim_steps),
                  "same_shape": float(same.mean()) if n else math.nan})
    return stats


def same_shape_pairs(step_log: Sequence[Any], time_model: Any, new_shape_s: float = 0.0
                     ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Measured vs predicted seconds of each logged real step (its completed iterations), and
    the per-iteration measured and predicted seconds of all of them. `new_shape_s` charges the
    attention shapes each iteration ran for the first time (`StepLog.new_shapes`)."""
    rows, meas_it, pred_it = [], [], []
    for entry in step_log:
        m = len(entry.iteration_ends_s)
        if m == 0 or entry.step.num_seqs == 0:
            continue
        if getattr(time_model, "sync_aware", False) and getattr(entry, "synced", False):
            pred = time_model.iteration_times(entry.step, m, True)
        else:
            pred = time_model.iteration_times(entry.step, m)
        if new_shape_s:
            pred = pred + new_shape_s * np.asarray(entry.new_shapes, dtype=np.float64)[:m]
        meas = np.diff(entry.iteration_ends_s, prepend=0.0)
        rows.append({"measured_s": float(entry.iteration_ends_s[-1]),
                     "predicted_s": float(pred.sum()), "num_iterations": m,
                     "num_seqs": entry.step.num_seqs,
                     "num_new_tokens": entry.step.num_first_tokens})
        meas_it.append(meas)
        pred_it.append(pred)
    if not rows:
        return pd.DataFrame(columns=["measured_s", "predicted_s"]), np.zeros(0), np.zeros(0)
    return pd.DataFrame(rows), np.concatenate(meas_it), np.concatenate(pred_it)
