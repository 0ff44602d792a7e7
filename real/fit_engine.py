"""Fit `sim.cost.engine_time.EngineTimeParams` on a profile and on replayed steps (torch-free).

Least squares on log(modelled / measured) seconds, over
  profile rows   one iteration each (`real.profile`): its features from the row's sums
                 (`sim.core.step_shape.shape_from_sums` splits prefill chunks from decode rows;
                 exact for the profile's grid), and, where the profile timed the first pass
                 of a shape, that pass with its first-run shape cost;
  replay steps   whole Steps a real replay ran (`real.step_log`): the sum of their iterations
                 plus the shapes they ran for the first time.
`cross_validate` predicts every replay step from a fit that never saw it (k folds, the profile
always in), the number to trust before using a calibration on other schedules.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from real.step_log import StepSample
from sim.core.step_shape import shape_from_sums
from sim.cost.engine_time import (EngineTimeModel, EngineTimeParams, EngineWork, IterationFeatures,
                             step_iteration_features)

# fitted fields, the optimizer's variable for each, and its bounds
HOST_MS = ("iteration_host_s", "per_seq_host_s", "per_chunk_host_s", "step_host_s",
           "sync_host_s", "new_shape_s", "eager_host_s", "mixed_host_s",
           "chunk_graph_host_s", "device_floor_s")  # fitted in milliseconds
EFFICIENCIES = ("weight_efficiency", "compute_efficiency", "attention_efficiency",
                "kv_efficiency")  # fitted as log10
FIELDS = HOST_MS + EFFICIENCIES + ("overlap", "kv_programs", "roofline_p")
LOWER = np.array([0.0] * len(HOST_MS) + [-3.0] * len(EFFICIENCIES) + [1.0, 0.0, 1.0])
UPPER = np.array([1e3] * len(HOST_MS) + [0.0] * len(EFFICIENCIES) + [32.0, 8192.0, 64.0])


@dataclass(frozen=True)
class FitData:
    """Everything the residuals need, as flat arrays (built once per fit)."""

    features: IterationFeatures  # every modelled iteration, profile rows first
    measured: np.ndarray  # seconds per observation
    starts: np.ndarray  # first iteration of each observation in `features`
    new_shapes: np.ndarray  # first-run shapes per observation
    source: np.ndarray  # label per observation: "profile" or the run


def profile_features(profile: pd.DataFrame) -> IterationFeatures:
    """Features of profile rows (one iteration each) from their recorded sums."""
    cols = {c: profile[c].to_numpy(dtype=np.float64) for c in profile.columns
            if c != "kind"}
    kv_paged = np.empty(len(profile))
    for i in range(len(profile)):
        shape = shape_from_sums(int(cols["num_tokens"][i]), int(cols["sum_context"][i]),
                                int(cols["sum_new_x_context"][i]),
                                int(cols["sum_new_squared"][i]), int(cols["num_seqs"][i]))
        kv_paged[i] = shape.num_decode * (shape.decode_kv + 1.0)
    if "decode_kv" in cols:  # recorded by newer profiles
        kv_paged = cols["decode_kv"]
    t = cols["num_tokens"]
    num_decode = cols["num_seqs"] - cols["num_prefill_seqs"]
    longest = np.divide(cols["decode_padded_kv"], num_decode, out=np.zeros(len(profile)),
                        where=num_decode > 0)
    return IterationFeatures(
        num_tokens=t, num_seqs=cols["num_seqs"], num_sampled=cols["num_sampled"],
        num_prefill=cols["num_prefill_seqs"],
        pairs=cols["sum_new_x_context"] + (cols["sum_new_squared"] + t) / 2.0,
        kv_paged=kv_paged, kv_padded=cols["decode_padded_kv"], first=cols["first_iteration"],
        synced=cols["synced"] if "synced" in cols else np.zeros(len(profile)),
        kv_longest=longest)


def _concat(parts: Sequence[IterationFeatures]) -> IterationFeatures:
    return IterationFeatures(*(np.concatenate([getattr(p, f.name) for p in parts])
                               for f in dataclasses.fields(IterationFeatures)))


def fit_data(profile: pd.DataFrame | None, samples: Sequence[StepSample]) -> FitData:
    """Observations of the profile rows (and their first passes) and of the replay steps."""
    parts, measured, lengths, shapes, source = [], [], [], [], []
    if profile is not None and len(profile):
        feats = profile_features(profile)
        parts.append(feats)
        measured += profile["seconds"].tolist()
        lengths += [1] * len(profile)
        shapes += [0.0] * len(profile)
        source += ["profile"] * len(profile)
        if "seconds_first" in profile.columns:  # the first pass: shapes new to the engine
            first = profile["seconds_first"].notna().to_numpy()
            parts.append(IterationFeatures(*(getattr(feats, f.name)[first] for f in
                                             dataclasses.fields(IterationFeatures))))
            measured += profile.loc[first, "seconds_first"].tolist()
            lengths += [1] * int(first.sum())
            shapes += profile.loc[first, "new_shapes_first"].astype(float).tolist()
            source += ["profile_first"] * int(first.sum())
    for s in samples:
        parts.append(step_iteration_features(s.step, s.num_iterations, s.synced))
        measured.append(s.duration_s)
        lengths.append(max(s.num_iterations, 1))
        shapes.append(float(np.sum(s.new_shapes)))
        source.append(s.run)
    if not parts:
        raise ValueError("nothing to fit: no profile rows and no replay steps")
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return FitData(_concat(parts), np.asarray(measured, dtype=np.float64), starts,
                   np.asarray(shapes), np.asarray(source, dtype=object))


def params_of(x: np.ndarray, base: EngineTimeParams) -> EngineTimeParams:
    """EngineTimeParams from the optimizer's variable."""
    values: dict[str, Any] = {}
    for name, v in zip(FIELDS, x):
        if name in HOST_MS:
            values[name] = float(v) * 1e-3
        elif name in EFFICIENCIES:
            values[name] = float(min(10 ** v, 1.0))
        else:
            values[name] = float(v)
    return dataclasses.replace(base, **values)


def predict(params: EngineTimeParams, work: EngineWork, data: FitData) -> np.ndarray:
    """Modelled seconds of each observation."""
    times = EngineTimeModel(params, work).times(data.features)
    return np.add.reduceat(times, data.starts) + params.new_shape_s * data.new_shapes


def _starts(base: EngineTimeParams, floor_ms: float, shapes: bool) -> list[np.ndarray]:
    out = []
    for overlap in (2.0, 8.0):
        for eff in (-0.1, -0.6):
            start = dict.fromkeys(FIELDS, 0.0)
            start.update(iteration_host_s=floor_ms * 0.5, new_shape_s=40.0 if shapes else 0.0,
                         eager_host_s=floor_ms if base.max_graph_batch > 0 else 0.0,
                         weight_efficiency=eff, compute_efficiency=eff - 0.2,
                         attention_efficiency=eff - 0.5, kv_efficiency=eff - 0.2,
                         overlap=overlap, kv_programs=2.0 * base.decode_split_sms,
                         roofline_p=overlap * 2.0)
            x = np.array([start[name] for name in FIELDS])
            out.append(np.clip(x, LOWER + 1e-9, UPPER - 1e-9))
    return out


def fit_engine(data: FitData, work: EngineWork, base: EngineTimeParams
               ) -> EngineTimeParams:
    """The params minimizing the squared log-error over `data` (several starting points).
    `base` fixes the structural fields (decode_kv, shape_granularity)."""
    from scipy.optimize import least_squares  # lazy: scipy comes with scikit-learn

    upper = UPPER.copy()
    has_shapes = base.shape_granularity > 0 and bool(np.any(data.new_shapes))
    if not has_shapes:  # nothing identifies the first-run cost
        upper[FIELDS.index("new_shape_s")] = 1e-9
    if not np.any(data.features.synced):  # nor the gap after a waited-for iteration
        upper[FIELDS.index("sync_host_s")] = 1e-9
    if base.max_graph_batch <= 0:  # no graph replays: launches are all in iteration_host_s
        upper[FIELDS.index("eager_host_s")] = 1e-9
    if base.max_graph_tokens <= 0:  # no graphs of prefill chunks
        upper[FIELDS.index("chunk_graph_host_s")] = 1e-9
    if base.decode_split_sms <= 0:  # no split-KV plan: decode KV is streamed as a whole
        upper[FIELDS.index("kv_programs")] = 1e-9
    log_measured = np.log(data.measured)

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(predict(params_of(x, base), work, data)) - log_measured

    floor_ms = float(np.min(data.measured)) * 1e3
    best = None
    for x0 in _starts(base, floor_ms, has_shapes):
        res = least_squares(residuals, np.minimum(x0, upper - 1e-12), bounds=(LOWER, upper),
                            x_scale="jac", diff_step=1e-4, max_nfev=400)
        if best is None or res.cost < best.cost:
            best = res
    return params_of(best.x, base)  # type: ignore[union-attr]


def error_stats(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """Count, median, p90 and mean of |predicted - measured| / measured."""
    err = np.abs(predicted - measured) / measured
    if not len(err):
        return {"n": 0}
    return {"n": int(len(err)), "median_abs_rel_err": float(np.median(err)),
            "p90_abs_rel_err": float(np.percentile(err, 90)),
            "mean_abs_rel_err": float(err.mean()),
            "bias": float(np.median(predicted / measured) - 1.0)}


def stats_by_source(predicted: np.ndarray, data: FitData) -> dict[str, dict[str, float]]:
    """error_stats per observation source (profile, each replay run)."""
    return {str(src): error_stats(predicted[data.source == src], data.measured[data.source == src])
            for src in dict.fromkeys(data.source.tolist())}


def subset(data: FitData, keep: np.ndarray) -> FitData:
    """The observations where `keep` is true."""
    lengths = np.diff(np.append(data.starts, len(data.features.num_tokens)))
    rows = np.repeat(keep, lengths)
    feats = IterationFeatures(*(getattr(data.features, f.name)[rows] for f in
                                dataclasses.fields(IterationFeatures)))
    kept = lengths[keep]
    starts = np.concatenate([[0], np.cumsum(kept)[:-1]]).astype(np.int64)
    return FitData(feats, data.measured[keep], starts, data.new_shapes[keep], data.source[keep])


def cross_validate(data: FitData, work: EngineWork, base: EngineTimeParams, folds: int,
                   seed: int = 0) -> np.ndarray:
    """Held-out predictions of every replay observation (k folds over replay steps; profile
    observations are always fitted on and predicted in sample). NaN where none was made."""
    replay = np.flatnonzero(~np.isin(data.source, ["profile", "profile_first"]))
    predicted = np.full(len(data.measured), np.nan)
    if len(replay) < 2 or folds < 2:
        return predicted
    rng = np.random.default_rng(seed)
    for fold in np.array_split(rng.permutation(replay), min(folds, len(replay))):
        fold = np.sort(fold)
        train = np.ones(len(data.measured), dtype=bool)
        train[fold] = False
        params = fit_engine(subset(data, train), work, base)
        predicted[fold] = predict(params, work, subset(data, ~train))
    return predicted
