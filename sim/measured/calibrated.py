"""Calibrated cost models fitted on real profiles (`python -m real.calibrate`); torch-free.

A calibration file (JSON) names the deployment that was profiled (model shape, device peaks,
dtypes, KV capacity and block size) and holds two fitted models of one iteration's time:
  roofline  `sim.cost.cost_model.CostModelConfig` efficiencies and overheads fitted by least squares;
  learned   gradient-boosted trees of log(measured / roofline) over step features (Vidur's
            idea of learning from profiles, here as a correction the roofline extrapolates),
            stored as plain JSON arrays (`sim.measured.learned_trees`): loading one executes nothing;
  engine    the engine's host work overlapped with its device work, plus what a new attention
            shape costs it (`sim/cost/engine_time.py`), fitted on the profile and on replayed steps:
            the default when the file has it.
A cluster config loads one by name: `cluster.cost_model: {calibration: FILE, kind: learned}`.
A file of `servesim calibrate` holds `cost_model` options fitted to a serving benchmark instead
(kind `cost_model`, its default): `fitted_cost_model` gives them, and the cluster runs its own
cost model with them (sim/cluster/spec.py), after checking it is the model, GPU and TP fitted.
`CalibratedExecutor` runs Steps with it and, unlike the plain cost model, runs out of KV memory
at block granularity, as the real engine's paged cache does.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Protocol

import numpy as np

from sim.core.executor import Step, StepResult, modelled_result
from sim.cost.cost_model import RooflineCostModel
from sim.cost.engine_shapes import ShapeCache, ShapeKey
from sim.measured.calibration_file import (WHERE, calibrated_engine, calibrated_roofline, fitted_options,
                                  learned_model, profiled_int, read_calibration)
from sim.util.errors import ConfigError, check_positive
from sim.util.jsonfile import int_value

KINDS = ("roofline", "learned", "engine", "cost_model")  # cost_model: servesim calibrate's
OPTION_KEYS = ("calibration", "kind", "kv_capacity_tokens", "block_size", "frontend_s")
FITTED_KEYS = ("calibration", "kind", "frontend_s")  # beside a benchmark calibration
FEATURES = ("num_tokens", "num_seqs", "num_sampled", "num_prefill_seqs", "num_prefill_tokens",
            "sum_context", "sum_new_x_context", "sum_new_squared", "max_kv_len",
            "decode_padded_kv", "first_iteration")
MAX_PREDICTED_ITERATIONS = 64  # a learned model predicts at most this many iterations, then
# interpolates its correction (the roofline part stays exact)


def step_features(step: Step, num_iterations: int | None = None) -> np.ndarray:
    """Features of each iteration of `step` [iterations, len(FEATURES)] (float64).

    decode_padded_kv = 1-token chunks x the longest of their KV lengths (the padded batch the
    sdpa backend attends over); max_kv_len = the longest KV length after the iteration;
    first_iteration = 1 for the step's first iteration (which also pays the step's host work)."""
    k = step.num_iterations if num_iterations is None else num_iterations
    n = np.asarray(step.num_new_tokens, dtype=np.float64)
    c = np.asarray(step.num_context_tokens, dtype=np.float64)
    b = float(len(n))
    kv = c + n
    pre = n > 1
    out = np.empty((max(k, 1), len(FEATURES)))
    dec_kv = kv[~pre].max() if (~pre).any() else 0.0
    out[0] = (n.sum(), b, float(sum(step.samples)), pre.sum(), n[pre].sum(), c.sum(),
              (n * c).sum(), (n * n).sum(), kv.max() if b else 0.0, (~pre).sum() * dec_kv, 1.0)
    if k > 1:
        j = np.arange(k - 1, dtype=np.float64)  # later iterations: one token per request
        ctx = kv.sum() + j * b
        top = (kv.max() if b else 0.0) + j + 1
        rows = out[1:]
        rows[:, 0] = rows[:, 1] = rows[:, 2] = b
        rows[:, 3] = rows[:, 4] = 0.0
        rows[:, 5] = rows[:, 6] = ctx
        rows[:, 7] = b
        rows[:, 8] = top
        rows[:, 9] = b * top
        rows[:, 10] = 0.0
    return out[:k]


class TimeModel(Protocol):
    """Seconds of each of a Step's first iterations. A model with `sync_aware = True` also takes
    `synced`: the engine reads the clock after each iteration (it watches for an arrival)."""

    def iteration_times(self, step: Step, num_iterations: int) -> np.ndarray: ...


class RooflineTimes:
    """Iteration times from a (calibrated) roofline cost model."""

    def __init__(self, cost_model: RooflineCostModel) -> None:
        self.cost_model = cost_model  # the fitted roofline

    def iteration_times(self, step: Step, num_iterations: int) -> np.ndarray:
        n, c = step.num_new_tokens, step.num_context_tokens
        return self.cost_model.iteration_times_from_sums(
            sum(n), sum(c), sum(a * b for a, b in zip(n, c)), sum(a * a for a in n), len(n),
            sum(step.samples), num_iterations)


class LearnedTimes:
    """Roofline times times exp(a regressor's log-correction over the step features)."""

    def __init__(self, roofline: RooflineTimes, regressor: Any) -> None:
        self.roofline = roofline  # the calibrated roofline being corrected
        self.regressor = regressor  # TreeEnsemble: model_inputs -> log(measured / roofline)

    def iteration_times(self, step: Step, num_iterations: int) -> np.ndarray:
        base = self.roofline.iteration_times(step, num_iterations)
        feats = step_features(step, num_iterations)
        if num_iterations <= MAX_PREDICTED_ITERATIONS:
            return base * np.exp(self.regressor.predict(model_inputs(feats, base)))
        at = np.unique(np.linspace(0, num_iterations - 1, MAX_PREDICTED_ITERATIONS).astype(int))
        corr = self.regressor.predict(model_inputs(feats[at], base[at]))
        return base * np.exp(np.interp(np.arange(num_iterations), at, corr))


def model_inputs(features: np.ndarray, roofline_s: np.ndarray) -> np.ndarray:
    """Regressor inputs: log1p of the features and the log of the roofline time."""
    return np.column_stack([np.log1p(features), np.log(roofline_s)])


class CalibratedExecutor:
    """Runs Steps instantly with a calibrated time model; KV is paged in `block_size` blocks."""

    def __init__(self, times: TimeModel, kv_capacity_tokens: int, block_size: int = 1,
                 name: str = "calibrated", max_model_len: int | None = None,
                 shapes: ShapeCache | None = None, new_shape_s: float = 0.0) -> None:
        if block_size < 1 or kv_capacity_tokens < block_size:
            raise ConfigError("kv_capacity_tokens", kv_capacity_tokens,
                              f"must hold at least one block of {block_size} tokens")
        self.times = times  # iteration-time model
        self.sync_aware = getattr(times, "sync_aware", False)  # models a watched step's syncs
        self.shapes = shapes  # attention shapes the modelled engine has run (engine kind)
        self.new_shape_s = new_shape_s  # seconds a first run of an attention shape costs
        self.block_size = block_size  # tokens per KV block
        self.num_blocks = kv_capacity_tokens // block_size  # blocks in the cache
        self.name = name  # human label
        self.max_model_len = max_model_len  # tokens: the profiled model's context (sim/engine/limits.py)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def _blocks_after(self, kv_lens: np.ndarray, iteration: int) -> int:
        """Blocks the batch holds after `iteration` (1-based) iterations."""
        return int((-(-(kv_lens + iteration - 1) // self.block_size)).sum())

    def _first_oom_iteration(self, step: Step, num_iterations: int) -> int:
        """1-based iteration whose KV first exceeds the cache, or 0 if none does."""
        kv = np.asarray(step.num_context_tokens, dtype=np.int64) + step.num_new_tokens
        cap = self.num_blocks + step.num_shared_kv_tokens // self.block_size  # shared: held once
        if self._blocks_after(kv, num_iterations) <= cap:
            return 0
        lo, hi = 1, num_iterations  # blocks grow with iterations: find the first over
        while lo < hi:
            mid = (lo + hi) // 2
            if self._blocks_after(kv, mid) > cap:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        """Model `step`; stop after the first iteration ending at or after `until_s` seconds."""
        oom_at = self._first_oom_iteration(step, step.num_iterations) if step.num_seqs else 0
        k = oom_at or step.num_iterations
        if self.sync_aware and until_s != math.inf:
            times = self.times.iteration_times(step, k, True)  # the host waits per iteration
        else:
            times = self.times.iteration_times(step, k)
        if self.shapes is None or not self.new_shape_s:
            return modelled_result(np.cumsum(times), until_s, oom_at)
        result = modelled_result(np.cumsum(times + self.new_shape_s
                                           * self.shapes.new_per_iteration(step, k)),
                                 until_s, oom_at)
        self.shapes.record(step, result.num_iterations)  # the iterations that ran
        return result


# ---- calibration files (read in sim/measured/calibration_file.py: JSON data only) -------------------
def default_kind(data: Mapping[str, Any]) -> str:
    """The kind a calibration is used as when none is named: cost_model if it holds fitted
    cost-model options (servesim calibrate), engine if fitted, else roofline."""
    if data.get("cost_model") is not None:
        return "cost_model"
    return "engine" if data.get("engine") else "roofline"


def fitted_cost_model(options: Mapping[str, Any], model: str, gpu: str,
                      tensor_parallel: int) -> dict[str, Any] | None:
    """The `cluster.cost_model` options a `{calibration: FILE}` of `servesim calibrate` stands
    for (its fitted options, the cluster's own `frontend_s` over the file's); None when the
    file is used as a calibrated executor (`python -m real.calibrate`, or another kind named).
    ConfigError naming the file unless it was fitted for `model` on `gpu` at `tensor_parallel`."""
    path = options.get("calibration")
    if not isinstance(path, (str, Path)):
        raise ConfigError(WHERE, path, "must be the path of a calibration JSON file")
    data = read_calibration(path, WHERE)
    fitted = fitted_options(data, path)
    kind = options.get("kind") or default_kind(data)
    if kind != "cost_model":
        return None
    if fitted is None:
        raise ConfigError("cluster.cost_model.kind", kind, f"{path} holds no fitted cost_model "
                          f"(`servesim calibrate BENCH.json` writes one)")
    for key in options:
        if key not in FITTED_KEYS:
            raise ConfigError(f"cluster.cost_model.{key}", options[key], f"not beside a "
                              f"benchmark calibration ({path}); known: {', '.join(FITTED_KEYS)}")
    mine = (data["model"].get("name"), data["device"].get("name"), data.get("tensor_parallel", 1))
    if mine != (model, gpu, tensor_parallel):
        raise ConfigError(WHERE, str(path), f"fitted for {mine[0]} on {mine[1]} with "
                          f"tensor_parallel {mine[2]}, but the cluster runs {model} on {gpu} with "
                          f"tensor_parallel {tensor_parallel}: set cluster.model, cluster.gpu and "
                          f"cluster.tensor_parallel as fitted (servesim run --calibration does)")
    own = {"frontend_s": options["frontend_s"]} if "frontend_s" in options else {}
    return {**fitted, **own}


def load_calibrated_executor(path: str | Path, kind: str | None = None,
                             kv_capacity_tokens: int | None = None,
                             block_size: int | None = None,
                             where: str = WHERE,
                             seen_shapes: tuple[ShapeKey, ...] = ()) -> CalibratedExecutor:
    """An executor from a calibration file; capacity and block size default to the profiled
    engine's, the kind to `default_kind`. Nothing in the file is executed: a learned model is
    JSON trees. `seen_shapes`: attention shapes the modelled engine has already run (engine)."""
    if kind is not None and (not isinstance(kind, str) or kind not in KINDS[:3]):
        raise ConfigError("cluster.cost_model.kind", kind, f"one of {', '.join(KINDS)} (a "
                          f"cost_model calibration runs on the cluster's cost model)")
    if not isinstance(path, (str, Path)):
        raise ConfigError(where, path, "must be the path of a calibration JSON file")
    data = read_calibration(path, where)
    kind = kind or default_kind(data)
    if kind == "cost_model":
        raise ConfigError(where, str(path), "holds cost-model options fitted to a serving "
                          "benchmark (servesim calibrate): they run on the cluster's own cost "
                          "model, as cluster.cost_model: {calibration: FILE}")
    roofline = calibrated_roofline(data, path, where)
    times: TimeModel = RooflineTimes(roofline)
    shapes, new_shape_s = None, 0.0
    if kind == "learned":
        if not data.get("learned"):
            raise ConfigError("cluster.cost_model.kind", kind, f"{path} holds no learned model")
        times = LearnedTimes(times, learned_model(data, path, FEATURES, where))
    elif kind == "engine":
        if not data.get("engine"):
            raise ConfigError("cluster.cost_model.kind", kind, f"{path} holds no engine model; "
                              f"re-run python -m real.calibrate on its profile")
        engine = calibrated_engine(data, path, where)
        times, new_shape_s = engine, engine.params.new_shape_s
    if kv_capacity_tokens is None:
        kv_capacity_tokens = profiled_int(data, "kv_capacity_tokens", path, where)
    if block_size is None:
        block_size = profiled_int(data, "block_size", path, where, default=1)
    if kind == "engine":
        warmup = profiled_int(data["engine"], "warmup_iterations", path, f"{where}.engine",
                              default=2)
        shapes = ShapeCache.after_warmup(engine.params.shape_granularity, kv_capacity_tokens,
                                         warmup, seen_shapes)
    deployment = roofline.deployment
    name = f"{deployment.model.name} on {deployment.gpu.name} (calibrated {kind})"
    return CalibratedExecutor(times, kv_capacity_tokens, block_size, name,
                              deployment.model.max_position_embeddings, shapes, new_shape_s)


def build_calibrated_executors(options: Mapping[str, Any], num_instances: int) -> list:
    """Executors for `cluster.cost_model: {calibration: FILE, kind, kv_capacity_tokens,
    block_size}`: one per instance (an engine model remembers the shapes its instance ran)."""
    for key in options:
        if key not in OPTION_KEYS:
            raise ConfigError(f"cluster.cost_model.{key}", options[key],
                              f"unknown with a calibration; known: {', '.join(OPTION_KEYS)}")
    if "frontend_s" in options:
        from sim.cost.frontend import check_frontend_s

        check_frontend_s(options["frontend_s"])
    sizes = {}
    for key in ("kv_capacity_tokens", "block_size"):
        if options.get(key) is not None:
            sizes[key] = int_value(options[key], f"cluster.cost_model.{key}")
            check_positive(f"cluster.cost_model.{key}", sizes[key])
    return [load_calibrated_executor(options["calibration"], options.get("kind"),
                                     sizes.get("kv_capacity_tokens"), sizes.get("block_size"))
            for _ in range(num_instances)]
