"""The batch-time estimator trained offline on the training split, retrained on actual lengths
(policies/magnus/profiling.py, issue 17)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policies.magnus.estimator import BatchSample
from policies.magnus.memory import EngineMemory
from policies.magnus.profiling import profile_batches
from policies.registry import build_policy
from sim.core.executor import InstanceInfo, StepResult
from sim.core.request import Request
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError
from tests.test_magnus_memory import chatglm_v100
from tests.test_magnus_workload import write_apps


def test_profiled_batches_fit_and_are_timed_on_the_engine():
    ex = chatglm_v100()
    rng = np.random.default_rng(0)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(10, 1500, 300),
                                                rng.integers(1, 500, 300))]
    samples = profile_batches(lengths, ex, EngineMemory((ex.memory,)), threshold=5e4,
                              chunk=50, max_requests=200, rng=rng)
    assert samples and sum(s.size for s in samples) <= 200
    for s in samples:
        assert s.duration_s == ex.batch_seconds(s.size, s.max_prompt, s.max_output)
        assert math.isfinite(s.duration_s)
    assert max(s.size for s in samples) > 1


def test_batch_seconds_is_inf_exactly_when_the_batch_runs_out_of_memory():
    ex = chatglm_v100()
    assert math.isfinite(ex.batch_seconds(7, 1000, 1000))
    assert ex.batch_seconds(8, 2047, 1) == math.inf


def make(tmp_path, executor, kind="oracle", **params):
    """A Magnus policy on one instance whose engine is `executor` (None: a paged one)."""
    path = write_apps(tmp_path / "apps.jsonl.gz", per_task=40)
    predictor = {"kind": kind, "train_path": str(path)}
    info = InstanceInfo(0, 40_000, "paged" if executor is None else executor.name,
                        engine=executor)
    return build_policy("magnus", {"predictor": predictor, **params}, [info], Recorder())


def test_magnus_on_hf_static_trains_its_estimator_offline(tmp_path):
    p = make(tmp_path, chatglm_v100(), wma_threshold=30.0)  # many small batches
    assert p.offline and p.estimator.trained
    assert [e[1] for e in p.recorder.events] == ["profile_estimator"]


@pytest.mark.parametrize("name", ["abp", "glp"])
def test_fcfs_ablations_and_paged_engines_learn_online(tmp_path, name):
    assert not make(tmp_path, None).offline  # nothing to time offline
    fcfs = build_policy(name, {}, [chatglm_v100().instance_info(0)], Recorder())
    assert not fcfs.offline  # FCFS never consults the estimator


def test_offline_training_needs_a_timeable_engine_and_training_data(tmp_path):
    with pytest.raises(ConfigError, match="estimator_training"):
        make(tmp_path, None, estimator_training="offline")
    with pytest.raises(ConfigError, match="estimator_training"):
        build_policy("magnus", {"estimator_training": "offline"},
                     [chatglm_v100().instance_info(0)], Recorder())


def test_offline_estimator_learns_badly_estimated_batches_with_their_actual_lengths(tmp_path):
    p = make(tmp_path, chatglm_v100(), kind="input_length",
             estimator_training="offline")
    r = Request(0, 0.0, 30, 400)  # predicted about 30 (the "upper" task), runs 400
    p.add_request(r, 0.0)
    step = p.next_step(0, 0.0)
    ends = 10.0 * np.arange(1, step.num_iterations + 1)  # far slower than profiled
    p.update(step, StepResult(float(ends[-1]), ends), float(ends[-1]))
    assert list(p.time_learner.samples) == [BatchSample(1, 30, 400, float(ends[-1]))]


def test_estimator_training_is_validated():
    from policies.magnus.config import MagnusConfig

    with pytest.raises(ConfigError, match="estimator_training"):
        MagnusConfig(estimator_training="sometimes")
