"""Absurd or non-finite numbers are refused where they enter, naming the field (issue 28).

Before: a GPU file with `hbm_bandwidth_gbps: 1e-300`, `tensor_tflops.fp16: 1e-300` or
`interconnect_latency_us: 1e300`, an `expert_zipf` above ~1075 or a disagg
`kv_bytes_per_token: 1e30` simulated to NaN or 1e300-second step times; the Python API returned
the NaNs as finished requests and the bench.json writer crashed after the run. Now each source
refuses its value with a physical bound in the message, and the engine refuses any executor's
non-finite or negative step duration, naming the executor and the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from policies.disagg_config import DisaggConfig
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.executor import Step, StepResult, StepTimeError
from sim.cost.overhead import SchedulingOverhead
from sim.hardware.gpu_file import read_gpu_file
from sim.memory.kv_transfer import Link, MeasuredLink
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace

GPU = {"name": "bounded", "memory_gib": 80, "hbm_bandwidth_gbps": 3350,
       "tensor_tflops": {"fp16": 989, "fp8": 1979}, "fp32_tflops": 67,
       "interconnect_gbps": 450, "interconnect_latency_us": 8}


def gpu_file(tmp_path: Path, **changes: object) -> Path:
    data = {**GPU, **changes}
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("key, value, field", [
    ("hbm_bandwidth_gbps", 1e-300, "gpu.hbm_bandwidth_gbps"),
    ("hbm_bandwidth_gbps", 1e300, "gpu.hbm_bandwidth_gbps"),
    ("tensor_tflops", {"fp16": 1e-300}, "gpu.tensor_tflops.fp16"),
    ("tensor_tflops", {"fp16": 989, "fp8": 1e-300}, "gpu.tensor_tflops.fp8"),
    ("fp32_tflops", 1e300, "gpu.fp32_tflops"),
    ("interconnect_gbps", 1e-300, "gpu.interconnect_gbps"),
    ("interconnect_latency_us", 1e300, "gpu.interconnect_latency_us"),
    ("memory_gib", 1e-300, "gpu.memory_gib"),
    ("memory_gib", 1e9, "gpu.memory_gib"),
])
def test_a_gpu_file_number_past_its_physical_range_is_refused(tmp_path, key, value, field):
    with pytest.raises(ConfigError) as err:
        read_gpu_file(gpu_file(tmp_path, **{key: value}))
    assert err.value.field == field
    assert "must be in [" in err.value.reason and "gpu.yaml" in err.value.reason


def test_gpu_file_bounds_keep_real_gpus_and_optional_zero_rates(tmp_path):
    gpu = read_gpu_file(gpu_file(tmp_path, tensor_tflops={"fp16": 989, "fp8": 0},
                                 interconnect_latency_us=0))
    assert gpu.peak_fp8_flops == 0 and gpu.interconnect_latency_s == 0
    assert read_gpu_file(Path(__file__).parents[2] / "experiments/configs/gpus/mi300x.yaml")


def test_a_gpu_file_bound_names_the_cluster_field_through_the_config(tmp_path, capsys):
    from experiments.run import main

    path = gpu_file(tmp_path, hbm_bandwidth_gbps=1e-300)
    config = {"name": "g", "workload": {"synthetic": {"num_requests": 2, "lengths": "alpaca"}},
              "cluster": {"model": "llama-2-7b", "gpu": str(path)},
              "policies": [{"name": "vllm"}], "request_rates": [1], "seeds": [0]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main([str(tmp_path / "c.yaml"), "--out", str(tmp_path / "o"), "--no-progress"]) != 0
    assert "cluster.gpu.hbm_bandwidth_gbps=1e-300" in capsys.readouterr().err
    assert not (tmp_path / "o" / "runs").exists()  # refused before anything ran


@pytest.mark.parametrize("zipf", [64.5, 1075.0, 1100.0])
def test_expert_zipf_past_its_bound_is_refused_before_any_step(zipf):
    with pytest.raises(ConfigError) as err:
        build_executors(ClusterSpec(model="mixtral-8x7b", gpu="H100-80GB", tensor_parallel=2,
                                    expert_zipf=zipf))
    assert err.value.field.endswith("expert_zipf") and "<= 64" in err.value.reason


def test_expert_zipf_at_its_bound_simulates_finite_times():
    executors = build_executors(ClusterSpec(model="mixtral-8x7b", gpu="H100-80GB",
                                            tensor_parallel=2, expert_parallel=2,
                                            expert_zipf=64.0))
    res = simulate(make_trace([(0.0, 300, 20), (0.01, 200, 30)]), "vllm", None, executors)
    done = res.records[res.records["status"] == "finished"]
    assert len(done) == 2 and np.isfinite(done[["ttft_s", "e2e_s"]].to_numpy()).all()


@pytest.mark.parametrize("value", [1e30, 2.0**30 + 1, math.inf, -1.0])
def test_disagg_kv_bytes_per_token_past_its_bound_is_refused(value):
    with pytest.raises(ConfigError) as err:
        DisaggConfig(kv_bytes_per_token=value)
    assert err.value.field == "kv_bytes_per_token" and "GPT-3" in err.value.reason


def test_disagg_link_parameters_are_bounded():
    with pytest.raises(ConfigError, match="latency_s=1e.300"):
        Link("slow", 1e300, 1e9)
    with pytest.raises(ConfigError, match="bandwidth_bytes_per_s"):
        Link("thin", 1e-6, 1e-300)
    assert Link("free", 0.0, math.inf).seconds(1e12) == 0.0
    with pytest.raises(ConfigError, match="send_recv_csv.*1e.300 s"):
        MeasuredLink("m.csv", (1.0, 2.0), (1e-5, 1e300), 1e9)
    with pytest.raises(ConfigError, match="send_recv_csv.*bandwidth"):
        MeasuredLink("m.csv", (1.0, 2.0), (1e-5, 2e-5), 1e-300)


@dataclass
class BadTimeExecutor(LinearExecutor):
    """LinearExecutor whose `bad_from`-th step (1-based) lasts `duration_s`."""

    duration_s: float = math.nan  # seconds the bad step reports
    bad_from: int = 1  # the first bad step
    calls: int = 0  # steps run

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        self.calls += 1
        result = super().execute(step, until_s)
        if self.calls < self.bad_from:
            return result
        ends = np.full(len(result.iteration_ends_s), self.duration_s)
        return StepResult(self.duration_s, ends)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # inf - inf in the clock
@pytest.mark.parametrize("duration, overhead", [
    (math.nan, None), (math.inf, None), (-1e-3, None),
    (math.nan, SchedulingOverhead(fixed_s=1e-3)), (math.inf, SchedulingOverhead(fixed_s=1e-3))])
def test_the_engine_refuses_a_bad_step_duration_naming_executor_and_step(duration, overhead):
    executor = BadTimeExecutor(duration_s=duration, name="nan-gpu")
    with pytest.raises(StepTimeError) as err:
        simulate(make_trace([(0.0, 50, 10), (0.0, 40, 5)]), "orca", {"max_batch_size": 4},
                 [executor], overhead=overhead)
    text = str(err.value)
    assert "BadTimeExecutor 'nan-gpu'" in text and "instance 0" in text
    assert "request_ids=(0, 1)" in text and "finite number of seconds >= 0" in text
    if overhead is None:
        assert f"duration_s={duration!r}" in text


def test_a_nan_last_step_never_becomes_a_finished_request():
    trace = make_trace([(0.0, 50, 10), (0.5, 40, 5)])
    good = BadTimeExecutor(bad_from=10**9)
    simulate(trace, "orca", {"max_batch_size": 4}, [good])
    assert good.calls >= 2
    bad = BadTimeExecutor(duration_s=math.nan, bad_from=good.calls)
    with pytest.raises(StepTimeError, match="duration_s=nan"):
        simulate(trace, "orca", {"max_batch_size": 4}, [bad])
    assert bad.calls == good.calls  # every earlier step ran; the last one's NaN stopped it
