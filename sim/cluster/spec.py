"""A cluster description (model, GPU, parallelism, precision, instances) and its executors.

`backend: sim` (default) models step times with the roofline cost model, or with a calibrated
one when `cost_model: {calibration: FILE}` names a `python -m real.calibrate` file
(`sim/measured/calibrated.py`); `backend: real` runs the torch engine (`real/`, options in `real:`), whose
builder `experiments.config.backend.build_executors` passes in (sim/ imports nothing from real/).
`gpu` names a built-in GPU or a GPU file (`sim/hardware/gpu_file.py`, docs/hardware.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

from sim.cluster.cost_model_choice import CHOICE_KEYS
from sim.cluster.heterogeneous import build_heterogeneous, normalize_instances
from sim.cluster.hf_static import check_hf_static_cluster, engine_kind, hf_static_params
from sim.cluster.run_cost import check_cost_options
from sim.cost.cost_model import CostModelConfig
from sim.cost.overhead import SchedulingOverhead, build_overhead
from sim.engine.limits import resolve_max_model_len
from sim.memory.kv_moves import DEFAULT_HOST_LINK, DEFAULT_REMOTE_LINK
from sim.memory.kv_transfer import link_preset
from sim.util.errors import ConfigError, check_fraction, check_positive
from sim.util.field_types import check_fields

BACKENDS = ("sim", "real")  # cost model | the real torch engine


@dataclass(frozen=True)
class ClusterSpec:
    """What is served, on what, and how many copies."""

    model: str = "llama-2-7b"  # built-in model name or path to a HF config.json / model dir
    gpu: str = "A100-80GB"  # built-in GPU name or a GPU file (.yaml / .json, docs/hardware.md)
    num_instances: int = 1  # model replicas, each with its own executor and KV cache
    tensor_parallel: int = 1  # GPUs per instance
    weight_dtype: str = "fp16"  # fp16 | bf16 | fp8 (GPUs with fp8 tensor cores) | int8 | int4
    kv_dtype: str = "fp16"  # fp16 | bf16 | fp8 | int8
    gpu_memory_utilization: float = 0.9  # fraction of GPU memory for weights + KV + activations
    cost_model: Mapping[str, Any] = field(default_factory=dict)  # kind, options (cost_model_choice)
    backend: str = "sim"  # sim: cost model | real: the torch engine (needs torch)
    real: Mapping[str, Any] = field(default_factory=dict)  # real.options.RealOptions fields
    instances: tuple[Mapping[str, Any], ...] = ()  # groups overriding gpu...
    draft_model: str | None = None  # speculative-decoding draft (name or config path); sim only
    scheduling_overhead: Mapping[str, Any] = field(default_factory=dict)  # sim.cost.overhead fields
    max_model_len: int | None = None  # tokens a sequence may reach (None: the model's context)
    expert_parallel: int = 1  # of an instance's tensor_parallel GPUs, how many the experts of an
    # MoE model are spread over (1: every expert split over all of them; docs/moe.md)
    expert_zipf: float = 0.0  # Zipf exponent of MoE expert popularity (0: uniform routing)
    engine: Mapping[str, Any] = field(default_factory=dict)  # {}: paged; {kind: hf_static, ...}:
    # HF-transformers static batches, contiguous padded KV (sim/cluster/hf_static.py, docs/magnus.md)
    kv_host_link: str = DEFAULT_HOST_LINK  # GPU <-> host memory link of KV swap and host prefix
    # tier copies (a sim/memory/kv_transfer.py preset: pcie4_host ~25 GB/s, pcie5_host ~50 GB/s, ...)
    kv_remote_link: str = DEFAULT_REMOTE_LINK  # remote KV store -> GPU link (a preset)
    medusa_heads: int = 0  # Medusa decoding heads on the target (sim/cluster/medusa.py); 0: none
    medusa_head_layers: int = 1  # residual blocks per Medusa head (Medusa's default: 1)
    lora: Mapping[str, Any] = field(default_factory=dict)  # LoRA adapter slots (sim/cluster/lora.py:
    # max_loras, max_lora_rank, target_modules); {}: LoRA off
    gpu_price_per_hour: float | None = None  # US dollars per GPU-hour for every instance
    # (None: the GPU type's default, sim/hardware/gpu_costs.py; docs/hardware.md "Cost and energy")
    power: Mapping[str, Any] = field(default_factory=dict)  # {idle_w, busy_w}: watts per GPU
    # overriding the GPU type's defaults in the run's energy (sim/cluster/run_cost.py)
    pipeline_parallel: int = 1  # pipeline stages per instance, each on tensor_parallel GPUs
    # (sim/cluster/pipeline.py: the instance is seen as this many virtual instances)
    pipeline_link: str | None = None  # stage-to-stage link: a sim/memory/kv_transfer.py preset
    # (e.g. rdma_400g across nodes); None: the GPU's interconnect (NVLink within a node)

    def __post_init__(self) -> None:
        self._check_types()
        check_positive("cluster.num_instances", self.num_instances)
        groups, total = normalize_instances(self.instances, self.num_instances)
        for k, group in enumerate(groups):  # a group's overrides: the same types as the cluster's
            check_fields(ClusterSpec, f"cluster.instances[{k}]",
                         {key: v for key, v in group.items() if key != "count"})
        object.__setattr__(self, "instances", groups)
        object.__setattr__(self, "num_instances", total)
        check_positive("cluster.tensor_parallel", self.tensor_parallel)
        self._check_pipeline()
        check_positive("cluster.expert_parallel", self.expert_parallel)
        check_positive("cluster.expert_zipf", self.expert_zipf, allow_zero=True)
        check_fraction("cluster.gpu_memory_utilization", self.gpu_memory_utilization)
        if self.backend not in BACKENDS:
            raise ConfigError("cluster.backend", self.backend, f"one of {', '.join(BACKENDS)}")
        if self.draft_model is not None and (self.backend != "sim" or "calibration" in
                                             self.cost_model):
            raise ConfigError("cluster.draft_model", self.draft_model, "a draft model runs on "
                              "the cost models only (backend: sim, no calibration)")
        self._check_heads_and_adapters()
        build_overhead(self.scheduling_overhead, self.backend)  # validates; None when empty
        if self.max_model_len is not None:
            resolve_max_model_len((), self.max_model_len)  # an int >= 1; vs the model: at build
        check_cost_options(self.gpu_price_per_hour, self.power)
        link_preset(self.kv_host_link, "cluster.kv_host_link")
        link_preset(self.kv_remote_link, "cluster.kv_remote_link")
        if engine_kind(self.engine) == "hf_static":
            hf_static_params(self.engine)  # validates the options
            check_hf_static_cluster(self.tensor_parallel, self.backend, self.draft_model,
                                    "calibration" in self.cost_model)

    def _check_pipeline(self) -> None:
        """pipeline_parallel an int >= 1, its link a preset, and nothing it does not model."""
        pp = self.pipeline_parallel
        check_positive("cluster.pipeline_parallel", pp)
        if self.pipeline_link is not None:
            link_preset(self.pipeline_link, "cluster.pipeline_link")
        if pp == 1:
            return
        calibrated = "calibration" in self.cost_model
        refused = (("backend", self.backend != "sim", self.backend),
                   ("cost_model.calibration", calibrated, self.cost_model.get("calibration")),
                   ("draft_model", self.draft_model is not None, self.draft_model),
                   ("medusa_heads", bool(self.medusa_heads), self.medusa_heads),
                   ("lora", bool(self.lora), self.lora),
                   ("engine", engine_kind(self.engine) == "hf_static", self.engine),
                   ("scheduling_overhead", bool(self.scheduling_overhead),
                    self.scheduling_overhead),
                   ("instances", bool(self.instances), self.instances))
        for name, on, value in refused:
            if on:
                raise ConfigError("cluster.pipeline_parallel", pp, f"not modelled with "
                                  f"cluster.{name} = {value!r} yet (docs/pipeline.md)")

    def _check_heads_and_adapters(self) -> None:
        """Medusa heads and LoRA slots: valid, on the cost models only, heads without a draft."""
        from sim.cluster.lora import lora_spec
        from sim.cluster.medusa import check_medusa_heads

        check_medusa_heads(self.medusa_heads)
        check_positive("cluster.medusa_head_layers", self.medusa_head_layers, allow_zero=True)
        lora_spec(self.lora)  # validates
        costed = self.backend == "sim" and "calibration" not in self.cost_model and \
            engine_kind(self.engine) != "hf_static"
        for name, on in (("cluster.medusa_heads", self.medusa_heads),
                         ("cluster.lora", self.lora)):
            if on and not costed:
                raise ConfigError(name, on, "runs on the cost models only (backend: sim, no "
                                  "calibration, the paged engine)")
        if self.medusa_heads and self.draft_model is not None:
            raise ConfigError("cluster.medusa_heads", self.medusa_heads,
                              f"Medusa heads replace a draft model; drop cluster.draft_model "
                              f"({self.draft_model})")

    def _check_types(self) -> None:
        """Every field, and the cost-model and overhead numbers, of its annotated type (no
        bool for a number, no 8.0 for an int): ConfigError naming `cluster.<field>`."""
        check_fields(ClusterSpec, "cluster", {f.name: getattr(self, f.name) for f in fields(self)})
        check_fields(CostModelConfig, "cluster.cost_model",
                     {k: v for k, v in self.cost_model.items() if k not in CHOICE_KEYS})
        check_fields(SchedulingOverhead, "cluster.scheduling_overhead", self.scheduling_overhead)


def build_executors(spec: ClusterSpec,
                    real: Callable[[ClusterSpec], list] | None = None) -> list:
    """One executor per instance: cost-model ones share one immutable cost model. `backend:
    real` needs the torch engine's builder `real` (sim/ does not import real/): use
    experiments.config.backend.build_executors, which passes it."""
    if spec.instances:
        return build_heterogeneous(spec, build_executors)
    if spec.backend == "real":
        if real is None:
            raise ConfigError("cluster.backend", spec.backend, "the torch engine's executors are "
                              "built by experiments.config.backend.build_executors")
        return real(spec)
    if "calibration" in spec.cost_model:  # (never with engine hf_static: __post_init__)
        from sim.measured.calibrated import build_calibrated_executors, fitted_cost_model

        fitted = fitted_cost_model(spec.cost_model, *deployment_names(spec))
        if fitted is None:  # a python -m real.calibrate file: its own executor
            return build_calibrated_executors(spec.cost_model, spec.num_instances)
        spec = replace(spec, cost_model=fitted)  # servesim calibrate: the fitted options
    from sim.cluster.cost_executor import CostModelExecutor
    from sim.cluster.cost_model_choice import build_cost_model
    from sim.cluster.draft import build_draft
    from sim.cost.cost_model import DeploymentSpec
    from sim.hardware.gpu_file import resolve_gpu
    from sim.memory.kv_moves import tier_links
    from sim.models.catalog import resolve_model

    deployment = DeploymentSpec(model=resolve_model(spec.model), gpu=resolve_gpu(spec.gpu),
                                tensor_parallel=spec.tensor_parallel,
                                weight_dtype=spec.weight_dtype, kv_dtype=spec.kv_dtype,
                                gpu_memory_utilization=spec.gpu_memory_utilization,
                                expert_parallel=spec.expert_parallel,
                                expert_zipf=spec.expert_zipf,
                                pipeline_parallel=spec.pipeline_parallel)
    if spec.pipeline_parallel > 1:
        return pipeline_executors(spec, deployment)
    if engine_kind(spec.engine) == "hf_static":
        from sim.cluster.hf_static import build_hf_static_executors

        return build_hf_static_executors(deployment, spec.engine, spec.num_instances)
    draft = build_draft(deployment, spec.draft_model, spec.cost_model)  # None without one
    links = tier_links(deployment, spec.kv_host_link, spec.kv_remote_link)
    medusa, lora = heads_and_adapters(spec, deployment, links)
    executor = CostModelExecutor(build_cost_model(deployment, spec.cost_model), draft, links,
                                 medusa, lora)
    return [executor] * spec.num_instances


def pipeline_executors(spec: ClusterSpec, deployment: Any) -> list:
    """`num_instances` pipelines of `pipeline_parallel` virtual instances (sim/cluster/pipeline.py)."""
    from sim.cluster.cost_model_choice import build_cost_model
    from sim.cluster.pipeline import build_pipeline_executors
    from sim.memory.kv_transfer import Link

    gpu = deployment.gpu
    link = (link_preset(spec.pipeline_link, "cluster.pipeline_link") if spec.pipeline_link
            else Link(f"{gpu.name} interconnect", gpu.interconnect_latency_s,
                      gpu.interconnect_bandwidth))
    return build_pipeline_executors(deployment, spec.num_instances, link,
                                    lambda d: build_cost_model(d, spec.cost_model))


def heads_and_adapters(spec: ClusterSpec, deployment: Any, links: Any) -> tuple:
    """The cluster's Medusa heads and LoRA costs (each None when off), priced with the
    roofline efficiencies of `cluster.cost_model` (defaults under the stage model)."""
    from sim.cluster.cost_model_choice import roofline_config
    from sim.cluster.lora import build_lora
    from sim.cluster.medusa import build_medusa

    eff = roofline_config(spec.cost_model)
    medusa = build_medusa(deployment, spec.medusa_heads, spec.medusa_head_layers,
                          eff.compute_efficiency, eff.memory_efficiency)
    lora = build_lora(deployment, spec.lora, links.host, eff.compute_efficiency,
                      eff.memory_efficiency)
    return medusa, lora


def deployment_names(spec: ClusterSpec) -> tuple[str, str, int]:
    """(model name, GPU name, tensor parallelism) of a cluster, as a calibration records them."""
    from sim.hardware.gpu_file import resolve_gpu
    from sim.models.catalog import resolve_model

    return resolve_model(spec.model).name, resolve_gpu(spec.gpu).name, spec.tensor_parallel
