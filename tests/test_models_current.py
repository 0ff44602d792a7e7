"""Built-in current models (issue 26): published parameter counts, context lengths, names and
aliases, the config.json fields they come from (tests/fixtures/models/), a short simulation on
each, long (RAG) prompts, and Gemma-2's sliding window refused past the length it is exact to."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.models.catalog import MODELS, get_model, model_from_config_dict, resolve_model
from sim.util.errors import ConfigError
from tests.factories import make_trace

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# published totals (model cards; DeepSeek-V3's paper); every count within 1%
TOTALS = {
    "llama-3-70b": 70.6e9, "llama-3.1-70b": 70.6e9, "llama-3.3-70b": 70.6e9,
    "llama-3.1-405b": 405.9e9, "qwen2.5-7b": 7.62e9, "qwen2.5-72b": 72.7e9, "qwen3-8b": 8.19e9,
    "qwen3-14b": 14.8e9, "qwen3-32b": 32.8e9, "mistral-small-24b": 23.6e9,
    "gemma-2-9b": 9.24e9, "gemma-2-27b": 27.2e9, "qwen3-235b-a22b": 235e9,
    "deepseek-r1": 671e9}
# max_position_embeddings of each config.json (Qwen2.5: the Instruct models')
CONTEXTS = {
    "llama-3-70b": 8192, "llama-3.1-70b": 131072, "llama-3.3-70b": 131072,
    "llama-3.1-405b": 131072, "qwen2.5-7b": 32768, "qwen2.5-72b": 32768, "qwen3-8b": 40960,
    "qwen3-14b": 40960, "qwen3-32b": 40960, "mistral-small-24b": 32768, "gemma-2-9b": 8192,
    "gemma-2-27b": 8192, "qwen3-235b-a22b": 40960, "deepseek-r1": 163840}
ALIASES = [
    ("meta-llama/Meta-Llama-3-70B-Instruct", "llama-3-70b"),
    ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"),
    ("meta-llama/Llama-3.1-405B-Instruct", "llama-3.1-405b"),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
    ("Qwen/Qwen3-8B", "qwen3-8b"), ("Qwen/Qwen3-14B", "qwen3-14b"), ("Qwen/Qwen3-32B", "qwen3-32b"),
    ("mistralai/Mistral-Small-24B-Instruct-2501", "mistral-small-24b"),
    ("google/gemma-2-9b-it", "gemma-2-9b"), ("google/gemma-2-27b", "gemma-2-27b"),
    ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"), ("deepseek-ai/DeepSeek-R1", "deepseek-r1")]
# (model, GPU, tensor_parallel, weight dtype, max_model_len) a short simulation runs on
DEPLOYMENTS = [
    ("llama-3-70b", "H100-80GB", 4, "fp16", None),
    ("llama-3.1-70b", "H100-80GB", 4, "fp16", None),
    ("llama-3.3-70b", "A100-80GB", 4, "fp16", None),
    ("llama-3.1-405b", "H100-80GB", 8, "fp8", None),
    ("qwen2.5-7b", "A100-80GB", 1, "fp16", None), ("qwen2.5-72b", "H100-80GB", 4, "fp16", None),
    ("qwen3-8b", "L40S", 1, "fp16", None), ("qwen3-14b", "A100-80GB", 1, "fp16", None),
    ("qwen3-32b", "H100-80GB", 2, "fp16", None),
    ("mistral-small-24b", "H100-80GB", 1, "fp16", None),
    ("gemma-2-9b", "A100-40GB", 1, "fp16", 4096), ("gemma-2-27b", "H100-80GB", 1, "fp16", 4096),
    ("qwen3-235b-a22b", "H100-80GB", 8, "fp16", None), ("deepseek-r1", "H200", 8, "fp8", None)]


def run(model: str, gpu: str, tp: int, rows: list[tuple[float, int, int]], *,
        dtype: str = "fp16", max_model_len: int | None = None):
    spec = ClusterSpec(model=model, gpu=gpu, tensor_parallel=tp, weight_dtype=dtype)
    return simulate(make_trace(rows), "vllm", None, build_executors(spec), seed=0,
                    max_model_len=max_model_len)


@pytest.mark.parametrize("name", sorted(TOTALS))
def test_parameter_count_within_1_percent_of_the_published_total(name):
    assert MODELS[name].num_params == pytest.approx(TOTALS[name], rel=0.01)


@pytest.mark.parametrize("name, active, non_embedding, rel", [
    ("qwen3-235b-a22b", 22e9, 234e9, 0.01),
    ("qwen3-30b-a3b", 3.3e9, 29.9e9, 0.02),
    # "37B activated": embedding and lm_head both counted give 37.55 B (1.5% above)
    ("deepseek-r1", 37e9, None, 0.02)])
def test_moe_active_and_non_embedding_params(name, active, non_embedding, rel):
    # Qwen3's cards give 2 significant digits (3.3 B); 3.35 B counts embedding and lm_head
    m = MODELS[name]
    assert m.num_active_params == pytest.approx(active, rel=rel)
    if non_embedding is not None:  # the model card's "Non-Embedding" total
        assert m.num_params - 2 * m.num_embedding_params == pytest.approx(non_embedding,
                                                                           rel=0.01)


@pytest.mark.parametrize("name", sorted(CONTEXTS))
def test_context_is_the_configs_max_position_embeddings(name):
    assert MODELS[name].max_position_embeddings == CONTEXTS[name]


@pytest.mark.parametrize("alias, name", ALIASES)
def test_resolves_by_name_and_alias(alias, name):
    assert get_model(alias) is MODELS[name]
    assert resolve_model(name) is MODELS[name] and resolve_model(name.upper()) is MODELS[name]


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "models").iterdir()
                                        if not p.name.startswith("gemma")))
def test_builtin_is_its_config_json(name):
    model = resolve_model(str(FIXTURES / "models" / name))
    assert dataclasses.replace(model, name=name) == MODELS[name]


def test_deepseek_r1_is_deepseek_v3s_config():
    model = resolve_model(str(FIXTURES / "moe" / "deepseek-v3"))
    assert dataclasses.replace(model, name="deepseek-r1") == MODELS["deepseek-r1"]


@pytest.mark.parametrize("name", ["gemma-2-9b", "gemma-2-27b"])
def test_gemma2_builtin_has_its_config_fields_and_window(name):
    cfg = json.loads((FIXTURES / "models" / name / "config.json").read_text())
    m = MODELS[name]
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.head_dim,
            m.intermediate_size, m.vocab_size, m.max_position_embeddings) == (
        cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
        cfg["num_key_value_heads"], cfg["head_dim"], cfg["intermediate_size"],
        cfg["vocab_size"], cfg["max_position_embeddings"])
    assert m.tie_word_embeddings and m.gated_mlp
    assert m.sliding_window == cfg["sliding_window"] == 4096
    assert m.num_sliding_layers == (m.num_layers + 1) // 2  # layers 0, 2, 4, ...
    # the config.json path still refuses the window by name (sim/models/hf_config.py)
    with pytest.raises(ConfigError) as err:
        model_from_config_dict(cfg, name, allow_moe=True)
    assert err.value.field == "model.config.sliding_window" and err.value.value == 4096


@pytest.mark.parametrize("name, gpu, tp, dtype, max_model_len", DEPLOYMENTS)
def test_a_short_simulation_runs(name, gpu, tp, dtype, max_model_len):
    rows = [(0.05 * i, 300 + 100 * i, 20 + i) for i in range(6)]
    res = run(name, gpu, tp, rows, dtype=dtype, max_model_len=max_model_len)
    assert list(res.records["finish_reason"]) == ["stop"] * 6
    assert res.summary["request_throughput"] > 0


def test_rag_prompts_run_on_llama_3_1_70b_and_are_rejected_on_llama_2_70b():
    rows = [(0.0, 32000, 64), (0.5, 500, 32)]
    new = run("llama-3.1-70b", "H100-80GB", 4, rows).records
    assert list(new["finish_reason"]) == ["stop", "stop"]
    old = run("llama-2-70b", "H100-80GB", 4, rows).records
    assert list(old["finish_reason"]) == ["rejected", "stop"]
    assert old["reason"].iloc[0] == "prompt_too_long"
    assert old["reason_detail"].iloc[0] == "prompt_tokens=32000 > max_model_len=4096"


@pytest.mark.parametrize("max_model_len", [None, 4097, 8192])
def test_gemma2_past_its_window_is_refused_naming_max_model_len(max_model_len):
    with pytest.raises(ConfigError, match="4096-token sliding window on 23 of its 46") as err:
        run("gemma-2-27b", "H100-80GB", 1, [(0.0, 100, 10)], max_model_len=max_model_len)
    assert err.value.field == "cluster.max_model_len" and err.value.value == max_model_len


def test_gemma2_within_its_window_rejects_and_cuts_with_reasons():
    rows = [(0.0, 3000, 16), (0.1, 5000, 8), (0.2, 4000, 200)]
    records = run("gemma-2-27b", "H100-80GB", 1, rows, max_model_len=4096).records
    assert list(records["finish_reason"]) == ["stop", "rejected", "length"]
    assert list(records["reason"])[1:] == ["prompt_too_long", "max_model_len"]


@pytest.mark.parametrize("changes, field", [
    ({"sliding_window": 0, "num_sliding_layers": 1}, "sliding_window"),
    ({"sliding_window": "4096", "num_sliding_layers": 1}, "sliding_window"),
    ({"sliding_window": 4096}, "num_sliding_layers"),
    ({"num_sliding_layers": 2}, "num_sliding_layers"),
    ({"sliding_window": 4096, "num_sliding_layers": 33}, "num_sliding_layers"),
    ({"sliding_window": 4096, "num_sliding_layers": True}, "num_sliding_layers")])
def test_bad_sliding_window_fields_are_refused_by_name(changes, field):
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(MODELS["llama-2-7b"], **changes)
    assert err.value.field == field


def test_a_window_as_long_as_the_context_is_exact():
    full = dataclasses.replace(MODELS["llama-2-7b"], sliding_window=4096, num_sliding_layers=32)
    assert full.exact_up_to is None and MODELS["llama-2-7b"].exact_up_to is None
    assert MODELS["gemma-2-9b"].exact_up_to[0] == 4096
