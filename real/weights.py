"""Weights of the real engine: seeded random ones, or a local HF safetensors checkpoint.

The model is built on the meta device and materialized straight on its target device, so a 7B
model never passes through host memory. Random weights are uniform with standard deviation 0.02
(HF's initializer_range; norms 1, biases 0), a hash of (seed, transformers' tensor name, element
index) (`real/init_hash.py`): the same seed gives the same bits on every device, so a CPU and a
CUDA engine compute the same logits. Checkpoints use transformers' Llama names, mapped onto the
fused q/k/v and gate/up weights (`real.model.hf_parameter_views`); a tied lm_head may be absent.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import torch

from real.init_hash import hash_uniform_
from real.model import LlamaForCausalLM, hf_parameter_views
from real.spec import RealModelConfig
from sim.util.errors import ConfigError
from sim.util.jsonfile import read_json_object

INIT_STD = 0.02  # standard deviation of random weights (HF's initializer_range)


def build_model(config: RealModelConfig, device: torch.device, dtype: torch.dtype,
                weights: str | Path | None = None, seed: int = 0) -> LlamaForCausalLM:
    """The model on `device` in `dtype`, with checkpoint or seeded random weights."""
    with torch.device("meta"):
        model = LlamaForCausalLM(config, dtype=dtype)
    model = model.to_empty(device=device)
    if config.spec.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    if weights is None:
        init_random(model, seed)
    else:
        load_checkpoint(model, weights)
    model.setup_rope(device, config.spec.max_position_embeddings)
    return model.eval()


@torch.no_grad()
def init_random(model: LlamaForCausalLM, seed: int) -> None:
    """Seeded random weights, the same bits on every device: uniform matrices of standard
    deviation INIT_STD keyed by transformers' tensor name, unit norms, zero biases."""
    for name, view in hf_parameter_views(model).items():
        if name.endswith("norm.weight"):
            view.fill_(1.0)
        elif name.endswith(".bias"):
            view.zero_()
        else:
            hash_uniform_(view, seed * 7919 + zlib.crc32(name.encode()), INIT_STD)


@torch.no_grad()
def load_hf_state_dict(model: LlamaForCausalLM, state_dict: dict[str, torch.Tensor]) -> None:
    """Copy a transformers state dict (its tensor names) into the model; every tensor the
    model has must be given, and none it does not know."""
    views = hf_parameter_views(model)
    unknown = [k for k in state_dict if k not in views and "rotary_emb" not in k]
    if unknown:
        raise ConfigError("real.weights", unknown[0], "unexpected tensor")
    for key, tensor in state_dict.items():
        if key in views:
            _copy(views, key, tensor)
    _check_complete(model, views, set(state_dict), "the state dict")


def checkpoint_files(path: str | Path) -> list[Path]:
    """The safetensors shards of a checkpoint folder (or a single .safetensors file).

    Only safetensors are read (tensors, no code); pickled checkpoints (`.bin`, `.pt`, `.pth`)
    are refused rather than torch.load-ed. Shards an index names must lie inside the folder."""
    path = Path(path)
    if path.is_file() and path.suffix == ".safetensors":
        return [path]
    index = path / "model.safetensors.index.json"
    if index.is_file():
        return _indexed_shards(path, index)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    if not files:
        raise ConfigError("real.weights", str(path), "no .safetensors checkpoint found there "
                          "(pickled .bin / .pt checkpoints are never loaded: they can run code; "
                          "convert them to safetensors)")
    return files


def _indexed_shards(folder: Path, index: Path) -> list[Path]:
    """The shards `model.safetensors.index.json` names, each a .safetensors file in `folder`."""
    weight_map = read_json_object(index, "real.weights", "safetensors index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ConfigError("real.weights", str(index), "its weight_map must be a non-empty "
                          "object of tensor name -> shard file")
    root = folder.resolve()
    shards = []
    for name in sorted({str(v) for v in weight_map.values()}):
        shard = (root / name).resolve()
        if not name.endswith(".safetensors") or not shard.is_relative_to(root):
            raise ConfigError("real.weights.weight_map", name, f"must be a .safetensors file "
                              f"inside {root} (named by {index})")
        shards.append(shard)
    return shards


def _copy(views: dict[str, torch.Tensor], key: str, tensor: torch.Tensor) -> None:
    if tuple(tensor.shape) != tuple(views[key].shape):
        raise ConfigError("real.weights", key, f"shape {tuple(tensor.shape)} != model's "
                          f"{tuple(views[key].shape)}")
    views[key].copy_(tensor)


def _check_complete(model: LlamaForCausalLM, views: dict[str, torch.Tensor], loaded: set[str],
                    source: str) -> None:
    missing = set(views) - loaded
    tied = {"lm_head.weight", "model.embed_tokens.weight"}
    if model.config.spec.tie_word_embeddings and tied & loaded:
        missing -= tied  # one name loaded the shared matrix
    if missing:
        raise ConfigError("real.weights", source, f"missing tensors: {sorted(missing)[:5]}")


@torch.no_grad()
def load_checkpoint(model: LlamaForCausalLM, path: str | Path) -> None:
    """Copy a HF safetensors checkpoint into the model, tensor by tensor, on its device."""
    from safetensors import safe_open  # lazy: only needed for real checkpoints

    views = hf_parameter_views(model)
    device = next(model.parameters()).device
    loaded: set[str] = set()
    for file in checkpoint_files(path):
        with safe_open(str(file), framework="pt", device=str(device)) as fh:
            for key in fh.keys():
                if key not in views:
                    if "rotary_emb" in key:
                        continue  # some checkpoints store RoPE buffers; they are recomputed
                    raise ConfigError("real.weights", key, f"unexpected tensor in {file.name}")
                _copy(views, key, fh.get_tensor(key))
                loaded.add(key)
    _check_complete(model, views, loaded, str(path))
