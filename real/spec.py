"""What the real engine needs to know about a model beyond its shape (torch-free).

`sim.models.catalog.ModelSpec` carries the shapes; a Llama-family forward pass also needs the RoPE base
and scaling, the RMSNorm epsilon and whether q/k/v have biases (Qwen2). A model is named as in the
simulator (a built-in name, or a local HF config.json / model folder), or `tiny`: a 2-layer model
for CPU tests (`real/models/tiny/config.json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from sim.models.catalog import ModelSpec, get_model, model_from_config_dict
from sim.util.errors import ConfigError, check_positive
from sim.util.jsonfile import read_json_object

TINY_CONFIG = Path(__file__).resolve().parent / "models" / "tiny" / "config.json"
ROPE_TYPES = ("default", "linear", "llama3")

# built-in model -> (rope_theta, rms_norm_eps, attention_bias), from their config.json files
_BUILTIN_EXTRAS: Mapping[str, tuple[float, float, bool]] = {
    "llama-2-7b": (10000.0, 1e-5, False),
    "llama-2-13b": (10000.0, 1e-5, False),
    "llama-2-70b": (10000.0, 1e-5, False),
    "llama-3-8b": (500000.0, 1e-5, False),
    "mistral-7b": (10000.0, 1e-5, False),
    "qwen-7b": (10000.0, 1e-6, True),
}


@dataclass(frozen=True)
class RealModelConfig:
    """A Llama-family decoder: shapes plus the constants of its forward pass."""

    spec: ModelSpec  # shapes (layers, widths, heads, vocabulary)
    rope_theta: float = 10000.0  # RoPE base
    rms_norm_eps: float = 1e-5  # RMSNorm epsilon
    attention_bias: bool = False  # q/k/v projections carry biases (Qwen2)
    rope_type: str = "default"  # default | linear | llama3 (Llama-3.1 frequency scaling)
    rope_factor: float = 1.0  # RoPE scaling factor (linear, llama3)
    rope_low_freq_factor: float = 1.0  # llama3 scaling: low-frequency wavelength factor
    rope_high_freq_factor: float = 4.0  # llama3 scaling: high-frequency wavelength factor
    rope_original_max_position: int = 8192  # tokens, llama3 scaling: pre-training context

    def __post_init__(self) -> None:
        if not self.spec.gated_mlp:
            raise ConfigError("model", self.spec.name, "the real engine runs Llama-family "
                              "models (gated SwiGLU MLP); this model has a plain MLP")
        check_positive("rope_theta", self.rope_theta)
        check_positive("rms_norm_eps", self.rms_norm_eps)
        check_positive("rope_factor", self.rope_factor)
        check_positive("rope_original_max_position", self.rope_original_max_position)
        if self.rope_type not in ROPE_TYPES:
            raise ConfigError("rope_type", self.rope_type, f"supported: {', '.join(ROPE_TYPES)}")

    @property
    def name(self) -> str:
        return self.spec.name


def _rope_fields(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """RoPE settings from transformers 4 (`rope_theta`, `rope_scaling`) or 5 (`rope_parameters`)."""
    params = dict(cfg.get("rope_parameters") or {})
    scaling = dict(cfg.get("rope_scaling") or {})
    merged = {**scaling, **params}
    rope_type = merged.get("rope_type", merged.get("type", "default")) or "default"
    out: dict[str, Any] = {"rope_theta": float(merged.get("rope_theta",
                                                           cfg.get("rope_theta", 10000.0))),
                           "rope_type": str(rope_type)}
    if "factor" in merged:
        out["rope_factor"] = float(merged["factor"])
    if "low_freq_factor" in merged:
        out["rope_low_freq_factor"] = float(merged["low_freq_factor"])
    if "high_freq_factor" in merged:
        out["rope_high_freq_factor"] = float(merged["high_freq_factor"])
    if "original_max_position_embeddings" in merged:
        out["rope_original_max_position"] = int(merged["original_max_position_embeddings"])
    return out


def config_from_hf_dict(cfg: Mapping[str, Any], name: str) -> RealModelConfig:
    """A RealModelConfig from a parsed HF config.json (Llama, Mistral, Qwen2 and alike)."""
    spec = model_from_config_dict(cfg, name)
    model_type = str(cfg.get("model_type", "")).lower()
    bias = bool(cfg.get("attention_bias", model_type in ("qwen", "qwen2")))
    eps = float(cfg.get("rms_norm_eps", cfg.get("layer_norm_epsilon", 1e-6)))
    return RealModelConfig(spec, rms_norm_eps=eps, attention_bias=bias, **_rope_fields(cfg))


def read_hf_config(path: str | Path) -> RealModelConfig:
    """A local config.json, or a model folder holding one (read as plain JSON)."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError("model", str(path), "no config.json found there")
    cfg = read_json_object(file, "model", "config.json")  # data only; malformed: ConfigError
    return config_from_hf_dict(cfg, file.parent.name)


def resolve_real_model(name_or_path: str | Path | RealModelConfig) -> RealModelConfig:
    """`tiny`, a built-in model name, or a path to a HF config.json / model folder."""
    if isinstance(name_or_path, RealModelConfig):
        return name_or_path
    text = str(name_or_path)
    if text.strip().lower() == "tiny":
        return read_hf_config(TINY_CONFIG)
    if Path(text).exists():
        return read_hf_config(text)
    spec = get_model(text)
    if spec.name not in _BUILTIN_EXTRAS:
        raise ConfigError("model", text, "the real engine runs Llama-family models; known: "
                          f"tiny, {', '.join(_BUILTIN_EXTRAS)} or a HF config.json path")
    theta, eps, bias = _BUILTIN_EXTRAS[spec.name]
    return RealModelConfig(spec, rope_theta=theta, rms_norm_eps=eps, attention_bias=bias)
