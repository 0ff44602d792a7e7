"""Read an experiment config: strict YAML (experiments/config/yaml_strict.py), then `--set` overrides.

An override assigns one value at a key path (`policies.0.params.batch_size=16`, the value parsed
as YAML). It may not silently change the shape of the config: replacing a mapping with nothing
(`--set cluster=` would reset every cluster field to its default), or a number, bool or string
with a mapping, is a ConfigError naming the key. Keys the config does not know are caught when
the config is checked (`check_keys`).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from experiments.config.experiment import ExperimentConfig, experiment_from_dict
from experiments.config.yaml_strict import load_yaml
from sim.util.errors import ConfigError, short_repr

# keys whose value may be a name or a mapping (`policies[0]: vllm`, `predictor: oracle`)
NAME_OR_MAPPING = re.compile(r"^policies\.\d+$|(^|\.)predictor$")


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read a YAML config, apply `key.path=value` overrides, then resolve and validate it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    raw = load_yaml_file(path)
    raw = apply_overrides(raw if raw is not None else {}, overrides)
    return experiment_from_dict(raw, path.stem)


def load_yaml_file(path: str | Path) -> Any:
    """A YAML file's data, read strictly (ConfigError naming the field, or the file)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("config", str(path), f"not UTF-8 text: {exc.reason}") from None
    return load_yaml(text, str(path))


def apply_overrides(raw: Any, overrides: Sequence[str]) -> Any:
    """A copy of `raw` with each `a.b.0.c=value` (value parsed as YAML) assigned."""
    raw = copy.deepcopy(raw)
    for text in overrides:
        key_path, sep, value_text = text.partition("=")
        if not sep or not key_path.strip():
            raise ConfigError("--set", text, "expected key.path=value")
        keys = re.sub(r"\[(\d+)\]", r".\1", key_path.strip()).split(".")
        where = ".".join(keys)
        value = load_yaml(value_text, f"--set {key_path}", where)
        node = raw
        for depth, key in enumerate(keys[:-1]):
            node = _child(node, key, ".".join(keys[: depth + 1]))
        _assign(node, keys[-1], value, where)
    return raw


def _index(node: list, key: str, where: str) -> int:
    if not key.isdigit() or int(key) >= len(node):
        raise ConfigError(f"--set {where}", key, f"not an index of a list of {len(node)}")
    return int(key)


def _child(node: Any, key: str, where: str) -> Any:
    """`node[key]`, creating an empty mapping for a missing or empty key of a mapping."""
    if isinstance(node, list):
        return node[_index(node, key, where)]
    if not isinstance(node, dict):
        raise ConfigError(f"--set {where}", node, "cannot descend into a non-mapping value")
    if node.get(key) is None:
        node[key] = {}
    return node[key]


def _assign(node: Any, key: str, value: Any, where: str) -> None:
    if isinstance(node, list):
        index = _index(node, key, where)
        _check_shape(node[index], value, where)
        node[index] = value
    elif isinstance(node, dict):
        _check_shape(node.get(key), value, where)
        node[key] = value
    else:
        raise ConfigError(f"--set {where}", node, "cannot set a key of a non-mapping value")


def _check_shape(old: Any, value: Any, where: str) -> None:
    """ConfigError naming `--set <where>` when `value` would replace the mapping `old` with
    nothing, or the number / bool / string `old` with a mapping."""
    if isinstance(old, Mapping) and old and value in (None, "", {}, []):
        raise ConfigError(f"--set {where}", value,
                          f"would drop the whole mapping {where} (every field back to its "
                          f"default); set its fields instead, e.g. --set {where}.FIELD=VALUE")
    scalar = isinstance(old, (int, float, str)) and not (
        isinstance(old, str) and NAME_OR_MAPPING.search(where))
    if scalar and isinstance(value, Mapping):
        raise ConfigError(f"--set {where}", value,
                          f"would replace the value {short_repr(old)} with a mapping")
