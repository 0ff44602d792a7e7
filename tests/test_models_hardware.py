"""Built-in GPU and model registries, parameter counts, and reading HF config.json files."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from sim.hardware.gpus import GPUS, GPUSpec, get_gpu
from sim.models.catalog import (MODELS, ModelSpec, get_model, model_from_config_dict,
                        model_from_hf_config, resolve_model)
from sim.util.errors import ConfigError

LLAMA2_7B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "torch_dtype": "float16",
    "vocab_size": 32000,
}


@pytest.mark.parametrize("name, expected, rel", [
    ("llama-2-7b", 6.74e9, 0.01), ("chatglm-6b", 6.2e9, 0.05), ("llama-2-70b", 69e9, 0.02),
    ("llama-2-13b", 13.0e9, 0.02), ("llama-3-8b", 8.03e9, 0.01), ("mistral-7b", 7.24e9, 0.01),
    ("qwen-7b", 7.72e9, 0.01),
])
def test_param_counts(name: str, expected: float, rel: float) -> None:
    assert get_model(name).num_params == pytest.approx(expected, rel=rel)


def test_kv_bytes_per_token() -> None:
    assert get_model("llama-2-7b").kv_bytes_per_token(2) == 2**19  # 0.5 MiB
    assert get_model("llama-2-70b").kv_bytes_per_token(2) == 2 * 80 * 8 * 128 * 2
    assert get_model("mistral-7b").kv_bytes_per_token(1) == 2 * 32 * 8 * 128


def test_gated_mlp_matrix_count() -> None:
    glm = get_model("chatglm-6b")
    assert glm.num_mlp_params_per_layer == 2 * 4096 * 16384
    assert get_model("llama-2-7b").num_mlp_params_per_layer == 3 * 4096 * 11008


def test_get_model_aliases_and_case() -> None:
    assert get_model("meta-llama/Llama-2-7b-hf") is MODELS["llama-2-7b"]
    assert get_model("LLAMA-2-7B") is MODELS["llama-2-7b"]
    assert resolve_model("Mistral-7B") is MODELS["mistral-7b"]


def test_unknown_model_lists_known() -> None:
    with pytest.raises(ConfigError, match="model='gpt-5'.*unknown model; known: .*llama-2-7b"):
        get_model("gpt-5")
    with pytest.raises(ConfigError, match="neither a built-in model"):
        resolve_model("/no/such/dir")


def test_bad_model_fields() -> None:
    with pytest.raises(ConfigError, match="num_kv_heads=5"):
        dataclasses.replace(MODELS["llama-2-7b"], num_kv_heads=5)
    with pytest.raises(ConfigError, match="num_layers=0"):
        dataclasses.replace(MODELS["llama-2-7b"], num_layers=0)


def _write_config(tmp_path: Path, cfg: dict, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_model_from_hf_config_matches_builtin(tmp_path: Path) -> None:
    folder = _write_config(tmp_path, LLAMA2_7B_CONFIG, "Llama-2-7b-hf")
    for source in (folder, folder / "config.json"):
        spec = model_from_hf_config(source)
        assert dataclasses.replace(spec, name="llama-2-7b") == MODELS["llama-2-7b"]
    assert resolve_model(str(folder)).num_params == MODELS["llama-2-7b"].num_params


def test_config_dict_without_transformers_defaults() -> None:
    cfg = {k: v for k, v in LLAMA2_7B_CONFIG.items() if k != "tie_word_embeddings"}
    cfg.pop("num_key_value_heads")
    spec = model_from_config_dict(cfg, "llama-2-7b")
    assert spec == MODELS["llama-2-7b"]


def test_config_dict_gqa_qwen_and_chatglm() -> None:
    mistral = model_from_config_dict({**LLAMA2_7B_CONFIG, "model_type": "mistral",
                                      "intermediate_size": 14336, "num_key_value_heads": 8,
                                      "max_position_embeddings": 32768}, "mistral-7b")
    assert mistral == MODELS["mistral-7b"]
    qwen = model_from_config_dict({
        "model_type": "qwen", "hidden_size": 4096, "intermediate_size": 22016,
        "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 151936,
        "seq_length": 8192, "tie_word_embeddings": False}, "qwen-7b")
    assert qwen == MODELS["qwen-7b"]
    glm = model_from_config_dict({
        "model_type": "chatglm", "hidden_size": 4096, "inner_hidden_size": 16384,
        "num_attention_heads": 32, "num_layers": 28, "vocab_size": 130528,
        "max_sequence_length": 2048}, "chatglm-6b")
    assert glm == MODELS["chatglm-6b"]


def test_missing_config_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no config.json"):
        model_from_hf_config(tmp_path)


def test_gpu_registry_and_aliases() -> None:
    assert get_gpu("a100") is GPUS["A100-80GB"]
    assert get_gpu("A100-80G") is GPUS["A100-80GB"]
    assert get_gpu("nvidia a100_40gb") is GPUS["A100-40GB"]
    assert get_gpu("h100") is GPUS["H100-80GB"]
    assert get_gpu("H200").memory_bytes == 143771 * 2**20
    assert get_gpu("a100-80gb").memory_bytes == 80 * 2**30
    assert len(GPUS) == 7  # + L40S (docs/hardware.md)


def test_unknown_gpu_lists_known() -> None:
    with pytest.raises(ConfigError, match="gpu='tpu-v5'.*unknown GPU; known: V100-32GB"):
        get_gpu("tpu-v5")


def test_bad_gpu_fields() -> None:
    with pytest.raises(ConfigError, match="hbm_bandwidth=-1"):
        GPUSpec("x", 1, -1, 1, 1, 1, 0)
    with pytest.raises(ConfigError, match="interconnect_latency_s=-1"):
        GPUSpec("x", 1, 1, 1, 1, 1, -1)
    assert isinstance(ModelSpec("m", 1, 8, 2, 1, 4, 16, 10).num_params, int)


def test_reads_json_when_transformers_missing(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import now raises ImportError
    folder = _write_config(tmp_path, LLAMA2_7B_CONFIG, "llama-2-7b")
    assert model_from_hf_config(folder) == MODELS["llama-2-7b"]


def test_unknown_model_type_falls_back_to_json(tmp_path: Path) -> None:
    folder = _write_config(tmp_path, {
        "model_type": "chatglm", "hidden_size": 4096, "inner_hidden_size": 16384,
        "num_attention_heads": 32, "num_layers": 28, "vocab_size": 130528,
        "max_sequence_length": 2048, "auto_map": {}}, "chatglm-6b")
    assert model_from_hf_config(folder) == MODELS["chatglm-6b"]
