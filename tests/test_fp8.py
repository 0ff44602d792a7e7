"""fp8 weights and activations (W8A8) where the GPU has fp8 tensor cores."""

from __future__ import annotations

import pytest

from sim.cluster.spec import ClusterSpec, build_executors
from sim.cost.cost_model import CostModelConfig, DeploymentSpec, RooflineCostModel
from sim.hardware.gpus import get_gpu
from sim.models.catalog import get_model
from sim.util.errors import ConfigError

MODEL = get_model("llama-2-7b")
PREFILL = ([4096], [0])  # one long prompt: the dense stage is compute-bound
DECODE = ([1] * 8, [500] * 8)  # eight decodes: the dense stage reads every weight once


def model(gpu: str, dtype: str) -> RooflineCostModel:
    return RooflineCostModel(DeploymentSpec(MODEL, get_gpu(gpu), weight_dtype=dtype))


@pytest.mark.parametrize("gpu", ["H100-80GB", "H200", "L40S"])
def test_fp8_dense_runs_at_the_fp8_peak(gpu):
    fp8 = model(gpu, "fp8").breakdown(*PREFILL, 1)["dense"]
    fp16 = model(gpu, "fp16").breakdown(*PREFILL, 1)["dense"]
    assert fp8.flops == fp16.flops
    peak = get_gpu(gpu).peak_fp8_flops
    assert fp8.seconds == pytest.approx(fp8.flops / (peak * CostModelConfig().compute_efficiency))
    assert fp8.seconds < fp16.seconds


def test_fp8_weights_take_one_byte_and_need_no_dequantization():
    fp8, fp16 = model("H100-80GB", "fp8"), model("H100-80GB", "fp16")
    quantized = fp8.deployment.num_quantized_params
    assert fp16.deployment.weight_bytes - fp8.deployment.weight_bytes == pytest.approx(quantized)
    stages = fp8.breakdown(*DECODE, 8)
    assert stages["dequant"].seconds == 0.0
    assert stages["dense"].bytes == pytest.approx(fp16.breakdown(*DECODE, 8)["dense"].bytes
                                                  - quantized)
    assert fp8.deployment.kv_capacity_tokens > fp16.deployment.kv_capacity_tokens


def test_fp16_and_int8_keep_their_dense_rate():
    for dtype in ("fp16", "bf16", "int8", "int4"):
        dense = model("H100-80GB", dtype).breakdown(*PREFILL, 1)["dense"]
        peak = get_gpu("H100-80GB").peak_tensor_flops
        compute = dense.flops / (peak * CostModelConfig().compute_efficiency)
        assert dense.seconds == pytest.approx(max(compute, dense.bytes / (
            get_gpu("H100-80GB").hbm_bandwidth * CostModelConfig().memory_efficiency)))


@pytest.mark.parametrize("gpu", ["A100-80GB", "A100-40GB", "V100-32GB", "A10G"])
def test_a_gpu_without_fp8_refuses_it_naming_the_gpu(gpu):
    from experiments.config.preflight import check_cluster

    with pytest.raises(ConfigError) as err:
        check_cluster(ClusterSpec(gpu=gpu, weight_dtype="fp8"))
    assert err.value.field == "cluster.weight_dtype" and err.value.value == "fp8"
    assert get_gpu(gpu).name in str(err.value) and "fp8" in err.value.reason


def test_a_heterogeneous_group_names_its_own_weight_dtype():
    spec = ClusterSpec(weight_dtype="fp8", instances=({"gpu": "H100-80GB"},
                                                      {"gpu": "A100-80GB"}))
    with pytest.raises(ConfigError) as err:
        build_executors(spec)
    assert err.value.field == "cluster.instances[1].weight_dtype"


def test_a_user_gpu_gets_fp8_only_if_it_declares_it(tmp_path):
    text = ("name: g\nmemory_gib: 48\nhbm_bandwidth_gbps: 864\ntensor_tflops: {fp16: 362%s}\n"
            "fp32_tflops: 91.6\ninterconnect_gbps: 32\ninterconnect_latency_us: 20\n")
    with_fp8, without = tmp_path / "with.yaml", tmp_path / "without.yaml"
    with_fp8.write_text(text % ", fp8: 733")
    without.write_text(text % "")
    assert build_executors(ClusterSpec(gpu=str(with_fp8), weight_dtype="fp8"))
    with pytest.raises(ConfigError, match="no fp8 tensor cores"):
        build_executors(ClusterSpec(gpu=str(without), weight_dtype="fp8"))


def test_fp8_kv_cache_is_unchanged_on_any_gpu():
    fp8_kv = DeploymentSpec(MODEL, get_gpu("A100-80GB"), kv_dtype="fp8")
    assert fp8_kv.kv_bytes_per_token_per_gpu * 2 == DeploymentSpec(
        MODEL, get_gpu("A100-80GB")).kv_bytes_per_token_per_gpu
