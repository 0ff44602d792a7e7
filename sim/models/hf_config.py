"""Reading a local Hugging Face `config.json` safely, and refusing what a ModelSpec cannot hold.

Which file: `config_file` is the one resolution of a model path (a folder reads its
config.json, any other path, `DIR/mixtral.json` say, is read as named, `~` expanded); the run
identity hashes that same file (`sim.models.catalog.model_config_file`). A FIFO or device is refused.
The file is read as plain JSON first. transformers' AutoConfig (which fills the defaults of a
known model type) is asked only when the config names no custom code (`auto_map`), always with
`trust_remote_code=False` and `local_files_only=True`: no code from a model folder ever runs.
MoE layouts (`MOE_LAYOUTS`) are read as written (transformers 5 renames Qwen3-MoE's
`num_experts` to `num_local_experts`, for one); sim/models/moe_config.py supplies their defaults.

A `ModelSpec` is a decoder whose every layer attends over the whole context. A config that
describes anything else would be simulated as a different model (a Mixtral config read as dense
is a 7.2B model), so it is a ConfigError naming the key and value: sliding-window attention
shorter than the context, encoder-decoder models, and model types whose layout has not been
checked. Mixture-of-experts and latent-attention (MLA) configs are read only for the model types
of `MOE_LAYOUTS`, each with the MoE keys its layout is known to use (`check_moe_representable`);
an MoE key another family uses is refused by name, never ignored, and one of its own set to a
value no model has (0 experts, top-k of 0 or above the experts, no MoE layer) is refused by
name too (`check_moe_values`, `check_some_moe_layer`): never read as a dense model. The
dense-only check (`check_representable`, what the real engine calls) refuses every MoE and MLA
key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from sim.util.errors import ConfigError
from sim.util.jsonfile import int_value, read_json_object

FIELD = "model.config"  # error field prefix: a key of the model's config.json
# model types whose config.json keys model_from_config_dict reads correctly
SUPPORTED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen", "qwen2", "qwen3", "chatglm",
                                   "gpt_neox", "opt", "gpt2", "internlm", "internlm2",
                                   "baichuan", "yi", "gemma", "falcon", "refinedweb",
                                   "refinedwebmodel"})  # falcon: sim/models/falcon_config.py
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
# MoE model types whose config layout sim/models/moe_config.py reads, with the MoE keys it reads
MOE_LAYOUTS: dict[str, tuple[str, ...]] = {
    "mixtral": ("num_local_experts", "num_experts_per_tok"),
    "qwen2_moe": _QWEN_MOE + ("shared_expert_intermediate_size",),
    "qwen3_moe": _QWEN_MOE,  # no shared expert in Qwen3-MoE
    "deepseek_v2": _DEEPSEEK, "deepseek_v3": _DEEPSEEK}
EXPERTS_KEY = {"mixtral": "num_local_experts", "qwen2_moe": "num_experts",  # routed experts
               "qwen3_moe": "num_experts", "deepseek_v2": "n_routed_experts",
               "deepseek_v3": "n_routed_experts"}
# MoE keys that must be >= 1 / >= 0 when a config sets them (the layout reads them)
MOE_AT_LEAST = {"num_local_experts": 1, "num_experts": 1, "n_routed_experts": 1,
                "num_experts_per_tok": 1, "moe_intermediate_size": 1, "decoder_sparse_step": 1,
                "moe_layer_freq": 1, "shared_expert_intermediate_size": 0,
                "n_shared_experts": 0, "first_k_dense_replace": 0}
# the keys that pick which layers are MoE, per layout (named when they pick none)
MOE_LAYER_KEYS = {"qwen2_moe": ("decoder_sparse_step", "mlp_only_layers"),
                  "qwen3_moe": ("decoder_sparse_step", "mlp_only_layers"),
                  "deepseek_v2": ("first_k_dense_replace", "moe_layer_freq"),
                  "deepseek_v3": ("first_k_dense_replace", "moe_layer_freq")}
# keys any family uses for an MoE or MLA layout: set in a MoE config whose layout does not
# read them, they are refused (a value that would be ignored changes the model)
MOE_LAYOUT_KEYS = MOE_KEYS + MLA_KEYS + ("decoder_sparse_step", "mlp_only_layers",
                                         "first_k_dense_replace", "moe_layer_freq",
                                         "moe_layer_start_index", "interleave_moe_layer_step",
                                         "moe_num_shared_experts", "experts_per_token")
NOT_MODELLED = "is not modelled by the simulator (its KV and FLOPs would be a different model's)"


def config_file(path: str | Path) -> Path:
    """The file a model path names (`~` expanded): a folder's config.json, any other path as
    named (`DIR/mixtral.json` is read, never `DIR/config.json` beside it). Nothing is checked:
    `read_config` refuses what is not a regular file."""
    named = Path(path).expanduser()
    return named / "config.json" if named.is_dir() else named


def read_config(file: Path) -> dict[str, Any]:
    """The JSON object in `file` (a `config_file`); filled with transformers' defaults for its
    model_type only when the config asks for no code. Only this file is read."""
    if file.exists() and not file.is_file():
        raise ConfigError("model", str(file), "not a regular file (a FIFO, a device or a "
                                              "socket is never read as a config.json)")
    raw = read_json_object(file, "model", "config.json")
    if "auto_map" in raw:
        return raw  # custom modelling code: read the JSON as data, never import that code
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or model_type.lower() in MOE_LAYOUTS:
        return raw  # MoE keys as written: transformers renames them between versions
    try:
        from transformers import AutoConfig  # lazy: heavy import, optional dependency
    except ImportError:
        return raw
    try:  # this very file (a path to a .json file is read as named), never code
        config = AutoConfig.from_pretrained(str(file), local_files_only=True,
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
    check_moe_values(cfg, model_type, source)
    _check_sliding_window(cfg, source)


def check_moe_values(cfg: Mapping[str, Any], model_type: str, source: str) -> None:
    """ConfigError naming the first MoE key of the layout that is set to a value no model has:
    0 experts (a Mixtral with `num_local_experts: 0` is not a dense model), top-k of 0 or
    above the experts, a width below 1, a negative count."""
    numbers: dict[str, int] = {}
    for key in MOE_LAYOUTS[model_type]:
        value = cfg.get(key)
        if key not in MOE_AT_LEAST or value is None:
            continue
        numbers[key] = int_value(value, f"{FIELD}.{key}", f" (in {source})")
        if numbers[key] < MOE_AT_LEAST[key]:
            raise ConfigError(f"{FIELD}.{key}", value, f"must be >= {MOE_AT_LEAST[key]} in a "
                              f"{model_type} config (a mixture-of-experts layout); in {source}")
    experts_key = EXPERTS_KEY[model_type]
    experts, top_k = numbers.get(experts_key), numbers.get("num_experts_per_tok")
    if experts is not None and top_k is not None and top_k > experts:
        raise ConfigError(f"{FIELD}.num_experts_per_tok", cfg["num_experts_per_tok"], (
            f"more than {experts_key}={experts}: a token cannot use more experts than a layer "
            f"has; in {source}"))


def check_some_moe_layer(cfg: Mapping[str, Any], model_type: str, num_layers: int,
                         source: str) -> None:
    """Called when an MoE layout made no layer MoE: fine for a config naming no routed experts
    (a dense DeepSeek), else a ConfigError naming the key that left every layer dense."""
    experts_key = EXPERTS_KEY[model_type]
    if cfg.get(experts_key) is None:
        return
    keys = MOE_LAYER_KEYS.get(model_type, (experts_key,))
    key = next((k for k in keys if cfg.get(k) not in (None, [], 0, 1)), keys[0])
    raise ConfigError(f"{FIELD}.{key}", cfg.get(key), f"leaves none of the {num_layers} layers "
                      f"a mixture-of-experts layer although {experts_key}="
                      f"{cfg[experts_key]}: the model would be simulated as dense; in {source}")


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
