"""The MoE and MLA parts of a Hugging Face config.json, for the layouts of
`sim.models.hf_config.MOE_LAYOUTS` (the config has passed `check_moe_representable`).

    mixtral              every layer MoE: num_local_experts experts of intermediate_size, top
                         num_experts_per_tok; no shared expert
    qwen2_moe, qwen3_moe layer i is MoE unless i is in mlp_only_layers, when (i + 1) %
                         decoder_sparse_step == 0; experts of moe_intermediate_size; Qwen2-MoE
                         adds one gated shared expert of shared_expert_intermediate_size
    deepseek_v2 / _v3    layer i is MoE when i >= first_k_dense_replace and i % moe_layer_freq
                         == 0; n_routed_experts of moe_intermediate_size plus n_shared_experts
                         of the same width; MLA attention (kv_lora_rank, q_lora_rank, ...)

Routing details that do not change which weights exist or how many experts a token uses are
not read: DeepSeek's group-limited routing (n_group, topk_group), scoring functions, the
normalization of top-k weights. DeepSeek-V3's multi-token-prediction module
(num_nextn_predict_layers) is a training / speculative-decoding extra and is not counted.
"""

from __future__ import annotations

from typing import Any, Mapping

from sim.models.hf_config import FIELD
from sim.models.moe import MLASpec, MoESpec
from sim.util.errors import ConfigError
from sim.util.jsonfile import int_value


def _get_int(cfg: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = cfg.get(key)
    if value is None:
        if default is None:
            raise ConfigError(f"{FIELD}.{key}", None, "missing (the MoE layout needs it)")
        return default
    return int_value(value, f"{FIELD}.{key}")


def _qwen_moe_layers(cfg: Mapping[str, Any], num_layers: int) -> int:
    step = _get_int(cfg, "decoder_sparse_step", 1)
    if step < 1:
        raise ConfigError(f"{FIELD}.decoder_sparse_step", step, "must be >= 1")
    dense = cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers for i in dense):
        raise ConfigError(f"{FIELD}.mlp_only_layers", dense,
                          f"must be a list of layer indices below {num_layers}")
    return sum(1 for i in range(num_layers) if i not in dense and (i + 1) % step == 0)


def _deepseek_moe_layers(cfg: Mapping[str, Any], num_layers: int) -> int:
    first = _get_int(cfg, "first_k_dense_replace", 0)
    freq = _get_int(cfg, "moe_layer_freq", 1)
    if freq < 1 or first < 0:
        key, value = ("moe_layer_freq", freq) if freq < 1 else ("first_k_dense_replace", first)
        raise ConfigError(f"{FIELD}.{key}", value, "must be >= 1" if freq < 1 else ">= 0")
    return sum(1 for i in range(num_layers) if i >= first and i % freq == 0)


def moe_from_config(cfg: Mapping[str, Any], model_type: str, num_layers: int,
                    intermediate_size: int) -> MoESpec | None:
    """The MoE MLP a config describes (None when it names no routed experts)."""
    top_k = cfg.get("num_experts_per_tok")
    if model_type == "mixtral":
        experts = _get_int(cfg, "num_local_experts")
        width, layers, shared, gate = intermediate_size, num_layers, 0, False
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        experts = _get_int(cfg, "num_experts")
        width = _get_int(cfg, "moe_intermediate_size") if experts else 0
        layers = _qwen_moe_layers(cfg, num_layers)
        shared = _get_int(cfg, "shared_expert_intermediate_size", 0)
        gate = shared > 0  # Qwen2-MoE's shared expert has a sigmoid gate
    else:  # deepseek_v2, deepseek_v3
        experts = _get_int(cfg, "n_routed_experts", 0)
        width = _get_int(cfg, "moe_intermediate_size") if experts else 0
        layers = _deepseek_moe_layers(cfg, num_layers)
        shared, gate = _get_int(cfg, "n_shared_experts", 0) * width, False
    if not experts or not layers:
        return None
    if top_k is None:
        raise ConfigError(f"{FIELD}.num_experts_per_tok", None, "missing (the MoE layout "
                                                                "needs it)")
    try:
        return MoESpec(num_experts=experts, experts_per_token=int_value(
            top_k, f"{FIELD}.num_experts_per_tok"), expert_intermediate_size=width,
            num_moe_layers=layers, shared_intermediate_size=shared, shared_expert_gate=gate)
    except ConfigError as err:
        raise ConfigError(f"{FIELD}.{err.field}", err.value, err.reason) from None


def mla_from_config(cfg: Mapping[str, Any]) -> MLASpec | None:
    """DeepSeek's latent attention (None when the config has no kv_lora_rank)."""
    if cfg.get("kv_lora_rank") is None:
        return None
    try:
        return MLASpec(q_lora_rank=_get_int(cfg, "q_lora_rank", 0),
                       kv_lora_rank=_get_int(cfg, "kv_lora_rank"),
                       qk_nope_head_dim=_get_int(cfg, "qk_nope_head_dim"),
                       qk_rope_head_dim=_get_int(cfg, "qk_rope_head_dim"),
                       v_head_dim=_get_int(cfg, "v_head_dim"))
    except ConfigError as err:
        field = err.field if err.field.startswith(FIELD) else f"{FIELD}.{err.field[4:]}"
        raise ConfigError(field, err.value, err.reason) from None
