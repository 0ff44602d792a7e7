"""Mixture-of-experts and MLA models from their config.json (tests/fixtures/moe/): parameter
counts against the published ones, built-ins equal to the fixtures, layouts refused by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sim.models.catalog import MODELS, get_model, model_from_config_dict, resolve_model
from sim.util.errors import ConfigError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "moe"


def fixture_dict(folder: str) -> dict:
    return json.loads((FIXTURES / folder / "config.json").read_text())


# published totals / active (B): Mixtral's model card, DeepSeek-V3's paper (671 B main model,
# without the 14 B multi-token-prediction module), Qwen3's model card (30.5 B / 3.3 B)
@pytest.mark.parametrize("folder, total, active, rel", [
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.005),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02),
    ("deepseek-v3", 671e9, 37e9, 0.02),  # active 37.55 B: embedding + lm_head both counted
])
def test_parameter_counts_match_the_published_ones(folder, total, active, rel):
    model = resolve_model(str(FIXTURES / folder))
    assert model.num_params == pytest.approx(total, rel=0.005)
    assert model.num_active_params == pytest.approx(active, rel=rel)
    assert model.moe is not None


def test_what_is_counted_for_deepseek_v3():
    m = resolve_model(str(FIXTURES / "deepseek-v3"))
    assert (m.moe.num_moe_layers, m.moe.num_experts, m.moe.experts_per_token) == (58, 256, 8)
    assert m.moe.shared_intermediate_size == 2048  # one shared expert of the routed width
    # MLA: q 7168x1536 + 1536x(128x192), kv 7168x576 + 512x(128x256), o 128x128x7168
    assert m.num_attention_params_per_layer == (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576
                                                + 512 * 128 * 256 + 128 * 128 * 7168)
    # the compressed KV cache: kv_lora_rank + qk_rope_head_dim elements per token per layer
    assert m.kv_bytes_per_token(2) == 61 * (512 + 64) * 2
    assert m.num_active_params == pytest.approx(37.55e9, rel=1e-3)


def test_mixtral_by_hand():
    m = resolve_model(str(FIXTURES / "mixtral-8x7b"))
    attn = 2 * 4096 * 4096 + 2 * 4096 * 1024
    expert = 3 * 4096 * 14336
    layers = 32 * (attn + 8 * expert + 4096 * 8)
    assert m.num_layer_params == layers
    assert m.num_params == layers + (2 * 32 + 1) * 4096 + 2 * 32000 * 4096
    assert m.num_params - m.num_active_params == 32 * 6 * expert
    assert m.kv_bytes_per_token(2) == 2 * 32 * 8 * 128 * 2  # GQA as a dense model


def test_qwen2_moe_shared_expert_by_dict():
    # Qwen1.5-MoE-A2.7B: 14.3 B total, 2.7 B active (model card); a gated shared expert
    cfg = {**fixture_dict("qwen3-30b-a3b"), "model_type": "qwen2_moe", "hidden_size": 2048,
           "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
           "head_dim": 128, "num_experts": 60, "num_experts_per_tok": 4,
           "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
           "intermediate_size": 5632, "max_position_embeddings": 8192}
    m = model_from_config_dict(cfg, "qwen1.5-moe", allow_moe=True)
    assert m.moe.shared_expert_gate and m.moe.shared_intermediate_size == 5632
    assert m.num_params == pytest.approx(14.3e9, rel=0.01)
    assert m.num_active_params == pytest.approx(2.7e9, rel=0.01)


@pytest.mark.parametrize("changes, moe_layers", [
    ({"decoder_sparse_step": 2}, 24), ({"mlp_only_layers": [0, 1, 47]}, 45),
    ({"decoder_sparse_step": 2, "mlp_only_layers": [1]}, 23)])
def test_qwen_dense_layers(changes, moe_layers):
    m = model_from_config_dict({**fixture_dict("qwen3-30b-a3b"), **changes}, "q", allow_moe=True)
    assert m.moe.num_moe_layers == moe_layers
    dense = 48 - moe_layers  # dense layers use intermediate_size (6144)
    full = resolve_model(str(FIXTURES / "qwen3-30b-a3b"))
    diff = moe_layers * m.moe.layer_params(2048) + dense * 3 * 2048 * 6144
    assert m.num_layer_params - full.num_layer_params == diff - 48 * m.moe.layer_params(2048)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"])
def test_builtins_are_the_fixtures(name):
    assert dataclasses.replace(resolve_model(str(FIXTURES / name)), name=name) == MODELS[name]


def test_aliases_and_context():
    assert get_model("mistralai/Mixtral-8x7B-Instruct-v0.1").name == "mixtral-8x7b"
    assert get_model("deepseek-ai/DeepSeek-V3").max_position_embeddings == 163840
    assert get_model("Qwen/Qwen3-30B-A3B").max_position_embeddings == 40960


@pytest.mark.parametrize("folder, changes, field, value", [
    # a key another family's layout uses, in an MoE config: refused by name, never ignored
    ("mixtral-8x7b", {"n_shared_experts": 2}, "n_shared_experts", 2),
    ("qwen3-30b-a3b", {"shared_expert_intermediate_size": 4096},
     "shared_expert_intermediate_size", 4096),  # Qwen3-MoE has no shared expert
    ("qwen3-30b-a3b", {"kv_lora_rank": 512}, "kv_lora_rank", 512),
    ("deepseek-v3", {"num_local_experts": 8}, "num_local_experts", 8),
    ("deepseek-v3", {"decoder_sparse_step": 2}, "decoder_sparse_step", 2),
    # MoE keys in a model type whose MoE layout is not read
    ("gpt-oss-20b", {}, "num_local_experts", 32),
    ("mixtral-8x7b", {"model_type": "llama"}, "num_local_experts", 8),
    ("qwen3-30b-a3b", {"model_type": "qwen3"}, "num_experts", 128),
    # keys the layout needs
    ("mixtral-8x7b", {"num_local_experts": None}, "num_local_experts", None),
    ("qwen3-30b-a3b", {"num_experts_per_tok": None}, "num_experts_per_tok", None),
    ("deepseek-v3", {"moe_layer_freq": 0}, "moe_layer_freq", 0),
    ("qwen3-30b-a3b", {"mlp_only_layers": [48]}, "mlp_only_layers", [48]),
])
def test_unread_moe_layouts_are_refused_by_name(folder, changes, field, value):
    cfg = {**fixture_dict(folder), **changes}
    with pytest.raises(ConfigError) as err:
        model_from_config_dict(cfg, "m", allow_moe=True)
    assert err.value.field == f"model.config.{field}" and err.value.value == value


def test_the_dense_only_reader_still_refuses_moe():
    """The real engine reads configs without allow_moe: an MoE config is refused, as before."""
    with pytest.raises(ConfigError, match="num_local_experts=8"):
        model_from_config_dict(fixture_dict("mixtral-8x7b"), "m")
    with pytest.raises(ConfigError, match="kv_lora_rank=512"):
        model_from_config_dict({**fixture_dict("deepseek-v3"), "n_routed_experts": None,
                                "n_shared_experts": None, "num_experts_per_tok": None,
                                "moe_intermediate_size": None}, "m")


def test_deepseek_without_routed_experts_is_dense_mla():
    cfg = {**fixture_dict("deepseek-v3"), "n_routed_experts": None}
    m = model_from_config_dict(cfg, "m", allow_moe=True)
    assert m.moe is None and m.mla is not None
    assert m.num_params == m.num_active_params


def test_a_sweep_config_loads_a_moe_folder():
    from experiments.config.experiment import cluster_from_dict

    spec = cluster_from_dict({"model": str(FIXTURES / "mixtral-8x7b"), "gpu": "H100-80GB",
                              "tensor_parallel": 2, "expert_parallel": 2})
    assert spec.expert_parallel == 2
