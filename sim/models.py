"""Transformer shapes (no weights): enough to count parameters, FLOPs and KV-cache bytes.

Built-in shapes come from the models' public config.json files. `model_from_hf_config` reads
a local config.json (`sim/hf_config.py`: plain JSON, or transformers.AutoConfig without remote
code), mixture-of-experts and MLA models included (`sim/moe.py`, `sim/moe_config.py`), and
refuses models a ModelSpec cannot represent (sliding window, unverified layouts, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from sim.errors import ConfigError, check_positive
from sim.hf_config import (CONTEXT_KEYS, FIELD as HF_FIELD, MOE_LAYOUTS,
                            check_moe_representable, check_representable,
                            check_some_moe_layer, config_file, read_config)
from sim.jsonfile import int_value
from sim.moe import MLASpec, MoESpec
from sim.moe_config import mla_from_config, moe_from_config

# HF model types whose MLP is gated (SwiGLU / GeGLU: gate, up and down matrices).
GATED_MODEL_TYPES = frozenset({"llama", "mistral", "mixtral", "qwen", "qwen2", "qwen3",
                               "gemma", "gemma2", "internlm", "internlm2", "baichuan", "yi"})
# Gated activations named by `hidden_act` in configs of other families.
GATED_ACTS = frozenset({"silu", "swiglu", "swish"})
# HF model types whose config class defaults tie_word_embeddings to False.
UNTIED_MODEL_TYPES = frozenset({"llama", "mistral", "mixtral", "qwen", "qwen2", "baichuan",
                                "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3"})


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer's shape."""

    name: str  # canonical name, e.g. "llama-2-7b"
    num_layers: int  # transformer blocks
    hidden_size: int  # model width (elements)
    num_attention_heads: int  # query heads
    num_kv_heads: int  # key/value heads (== query heads for MHA, fewer for GQA/MQA)
    head_dim: int  # elements per attention head
    intermediate_size: int  # MLP width per matrix (elements)
    vocab_size: int  # tokens in the vocabulary
    gated_mlp: bool = True  # True: SwiGLU, 3 MLP matrices; False: plain GeLU MLP, 2 matrices
    tie_word_embeddings: bool = False  # the lm_head shares the input embedding matrix
    max_position_embeddings: int = 4096  # tokens, longest supported sequence
    moe: MoESpec | None = None  # mixture-of-experts MLP of the MoE layers (None: dense model)
    mla: MLASpec | None = None  # multi-head latent attention (None: MHA / GQA)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("name", self.name, "model name must be non-empty")
        for field in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
                      "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(field, value, "must be an int")
            check_positive(field, value)
        if self.num_attention_heads % self.num_kv_heads:
            raise ConfigError("num_kv_heads", self.num_kv_heads,
                              f"must divide num_attention_heads={self.num_attention_heads}")
        if self.moe is not None and self.moe.num_moe_layers > self.num_layers:
            raise ConfigError("moe.num_moe_layers", self.moe.num_moe_layers,
                              f"more than num_layers={self.num_layers}")

    @property
    def num_attention_params_per_layer(self) -> int:
        """Weights of the q, k, v and o projections of one layer."""
        if self.mla is not None:
            return self.mla.attention_params(self.hidden_size, self.num_attention_heads)
        q_and_o = 2 * self.hidden_size * self.num_attention_heads * self.head_dim
        k_and_v = 2 * self.hidden_size * self.num_kv_heads * self.head_dim
        return q_and_o + k_and_v

    @property
    def num_mlp_params_per_layer(self) -> int:
        """Weights of the MLP matrices of one layer."""
        return (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size

    @property
    def num_dense_params_per_layer(self) -> int:
        """Weights of one dense layer's linear (matmul) layers: attention projections plus MLP."""
        return self.num_attention_params_per_layer + self.num_mlp_params_per_layer

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        return 0 if self.moe is None else self.moe.num_moe_layers

    @property
    def num_layer_params(self) -> int:
        """Weights of all layers' linear layers (every expert of every MoE layer)."""
        if self.moe is None:
            return self.num_layers * self.num_dense_params_per_layer
        moe_layers = self.moe.num_moe_layers
        return (self.num_layers * self.num_attention_params_per_layer
                + (self.num_layers - moe_layers) * self.num_mlp_params_per_layer
                + moe_layers * self.moe.layer_params(self.hidden_size))

    @property
    def num_active_layer_params(self) -> int:
        """Weights of all layers' linear layers one token uses (top-k experts per MoE layer)."""
        if self.moe is None:
            return self.num_layer_params
        return (self.num_layer_params - self.moe.num_moe_layers
                * (self.moe.layer_params(self.hidden_size)
                   - self.moe.active_layer_params(self.hidden_size)))

    @property
    def num_embedding_params(self) -> int:
        """Weights of the input embedding (and of the lm_head, which has the same shape)."""
        return self.vocab_size * self.hidden_size

    @property
    def num_norm_params(self) -> int:
        """Weights of the two norms per layer and the final norm (biases are ignored), plus
        MLA's latent norms."""
        norms = (2 * self.num_layers + 1) * self.hidden_size
        return norms + (self.num_layers * self.mla.norm_params() if self.mla else 0)

    @property
    def num_params(self) -> int:
        """All weights: layers (every expert), norms, embedding and lm_head (once if tied)."""
        embeddings = self.num_embedding_params * (1 if self.tie_word_embeddings else 2)
        return self.num_layer_params + self.num_norm_params + embeddings

    @property
    def num_active_params(self) -> int:
        """Weights one token uses: `num_params` with only the top-k routed experts of each MoE
        layer (embedding and lm_head both counted, as Mixtral's and DeepSeek's figures do)."""
        return self.num_params - (self.num_layer_params - self.num_active_layer_params)

    def kv_elements_per_token_per_layer(self) -> int:
        """Cached elements per token per layer: K and V of every KV head, or MLA's latent."""
        if self.mla is not None:
            return self.mla.kv_elements_per_token
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """Bytes of K and V cache one token holds across all layers and KV heads (MLA: its
        compressed latent)."""
        if self.mla is not None:
            return self.num_layers * self.mla.kv_elements_per_token * kv_dtype_bytes
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * kv_dtype_bytes


_BUILTIN = (
    ModelSpec("chatglm-6b", 28, 4096, 32, 32, 128, 16384, 130528, gated_mlp=False,
              tie_word_embeddings=True, max_position_embeddings=2048),
    ModelSpec("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, max_position_embeddings=4096),
    ModelSpec("llama-2-13b", 40, 5120, 40, 40, 128, 13824, 32000, max_position_embeddings=4096),
    ModelSpec("llama-2-70b", 80, 8192, 64, 8, 128, 28672, 32000, max_position_embeddings=4096),
    ModelSpec("llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, max_position_embeddings=8192),
    # Llama-3.1-8B: Llama-3-8B's shapes with a 128k context (RoPE scaling; long-prompt traces)
    ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256,
              max_position_embeddings=131072),
    # Qwen(1)-7B's config.json says intermediate_size=22016: the sum of its two MLP inputs.
    ModelSpec("qwen-7b", 32, 4096, 32, 32, 128, 11008, 151936, max_position_embeddings=8192),
    ModelSpec("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, max_position_embeddings=32768),
    # small Llama-tokenizer models used as speculative-decoding drafts
    ModelSpec("llama-68m", 2, 768, 12, 12, 64, 3072, 32000, max_position_embeddings=2048),
    ModelSpec("tinyllama-1.1b", 22, 2048, 32, 4, 64, 5632, 32000, max_position_embeddings=2048),
    # mixture-of-experts (sim/moe.py; shapes of tests/fixtures/moe/*/config.json)
    ModelSpec("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, max_position_embeddings=32768,
              moe=MoESpec(8, 2, 14336, 32)),  # 46.7 B total, 12.9 B active
    ModelSpec("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 6144, 151936,
              max_position_embeddings=40960, moe=MoESpec(128, 8, 768, 48)),  # 30.5 B, 3.3 B
    # DeepSeek-V3: 3 dense layers then 58 MoE layers of 256 routed + 1 shared expert, MLA
    # attention (per-head K width 128 + 64); the multi-token-prediction module is not counted
    ModelSpec("deepseek-v3", 61, 7168, 128, 128, 192, 18432, 129280,
              max_position_embeddings=163840,
              moe=MoESpec(256, 8, 2048, 58, shared_intermediate_size=2048),
              mla=MLASpec(1536, 512, 128, 64, 128)),  # 671 B total, 37.6 B active
)

MODELS: Mapping[str, ModelSpec] = MappingProxyType({m.name: m for m in _BUILTIN})

_ALIASES: Mapping[str, str] = MappingProxyType({
    "thudm/chatglm-6b": "chatglm-6b",
    "llama2-7b": "llama-2-7b", "meta-llama/llama-2-7b-hf": "llama-2-7b",
    "meta-llama/llama-2-7b-chat-hf": "llama-2-7b",
    "llama2-13b": "llama-2-13b", "meta-llama/llama-2-13b-hf": "llama-2-13b",
    "meta-llama/llama-2-13b-chat-hf": "llama-2-13b",
    "llama2-70b": "llama-2-70b", "meta-llama/llama-2-70b-hf": "llama-2-70b",
    "meta-llama/llama-2-70b-chat-hf": "llama-2-70b",
    "llama3-8b": "llama-3-8b", "meta-llama/meta-llama-3-8b": "llama-3-8b",
    "meta-llama/meta-llama-3-8b-instruct": "llama-3-8b",
    "qwen/qwen-7b": "qwen-7b", "qwen/qwen-7b-chat": "qwen-7b",
    # v0.2 only: Mistral-7B-v0.1 attends over a 4,096-token sliding window, which a ModelSpec
    # cannot represent (its config.json is refused, see sim/hf_config.py)
    "mistralai/mistral-7b-instruct-v0.2": "mistral-7b",
    "jackfram/llama-68m": "llama-68m",
    "tinyllama/tinyllama-1.1b-chat-v1.0": "tinyllama-1.1b", "tinyllama-1.1b-chat": "tinyllama-1.1b",
    "mistralai/mixtral-8x7b-v0.1": "mixtral-8x7b",
    "mistralai/mixtral-8x7b-instruct-v0.1": "mixtral-8x7b",
    "qwen/qwen3-30b-a3b": "qwen3-30b-a3b", "deepseek-ai/deepseek-v3": "deepseek-v3",
})


def _lookup(name: str) -> ModelSpec | None:
    key = name.strip().lower().replace("_", "-")
    if key in MODELS:
        return MODELS[key]
    return MODELS[_ALIASES[key]] if key in _ALIASES else None


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
    """Map an HF config dict (Llama, Mistral, Qwen, Qwen2, ChatGLM, GPT-style; with allow_moe
    also Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3) to a ModelSpec; a config the spec cannot
    represent (an MoE or MLA layout without allow_moe, sliding window, ...) is a ConfigError.
    The real engine runs dense models only and calls this without allow_moe."""
    model_type = str(cfg.get("model_type", "")).lower()
    moe_layout = allow_moe and model_type in MOE_LAYOUTS
    if moe_layout:
        check_moe_representable(cfg, source or name)
    else:
        check_representable(cfg, source or name)
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
        max_position_embeddings=_int(cfg, CONTEXT_KEYS), moe=moe, mla=mla)


def model_config_file(name_or_path: str | Path) -> Path | None:
    """The file a `cluster.model` value reads (None: a built-in name); the one resolution the
    model and the run identity (experiments/resume.py) share (`sim.hf_config.config_file`)."""
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
