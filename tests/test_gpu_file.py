"""User-defined GPUs: `cluster.gpu` naming a YAML / JSON file, read strictly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cluster.spec import ClusterSpec, build_executors
from sim.hardware.gpu_file import read_gpu_file, resolve_gpu
from sim.hardware.gpus import GPUS, get_gpu
from sim.util.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "experiments" / "configs" / "gpus" / "mi300x.yaml"
H100_LIKE = """\
name: my-h100
memory_gib: 79.65
hbm_bandwidth_gbps: 3350
tensor_tflops: {fp16: 989, fp8: 1979, int8: 1979}
fp32_tflops: 67
interconnect_gbps: 450
interconnect_latency_us: 8
"""


def write(tmp_path: Path, text: str, name: str = "gpu.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_example_file_reads_with_datasheet_units():
    gpu = read_gpu_file(EXAMPLE)
    assert gpu.name == "MI300X"
    assert gpu.memory_bytes == 192 * 2**30
    assert gpu.hbm_bandwidth == pytest.approx(5.3e12)
    assert gpu.peak_tensor_flops == pytest.approx(1307.4e12)
    assert gpu.peak_fp8_flops == pytest.approx(2614.9e12)
    assert gpu.peak_int8_ops == pytest.approx(2614.9e12)
    assert gpu.peak_vector_flops == pytest.approx(163.4e12)
    assert gpu.interconnect_bandwidth == pytest.approx(64e9)
    assert gpu.interconnect_latency_s == pytest.approx(8e-6)


def test_a_file_copying_a_builtin_gpu_simulates_like_it(tmp_path):
    path = write(tmp_path, H100_LIKE)
    builtin = get_gpu("H100-80GB")
    assert resolve_gpu(path).peak_tensor_flops == builtin.peak_tensor_flops
    ours = build_executors(ClusterSpec(gpu=path))[0]
    theirs = build_executors(ClusterSpec(gpu="H100-80GB"))[0]
    assert ours.kv_capacity_tokens == pytest.approx(theirs.kv_capacity_tokens, rel=1e-3)
    steps = ([512, 1, 1], [0, 100, 900])
    assert (ours.cost_model.iteration_times(*steps, 3) ==
            pytest.approx(theirs.cost_model.iteration_times(*steps, 3), rel=1e-9))


def test_json_files_read_too(tmp_path):
    data = {"name": "j", "memory_gib": 24, "hbm_bandwidth_gbps": 300,
            "tensor_tflops": {"fp16": 121}, "fp32_tflops": 30, "interconnect_gbps": 32,
            "interconnect_latency_us": 20}
    gpu = read_gpu_file(write(tmp_path, json.dumps(data), "gpu.json"))
    assert gpu.peak_fp8_flops == 0.0 and gpu.memory_bytes == 24 * 2**30


@pytest.mark.parametrize("edit, field, value", [
    (("memory_gib: 79.65", "memory_gib: -1"), "gpu.memory_gib", -1),
    (("memory_gib: 79.65", "memory_gib: '80'"), "gpu.memory_gib", "80"),
    (("memory_gib: 79.65", "memory_gib: yes"), "gpu.memory_gib", "yes"),
    (("memory_gib: 79.65", "memory_gib: 010"), "gpu.memory_gib", "010"),
    (("fp32_tflops: 67", "fp32_tflops: .inf"), "gpu.fp32_tflops", float("inf")),
    (("fp32_tflops: 67", "fp32_tflops: 67\nfp32_tflops: 68"), "gpu.fp32_tflops", "fp32_tflops"),
    (("fp8: 1979", "fp9: 1979"), "gpu.tensor_tflops.fp9", 1979),
    (("fp16: 989, ", ""), "gpu.tensor_tflops.fp16", None),
    (("fp16: 989", "fp16: 0"), "gpu.tensor_tflops.fp16", 0),
    (("name: my-h100", "name: ''"), "gpu.name", ""),
    (("name: my-h100", "nmae: my-h100"), "gpu.nmae", "my-h100"),
    (("interconnect_latency_us: 8\n", ""), "gpu.interconnect_latency_us", None),
])
def test_each_bad_field_is_named_with_its_value(tmp_path, edit, field, value):
    path = write(tmp_path, H100_LIKE.replace(*edit))
    with pytest.raises(ConfigError) as err:
        read_gpu_file(path)
    assert err.value.field == field and err.value.value == value


def test_a_missing_or_unreadable_file_names_cluster_gpu(tmp_path):
    with pytest.raises(ConfigError) as err:
        build_executors(ClusterSpec(gpu=str(tmp_path / "none.yaml")))
    assert err.value.field == "gpu" and "no such file" in str(err.value)
    with pytest.raises(ConfigError, match="not a readable GPU file"):
        read_gpu_file(write(tmp_path, "name: [unclosed"))
    with pytest.raises(ConfigError, match="one mapping"):
        read_gpu_file(write(tmp_path, "- 1\n- 2\n"))


def test_the_config_reader_checks_the_file_and_names_cluster_gpu(tmp_path):
    from experiments.config.experiment import cluster_from_dict

    good = write(tmp_path, H100_LIKE)
    assert cluster_from_dict({"gpu": good}).gpu == good
    bad = write(tmp_path, H100_LIKE.replace("hbm_bandwidth_gbps: 3350", "hbm_bandwidth_gbps: 0"),
                "bad.yaml")
    with pytest.raises(ConfigError) as err:
        cluster_from_dict({"gpu": bad})
    assert err.value.field == "cluster.gpu.hbm_bandwidth_gbps" and err.value.value == 0


def test_builtin_names_still_resolve_and_l40s_is_built_in():
    assert resolve_gpu("a100") is GPUS["A100-80GB"]
    l40s = get_gpu("l40s")
    assert l40s.memory_bytes == 46068 * 2**20 and l40s.peak_tensor_flops == pytest.approx(362e12)
    assert l40s.peak_fp8_flops == pytest.approx(733e12)
