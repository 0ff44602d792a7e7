"""Reading a local Hugging Face `config.json` safely, and refusing what a ModelSpec cannot hold.

The file is read as plain JSON first. transformers' AutoConfig (which fills the defaults of a
known model type) is asked only when the config names no custom code (`auto_map`), always with
`trust_remote_code=False` and `local_files_only=True`: no code from a model folder ever runs.

A `ModelSpec` is a dense decoder whose every layer attends over the whole context with one KV
head set. A config that describes anything else would be simulated as a different model (a
Mixtral config as a 7.2B dense model), so it is a ConfigError naming the key and value: mixture
of experts, multi-head latent attention (DeepSeek MLA), sliding-window attention shorter than
the context, encoder-decoder models, and model types whose layout has not been checked.
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
NOT_MODELLED = "is not modelled by the simulator (its KV and FLOPs would be a different model's)"


def read_config(config_dir: Path) -> dict[str, Any]:
    """A folder's config.json as a dict; through AutoConfig only when it asks for no code."""
    raw = read_json_object(config_dir / "config.json", "model", "config.json")
    if "auto_map" in raw:
        return raw  # custom modelling code: read the JSON as data, never import that code
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


def check_representable(cfg: Mapping[str, Any], source: str) -> None:
    """ConfigError naming the first key of `cfg` that describes a model a ModelSpec cannot
    represent; `source` (a path or name) is quoted in the message."""
    if cfg.get("is_encoder_decoder"):
        raise ConfigError(f"{FIELD}.is_encoder_decoder", cfg["is_encoder_decoder"],
                          f"encoder-decoder models {NOT_MODELLED}; in {source}")
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
