"""User-defined GPUs: `cluster.gpu` may name a YAML or JSON file describing one.

A file (.yaml / .yml / .json) holds one mapping, read strictly: unknown, missing or duplicate
keys, YAML 1.1 surprises (`yes`, `010`) and values of the wrong type are ConfigErrors naming
`gpu.<key>` and the value (rebased to `cluster.gpu.<key>` by the config reader). Units follow
vendor datasheets: GiB of device memory, decimal GB/s, dense (non-sparse) TFLOP/s. Each number
must lie within `BOUNDS`, physical ranges far wider than any real GPU's (the error gives the
range and why). Example:
`experiments/configs/gpus/l40s.yaml`; reference: docs/hardware.md.

This reader lives in sim/ (which may not import experiments' strict YAML loader): it uses
`yaml.safe_load`'s machinery with a duplicate-key check of its own.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from sim.hardware.gpus import GB, TFLOPS, GPUSpec, get_gpu
from sim.util.errors import ConfigError

GPU_FILE_SUFFIXES = (".yaml", ".yml", ".json")  # a cluster.gpu ending so names a file
MAX_GPU_FILE_BYTES = 2**20  # bytes: a larger GPU file is refused before it is read
GIB = 2**30  # bytes per GiB
REQUIRED = ("name", "memory_gib", "hbm_bandwidth_gbps", "tensor_tflops", "fp32_tflops",
            "interconnect_gbps", "interconnect_latency_us")  # keys every GPU file names
TENSOR_DTYPES = ("fp16", "fp8", "int8")  # tensor_tflops keys (fp16 stands for fp16 / bf16)
# key -> (lowest, highest, unit, why): bounds a real GPU sits far inside; a value past them is a
# typo or a unit mistake, and would give step times of 1e300 s (or inf / NaN) after a long run.
BOUNDS: Mapping[str, tuple[float, float, str, str]] = MappingProxyType({
    "memory_gib": (2.0**-10, 2.0**14, "GiB", "1 MiB to 16 TiB; the largest GPUs hold 288 GB"),
    "hbm_bandwidth_gbps": (1.0, 1e6, "GB/s", "1 GB/s is below any GPU memory since the 1990s, "
                           "1 PB/s over 100x today's fastest HBM (8 TB/s)"),
    "tensor_tflops": (1e-3, 1e6, "TFLOP/s", "1 GFLOP/s to 1 EFLOP/s; today's largest dense "
                      "peaks are about 5 PFLOP/s"),
    "fp32_tflops": (1e-3, 1e6, "TFLOP/s", "1 GFLOP/s to 1 EFLOP/s; today's GPUs run 15-160 "
                    "TFLOP/s of fp32"),
    "interconnect_gbps": (1e-2, 1e5, "GB/s", "10 MB/s (slower than 100 Mb Ethernet) to 100 TB/s"
                          " (over 100x NVLink 5's 0.9 TB/s per direction)"),
    "interconnect_latency_us": (0.0, 1e5, "us", "0 to 100 ms, a round trip across a continent; "
                                "collectives between GPUs take 5-100 us"),
})
_YAML11_SURPRISE = re.compile(r"^(?:[-+]?0[0-9_]+|yes|no|on|off|y|n)$", re.IGNORECASE)


def is_gpu_file(name: str) -> bool:
    """Whether `cluster.gpu` names a GPU file rather than a built-in GPU."""
    return name.strip().lower().endswith(GPU_FILE_SUFFIXES)


def resolve_gpu(name: str) -> GPUSpec:
    """A built-in GPU by name (sim.hardware.gpus.get_gpu), or the GPU a file describes."""
    return read_gpu_file(name) if is_gpu_file(name) else get_gpu(name)


class _StrictLoader(yaml.SafeLoader):
    """safe_load, refusing duplicate keys and YAML 1.1 scalars a reader would misread."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConfigError(f"gpu.{key}", key, "duplicate key in the GPU file "
                                  f"(line {key_node.start_mark.line + 1})")
            seen.add(key)
            plain = isinstance(value_node, yaml.ScalarNode) and not value_node.style
            if plain and _YAML11_SURPRISE.match(value_node.value):
                raise ConfigError(f"gpu.{key}", value_node.value, "ambiguous YAML 1.1 scalar: "
                                  "quote it, or write a plain number")
        return super().construct_mapping(node, deep=deep)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"gpu.{key}", value, "duplicate key in the GPU file")
        out[key] = value
    return out


def _load(path: Path) -> object:
    """The file's data (YAML or JSON by suffix); ConfigError naming cluster.gpu otherwise."""
    if not path.is_file():
        raise ConfigError("gpu", str(path), "not a GPU file: no such file")
    if path.stat().st_size > MAX_GPU_FILE_BYTES:
        raise ConfigError("gpu", str(path), f"GPU file larger than {MAX_GPU_FILE_BYTES} bytes")
    try:
        text = path.read_bytes().decode("utf-8")
        if path.suffix.lower() == ".json":
            return json.loads(text, object_pairs_hook=_json_object)
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError("gpu", str(path), f"not a readable GPU file: {exc}") from None


def _number(data: Mapping[str, Any], key: str, path: Path, *, allow_zero: bool = False,
            where: str = "gpu") -> float:
    """data[key] as a finite float > 0 (>= 0 with allow_zero) within BOUNDS of `key` (of
    `where` for tensor_tflops' dtypes; 0 is always allowed with allow_zero); ConfigError
    <where>.<key>."""
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}.{key}", value, f"in {path}: must be a finite number")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{where}.{key}", value,
                          f"in {path}: must be {'>= 0' if allow_zero else '> 0'}")
    lo, hi, unit, why = BOUNDS[key if where == "gpu" else where.removeprefix("gpu.")]
    if not (lo <= value <= hi or (value == 0 and allow_zero)):
        raise ConfigError(f"{where}.{key}", value,
                          f"in {path}: must be in [{lo:g}, {hi:g}] {unit} ({why})")
    return float(value)


def _check_keys(data: object, path: Path) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError("gpu", str(path), f"a GPU file holds one mapping, not "
                          f"{type(data).__name__}")
    for key in data:
        if key not in REQUIRED:
            raise ConfigError(f"gpu.{key}", data[key], f"in {path}: unknown key; known: "
                              f"{', '.join(REQUIRED)}")
    for key in REQUIRED:
        if key not in data:
            raise ConfigError(f"gpu.{key}", None, f"in {path}: missing")
    if not isinstance(data["name"], str) or not data["name"].strip():
        raise ConfigError("gpu.name", data["name"], f"in {path}: must be a non-empty string")
    return data


def _tensor_rates(value: object, path: Path) -> dict[str, float]:
    """tensor_tflops as {dtype: FLOP/s}; fp16 required, fp8 / int8 optional (0: none)."""
    if not isinstance(value, dict):
        raise ConfigError("gpu.tensor_tflops", value, f"in {path}: must be a mapping like "
                          "{fp16: 989, fp8: 1979}")
    for key in value:
        if key not in TENSOR_DTYPES:
            raise ConfigError(f"gpu.tensor_tflops.{key}", value[key], f"in {path}: unknown "
                              f"dtype; known: {', '.join(TENSOR_DTYPES)} (fp16 means fp16/bf16)")
    if "fp16" not in value:
        raise ConfigError("gpu.tensor_tflops.fp16", None, f"in {path}: missing")
    rates = {}
    for key in value:
        number = _number(value, key, path, allow_zero=key != "fp16", where="gpu.tensor_tflops")
        rates[key] = number * TFLOPS
    return rates


def read_gpu_file(name: str | Path) -> GPUSpec:
    """The GPUSpec a YAML / JSON GPU file describes (see the module docstring)."""
    path = Path(name)
    data = _check_keys(_load(path), path)
    rates = _tensor_rates(data["tensor_tflops"], path)
    memory = int(_number(data, "memory_gib", path) * GIB)
    hbm = _number(data, "hbm_bandwidth_gbps", path) * GB
    fp32 = _number(data, "fp32_tflops", path) * TFLOPS
    link = _number(data, "interconnect_gbps", path) * GB
    latency = _number(data, "interconnect_latency_us", path, allow_zero=True) * 1e-6
    try:
        return GPUSpec(data["name"].strip(), memory, hbm, rates["fp16"], fp32, link, latency,
                       peak_fp8_flops=rates.get("fp8", 0.0), peak_int8_ops=rates.get("int8", 0.0))
    except ConfigError as err:  # GPUSpec's own checks name its fields
        raise ConfigError(f"gpu.{err.field}", err.value, f"in {path}: {err.reason}") from None
