"""The cost models the fidelity report compares, as StageTimes per TP degree.

`stage` imports the stage model (sim/cost/stage_model.py) and the GPU's parameters lazily: they are
another slice of the same work, and the report falls back to the roofline (saying so) when
either is missing. Its attention terms are those of the kernel the profile names (Vidur's
`attention_backend`; `sim/cost/attention_kernels.py`), or of the one asked for.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable

from sim.cost.cost_model import CostModelConfig, DeploymentSpec, RooflineCostModel
from sim.cost.roofline_stages import RooflineStages
from sim.cost.stage_times import StageTimes
from sim.hardware.gpus import GPUSpec
from sim.measured.profile_cost_model import ProfileStageTimes
from sim.measured.profile_tables import ProfileTables
from sim.models.catalog import ModelSpec
from sim.util.errors import ConfigError

KINDS = ("roofline", "stage", "profile")
PARAM_MODULES = ("sim.cost.gpu_params", "sim.cost.stage_params")  # where per-GPU stage parameters live
PARAM_GETTERS = ("stage_params_for", "get_gpu_params", "params_for")  # GPU name -> params
PARAM_TABLES = ("GPU_STAGE_PARAMS", "GPU_PARAMS")  # mappings GPU name -> StageParams

StagesFor = Callable[[int], "StageTimes | None"]


def deployment(model: ModelSpec, gpu: GPUSpec, tp: int) -> DeploymentSpec | None:
    """The deployment at TP `tp` (no activation reserve), None if it cannot exist."""
    try:
        return DeploymentSpec(model, gpu, tp, gpu_memory_utilization=1.0,
                              activation_reserve_bytes=0)
    except ConfigError:
        return None


def roofline_config(calibration: str | None) -> CostModelConfig:
    """The default CostModelConfig, or a calibration file's fitted one."""
    if calibration is None:
        return CostModelConfig()
    from sim.measured.calibration_file import calibrated_roofline, read_calibration

    return calibrated_roofline(read_calibration(calibration), calibration).config


def stage_params(gpu: GPUSpec) -> Any | None:
    """The stage model's parameters for `gpu`, or None if no module provides them."""
    for name in PARAM_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for getter in PARAM_GETTERS:
            fn = getattr(module, getter, None)
            if callable(fn):
                try:
                    return fn(gpu.name)
                except (ConfigError, KeyError):
                    return None
        for table in PARAM_TABLES:
            mapping = getattr(module, table, None)
            if isinstance(mapping, dict) or hasattr(mapping, "get"):
                if mapping.get(gpu.name) is not None:
                    return mapping[gpu.name]
    return None


def attention_kernel(tables: ProfileTables, attention: str | None) -> str | None:
    """The attention kernel set to report against: `attention` when named, else the one the
    profile's backend maps to, else None (the GPU's own set)."""
    from sim.cost.attention_kernels import check_kernel, kernel_of_backend

    if attention is not None:
        return check_kernel(attention, "--attention")
    return kernel_of_backend(tables.attention_backend)


def _stage_factory(model: ModelSpec, gpu: GPUSpec, kernel: str | None = None
                   ) -> Callable[[DeploymentSpec], StageTimes] | None:
    try:
        from sim.cost.stage_model import StageCostModel  # the other slice of issue 12
    except ImportError:
        return None
    params = stage_params(gpu)
    if params is None:
        return None
    if kernel is not None:
        from sim.cost.attention_kernels import with_kernel
        params = with_kernel(params, kernel, gpu)
    return lambda dep: StageCostModel(dep, params)


def stages_factory(kind: str, model: ModelSpec, gpu: GPUSpec, tables: ProfileTables,
                   calibration: str | None = None, attention: str | None = None
                   ) -> tuple[StagesFor, str]:
    """TP -> StageTimes of the `kind` cost model, and the name of the model actually used
    (`attention`: the stage model's attention kernel set, see `attention_kernel`)."""
    if kind not in KINDS:
        raise ConfigError("cost_model", kind, f"one of {', '.join(KINDS)}")
    config = roofline_config(calibration)
    used = "roofline" + (f" (calibrated: {calibration})" if calibration else "")
    build: Callable[[DeploymentSpec], StageTimes] = \
        lambda dep: RooflineStages(RooflineCostModel(dep, config))
    if kind == "stage":
        kernel = attention_kernel(tables, attention)
        stage = _stage_factory(model, gpu, kernel)
        if stage is None:
            print(f"note: the stage model or its {gpu.name} parameters are not available; "
                  f"reporting the roofline", file=sys.stderr)
        else:
            from sim.cost.attention_kernels import DEFAULT_KERNEL
            build, used = stage, f"stage (attention: {kernel or DEFAULT_KERNEL})"
    elif kind == "profile":
        base = build
        build = lambda dep: ProfileStageTimes(tables, dep.tensor_parallel, base(dep))  # noqa
        used = f"profile tables (fallback {used})"
    cache: dict[int, StageTimes | None] = {}

    def stages_for(tp: int) -> StageTimes | None:
        if tp not in cache:
            dep = deployment(model, gpu, tp)
            cache[tp] = build(dep) if dep is not None else None
        return cache[tp]

    return stages_for, used
