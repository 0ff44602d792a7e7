"""Reading a local Hugging Face `config.json` safely, and refusing what a ModelSpec cannot hold.

The file is read as plain JSON first. transformers' AutoConfig (which fills the defaults of a
known model type) is asked only when the config names no custom code (`auto_map`), always with
`trust_remote_code=False` and `local_files_only=True`: no code from a model folder ever runs.
MoE layouts (`MOE_LAYOUTS`) are read as written (transformers 5 renames Qwen3-MoE's
`num_experts` to `num_local_experts`, for one); sim/moe_config.py supplies their defaults.

A `ModelSpec` is a decoder whose every layer attends over the whole context. A config that
describes anything else would be simulated as a different model (a Mixtral config read as dense
is a 7.2B model), so it is a ConfigError naming the key and value: sliding-window attention
shorter than the context, encoder-decoder models, and model types whose layout has not been
checked. Mixture-of-experts and latent-attention (MLA) configs are read only for the model types
of `MOE_LAYOUTS`, each with the MoE keys its layout is known to use (`check_moe_representable`);
an MoE key another family uses is refused by name, never ignored. The dense-only check
(`check_representable`, what the real engine calls) refuses every MoE and MLA key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from sim.errors import ConfigError
from sim.jsonfile import read_json_object

FIELD = "model.config"  # error field prefix: a key of the model's config.json
# model types whose config.json keys model_from_config_dict reads correctly
SUPPORTED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen", "qwen2", "qwen3", "chatglm",
                                   "gpt_neox", "opt", "gpt2", "internlm", "internlm2",
                                   "baichuan", "yi", "gemma"})
# keys that announce a mixture-of-experts MLP when set to a non-zero value
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
            "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
            "shared_expert_intermediate_size")
MLA_KEYS = ("kv_lora_rank", "q_lora_rank")  # DeepSeek-V2/V3 multi-head latent attention
CONTEXT_KEYS = ("max_position_embeddings", "seq_length", "n_positions", "max_sequence_length",
                "model_max_length")  # the context length, first one set wins
_DEEPSEEK = ("n_routed_experts", "n_shared_experts", "num_experts_per_tok",
             "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq") + MLA_KEYS
_QWEN_MOE = ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
             "decoder_sparse_step", "mlp_only_layers")
# MoE model types whose config layout sim/moe_config.py reads, with the MoE keys it reads
MOE_LAYOUTS: dict[str, tuple[str, ...]] = {
    "mixtral": ("num_local_experts", "num_experts_per_tok"),
    "qwen2_moe": _QWEN_MOE + ("shared_expert_intermediate_size",),
    "qwen3_moe": _QWEN_MOE,  # no shared expert in Qwen3-MoE
    "deepseek_v2": _DEEPSEEK, "deepseek_v3": _DEEPSEEK}
# keys any family uses for an MoE or MLA layout: set in a MoE config whose layout does not
# read them, they are refused (a value that would be ignored changes the model)
MOE_LAYOUT_KEYS = MOE_KEYS + MLA_KEYS + ("decoder_sparse_step", "mlp_only_layers",
                                         "first_k_dense_replace", "moe_layer_freq",
                                         "moe_layer_start_index", "interleave_moe_layer_step",
                                         "moe_num_shared_experts", "experts_per_token")
NOT_MODELLED = "is not modelled by the simulator (its KV and FLOPs would be a different model's)"


def read_config(config_dir: Path) -> dict[str, Any]:
    """A folder's config.json as a dict; through AutoConfig only when it asks for no code."""
    raw = read_json_object(config_dir / "config.json", "model", "config.json")
    if "auto_map" in raw:
        return raw  # custom modelling code: read the JSON as data, never import that code
    if str(raw.get("model_type", "")).lower() in MOE_LAYOUTS:
        return raw  # MoE keys as written: transformers renames them between versions
    try:
        from transformers import AutoConfig  # lazy: heavy import, optional dependency
    except ImportError:
        return raw
    try:
        config = AutoConfig.from_pretrained(str(config_dir), local_files_only=True,
                                            trust_remote_code=False)
        return config.to_dict()
    except Exception:  # an unknown model_type, or a config transformers rejects: raw JSON
        return raw


def context_length(cfg: Mapping[str, Any]) -> Any:
    """The config's context length (first of CONTEXT_KEYS that is set), or None."""
    return next((cfg[k] for k in CONTEXT_KEYS if cfg.get(k) is not None), None)


def _check_sliding_window(cfg: Mapping[str, Any], source: str) -> None:
    window = cfg.get("sliding_window")
    if window is not None and cfg.get("use_sliding_window", True) is not False:
        context = context_length(cfg)
        if isinstance(window, bool) or not isinstance(window, (int, float)) \
                or not isinstance(context, (int, float)) or window < context:
            raise ConfigError(f"{FIELD}.sliding_window", window, (
                f"sliding-window attention shorter than the context "
                f"({context} tokens) {NOT_MODELLED}; in {source}"))
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        other = sorted({str(t) for t in layer_types} - {"full_attention"})
        if other:
            raise ConfigError(f"{FIELD}.layer_types", other[0], f"layers other than "
                              f"full_attention {NOT_MODELLED}; in {source}")


def _check_common(cfg: Mapping[str, Any], source: str) -> None:
    if cfg.get("is_encoder_decoder"):
        raise ConfigError(f"{FIELD}.is_encoder_decoder", cfg["is_encoder_decoder"],
                          f"encoder-decoder models {NOT_MODELLED}; in {source}")


def check_moe_representable(cfg: Mapping[str, Any], source: str) -> None:
    """As `check_representable` for a config whose model_type is in MOE_LAYOUTS: its own MoE
    and MLA keys are read; any other family's that is set is a ConfigError naming it."""
    _check_common(cfg, source)
    model_type = str(cfg.get("model_type")).lower()
    known = MOE_LAYOUTS[model_type]
    for key in MOE_LAYOUT_KEYS:
        if key not in known and cfg.get(key) not in (None, 0, [], False):
            raise ConfigError(f"{FIELD}.{key}", cfg[key], (
                f"not read for model_type {model_type!r} (its MoE layout uses "
                f"{', '.join(known)}); a mixture-of-experts layout this key describes "
                f"{NOT_MODELLED}; in {source}"))
    _check_sliding_window(cfg, source)


def check_representable(cfg: Mapping[str, Any], source: str) -> None:
    """ConfigError naming the first key of `cfg` that describes a model a ModelSpec cannot
    represent as a dense model; `source` (a path or name) is quoted in the message."""
    _check_common(cfg, source)
    for key in MOE_KEYS:
        if cfg.get(key) not in (None, 0):
            raise ConfigError(f"{FIELD}.{key}", cfg[key],
                              f"mixture-of-experts {NOT_MODELLED}; in {source}")
    for key in MLA_KEYS:
        if cfg.get(key) is not None:
            raise ConfigError(f"{FIELD}.{key}", cfg[key], "multi-head latent attention (MLA) "
                              f"{NOT_MODELLED}; in {source}")
    _check_sliding_window(cfg, source)
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or model_type.lower() not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(f"{FIELD}.model_type", model_type, (
            f"a model type whose config layout is not verified (in {source}); supported: "
            f"{', '.join(sorted(SUPPORTED_MODEL_TYPES))}"))
