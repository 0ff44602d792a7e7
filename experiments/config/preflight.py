"""Checks a sweep or a capacity search makes before anything runs (shared by run and capacity).

- `check_cluster`: the sim backend's executors are built once (cost-model errors surface), and
  its `real:` options, unused until `--backend real`, are checked all the same; the real
  backend is checked without torch: its options, the model, a CPU engine's memory (weights,
  KV budget) and KV budget, the checkpoint folder (`real.weights`). What only the engine can
  check (a CUDA device's memory, the device `auto` picks) is said in a note on stderr.
- `check_policy_build`: policies whose checks need the cluster's instances (`disagg`: its pools,
  their policies and parameters, the link, the KV size) are built once on those instances, as a
  run's start builds them, so each of their errors surfaces in the config pass.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from experiments.config.backend import build_executors
from sim.cluster.spec import ClusterSpec
from sim.engine.limits import resolve_max_model_len
from sim.util.errors import ConfigError
from sim.util.jsonfile import read_json_object
from sim.util.schema import rebase

BUILT_AT_CHECK = ("disagg",)  # policies built on the cluster's instances by the config pass
INDEX = "model.safetensors.index.json"  # a sharded checkpoint's tensor -> shard map


def check_cluster(spec: ClusterSpec, where: str = "cluster") -> list[str]:
    """Surface the cluster's errors before any run (ConfigError named under `where`); returns
    the notes on what only a run can check (also written to stderr)."""
    try:
        if spec.backend == "real":  # building loads a model: check what needs no torch
            notes = check_real(spec)
        else:
            if spec.real:  # ignored by the cost model, but a typo there is still an error
                from real.options import RealOptions  # torch-free

                RealOptions.from_mapping(spec.real)
            resolve_max_model_len(build_executors(spec), spec.max_model_len)
            notes = []
    except ConfigError as err:
        raise rebase(where, err) from None
    for note in notes:
        print(f"note: {where}: {note}", file=sys.stderr)
    return notes


def check_real(spec: ClusterSpec) -> list[str]:
    """The real backend's checks that need no torch; notes for the ones that do."""
    from real.options import check_real_cluster  # torch-free (real/options.py)
    from real.spec import resolve_real_model

    opts = check_real_cluster(spec)  # options, model, and host memory when device is cpu
    if opts.device == "cpu" and opts.kv_tokens is None:
        raise ConfigError("cluster.real.kv_tokens", None, "give a KV token budget when running "
                          "on CPU (real.kv_tokens: tokens of KV cache)")
    model = resolve_real_model(spec.model).spec
    if opts.weights is not None:
        check_checkpoint(opts.weights, model)
    if opts.device == "cpu":
        return []
    which = ("the device (CUDA when available, else CPU: then real.kv_tokens is needed)"
             if opts.device == "auto" else f"device {opts.device}")
    return [f"real.device={opts.device}: whether {model.name} ({model.num_params:,} weights) "
            f"and its KV cache fit the memory of {which} is checked when the engine is built "
            f"(device memory is read through torch), before anything is allocated"]


def check_checkpoint(weights: str, model: Any) -> None:
    """ConfigError naming `cluster.real.weights` unless it is a safetensors checkpoint the
    engine can open (a .safetensors file, or a folder of them, shards named by its index all
    present in it) for `model` (a folder's config.json, when it has one, has its shapes)."""
    path = Path(weights)
    field = "cluster.real.weights"
    if path.is_file() and path.suffix == ".safetensors":
        return
    index = path / INDEX
    if index.is_file():
        check_shards(path, index)
    elif not (path.is_dir() and any(path.glob("*.safetensors"))):
        raise ConfigError(field, weights, "no .safetensors checkpoint found there (pickled "
                          ".bin / .pt checkpoints are never loaded: they can run code; convert "
                          "them to safetensors)")
    if (path / "config.json").is_file():
        check_same_shapes(path, model)


def check_shards(folder: Path, index: Path) -> None:
    """Every shard a checkpoint's index names is a .safetensors file inside `folder`."""
    weight_map = read_json_object(index, "cluster.real.weights", "safetensors index").get(
        "weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ConfigError("cluster.real.weights", str(index), "its weight_map must be a "
                          "non-empty object of tensor name -> shard file")
    root = folder.resolve()
    for name in sorted({str(v) for v in weight_map.values()}):
        shard = (root / name).resolve()
        if not name.endswith(".safetensors") or not shard.is_relative_to(root):
            raise ConfigError("cluster.real.weights.weight_map", name, f"must be a "
                              f".safetensors file inside {root} (named by {index})")
        if not shard.is_file():
            raise ConfigError("cluster.real.weights.weight_map", name, f"no such shard in "
                              f"{root} (named by {index})")


def check_same_shapes(folder: Path, model: Any) -> None:
    """ConfigError when the checkpoint's config.json describes other shapes than `model`."""
    from real.spec import read_hf_config

    try:
        theirs = read_hf_config(folder).spec
    except ConfigError:
        return  # unreadable here: the engine's tensor-by-tensor shape check still applies
    for name in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
                 "intermediate_size", "vocab_size"):
        if getattr(theirs, name) != getattr(model, name):
            raise ConfigError("cluster.real.weights", str(folder), (
                f"its config.json has {name}={getattr(theirs, name)}, the model "
                f"{model.name} has {getattr(model, name)}: the checkpoint is another model's"))


def check_policy_build(name: str, config: Any, cluster: ClusterSpec, where: str) -> None:
    """Build policy `name` (config resolved) on the cluster's instances when it is one of
    BUILT_AT_CHECK, so that the errors its constructor raises are named under `where`
    (`policies[0].params.decode_policy`, `policies[0].cluster.backend`) before any run."""
    if name not in BUILT_AT_CHECK:
        return
    from policies.registry import get_policy
    from sim.core.executor import info_of
    from sim.records.recorder import Recorder

    try:
        if cluster.backend != "sim":
            raise ConfigError("cluster.backend", cluster.backend, f"{name} runs on the "
                              f"cost-model backend only (backend: sim)")
        infos = [info_of(ex, i) for i, ex in enumerate(build_executors(cluster))]
        get_policy(name)(config, infos, Recorder(), np.random.default_rng(0))
    except ConfigError as err:
        field = err.field if err.field.startswith("cluster.") else f"params.{err.field}"
        raise rebase(where, ConfigError(field, err.value, err.reason)) from None
