"""A cluster description (model, GPU, parallelism, precision, instances) and its executors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from sim.errors import ConfigError, check_fraction, check_positive


@dataclass(frozen=True)
class ClusterSpec:
    """What is served, on what, and how many copies."""

    model: str = "llama-2-7b"  # built-in model name or path to a HF config.json / model dir
    gpu: str = "A100-80GB"  # built-in GPU name
    num_instances: int = 1  # model replicas, each with its own executor and KV cache
    tensor_parallel: int = 1  # GPUs per instance
    weight_dtype: str = "fp16"  # fp16 | bf16 | int8 | int4
    kv_dtype: str = "fp16"  # fp16 | bf16 | fp8 | int8
    gpu_memory_utilization: float = 0.9  # fraction of GPU memory for weights + KV + activations
    cost_model: Mapping[str, Any] = field(default_factory=dict)  # CostModelConfig overrides

    def __post_init__(self) -> None:
        check_positive("cluster.num_instances", self.num_instances)
        check_positive("cluster.tensor_parallel", self.tensor_parallel)
        check_fraction("cluster.gpu_memory_utilization", self.gpu_memory_utilization)


def build_executors(spec: ClusterSpec) -> list:
    """One cost-model executor per instance (they share one immutable cost model)."""
    from sim.cost_executor import CostModelExecutor
    from sim.cost_model import CostModelConfig, DeploymentSpec, RooflineCostModel
    from sim.hardware import get_gpu
    from sim.models import resolve_model

    try:
        cost_config = CostModelConfig(**dict(spec.cost_model))
    except TypeError as exc:
        raise ConfigError("cluster.cost_model", dict(spec.cost_model), str(exc)) from exc
    deployment = DeploymentSpec(model=resolve_model(spec.model), gpu=get_gpu(spec.gpu),
                                tensor_parallel=spec.tensor_parallel,
                                weight_dtype=spec.weight_dtype, kv_dtype=spec.kv_dtype,
                                gpu_memory_utilization=spec.gpu_memory_utilization)
    executor = CostModelExecutor(RooflineCostModel(deployment, cost_config))
    return [executor] * spec.num_instances
