"""The built-in models by name or alias, and models read from a local HF config.json.

`ModelSpec` (sim/models/model_spec.py) is a transformer's shape (no weights): enough to count
parameters, FLOPs and KV-cache bytes. Built-in shapes (sim/models/builtin_models.py) come from the
models' public config.json files. `model_from_hf_config` reads a local config.json
(`sim/models/hf_config.py`: plain JSON, or transformers.AutoConfig without remote code),
mixture-of-experts and MLA models included (`sim/models/moe.py`, `sim/models/moe_config.py`), and refuses
models a ModelSpec cannot represent (sliding window, unverified layouts, ...).
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from sim.models.builtin_models import ALIASES, BUILTIN_MODELS
from sim.models.falcon_config import falcon_parallel_attn, is_falcon, with_falcon_defaults
from sim.models.hf_config import (CONTEXT_KEYS, FIELD as HF_FIELD, MOE_LAYOUTS,
                            check_moe_representable, check_representable,
                            check_some_moe_layer, config_file, read_config)
from sim.models.model_spec import ModelSpec
from sim.models.moe import MLASpec
from sim.models.moe_config import mla_from_config, moe_from_config
from sim.util.errors import ConfigError
from sim.util.jsonfile import int_value

__all__ = ["MODELS", "ModelSpec", "get_model", "model_config_file", "model_from_config_dict",
           "model_from_hf_config", "resolve_model"]

# HF model types whose MLP is gated (SwiGLU / GeGLU: gate, up and down matrices).
GATED_MODEL_TYPES = frozenset({"llama", "mistral", "mixtral", "qwen", "qwen2", "qwen3",
                               "gemma", "gemma2", "internlm", "internlm2", "baichuan", "yi"})
# Gated activations named by `hidden_act` in configs of other families.
GATED_ACTS = frozenset({"silu", "swiglu", "swish"})
# HF model types whose config class defaults tie_word_embeddings to False.
UNTIED_MODEL_TYPES = frozenset({"llama", "mistral", "mixtral", "qwen", "qwen2", "baichuan",
                                "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3"})


MODELS: Mapping[str, ModelSpec] = MappingProxyType({m.name: m for m in BUILTIN_MODELS})


def _lookup(name: str) -> ModelSpec | None:
    key = name.strip().lower().replace("_", "-")
    if key in MODELS:
        return MODELS[key]
    return MODELS[ALIASES[key]] if key in ALIASES else None


def get_model(name: str) -> ModelSpec:
    """Look a built-in model up by name or HF id, case-insensitively."""
    spec = _lookup(name)
    if spec is None:
        raise ConfigError("model", name, f"unknown model; known: {', '.join(MODELS)}")
    return spec


def _int(cfg: Mapping[str, Any], keys: tuple[str, ...], default: int | None = None) -> int:
    """The first of `keys` set in `cfg` as an int; ConfigError naming the key otherwise."""
    key = next((k for k in keys if cfg.get(k) is not None), None)
    if key is None:
        if default is None:
            raise ConfigError(f"{HF_FIELD}.{keys[0]}", None, f"missing (also looked for "
                              f"{', '.join(keys[1:]) or 'no other key'})")
        return default
    return int_value(cfg[key], f"{HF_FIELD}.{key}")


def _attention_shape(cfg: Mapping[str, Any], heads: int, hidden: int,
                     mla: MLASpec | None) -> tuple[int, int]:
    """(KV heads, head_dim) of a config; MLA materializes keys per head (qk head width)."""
    if mla is not None:
        return heads, mla.qk_head_dim
    kv_heads = _int(cfg, ("num_key_value_heads",), heads)
    if cfg.get("multi_query_attention") and cfg.get("multi_query_group_num"):
        kv_heads = _int(cfg, ("multi_query_group_num",))  # ChatGLM2/3 style GQA
    return kv_heads, _int(cfg, ("head_dim", "kv_channels"), hidden // heads if heads > 0 else 0)


def model_from_config_dict(cfg: Mapping[str, Any], name: str,
                           source: str | None = None, *, allow_moe: bool = False) -> ModelSpec:
    """Map an HF config dict (Llama, Mistral, Qwen, Qwen2, ChatGLM, Falcon, GPT-style; with allow_moe
    also Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3) to a ModelSpec; a config the spec cannot
    represent (an MoE or MLA layout without allow_moe, sliding window, ...) is a ConfigError.
    The real engine runs dense models only and calls this without allow_moe."""
    model_type = str(cfg.get("model_type", "")).lower()
    moe_layout = allow_moe and model_type in MOE_LAYOUTS
    if moe_layout:
        check_moe_representable(cfg, source or name)
    else:
        check_representable(cfg, source or name)
    parallel_attn = is_falcon(cfg) and falcon_parallel_attn(cfg)  # one all-reduce per layer
    if is_falcon(cfg):
        cfg = with_falcon_defaults(cfg)  # KV heads from Falcon's flags, its 2,048-token context
    hidden = _int(cfg, ("hidden_size", "n_embd", "d_model"))
    heads = _int(cfg, ("num_attention_heads", "n_head"))
    layers = _int(cfg, ("num_hidden_layers", "num_layers", "n_layer"))
    mla = mla_from_config(cfg) if moe_layout else None
    kv_heads, head_dim = _attention_shape(cfg, heads, hidden, mla)
    inter = _int(cfg, ("intermediate_size", "ffn_hidden_size", "inner_hidden_size", "n_inner",
                       "ffn_dim"), 4 * hidden)
    gated = model_type in GATED_MODEL_TYPES or str(cfg.get("hidden_act", "")).lower() in GATED_ACTS
    gated = gated or (model_type == "chatglm" and "ffn_hidden_size" in cfg)  # ChatGLM2/3: SwiGLU
    if model_type == "qwen":
        inter //= 2  # Qwen(1) stores the sum of the two gated-MLP input widths
    moe = moe_from_config(cfg, model_type, layers, inter) if moe_layout else None
    if moe_layout and moe is None:  # experts named, yet no MoE layer: not a dense model
        check_some_moe_layer(cfg, model_type, layers, source or name)
    return ModelSpec(
        name=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=inter,
        vocab_size=_int(cfg, ("padded_vocab_size", "vocab_size")), gated_mlp=gated,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings",
                                         model_type not in UNTIED_MODEL_TYPES)),
        max_position_embeddings=_int(cfg, CONTEXT_KEYS), moe=moe, mla=mla,
        causal=not (model_type == "chatglm" and "ffn_hidden_size" not in cfg),  # GLM-1: prefix-LM
        parallel_attn=parallel_attn)


def model_config_file(name_or_path: str | Path) -> Path | None:
    """The file a `cluster.model` value reads (None: a built-in name); the one resolution the
    model and the run identity (experiments/files/resume.py) share (`sim.models.hf_config.config_file`)."""
    if _lookup(str(name_or_path)) is not None:
        return None
    return config_file(name_or_path)


def model_from_hf_config(path_or_dir: str | Path) -> ModelSpec:
    """Read a local HF config file (as named), or a folder's config.json, into a ModelSpec."""
    file = config_file(path_or_dir)
    if not file.exists() and file.name == "config.json":
        raise ConfigError("model", str(path_or_dir), "no config.json found there")
    name = file.parent.name if file.name == "config.json" else file.stem
    return model_from_config_dict(read_config(file), name, str(file), allow_moe=True)


def resolve_model(name_or_path: str | Path) -> ModelSpec:
    """A built-in model by name, or a model read from an existing local config path."""
    spec = _lookup(str(name_or_path))
    if spec is not None:
        return spec
    if Path(name_or_path).expanduser().exists():
        return model_from_hf_config(name_or_path)
    raise ConfigError("model", str(name_or_path),
                      f"neither a built-in model nor an existing path; known: {', '.join(MODELS)}")
