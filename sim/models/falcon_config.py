"""Falcon's config.json layout, read into the keys `sim.models.catalog.model_from_config_dict` reads.

Hugging Face `model_type: falcon` configs (and TII's first `RefinedWeb` / `RefinedWebModel`
ones, with `n_head`, `n_head_kv`, `n_layer`) describe a GPT-style decoder: a plain GELU MLP of
4 x hidden (`dense_h_to_4h`, `dense_4h_to_h`: two matrices, no gate), rotary positions (or
ALiBi), tied embeddings, attention and MLP in parallel, and one of three attention layouts, as
transformers' `FalconAttention` picks them:

- `new_decoder_architecture` (Falcon-40B, -180B; always for `RefinedWeb`): grouped-query
  attention with `num_kv_heads` (`n_head_kv`) KV heads (40B: 128 query, 8 KV heads of 64);
- else `multi_query` (Falcon-7B, the default): one KV head (7B: 71 query heads of 64);
- else multi-head attention (`num_kv_heads` = query heads).

transformers' `FalconConfig.to_dict()` says `num_kv_heads: 71` for Falcon-7B, where its model
builds one KV head, so the flags decide, never `num_kv_heads` alone. Configs omit the context:
`FalconConfig`'s default of 2,048 tokens applies. Parallel attention (`parallel_attn`, default
true, or `new_decoder_architecture`) changes no weight or FLOP: a layer's attention and MLP read
the same normed input and vLLM sums their outputs before ONE tensor-parallel all-reduce per layer
(`reduce_row_parallel_results` false), which `ModelSpec.parallel_attn` tells the cost models.
Biases (`bias: true`, Falcon-RW) are not counted, as for GPT-2 and OPT.
"""

from __future__ import annotations

from typing import Any, Mapping

from sim.models.hf_config import CONTEXT_KEYS, FIELD
from sim.util.errors import ConfigError
from sim.util.jsonfile import int_value

FALCON_MODEL_TYPES = frozenset({"falcon", "refinedweb", "refinedwebmodel"})  # lowercase
FALCON_CONTEXT = 2048  # tokens: FalconConfig's max_position_embeddings when a config omits it
KV_HEAD_KEYS = ("num_kv_heads", "n_head_kv")  # KV heads of the new decoder architecture
HEAD_KEYS = ("num_attention_heads", "n_head")  # query heads


def is_falcon(cfg: Mapping[str, Any]) -> bool:
    """Whether `cfg` is a Falcon (or RefinedWeb) config."""
    return str(cfg.get("model_type", "")).lower() in FALCON_MODEL_TYPES


def _first(cfg: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    key = next((k for k in keys if cfg.get(k) is not None), None)
    return None if key is None else (key, cfg[key])


def _flag(cfg: Mapping[str, Any], key: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{FIELD}.{key}", value, "must be true or false in a Falcon config")
    return value


def falcon_kv_heads(cfg: Mapping[str, Any]) -> int:
    """KV heads of a Falcon config, as transformers' FalconAttention builds them."""
    heads = _first(cfg, HEAD_KEYS)
    if heads is None:
        raise ConfigError(f"{FIELD}.num_attention_heads", None, "missing (also looked for n_head)")
    num_heads = int_value(heads[1], f"{FIELD}.{heads[0]}")
    new_arch = str(cfg.get("model_type", "")).lower() == "refinedweb" or \
        _flag(cfg, "new_decoder_architecture", False)
    if new_arch:
        kv = _first(cfg, KV_HEAD_KEYS)
        return num_heads if kv is None else int_value(kv[1], f"{FIELD}.{kv[0]}")
    return 1 if _flag(cfg, "multi_query", True) else num_heads


def falcon_parallel_attn(cfg: Mapping[str, Any]) -> bool:
    """Whether a Falcon config's layers run attention and MLP in parallel (one all-reduce per
    layer in vLLM): `new_decoder_architecture` (always for `RefinedWeb`) or `parallel_attn`
    (FalconConfig's default: true)."""
    new_arch = str(cfg.get("model_type", "")).lower() == "refinedweb" or \
        _flag(cfg, "new_decoder_architecture", False)
    return new_arch or _flag(cfg, "parallel_attn", True)


def with_falcon_defaults(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a Falcon config with the keys the generic reader reads filled as Falcon's
    model builds them: `num_key_value_heads` (the flags above), the context (2,048 when
    omitted), the hidden width of TII's `n_embed`, and no gated MLP (`hidden_act: gelu`)."""
    if cfg.get("num_key_value_heads") is not None:
        raise ConfigError(f"{FIELD}.num_key_value_heads", cfg["num_key_value_heads"],
                          "not a Falcon key (Falcon names KV heads num_kv_heads / n_head_kv)")
    out = dict(cfg)
    out["num_key_value_heads"] = falcon_kv_heads(cfg)
    if _first(cfg, CONTEXT_KEYS) is None:
        out["max_position_embeddings"] = FALCON_CONTEXT
    if cfg.get("hidden_size") is None and cfg.get("n_embed") is not None:
        out["hidden_size"] = cfg["n_embed"]
    activation = str(cfg.get("activation", "gelu")).lower()
    if not activation.startswith("gelu"):
        raise ConfigError(f"{FIELD}.activation", cfg.get("activation"),
                          "Falcon's MLP is read as GELU (two matrices); another activation "
                          "is not a layout this reader has checked")
    out["hidden_act"] = activation
    return out
