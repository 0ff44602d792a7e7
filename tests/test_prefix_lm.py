"""Causal and prefix-LM models (issue 31): ChatGLM-6B (GLM-1) attends bidirectionally over its
prompt, so a prompt prefix's KV depends on the rest of the prompt and is never the same in two
requests; enabling prefix KV reuse for it is a ConfigError naming the model and the field, in a
policy built on its instances and in an experiment config. Causal models are accepted."""

from __future__ import annotations

import pytest

from experiments.config.experiment import experiment_from_dict
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.models.catalog import get_model, model_from_config_dict
from sim.util.errors import ConfigError
from tests.factories import make_trace

GLM1 = {"model_type": "chatglm", "hidden_size": 4096, "inner_hidden_size": 16384,
        "num_attention_heads": 32, "num_layers": 28, "vocab_size": 130528,
        "max_sequence_length": 2048}
TRACE = make_trace([(0.0, 64, 4), (0.1, 64, 4)])


def run(model: str, policy: str, params: dict | None):
    executors = build_executors(ClusterSpec(model=model, gpu="A100-80GB"))
    return simulate(TRACE, policy, params, executors, seed=0)


def test_chatglm_6b_is_a_prefix_lm_and_the_others_are_causal():
    assert get_model("chatglm-6b").causal is False
    assert get_model("THUDM/chatglm-6b").causal is False
    assert all(get_model(n).causal for n in ("llama-2-7b", "qwen-7b", "falcon-40b"))


def test_config_json_of_glm1_reads_as_prefix_lm_and_chatglm2_as_causal():
    assert model_from_config_dict(GLM1, "chatglm-6b") == get_model("chatglm-6b")
    glm2 = {**GLM1, "ffn_hidden_size": 13696, "multi_query_attention": True,
            "multi_query_group_num": 2, "kv_channels": 128}
    assert model_from_config_dict(glm2, "chatglm2-6b").causal is True


@pytest.mark.parametrize("policy, params", [
    ("vllm_v0", {"enable_prefix_caching": True}),
    ("sarathi", {"enable_prefix_caching": True}),
    ("vllm", None),  # vLLM V1 enables prefix caching by default
    ("djl", {"rolling_batch": "lmi-dist", "enable_prefix_caching": True})])
def test_prefix_caching_on_chatglm_6b_is_refused_by_model_and_field(policy, params):
    with pytest.raises(ConfigError) as err:
        run("chatglm-6b", policy, params)
    assert err.value.field == "enable_prefix_caching" and err.value.value is True
    assert "chatglm-6b is a prefix-LM" in err.value.reason
    assert "causal" in err.value.reason


def test_the_prefix_scoring_router_on_chatglm_6b_is_refused():
    with pytest.raises(ConfigError) as err:
        run("chatglm-6b", "vllm_v0", {"router": "cache_aware"})
    assert err.value.field == "router" and "chatglm-6b" in err.value.reason


@pytest.mark.parametrize("policy, params", [
    ("vllm_v0", None), ("vllm", {"enable_prefix_caching": False}),
    ("vllm_v0", {"router": "session_affinity"})])
def test_chatglm_6b_without_prefix_reuse_runs(policy, params):
    assert list(run("chatglm-6b", policy, params).records["finish_reason"]) == ["stop"] * 2


@pytest.mark.parametrize("model", ["llama-2-7b", "falcon-7b"])
def test_a_causal_model_with_prefix_caching_is_accepted(model):
    res = run(model, "vllm_v0", {"enable_prefix_caching": True, "router": "cache_aware"})
    assert list(res.records["finish_reason"]) == ["stop"] * 2


def experiment(model: str, params: dict) -> dict:
    return {"workload": {"synthetic": {"num_requests": 10}}, "request_rates": [1],
            "cluster": {"model": model, "gpu": "A100-80GB"},
            "policies": [{"name": "vllm_v0", "params": params}]}


def test_an_experiment_config_is_refused_at_load_by_model_and_field():
    with pytest.raises(ConfigError) as err:
        experiment_from_dict(experiment("chatglm-6b", {"enable_prefix_caching": True}), "t")
    assert err.value.field == "policies[0].params.enable_prefix_caching"
    assert "chatglm-6b" in err.value.reason
    cfg = experiment_from_dict(experiment("llama-2-7b", {"enable_prefix_caching": True}), "t")
    assert cfg.policies[0].name == "vllm_v0"
