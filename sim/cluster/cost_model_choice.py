"""Which step-time model a cost-model instance uses: `cluster.cost_model` options.

    cost_model: {}                                   # stage model (default), the GPU's parameters
    cost_model: {kind: stage}                        # the same, named
    cost_model: {kind: stage, cpu_step_s: 4e-3}      # ... with StageParams fields overridden
    cost_model: {kind: stage, params: FILE.json}     # ... a full parameter set from a file
    cost_model: {kind: profile, profiles: DIR}       # measured tables, stage model outside them
    cost_model: {kind: roofline}                     # the roofline (the default before issue 12)
    cost_model: {step_overhead_s: 1e-3}              # roofline fields alone imply kind: roofline
    cost_model: {kind: stage, frontend_s: 0.02}      # any kind: + a frontend's latency per request
    cost_model: {sampler: hf}                        # stage / profile: the sampler's build
    cost_model: {score_buffer: {max_prefill_tokens: 2048}}   # stage: no FlashAttention
    cost_model: {calibration: FILE}                  # servesim calibrate's fitted options

`stage` (sim/cost/stage_model.py) gives each stage (GEMMs, attention prefill / decode, all-reduce,
small kernels, lm_head, engine overhead) its own efficiency and fixed costs that do not divide by
tensor parallelism, with per-GPU parameters (sim/cost/gpu_params.py, see docs/fidelity.md). `profile`
interpolates per-operator profiles in Vidur's layout or the real backend's
(sim/measured/profile_tables.py) and falls back to the stage model where they have no rows. The roofline
keeps `CostModelConfig` fields; `stage` and `profile` take StageParams fields and `params: FILE`
(sim/cost/stage_params_config.py; for `profile` they set the stage fallback). `frontend_s` is not a
step cost: the seconds a request spends outside the engine, added to its TTFT and latency
(sim/cost/frontend.py).
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, Mapping

from sim.cost.cost_model import CostModelConfig, DeploymentSpec, RooflineCostModel
from sim.cost.frontend import frontend_of
from sim.cost.sampler_cost import check_sampler
from sim.cost.score_buffer import score_buffer_of
from sim.util.errors import ConfigError

KINDS = ("roofline", "stage", "profile")  # cluster.cost_model.kind values
CHOICE_KEYS = ("kind", "profiles", "params", "host", "frontend_s", "attention", "sampler",
               "score_buffer")  # cost_model keys that are not step-cost fields (frontend_s:
# sim/cost/frontend.py; attention: the kernel set, sim/cost/attention_kernels.py; sampler:
# sim/cost/sampler_cost.py; score_buffer: unfused prefill attention, sim/cost/score_buffer.py)
WHERE = "cluster.cost_model"  # the config field these options live in


DEFAULT_KIND = "stage"  # measured-fit per-stage model (docs/fidelity.md says why)


def _implied_kind(options: Mapping[str, Any]) -> str:
    """The kind options without `kind` mean: `profiles` -> profile, roofline fields ->
    roofline, else the default."""
    if "profiles" in options:
        return "profile"
    roofline = {f.name for f in fields(CostModelConfig)}
    return "roofline" if any(k in roofline for k in options) else DEFAULT_KIND


def cost_model_kind(options: Mapping[str, Any]) -> str:
    """The kind named by `options`, or implied by its keys (`_implied_kind`)."""
    kind = options.get("kind", _implied_kind(options))
    frontend_of(options)  # checked here, used by the run (sim/cost/frontend.py)
    if "sampler" in options:
        check_sampler(options["sampler"])
    score_buffer_of(options)  # checked here, used by build_cost_model
    if kind not in KINDS:
        raise ConfigError(f"{WHERE}.kind", kind, f"one of {', '.join(KINDS)} (or a "
                                                 f"calibration: FILE with its own kinds)")
    if kind == "profile" and not isinstance(options.get("profiles"), str):
        raise ConfigError(f"{WHERE}.profiles", options.get("profiles"),
                          "kind: profile needs profiles: DIR (a profile folder or file)")
    if kind != "profile" and "profiles" in options:
        raise ConfigError(f"{WHERE}.profiles", options["profiles"],
                          f"only with kind: profile (not {kind})")
    if kind == "roofline" and "params" in options:
        raise ConfigError(f"{WHERE}.params", options["params"],
                          "a stage parameter file: only with kind: stage or profile")
    if kind == "roofline" and "attention" in options:
        raise ConfigError(f"{WHERE}.attention", options["attention"],
                          "an attention kernel set: only with kind: stage or profile")
    for key in ("sampler", "score_buffer"):
        if kind == "roofline" and key in options:
            raise ConfigError(f"{WHERE}.{key}", options[key], "only with kind: stage or profile "
                              "(the roofline's sampling is inside step_overhead_s)"
                              if key == "sampler" else "only with kind: stage")
    if kind == "profile" and "score_buffer" in options:
        raise ConfigError(f"{WHERE}.score_buffer", options["score_buffer"], "only with kind: "
                          "stage (a profile's attention rows are the fused kernel's)")
    if kind == "roofline" and "host" in options:
        raise ConfigError(f"{WHERE}.host", options["host"],
                          "a host preset: only with kind: stage or profile (the roofline has "
                          "step_overhead_s)")
    return kind


def _check_stage_options(kind: str, rest: Mapping[str, Any]) -> None:
    """StageParams overrides of kind stage / profile, checked (roofline fields refused)."""
    from sim.cost.stage_params_config import stage_overrides

    roofline = {f.name for f in fields(CostModelConfig)}
    for key, value in rest.items():
        if key in roofline:
            raise ConfigError(f"{WHERE}.{key}", value, f"a roofline field; kind: {kind} takes "
                              f"{', '.join(CHOICE_KEYS)} and StageParams fields")
    stage_overrides(rest, CHOICE_KEYS)


def roofline_config(options: Mapping[str, Any]) -> CostModelConfig:
    """The roofline's config from the options; other kinds refuse roofline fields (and have
    their StageParams overrides checked)."""
    rest = {k: v for k, v in options.items() if k not in CHOICE_KEYS}
    kind = cost_model_kind(options)
    if kind != "roofline":
        _check_stage_options(kind, rest)
        return CostModelConfig()
    known = {f.name for f in fields(CostModelConfig)}
    for key in rest:
        if key not in known:
            raise ConfigError(f"{WHERE}.{key}", rest[key],
                              f"unknown; known: {', '.join([*CHOICE_KEYS, *sorted(known)])}")
    return CostModelConfig(**rest)


def build_cost_model(deployment: DeploymentSpec, options: Mapping[str, Any]) -> Any:
    """The step-time model of one deployment (an object with `deployment` and
    `iteration_times_from_sums`, as RooflineCostModel)."""
    config = roofline_config(options)
    kind = cost_model_kind(options)
    if kind == "roofline":
        return RooflineCostModel(deployment, config)
    from sim.cost.gpu_params import stage_params_for
    from sim.cost.stage_model import StageCostModel
    from sim.cost.stage_params_config import resolve_stage_params

    params = resolve_stage_params(lambda: stage_params_for(deployment.gpu), options,
                                  CHOICE_KEYS, deployment.gpu)
    scores = score_buffer_of(options)
    if scores is not None:  # the buffer comes out of the KV pool, as activations do
        reserve = deployment.activation_reserve_bytes or 0
        deployment = replace(deployment, activation_reserve_bytes=int(
            reserve + scores.reserve_bytes(deployment.model.num_attention_heads
                                           // deployment.tensor_parallel)))
    stage = StageCostModel(deployment, params, scores)
    if kind == "stage":
        return stage
    from sim.measured.profile_cost_model import ProfileCostModel
    from sim.measured.profile_tables import load_profiles

    try:
        tables = load_profiles(options["profiles"], deployment.model.name, deployment.gpu.name)
    except ConfigError as err:
        raise ConfigError(f"{WHERE}.profiles", options["profiles"], str(err)) from None
    return ProfileCostModel(tables, deployment, fallback=stage)
