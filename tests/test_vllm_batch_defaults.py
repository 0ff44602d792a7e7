"""`vllm`'s batch limits follow the GPU as `vllm serve` does (EngineArgs.get_batch_defaults):
8192 tokens / 1024 sequences on >= 70 GiB GPUs other than A100, 2048 / 256 on A100 and smaller;
a value set is kept, and the run shows what each instance used."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from experiments.run import main as run_main
from policies.registry import build_policy
from policies.vllm_batch_defaults import GIB, batch_limits, gpu_defaults
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.executor import InstanceInfo, info_of
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError
from tests.test_run_cli import run_cli, write_config


def vllm_on(spec: ClusterSpec, **params):
    """The `vllm` policy built on the cluster's own instances."""
    executors = build_executors(spec)
    infos = [info_of(e, i) for i, e in enumerate(executors)]
    return build_policy("vllm", params, infos, Recorder(), 0)


def limits(policy) -> list[tuple[int, int]]:
    return [(policy.token_budgets[i], s.max_num_seqs) for i, s in enumerate(policy.state)]


@pytest.mark.parametrize("gpu, expected", [
    ("A100-80GB", (2048, 256)), ("A100-40GB", (2048, 256)), ("L40S", (2048, 256)),
    ("A10G", (2048, 256)), ("V100-32GB", (2048, 256)),
    ("H100-80GB", (8192, 1024)), ("H200", (8192, 1024))])
def test_an_instance_gets_its_gpus_vllm_serve_defaults(gpu, expected):
    assert limits(vllm_on(ClusterSpec(gpu=gpu))) == [expected]


def test_the_rule_is_memory_and_not_a100():
    assert gpu_defaults("MI300X", 192 * GIB) == (8192, 1024)  # >= 70 GiB, not an A100
    assert gpu_defaults("A100-SXM4-80GB", 80 * GIB) == (2048, 256)  # CUDA's name for an A100
    assert gpu_defaults("RTX 6000 Ada", 48 * GIB) == (2048, 256)
    assert gpu_defaults("", 0) == (8192, 1024)  # unknown GPU: the H100 class (test executors)


def test_a_mixed_cluster_resolves_each_instance_on_its_own_gpu():
    spec = ClusterSpec(instances=({"gpu": "A100-80GB"}, {"gpu": "H100-80GB"}))
    assert limits(vllm_on(spec)) == [(2048, 256), (8192, 1024)]


def test_values_set_are_kept_and_the_unset_one_clamps_as_vllm_does():
    assert limits(vllm_on(ClusterSpec(gpu="A100-80GB"), max_num_seqs=64)) == [(2048, 64)]
    assert limits(vllm_on(ClusterSpec(gpu="H100-80GB"), max_num_batched_tokens=512)) == \
        [(512, 512)]  # max_num_seqs = min(1024, 512)
    assert limits(vllm_on(ClusterSpec(gpu="H100-80GB"), max_num_batched_tokens=4096,
                          max_num_seqs=128)) == [(4096, 128)]


def test_sequences_above_the_gpus_token_budget_are_refused_naming_the_field():
    info = InstanceInfo(0, 10_000, gpu_name="A100-80GB", gpu_memory_bytes=80 * GIB)
    with pytest.raises(ConfigError) as err:
        batch_limits(None, 4096, info)  # A100's 2048-token budget < 4096 sequences
    assert err.value.field == "max_num_batched_tokens" and err.value.value == 2048
    assert "A100-80GB" in err.value.reason and "max_num_seqs=4096" in err.value.reason


@pytest.mark.parametrize("field, value", [("max_num_batched_tokens", 0),
                                          ("max_num_seqs", -1), ("max_num_seqs", 0)])
def test_bad_limits_are_named(field, value):
    with pytest.raises(ConfigError) as err:
        build_policy("vllm", {field: value}, [InstanceInfo(0, 10_000)], Recorder(), 0)
    assert field in err.value.field and err.value.value == value


def test_the_run_shows_the_limits_each_instance_used(tmp_path):
    raw = {"name": "d", "workload": {"synthetic": {"num_requests": 8, "arrival": "poisson",
                                                   "lengths": "alpaca"}},
           "cluster": {"model": "llama-2-7b", "instances": [{"gpu": "A100-80GB"},
                                                            {"gpu": "H100-80GB"}]},
           "policies": [{"name": "vllm"}], "request_rates": [4], "seeds": [0]}
    out = tmp_path / "out"
    assert run_cli(write_config(tmp_path, raw), out) == 0
    run = out / "runs" / "vllm__rate4__seed0"
    config = json.loads((run / "config.json").read_text())
    assert config["run"]["params"]["max_num_batched_tokens"] is None  # as configured
    assert config["run"]["instance_settings"] == [
        {"max_num_batched_tokens": 2048, "max_num_seqs": 256},
        {"max_num_batched_tokens": 8192, "max_num_seqs": 1024}]
    instances = pd.read_parquet(run / "instances.parquet")
    assert instances["max_num_seqs"].tolist() == [256, 1024]


def test_list_shows_the_defaults_per_gpu(capsys):
    assert run_main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "A100-80GB 2048 / 256" in out and "H100-80GB 8192 / 1024" in out
    assert "max_num_seqs: int | None = None  (None: follows the GPU" in out
