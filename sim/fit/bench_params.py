"""What a serving-benchmark fit (sim/fit/bench_fit.py) may adjust, per cost-model kind.

    roofline  CostModelConfig fields: step_overhead_s, per_seq_overhead_s (default),
              compute_efficiency, memory_efficiency;
    stage     StageParams host terms: cpu_step_s, cpu_per_seq_s (default), sampler_fixed_s,
              sampler_per_seq_s, cpu_launch_per_layer_s (an eager engine's launch floor), and
              gemm_compute_eff (large GEMMs' efficiency: what a prefill costs per token);
              fitted values go back in as `cluster.cost_model` overrides
              (sim/cost/stage_params_config.py), so `kind: profile` fits its stage fallback's.
    both      frontend_s (default): a serving frontend's fixed latency per request
              (sim/cost/frontend.py), solved in closed form at each evaluation (sim/fit/bench_frontend.py),
              not searched: it is the TTFT term the engine terms cannot give.
Each field maps to an optimizer variable (`FitParam`); `fit_space` gives the table, the start
values of a cluster's cost model and the field that carries the per-step overhead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from sim.cluster.cost_model_choice import CHOICE_KEYS, cost_model_kind, roofline_config
from sim.cluster.spec import ClusterSpec
from sim.util.errors import ConfigError


@dataclass(frozen=True)
class FitParam:
    """How one cost-model field maps to an optimizer variable."""

    to_var: str  # "ms": variable = seconds * 1e3 | "log": variable = ln(value)
    lower: float  # field's lowest value (seconds or fraction)
    upper: float  # field's highest value (seconds or fraction)
    min_step: float  # smallest finite-difference step, in variable units (ms, or ln units)
    typical: float  # a typical change of the variable (the optimizer's x_scale)

    def __post_init__(self) -> None:
        if self.to_var not in ("ms", "log"):
            raise ConfigError("to_var", self.to_var, "one of ms, log")
        if not (self.min_step > 0 and self.typical > 0):
            raise ConfigError("min_step/typical", (self.min_step, self.typical), "must be > 0")
        if not 0 <= self.lower < self.upper:
            raise ConfigError("lower", (self.lower, self.upper), "need 0 <= lower < upper")

    def var(self, value: float) -> float:
        """Optimizer variable for a field value."""
        return value * 1e3 if self.to_var == "ms" else math.log(value)

    def value(self, var: float) -> float:
        """Field value for an optimizer variable."""
        return var * 1e-3 if self.to_var == "ms" else math.exp(var)


FIT_PARAMS: Mapping[str, FitParam] = MappingProxyType({  # roofline CostModelConfig fields
    "step_overhead_s": FitParam("ms", 0.0, 0.5, 0.5, 5.0),
    "per_seq_overhead_s": FitParam("ms", 0.0, 0.05, 0.05, 0.1),
    "compute_efficiency": FitParam("log", 0.02, 1.0, 0.1, 0.5),
    "memory_efficiency": FitParam("log", 0.05, 1.0, 0.1, 0.5),
})
STAGE_FIT_PARAMS: Mapping[str, FitParam] = MappingProxyType({  # StageParams host terms
    "cpu_step_s": FitParam("ms", 0.0, 0.5, 0.5, 5.0),
    "cpu_per_seq_s": FitParam("ms", 0.0, 0.05, 0.05, 0.1),
    "sampler_fixed_s": FitParam("ms", 0.0, 0.5, 0.1, 1.0),
    "sampler_per_seq_s": FitParam("ms", 0.0, 0.05, 0.01, 0.05),
    "cpu_launch_per_layer_s": FitParam("ms", 0.0, 2.0, 0.01, 0.1),  # eager engines' floor
    "gemm_compute_eff": FitParam("log", 0.05, 1.0, 0.05, 0.3),  # prefill's per-token cost
})
FRONTEND = "frontend_s"  # fitted in closed form beside either table (sim/fit/bench_frontend.py)
DEFAULT_FIT = ("step_overhead_s", "per_seq_overhead_s", FRONTEND)  # roofline, by default
STAGE_DEFAULT_FIT = ("cpu_step_s", "cpu_per_seq_s", FRONTEND)  # stage, by default
STEP_FIELD = {"roofline": "step_overhead_s", "stage": "cpu_step_s"}  # the per-step term


@dataclass(frozen=True)
class FitSpace:
    """The fittable fields of one cluster's cost model and where a fit starts."""

    family: str  # "roofline" | "stage" (kind profile fits its stage fallback)
    table: Mapping[str, FitParam]  # fittable field -> its variable mapping
    start: Mapping[str, float]  # each fittable field's value in the cluster's cost model
    default_fit: tuple[str, ...]  # fields fitted unless told otherwise
    step_field: str  # the field that carries the per-step overhead

    def __post_init__(self) -> None:
        if self.family not in STEP_FIELD:
            raise ConfigError("family", self.family, f"one of {', '.join(STEP_FIELD)}")
        if set(self.start) != set(self.table):
            raise ConfigError("start", sorted(self.start), "needs one value per fittable field")


def fit_space(cluster: ClusterSpec) -> FitSpace:
    """The FitSpace of the cluster's `cost_model` (ConfigError naming a bad option)."""
    options = cluster.cost_model
    if cost_model_kind(options) == "roofline":
        base = roofline_config(options)  # ConfigError naming a bad key
        start = {k: float(getattr(base, k)) for k in FIT_PARAMS}
        return FitSpace("roofline", FIT_PARAMS, start, DEFAULT_FIT, STEP_FIELD["roofline"])
    from sim.cost.gpu_params import get_stage_gpu, stage_params_for
    from sim.cost.stage_params_config import resolve_stage_params
    from sim.hardware.gpus import GPUSpec

    gpu = cluster.gpu if isinstance(cluster.gpu, GPUSpec) else get_stage_gpu(cluster.gpu)
    params = resolve_stage_params(lambda: stage_params_for(cluster.gpu), options, CHOICE_KEYS,
                                  gpu)
    start = {k: float(getattr(params, k)) for k in STAGE_FIT_PARAMS}
    return FitSpace("stage", STAGE_FIT_PARAMS, start, STAGE_DEFAULT_FIT, STEP_FIELD["stage"])
