"""Calibrated cost models: step features, fits with known answers, the calibrated executor."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from policies.simulate import simulate
from real.fit import export_trees, fit_learned, fit_roofline, roofline_times
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.executor import Step
from sim.cost.cost_model import CostModelConfig, DeploymentSpec, RooflineCostModel
from sim.hardware.gpus import GPUSpec
from sim.measured.calibrated import (FEATURES, CalibratedExecutor, RooflineTimes, load_calibrated_executor,
                            step_features)
from sim.measured.learned_trees import ensemble_from_dict
from sim.models.catalog import get_model
from sim.util.errors import ConfigError
from tests.factories import make_trace

DEVICE = GPUSpec("test-device", 2.0**40, 100e9, 2e12, 2e12, 1e9, 0.0)
MODEL = get_model("llama-2-7b")
TRUE = CostModelConfig(compute_efficiency=0.4, memory_efficiency=0.7, step_overhead_s=2e-3,
                       per_seq_overhead_s=1e-4, activation_bytes_factor=12.0)


def deployment() -> DeploymentSpec:
    return DeploymentSpec(MODEL, DEVICE, activation_reserve_bytes=0)


def synthetic_profile() -> pd.DataFrame:
    """Profile rows whose seconds come from a known roofline config."""
    steps = [Step(0, (0,), (p,), (0,), (True,)) for p in (8, 64, 256, 1024, 4096)]
    steps += [Step(0, tuple(range(b)), (1,) * b, (c,) * b, (True,) * b)
              for b in (1, 4, 16, 64, 256) for c in (64, 512, 2048)]
    steps += [Step(0, tuple(range(b + 1)), (1,) * b + (p,), (c,) * b + (0,), (True,) * (b + 1))
              for b in (8, 32) for c in (256,) for p in (128, 1024)]
    frame = pd.DataFrame([dict(zip(FEATURES, step_features(s)[0])) for s in steps])
    frame["seconds"] = roofline_times(RooflineCostModel(deployment(), TRUE), frame)
    return frame


def test_later_iteration_features_equal_a_fresh_decode_step():
    step = Step(0, (1, 2, 3), (40, 1, 1), (0, 100, 7), (True,) * 3, num_iterations=5)
    feats = step_features(step)
    assert feats.shape == (5, len(FEATURES))
    for j in range(1, 5):
        ctx = (40 + j - 1, 101 + j - 1, 8 + j - 1)
        fresh = step_features(Step(0, (1, 2, 3), (1, 1, 1), ctx, (True,) * 3))[0]
        fresh[FEATURES.index("first_iteration")] = 0.0
        np.testing.assert_allclose(feats[j], fresh)


def test_roofline_fit_recovers_a_known_config():
    profile = synthetic_profile()
    config, stats = fit_roofline(profile, deployment())
    assert stats["p90_abs_rel_err"] < 0.01
    for name in ("compute_efficiency", "memory_efficiency", "step_overhead_s"):
        assert getattr(config, name) == pytest.approx(getattr(TRUE, name), rel=0.05), name


def test_learned_model_corrects_what_the_roofline_misses():
    profile = synthetic_profile()
    profile["seconds"] *= np.where(profile["num_seqs"] > 8, 1.5, 1.0)  # a batch-size effect
    model = RooflineCostModel(deployment(), TRUE)
    _, stats = fit_learned(profile, model)
    assert stats["median_abs_rel_err"] < 0.02 and stats["p90_abs_rel_err"] < 0.1


def write_calibration(tmp_path, config: CostModelConfig = TRUE, learned: bool = False) -> str:
    data = {"version": 1, "model": dataclasses.asdict(MODEL), "device": dataclasses.asdict(DEVICE),
            "weight_dtype": "fp16", "kv_dtype": "fp16", "kv_capacity_tokens": 4096,
            "block_size": 16, "roofline": dataclasses.asdict(config), "learned": None,
            "fit": {}}
    if learned:
        regressor, _ = fit_learned(synthetic_profile(), RooflineCostModel(deployment(), config))
        (tmp_path / "cal.learned.json").write_text(json.dumps(export_trees(regressor)))
        data["learned"] = {"path": "cal.learned.json", "features": list(FEATURES)}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_calibrated_roofline_times_are_the_cost_model_times(tmp_path):
    ex = load_calibrated_executor(write_calibration(tmp_path))
    assert ex.kv_capacity_tokens == 4096 and ex.block_size == 16
    step = Step(0, (1, 2), (1, 300), (50, 0), (True, True), num_iterations=1)
    expected = RooflineCostModel(deployment(), TRUE).iteration_times([1, 300], [50, 0], 2)
    assert ex.execute(step).duration_s == pytest.approx(float(expected[0]), rel=1e-12)
    learned = load_calibrated_executor(write_calibration(tmp_path, learned=True), "learned")
    long = Step(0, (1, 2), (1, 1), (50, 60), (True, True), num_iterations=200)
    times = learned.times.iteration_times(long, 200)
    base = RooflineTimes(RooflineCostModel(deployment(), TRUE)).iteration_times(long, 200)
    np.testing.assert_allclose(times, base, rtol=0.05)  # exact data: a near-zero correction


def test_block_granular_oom_matches_a_brute_force_count():
    class Unit:
        def iteration_times(self, step, k):
            return np.ones(k)

    ex = CalibratedExecutor(Unit(), kv_capacity_tokens=160, block_size=16)
    rng = np.random.default_rng(0)
    for _ in range(50):
        b = int(rng.integers(1, 5))
        kv = rng.integers(1, 60, b)
        step = Step(0, tuple(range(b)), (1,) * b, tuple(int(x) - 1 for x in kv), (True,) * b,
                    num_iterations=80)
        blocks = [sum(-(-(int(x) + j) // 16) for x in kv) for j in range(80)]
        first_over = next((j + 1 for j, n in enumerate(blocks) if n > 10), 0)
        res = ex.execute(step)
        assert res.oom == bool(first_over)
        assert res.num_iterations == (first_over - 1 if first_over else 80)


def test_cluster_loads_a_calibration_by_name(tmp_path):
    path = write_calibration(tmp_path)
    spec = ClusterSpec(cost_model={"calibration": path, "kind": "roofline",
                                   "kv_capacity_tokens": 2048})
    executors = build_executors(spec)
    assert isinstance(executors[0], CalibratedExecutor)
    assert executors[0].kv_capacity_tokens == 2048
    res = simulate(make_trace([(0.0, 100, 20), (0.1, 50, 10)]), "orca", {"max_tokens": 64},
                   executors)
    assert res.summary["completed"] == 2
    with pytest.raises(ConfigError):
        build_executors(ClusterSpec(cost_model={"calibration": path, "speed": 2}))
    with pytest.raises(ConfigError):
        build_executors(ClusterSpec(cost_model={"calibration": path, "kind": "learned"}))
    with pytest.raises(ConfigError):
        ClusterSpec(backend="gpu")


def test_json_trees_predict_exactly_what_sklearn_predicts():
    """The learned model is stored as plain JSON arrays; its numpy evaluator reproduces
    scikit-learn's predict (inputs rounded to float32 as sklearn does) on random inputs."""
    model = RooflineCostModel(deployment(), TRUE)
    profile = synthetic_profile()
    profile["seconds"] *= np.where(profile["num_seqs"] > 8, 1.5, 0.8)
    regressor, _ = fit_learned(profile, model)
    trees = ensemble_from_dict(json.loads(json.dumps(export_trees(regressor))), "learned")
    rng = np.random.default_rng(1)
    base = model_inputs_of(profile, model)
    lo, hi = base.min(axis=0) - 1, base.max(axis=0) + 1
    for x in (base, rng.uniform(lo, hi, size=(2000, base.shape[1])),
              rng.normal(0, 50, size=(500, base.shape[1]))):
        np.testing.assert_allclose(trees.predict(x), regressor.predict(x), rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="12 inputs"):
        trees.predict(np.zeros((3, 5)))


def model_inputs_of(profile: pd.DataFrame, model: RooflineCostModel) -> np.ndarray:
    from sim.measured.calibrated import model_inputs

    return model_inputs(profile[list(FEATURES)].to_numpy(dtype=np.float64),
                        roofline_times(model, profile))
