"""Fitting cost models to a step-time profile (torch-free; used by `real.calibrate`).

roofline  least squares on log(predicted / measured) over `CostModelConfig`'s compute and memory
          efficiencies, per-iteration and per-sequence overheads and activation traffic, with
          several starting points;
learned   gradient-boosted trees (scikit-learn; quick to predict a few rows) of the roofline's
          log-error over the step features, so the roofline carries it outside the grid;
          `export_trees` turns them into plain JSON arrays (`sim.measured.learned_trees`), never a pickle.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from sim.cost.cost_model import CostModelConfig, DeploymentSpec, RooflineCostModel
from sim.measured.calibrated import FEATURES, model_inputs
from sim.measured.learned_trees import FORMAT, FORMAT_VERSION

# fitted CostModelConfig fields, how each maps to the optimizer's variable, and its bounds
FIT_FIELDS = ("compute_efficiency", "memory_efficiency", "step_overhead_s",
              "per_seq_overhead_s", "activation_bytes_factor")
LOWER = np.array([-4.0, -4.0, 0.0, 0.0, 0.0])  # log10 eff, log10 eff, ms, ms, factor
UPPER = np.array([0.0, 0.0, 1e3, 1e2, 1e3])


def roofline_times(model: RooflineCostModel, profile: pd.DataFrame) -> np.ndarray:
    """The model's seconds for each profiled (single-iteration) step."""
    cols = [profile[c].to_numpy(dtype=np.int64) for c in
            ("num_tokens", "sum_context", "sum_new_x_context", "sum_new_squared", "num_seqs",
             "num_sampled")]
    return np.array([model.iteration_times_from_sums(*map(int, row))[0] for row in zip(*cols)])


def _config(x: np.ndarray, base: CostModelConfig) -> CostModelConfig:
    return dataclasses.replace(base, compute_efficiency=float(10 ** x[0]),
                               memory_efficiency=float(10 ** x[1]),
                               step_overhead_s=float(x[2]) * 1e-3,
                               per_seq_overhead_s=float(x[3]) * 1e-3,
                               activation_bytes_factor=float(x[4]))


def error_stats(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """Median, p90 and mean absolute relative error of predictions."""
    err = np.abs(predicted - measured) / measured
    return {"median_abs_rel_err": float(np.median(err)), "p90_abs_rel_err":
            float(np.percentile(err, 90)), "mean_abs_rel_err": float(err.mean())}


def fit_roofline(profile: pd.DataFrame, deployment: DeploymentSpec,
                 base: CostModelConfig = CostModelConfig()) -> tuple[CostModelConfig, dict]:
    """CostModelConfig minimizing the squared log-error of the roofline on the profile."""
    from scipy.optimize import least_squares  # lazy: scipy comes with scikit-learn

    measured = profile["seconds"].to_numpy(dtype=np.float64)

    def residuals(x: np.ndarray) -> np.ndarray:
        model = RooflineCostModel(deployment, _config(x, base))
        return np.log(roofline_times(model, profile)) - np.log(measured)

    floor_ms = float(measured.min()) * 1e3
    best = None
    for c_eff in (-0.3, -2.5):
        for m_eff in (-0.3, -2.0):
            x0 = np.array([c_eff, m_eff, floor_ms * 0.5, 0.0, base.activation_bytes_factor])
            x0 = np.clip(x0, LOWER + 1e-9, UPPER - 1e-9)
            res = least_squares(residuals, x0, bounds=(LOWER, UPPER), x_scale="jac",
                                diff_step=1e-4, max_nfev=200)
            if best is None or res.cost < best.cost:
                best = res
    config = _config(best.x, base)  # type: ignore[union-attr]
    predicted = roofline_times(RooflineCostModel(deployment, config), profile)
    return config, error_stats(predicted, measured)


def fit_learned(profile: pd.DataFrame, roofline: RooflineCostModel, seed: int = 0):
    """A regressor of log(measured / roofline) over the features, and its error stats
    (in-sample and 5-fold cross-validated)."""
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.model_selection import KFold, cross_val_predict

    measured = profile["seconds"].to_numpy(dtype=np.float64)
    base = roofline_times(roofline, profile)
    x = model_inputs(profile[list(FEATURES)].to_numpy(dtype=np.float64), base)
    y = np.log(measured) - np.log(base)
    regressor = GradientBoostingRegressor(n_estimators=200, learning_rate=0.05, max_depth=3,
                                          min_samples_leaf=2, subsample=0.8, random_state=seed)
    regressor.fit(x, y)
    stats = error_stats(base * np.exp(regressor.predict(x)), measured)
    folds = min(5, len(y))
    if folds >= 2:
        cv = cross_val_predict(regressor, x, y, cv=KFold(folds, shuffle=True, random_state=seed))
        stats.update({f"cv_{k}": v for k, v in error_stats(base * np.exp(cv), measured).items()})
    return regressor, stats


def export_trees(regressor: Any) -> dict[str, Any]:
    """A fitted GradientBoostingRegressor as the JSON object `sim.measured.learned_trees` reads."""
    from sklearn.dummy import DummyRegressor
    from sklearn.ensemble import GradientBoostingRegressor

    if not isinstance(regressor, GradientBoostingRegressor):
        raise TypeError(f"can store a GradientBoostingRegressor, not {type(regressor).__name__}")
    if isinstance(regressor.init_, str) and regressor.init_ == "zero":
        init = 0.0
    elif isinstance(regressor.init_, DummyRegressor):
        init = float(np.ravel(regressor.init_.constant_)[0])
    else:
        raise TypeError(f"cannot store an init estimator {type(regressor.init_).__name__}")
    trees = []
    for stage in regressor.estimators_[:, 0]:
        t = stage.tree_
        trees.append({"children_left": t.children_left.tolist(),
                      "children_right": t.children_right.tolist(),
                      "feature": t.feature.tolist(), "threshold": t.threshold.tolist(),
                      "value": t.value[:, 0, 0].tolist()})
    return {"format": FORMAT, "format_version": FORMAT_VERSION,
            "num_inputs": int(regressor.n_features_in_), "init": init,
            "learning_rate": float(regressor.learning_rate), "trees": trees}
