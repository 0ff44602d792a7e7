"""Falcon (issue 31): HF `model_type: falcon` configs (and TII's first `RefinedWeb` ones) are
read with Falcon's attention layouts, its plain 4 x hidden GELU MLP and its 2,048-token context;
the built-ins' parameter counts match the published ones, computed by hand from the config; the
cost model prices two MLP matrices and the KV heads Falcon caches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cluster.spec import ClusterSpec, build_executors
from sim.cost.cost_model import DeploymentSpec
from sim.hardware.gpus import get_gpu
from sim.models.catalog import get_model, model_from_config_dict, model_from_hf_config
from sim.util.errors import ConfigError

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def config(name: str) -> dict:
    return json.loads((FIXTURES / "models" / name / "config.json").read_text())


def falcon_params(hidden: int, layers: int, heads: int, kv_heads: int, vocab: int) -> int:
    """By hand: q and o (hidden x hidden), k and v (hidden x kv_heads x 64), two MLP matrices
    of hidden x 4 hidden, (2 layers + 1) norms of hidden as ModelSpec counts them, and one
    embedding matrix shared with the lm_head."""
    head_dim = hidden // heads
    attention = 2 * hidden * hidden + 2 * hidden * kv_heads * head_dim
    mlp = 2 * hidden * 4 * hidden
    return layers * (attention + mlp) + (2 * layers + 1) * hidden + vocab * hidden


def test_falcon_40b_is_41_3b_tied_and_41_8b_as_the_card_counts_it():
    m = get_model("tiiuae/falcon-40b")
    assert m.num_params == falcon_params(8192, 60, 128, 8, 65024) == 41_302_302_720
    # the card's 41.8 B counts the checkpoint's stored lm_head, a copy of the tied embedding
    assert m.num_params + m.num_embedding_params == pytest.approx(41.8e9, rel=0.001)
    assert m.num_params == pytest.approx(40e9, rel=0.05)  # "Falcon-40B is a 40B parameters"


def test_falcon_7b_is_6_92b_tied_and_7_22b_as_the_card_counts_it():
    m = get_model("tiiuae/falcon-7b")
    assert m.num_params == falcon_params(4544, 32, 71, 1, 65024) == 6_921_716_160
    assert m.num_params + m.num_embedding_params == pytest.approx(7.22e9, rel=0.001)


@pytest.mark.parametrize("name, kv_heads, kv_bytes", [
    ("falcon-40b", 8, 2 * 60 * 8 * 64 * 2),  # grouped: 120 KiB per token in fp16
    ("falcon-7b", 1, 2 * 32 * 1 * 64 * 2)])  # multi-query: 8 KiB per token
def test_per_layer_weights_have_no_gate_and_kv_counts_falcons_kv_heads(name, kv_heads, kv_bytes):
    m = get_model(name)
    assert not m.gated_mlp and m.intermediate_size == 4 * m.hidden_size
    assert m.num_mlp_params_per_layer == 2 * m.hidden_size * 4 * m.hidden_size
    assert m.num_kv_heads == kv_heads and m.head_dim == 64
    assert m.kv_bytes_per_token(2) == kv_bytes
    assert m.tie_word_embeddings and m.max_position_embeddings == 2048 and m.causal


@pytest.mark.parametrize("name", ["falcon-40b", "falcon-7b"])
def test_config_json_reads_as_the_builtin_with_and_without_transformers(name):
    raw = model_from_config_dict(config(name), name)  # the JSON as written
    assert raw == get_model(name)
    read = model_from_hf_config(FIXTURES / "models" / name)  # through AutoConfig when present
    assert read == get_model(name)


def test_transformers_num_kv_heads_of_71_does_not_override_multi_query():
    # FalconConfig.to_dict() writes num_kv_heads = num_attention_heads for Falcon-7B
    cfg = {**config("falcon-7b"), "num_kv_heads": 71, "ffn_hidden_size": 18176}
    assert model_from_config_dict(cfg, "falcon-7b").num_kv_heads == 1


def test_attention_layouts_follow_falcons_flags():
    base = config("falcon-40b")
    assert model_from_config_dict({**base, "new_decoder_architecture": False,
                                   "multi_query": False}, "m").num_kv_heads == 128  # MHA
    assert model_from_config_dict({**base, "new_decoder_architecture": False},
                                  "m").num_kv_heads == 1  # multi_query defaults to true
    rw = model_from_hf_config(FIXTURES / "refinedweb" / "falcon-40b")  # n_head, n_head_kv
    assert rw == model_from_config_dict(base, "falcon-40b")


@pytest.mark.parametrize("changes, field", [
    ({"activation": "relu"}, "activation"),
    ({"num_key_value_heads": 8}, "num_key_value_heads"),
    ({"multi_query": "yes", "new_decoder_architecture": False}, "multi_query")])
def test_unchecked_falcon_layouts_are_refused_by_key(changes, field):
    with pytest.raises(ConfigError) as err:
        model_from_config_dict({**config("falcon-40b"), **changes}, "m")
    assert err.value.field == f"model.config.{field}"


def test_falcon_40b_on_djls_g5_48xlarge_holds_djls_rolling_batch():
    """DJL's LMI tuning guides: Falcon-40B fp16 on g5.48xlarge (8 x A10G), TP 8, rolling batch
    64 of 8 + 256 tokens (lmi-dist) and 32 of 1,024 + 512 (TensorRT-LLM): both fit its KV."""
    dep = DeploymentSpec(get_model("falcon-40b"), get_gpu("A10G"), tensor_parallel=8)
    assert dep.kv_bytes_per_token_per_gpu == 2 * 60 * 1 * 64 * 2  # one of the 8 KV heads each
    assert dep.weight_bytes_per_gpu == pytest.approx(41_302_302_720 * 2 / 8)
    assert dep.kv_capacity_tokens >= max(64 * (8 + 256), 32 * (1024 + 512))


def test_a_short_simulation_runs_on_falcon_40b():
    from policies.simulate import simulate
    from tests.factories import make_trace

    spec = ClusterSpec(model="falcon-40b", gpu="A10G", tensor_parallel=8)
    rows = [(0.05 * i, 8, 256) for i in range(4)]
    res = simulate(make_trace(rows), "djl", {"rolling_batch": "lmi-dist",
                                              "max_rolling_batch_size": 64},
                   build_executors(spec), seed=0)
    assert list(res.records["finish_reason"]) == ["stop"] * 4


def test_the_djl_falcon_40b_sweep_config_loads_on_djls_deployment():
    from experiments.config.load import load_config

    root = Path(__file__).resolve().parents[1]
    cfg = load_config(root / "experiments" / "configs" / "rolling_batch_falcon40b.yaml")
    assert (cfg.cluster.model, cfg.cluster.gpu, cfg.cluster.tensor_parallel) == (
        "falcon-40b", "A10G", 8)
    assert [p.name for p in cfg.policies] == ["dynamic", "djl", "djl", "djl", "djl"]
