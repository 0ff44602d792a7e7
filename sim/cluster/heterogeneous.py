"""Heterogeneous clusters: instances that differ in GPU, parallelism or precision.

`cluster.instances` lists instance groups, each overriding some of the cluster's per-instance
fields and giving a `count`; e.g. `[{gpu: H100-80GB, count: 2}, {gpu: A100-40GB}]` is three
instances of the cluster's model. Every instance serves the same model, so any router may send
any request anywhere; `least_kv` weighs load by each instance's own KV capacity.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Mapping, Protocol, Sequence, TypeVar

from sim.util.errors import ConfigError


class GroupedCluster(Protocol):
    """What this module reads of a cluster (sim.cluster.spec.ClusterSpec, a frozen dataclass); a
    protocol, so that sim.cluster.spec and this module do not import each other."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # a dataclass (dataclasses.replace works)

    @property
    def instances(self) -> tuple[Mapping[str, Any], ...]: ...  # instance groups with a count

    @property
    def num_instances(self) -> int: ...  # instances in all

    @property
    def backend(self) -> str: ...  # sim | real

    @property
    def cost_model(self) -> Mapping[str, Any]: ...  # cost-model choice and options


C = TypeVar("C", bound=GroupedCluster)  # the cluster type (ClusterSpec)

# ClusterSpec fields an instance group may override
INSTANCE_FIELDS: tuple[str, ...] = ("gpu", "tensor_parallel", "weight_dtype", "kv_dtype",
                                    "gpu_memory_utilization", "expert_parallel",
                                    "pipeline_parallel")  # a group's pipeline: one virtual
# instance per stage (sim/cluster/pipeline.py), so its `count` instances are count x stages


def normalize_instances(groups: object, num_instances: int) -> tuple[tuple[dict, ...], int]:
    """Validated groups (as a tuple of dicts with a `count`) and the total instance count.

    `num_instances` must be left at 1 or equal the groups' total count."""
    if not groups:
        return (), num_instances
    if not isinstance(groups, Sequence) or isinstance(groups, (str, bytes)):
        raise ConfigError("cluster.instances", groups, "must be a list of instance groups")
    out: list[dict] = []
    for k, group in enumerate(groups):
        where = f"cluster.instances[{k}]"
        if not isinstance(group, Mapping):
            raise ConfigError(where, group, "must be a mapping like {gpu: H100-80GB, count: 2}")
        for key in group:
            if key not in INSTANCE_FIELDS and key != "count":
                raise ConfigError(f"{where}.{key}", group[key], f"unknown; known: count, "
                                  f"{', '.join(INSTANCE_FIELDS)}")
        count = group.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ConfigError(f"{where}.count", count, "must be an integer >= 1")
        out.append({**group, "count": count})
    total = sum(g["count"] for g in out)
    if num_instances not in (1, total):
        raise ConfigError("cluster.num_instances", num_instances,
                          f"disagrees with cluster.instances, which total {total} instances")
    return tuple(out), total


def instance_specs(spec: C) -> list[C]:
    """One single-instance, homogeneous ClusterSpec per instance of `spec`, in instance order."""
    if not spec.instances:
        return [dataclasses.replace(spec, num_instances=1)] * spec.num_instances
    out = []
    for group in spec.instances:
        fields: dict[str, Any] = {k: v for k, v in group.items() if k != "count"}
        one = dataclasses.replace(spec, instances=(), num_instances=1, **fields)
        out.extend([one] * group["count"])
    return out


def build_heterogeneous(spec: C, build: Callable[[C], list]) -> list:
    """Executors for a cluster with instance groups: one `build` per distinct group."""
    if spec.backend != "sim" or "calibration" in spec.cost_model:
        raise ConfigError("cluster.instances", list(spec.instances),
                          "heterogeneous instances need the roofline cost model "
                          "(backend: sim without a calibration file)")
    executors: list = []
    for k, group in enumerate(spec.instances):
        fields = {key: v for key, v in group.items() if key != "count"}
        pipelines = fields.get("pipeline_parallel", 1) > 1  # stages share clocks: built whole
        try:
            built = build(dataclasses.replace(spec, instances=(), **fields,
                                              num_instances=group["count"] if pipelines else 1))
        except ConfigError as err:
            raise ConfigError(f"cluster.instances[{k}].{err.field.removeprefix('cluster.')}",
                              err.value, err.reason) from None
        executors.extend(built if pipelines else [built[0]] * group["count"])
    return executors
