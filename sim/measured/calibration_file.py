"""Reading a calibration file (`python -m real.calibrate`, `servesim calibrate`): JSON data only,
checked field by field.

A calibration JSON holds the profiled deployment (`model`, `device`, dtypes, KV capacity, block
size), the fitted `roofline` config, optionally an `engine` section (`sim.cost.engine_time`'s
`EngineTimeParams`, fitted), optionally a `learned` model: gradient-boosted trees as
plain arrays (`sim.measured.learned_trees`), embedded under `learned` or in a sibling `.learned.json`
named by `learned.path`, and optionally a `cost_model` section: `cluster.cost_model` options
fitted to a serving benchmark (`servesim calibrate`), used on the cluster's own cost model.
A file of another kind (a benchmark result, a real-engine benchmark) is named as such
(`sim.util.file_kinds`). That path must stay inside the calibration's own folder (no absolute
path, no `..`, no symlink leading out). Pickles (`.joblib`, `.pkl`, ...) are never loaded: an
older calibration that names one is refused with the command that rewrites it.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Any, Mapping, Sequence

from sim.cost.cost_model import CostModelConfig, DeploymentSpec, RooflineCostModel
from sim.cost.engine_time import EngineTimeModel, EngineTimeParams, EngineWork
from sim.hardware.gpus import GPUSpec
from sim.measured.learned_trees import TreeEnsemble, ensemble_from_dict
from sim.models.catalog import ModelSpec
from sim.util.errors import ConfigError
from sim.util.file_kinds import EXPECTED_CALIBRATION, OLD_BENCH_CALIBRATION, describe_json
from sim.util.jsonfile import int_value, read_json_object, section
from sim.util.schema import build

WHERE = "cluster.cost_model.calibration"  # the config field that names a calibration file
WHAT = "calibration file"
REQUIRED = ("model", "device", "roofline")  # sections every calibration has
RERUN = ("re-run `python -m real.calibrate PROFILE.csv --out FILE.json`, which stores the "
         "learned model as JSON trees")


def read_calibration(path: str | Path, where: str = WHERE) -> dict[str, Any]:
    """A calibration file's JSON object, with its model, device and roofline sections."""
    data = read_json_object(path, where, WHAT)
    if not all(isinstance(data.get(key), dict) for key in REQUIRED):
        if data.get("format") != OLD_BENCH_CALIBRATION and any(k in data for k in REQUIRED):
            for key in REQUIRED:  # a calibration with a section missing or malformed
                section(data, key, where, path, f"calibration file {path}")
        raise ConfigError(where, str(path), f"{path} is {describe_json(data)}; expected "
                                            f"{EXPECTED_CALIBRATION}")
    return data


def fitted_options(data: Mapping[str, Any], path: str | Path,
                   where: str = WHERE) -> dict[str, Any] | None:
    """The `cost_model` options a benchmark calibration holds (`servesim calibrate`), None when
    the file has none; ConfigError naming the file when the section is not such options."""
    options = data.get("cost_model")
    if options is None:
        return None
    if not isinstance(options, dict) or "calibration" in options:
        raise ConfigError(f"{where}.cost_model", options, f"must be cluster.cost_model options "
                          f"(an object with no calibration key; in {path})")
    return dict(options)


def _deployment_sections(data: Mapping[str, Any], path: str | Path,
                         where: str) -> tuple[ModelSpec, GPUSpec]:
    """The profiled model and device (`sim.util.schema.build`: errors name the file). The
    device's types are left to GPUSpec's checks: real.calibrate stores memory_bytes as a float."""
    return (build(ModelSpec, f"{where}.model", section(data, "model", where, path, WHAT),
                  note=f"in {path}"),
            build(GPUSpec, f"{where}.device", section(data, "device", where, path, WHAT),
                  note=f"in {path}", types=False))


def calibrated_roofline(data: Mapping[str, Any], path: str | Path = "<calibration>",
                        where: str = WHERE) -> RooflineCostModel:
    """The fitted roofline model of a calibration's deployment."""
    model, device = _deployment_sections(data, path, where)
    config = build(CostModelConfig, f"{where}.roofline", section(data, "roofline", where, path,
                                                                  WHAT), note=f"in {path}")
    try:
        deployment = DeploymentSpec(model, device, weight_dtype=data.get("weight_dtype", "fp16"),
                                    kv_dtype=data.get("kv_dtype", "fp16"),
                                    activation_reserve_bytes=0)
    except ConfigError as err:
        raise ConfigError(f"{where}.{err.field}", err.value, f"{err.reason} (in {path})") from None
    return RooflineCostModel(deployment, config)


def calibrated_engine(data: Mapping[str, Any], path: str | Path = "<calibration>",
                      where: str = WHERE) -> EngineTimeModel:
    """The fitted engine model (host and device work) of a calibration's deployment."""
    model, device = _deployment_sections(data, path, where)
    engine = section(data, "engine", where, path, WHAT)
    params = build(EngineTimeParams, f"{where}.engine.params",
                   section(engine, "params", f"{where}.engine", path, WHAT), note=f"in {path}")
    dtype = data.get("engine_dtype") or data.get("weight_dtype", "fp16")
    try:
        work = EngineWork.of(model, device, dtype)
    except ConfigError as err:
        raise ConfigError(f"{where}.{err.field}", err.value, f"{err.reason} (in {path})") from None
    return EngineTimeModel(params, work)


def profiled_int(data: Mapping[str, Any], key: str, path: str | Path, where: str = WHERE,
                 default: int | None = None) -> int:
    """An integer the calibration recorded about the profiled engine (kv_capacity_tokens...)."""
    if data.get(key) is None:
        if default is not None:
            return default
        raise ConfigError(where, str(path), f"has no {key}; set cluster.cost_model.{key}")
    value = int_value(data[key], f"{where}.{key}", f" (in {path})")
    if value < 1:
        raise ConfigError(f"{where}.{key}", value, f"must be >= 1 (in {path})")
    return value


def learned_file(path: str | Path, value: object, field: str) -> Path:
    """The learned-model file `value` names, resolved strictly inside the calibration's folder."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field, value, "must name a .learned.json file beside the calibration")
    rel = PurePath(value)
    if rel.suffix.lower() != ".json":
        raise ConfigError(field, value, "a pickled / non-JSON model file is never loaded: "
                          f"unpickling it could run any code; {RERUN}")
    folder = Path(path).resolve().parent
    if rel.is_absolute() or rel.anchor or ".." in rel.parts:
        raise ConfigError(field, value, f"must be a file name inside the calibration's folder "
                          f"{folder}")
    target = (folder / rel).resolve()
    if not target.is_relative_to(folder):
        raise ConfigError(field, value, f"resolves to {target}, outside the calibration's "
                          f"folder {folder}")
    if not target.is_file():
        raise ConfigError(field, value, f"no such file in {folder}")
    return target


def learned_model(data: Mapping[str, Any], path: str | Path, features: Sequence[str],
                  where: str = WHERE) -> TreeEnsemble:
    """The learned correction over `features` (+ the roofline time) a calibration holds."""
    learned = data.get("learned")
    if not isinstance(learned, dict):
        raise ConfigError(f"{where}.learned", learned, f"must be an object (in {path})")
    if learned.get("features", list(features)) != list(features):
        raise ConfigError(f"{where}.learned.features", learned.get("features"),
                          f"the learned model uses other step features; {RERUN}")
    if "trees" in learned:
        model = ensemble_from_dict(learned, f"{where}.learned")
    else:
        file = learned_file(path, learned.get("path"), f"{where}.learned.path")
        raw = read_json_object(file, f"{where}.learned.path", "learned-model JSON file")
        model = ensemble_from_dict(raw, f"{where}.learned")
    if model.num_inputs != len(features) + 1:
        raise ConfigError(f"{where}.learned.num_inputs", model.num_inputs,
                          f"must be {len(features) + 1} (the features and the roofline time)")
    return model
