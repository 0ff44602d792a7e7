"""Host drift in a replay: eager (CPU-launched) iterations against CUDA-graph ones."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.validate.main import pace_lines
from real.check_report import pace_markdown
from real.host_pace import drift_note, host_pace
from real.step_log import StepSample
from sim.core.executor import Step
from sim.cost.engine_time import EngineTimeModel, EngineTimeParams, EngineWork
from sim.hardware.gpus import get_gpu
from sim.models.catalog import get_model

WORK = EngineWork.of(get_model("llama-2-7b"), get_gpu("H200"), "bf16")
MODEL = EngineTimeModel(EngineTimeParams(iteration_host_s=1e-3, eager_host_s=0.012,
                                         mixed_host_s=0.003, weight_efficiency=0.75,
                                         kv_efficiency=0.8, overlap=6.0, max_graph_batch=256),
                        WORK)


def replay_log(eager_pace: float, n: int = 40, seed: int = 0) -> list[StepSample]:
    """Steps of a prefill chunk beside decodes, then decodes, timed by MODEL with the eager
    (host-bound) iterations at `eager_pace` times the model."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        b = int(rng.integers(1, 6))
        step = Step(0, tuple(range(b + 1)), (1,) * b + (int(rng.integers(16, 200)),),
                    tuple(int(x) for x in rng.integers(10, 900, size=b)) + (0,),
                    (True,) * (b + 1), num_iterations=int(rng.integers(1, 20)))
        k = step.num_iterations
        times = MODEL.iteration_times(step, k)
        times[0] *= eager_pace
        ends = np.cumsum(times)
        out.append(StepSample(step, k, float(ends[-1]), ends, np.zeros(k), "r", False))
    return out


def test_a_steady_host_is_not_called_drift():
    pace = host_pace(replay_log(1.0), MODEL)
    assert pace["eager"]["median"] == pytest.approx(1.0) and pace["graph"]["n"] > 0
    assert drift_note(pace) is None


@pytest.mark.parametrize("eager_pace", [0.6, 1.5])
def test_a_host_at_another_speed_is_named_with_its_ratio(eager_pace):
    pace = host_pace(replay_log(eager_pace), MODEL)
    assert pace["eager"]["median"] == pytest.approx(eager_pace)
    assert pace["graph"]["median"] == pytest.approx(1.0)
    note = drift_note(pace)
    assert note is not None and f"{eager_pace:.2f}x" in note


def test_a_slow_spell_within_a_run_is_drift_though_the_median_holds():
    log = replay_log(1.0, n=60)
    slow = replay_log(2.0, n=12, seed=1)
    pace = host_pace(log + slow, MODEL)
    assert abs(pace["eager"]["median"] - 1.0) < 0.1
    assert drift_note(pace) is not None


def test_reports_show_the_pace_and_the_note():
    row = {"policy": "sarathi", **host_pace(replay_log(0.6), MODEL)}
    text = "\n".join(pace_lines([row]))
    assert "sarathi: eager 0.60" in text and "host drift" in text
    md = "\n".join(pace_markdown([row]))
    assert "| sarathi | 0.60" in md and "host drift" in md
    assert pace_lines([]) == [] and pace_markdown([]) == []
