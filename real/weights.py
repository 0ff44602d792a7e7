"""Weights of the real engine: seeded random ones, or a local HF safetensors checkpoint.

The model is built on the meta device and materialized straight on its target device, so a 7B
model never passes through host memory. Random weights are N(0, 0.02) (norms 1, biases 0),
drawn from a generator seeded per parameter name: the same seed gives the same model on any
device order. Checkpoints use transformers' Llama names; a tied lm_head may be absent.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import torch

from real.model import LlamaForCausalLM
from real.spec import RealModelConfig
from sim.errors import ConfigError
from sim.jsonfile import read_json_object

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
    model.setup_rope(device)
    return model.eval()


@torch.no_grad()
def init_random(model: LlamaForCausalLM, seed: int) -> None:
    """Seeded random weights: N(0, INIT_STD) matrices, unit norms, zero biases."""
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            param.fill_(1.0)
        elif name.endswith(".bias"):
            param.zero_()
        else:
            gen = torch.Generator(device=param.device)
            gen.manual_seed(seed * 7919 + zlib.crc32(name.encode()))
            param.normal_(0.0, INIT_STD, generator=gen)


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


@torch.no_grad()
def load_checkpoint(model: LlamaForCausalLM, path: str | Path) -> None:
    """Copy a HF safetensors checkpoint into the model, tensor by tensor, on its device."""
    from safetensors import safe_open  # lazy: only needed for real checkpoints

    params = dict(model.named_parameters(remove_duplicate=False))
    device = next(model.parameters()).device
    loaded: set[str] = set()
    for file in checkpoint_files(path):
        with safe_open(str(file), framework="pt", device=str(device)) as fh:
            for key in fh.keys():
                if key not in params:
                    if "rotary_emb" in key:
                        continue  # some checkpoints store RoPE buffers; they are recomputed
                    raise ConfigError("real.weights", key, f"unexpected tensor in {file.name}")
                tensor = fh.get_tensor(key)
                if tuple(tensor.shape) != tuple(params[key].shape):
                    raise ConfigError("real.weights", key, f"shape {tuple(tensor.shape)} != "
                                      f"model's {tuple(params[key].shape)}")
                params[key].copy_(tensor)
                loaded.add(key)
    missing = set(params) - loaded
    tied = {"lm_head.weight", "model.embed_tokens.weight"}
    if model.config.spec.tie_word_embeddings and tied & loaded:
        missing -= tied  # one name loaded the shared matrix
    if missing:
        raise ConfigError("real.weights", str(path), f"missing tensors: {sorted(missing)[:5]}")
