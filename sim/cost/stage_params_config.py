"""StageParams from a config: a JSON parameter file and per-field overrides.

    cluster.cost_model: {kind: stage, cpu_step_s: 4e-3, gemm_fixed_s: 6e-6}
    cluster.cost_model: {kind: stage, host: legacy}      # host terms: sim/cost/host_presets.py
    cluster.cost_model: {kind: stage, params: FILE.json, cpu_step_s: 4e-3}
    cluster.cost_model: {kind: profile, profiles: DIR, cpu_step_s: 4e-3}   # the stage fallback
    cluster.cost_model: {kind: stage, sampler: hf}        # sampler: sim/cost/sampler_cost.py

A parameter file (`python -m experiments.fidelity.fit_gpu` writes one) is data, read with
`sim.util.jsonfile.read_json_object`: either an object whose `stage_params` section holds every
StageParams field, or an object holding the fields itself (`format`, `version`, `source`,
`errors` keys are then ignored). `allreduce` is an object of three equal-length lists
(`num_workers`, `latency_s`, `bus_bandwidth`). Overrides apply on top of the file (or of the
GPU's own parameters); every value is checked, errors name `cluster.cost_model.<field>`.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Any, Callable, Mapping

from sim.cost.host_presets import apply_host, host_preset
from sim.cost.sampler_cost import with_sampler
from sim.cost.stage_params import EFFICIENCY_FIELDS, ZERO_OK_FIELDS, AllReduceParams, StageParams
from sim.hardware.gpus import GPUSpec
from sim.util.errors import ConfigError
from sim.util.jsonfile import read_json_object

WHERE = "cluster.cost_model"  # the config field the options live in
PARAMS_KEY = "params"  # cost_model key naming a StageParams JSON file
FILE_SECTION = "stage_params"  # the section of a parameter file that holds the fields
META_KEYS = ("format", "version", "source", "errors")  # file keys that are not fields
STAGE_FIELDS = tuple(f.name for f in fields(StageParams))  # every StageParams field name
OPTIONAL_FIELDS = ("cpu_launch_per_layer_s", "cpu_overlapped", "attn_prefill_key_s",
                   "attn_prefill_split_rows", "attn_decode_item_s", "attn_decode_floor_s",
                   "attn_decode_floor_half_tokens", "sampler_logit_passes")  # a file may leave
# these at their defaults (older files)
ALLREDUCE_KEYS = ("num_workers", "latency_s", "bus_bandwidth")  # AllReduceParams fields, required
ALLREDUCE_LL_KEYS = ("ll_latency_s", "ll_bus_bandwidth")  # optional low-latency protocol


def _number(where: str, value: Any) -> float:
    """`value` as a finite number >= 0 (int or float, never a bool or a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(where, value, f"must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ConfigError(where, value, "must be a finite number >= 0")
    return float(value)


def _number_list(where: str, value: Any) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(where, value, "must be a non-empty list of numbers")
    return tuple(_number(f"{where}[{i}]", v) for i, v in enumerate(value))


def allreduce_from(where: str, value: Any) -> AllReduceParams:
    """AllReduceParams from {num_workers, latency_s, bus_bandwidth} (an AllReduceParams is
    taken as it is)."""
    if isinstance(value, AllReduceParams):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(where, value, f"must be an object with {', '.join(ALLREDUCE_KEYS)}")
    unknown = sorted(set(value) - set(ALLREDUCE_KEYS) - set(ALLREDUCE_LL_KEYS))
    missing = [k for k in ALLREDUCE_KEYS if k not in value]
    if unknown or missing:
        key = unknown[0] if unknown else missing[0]
        raise ConfigError(f"{where}.{key}", value.get(key), f"{'unknown' if unknown else 'missing'}"
                          f"; an all-reduce takes {', '.join(ALLREDUCE_KEYS)} (and optionally "
                          f"{', '.join(ALLREDUCE_LL_KEYS)})")
    workers = _number_list(f"{where}.num_workers", value["num_workers"])
    if any(w != int(w) for w in workers):
        raise ConfigError(f"{where}.num_workers", value["num_workers"], "must be integers")
    try:
        return AllReduceParams(tuple(int(w) for w in workers),
                               _number_list(f"{where}.latency_s", value["latency_s"]),
                               _number_list(f"{where}.bus_bandwidth", value["bus_bandwidth"]),
                               *(_number_list(f"{where}.{k}", value[k]) if k in value else ()
                                 for k in ALLREDUCE_LL_KEYS))
    except ConfigError as err:
        raise ConfigError(f"{where}.{err.field.removeprefix('allreduce.')}", err.value,
                          err.reason) from None


def check_value(where: str, name: str, value: Any) -> Any:
    """One StageParams field's value, checked; ConfigError naming `<where>.<name>`."""
    if name == "allreduce":
        return allreduce_from(f"{where}.allreduce", value)
    if name == "cpu_overlapped":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}.{name}", value, "must be true or false")
        return value
    number = _number(f"{where}.{name}", value)
    if name in EFFICIENCY_FIELDS and not 0 < number <= 1:
        raise ConfigError(f"{where}.{name}", value, "an efficiency: must be in (0, 1]")
    if name.endswith(("_tokens", "_batch")) and number <= 0 and name not in ZERO_OK_FIELDS:
        raise ConfigError(f"{where}.{name}", value, "must be > 0")
    return number


def stage_overrides(options: Mapping[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The StageParams fields set in `options`, checked; keys in `skip` are not fields.
    Unknown keys are a ConfigError naming `cluster.cost_model.<key>` and the known ones."""
    out = {}
    for key, value in options.items():
        if key in skip:
            continue
        if key not in STAGE_FIELDS:
            raise ConfigError(f"{WHERE}.{key}", value, f"unknown; known: "
                              f"{', '.join([*skip, *STAGE_FIELDS])}")
        out[key] = check_value(WHERE, key, value)
    return out


def params_from_dict(data: Mapping[str, Any], where: str) -> StageParams:
    """A full StageParams from a mapping of every field (errors name `<where>.<field>`)."""
    missing = [f for f in STAGE_FIELDS if f not in data and f not in OPTIONAL_FIELDS]
    if missing:
        raise ConfigError(f"{where}.{missing[0]}", None,
                          f"missing; a parameter set needs every field: {', '.join(missing)}")
    unknown = [k for k in data if k not in STAGE_FIELDS]
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", data[unknown[0]],
                          f"unknown; known: {', '.join(STAGE_FIELDS)}")
    return _build(where, {k: check_value(where, k, data[k]) for k in STAGE_FIELDS if k in data})


def _build(where: str, values: Mapping[str, Any]) -> StageParams:
    try:
        return StageParams(**values)
    except ConfigError as err:
        raise ConfigError(f"{where}.{err.field}", err.value, err.reason) from None


def params_to_dict(params: StageParams) -> dict[str, Any]:
    """A StageParams as plain JSON data (the inverse of `params_from_dict`)."""
    out: dict[str, Any] = {f: getattr(params, f) for f in STAGE_FIELDS}
    ar = params.allreduce
    out["allreduce"] = {"num_workers": list(ar.num_workers), "latency_s": list(ar.latency_s),
                        "bus_bandwidth": list(ar.bus_bandwidth)}
    if ar.ll_latency_s:
        out["allreduce"].update(ll_latency_s=list(ar.ll_latency_s),
                                ll_bus_bandwidth=list(ar.ll_bus_bandwidth))
    return out


def load_stage_params(path: str) -> StageParams:
    """The StageParams in a parameter file (module docstring); errors name the file."""
    field = f"{WHERE}.{PARAMS_KEY}"
    data = read_json_object(path, field, "stage parameter file")
    if FILE_SECTION in data:
        body = data[FILE_SECTION]
        if not isinstance(body, dict):
            raise ConfigError(field, path, f"its {FILE_SECTION!r} must be a JSON object")
    else:
        body = {k: v for k, v in data.items() if k not in META_KEYS}
    try:
        return params_from_dict(body, "params")
    except ConfigError as err:
        raise ConfigError(field, path, f"{err.field}={err.value!r}: {err.reason}") from None


def with_attention_kernel(params: StageParams, kernel: Any, gpu: GPUSpec | None) -> StageParams:
    """`params` with the attention terms of the kernel set `cluster.cost_model.attention`
    names (sim/cost/attention_kernels.py), derived for `gpu`; unchanged when none is named."""
    if kernel is None:
        return params
    from sim.cost.attention_kernels import check_kernel, with_kernel

    name = check_kernel(kernel, f"{WHERE}.attention") if isinstance(kernel, str) else None
    if name is None or gpu is None:
        raise ConfigError(f"{WHERE}.attention", kernel, "a kernel set name (flashinfer, "
                          "flash_attention) for a built-in or file GPU")
    return with_kernel(params, name, gpu)


def resolve_stage_params(gpu_params: Callable[[], StageParams], options: Mapping[str, Any],
                         skip: tuple[str, ...], gpu: GPUSpec | None = None) -> StageParams:
    """The `params` file's set when named, else `gpu_params()` (the GPU's own; not called
    with a file, so a GPU without a built-in set can run from one), with the host preset
    (`host`, sim/cost/host_presets.py; `gpu` decides its all-reduce; a file keeps its own host
    terms unless `host` is named) and then the field overrides of `options` on top (keys in
    `skip` are choice keys, not fields)."""
    overrides = stage_overrides(options, skip)
    host = host_preset(options)
    path = options.get(PARAMS_KEY)
    if path is None:
        base = gpu_params()
    elif isinstance(path, str):
        base = load_stage_params(path)
        if "host" not in options:  # a parameter file is a whole set: its own host terms
            host = "params"
    else:
        raise ConfigError(f"{WHERE}.{PARAMS_KEY}", path, "must be a path to a JSON file")
    base = with_attention_kernel(base, options.get("attention"), gpu)
    base = apply_host(base, host, gpu)
    base = with_sampler(base, options)  # flat (default) leaves the set's sampler as it is
    if not overrides:
        return base
    try:
        return replace(base, **overrides)
    except ConfigError as err:
        raise ConfigError(f"{WHERE}.{err.field}", err.value, err.reason) from None
