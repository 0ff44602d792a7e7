"""The candidates of a deployment search: one capacity-config policy entry each.

A candidate is one serving unit, the smallest deployment that can be replicated:

- colocated: GPU type x per-instance parallelism (`DeploymentSpace.parallel_axes()`: tensor
  parallelism today) x scheduler x batch caps, ONE instance (replicas are counted afterwards,
  for the target rate: experiments/search/rank.py);
- disaggregated: GPU type x P:D ratio x prefill TP x decode TP: P prefill instances and D decode
  instances (`disagg` policy, `num_prefill: P`), each pool its own TP through `cluster.instances`
  groups (docs/disaggregation.md); each pool runs `disagg`'s default pool policy (vllm).

Its entry carries its own `cluster:` overrides (gpu, tensor_parallel, num_instances or
instances) and `params:`, so that one capacity run holds every candidate. Units needing more
than `max_gpus` GPUs are not enumerated (`enumerate_candidates` says how many). Labels are
readable ids: `H100x2_tp2_vllm_seqs256`, `A100x3_disagg_1P2D_tp1`, `H100x3_disagg_1P1D_ptp1_dtp2`.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from experiments.search.space import DeploymentSpace, cap_param

AXIS_TAGS = {"tensor_parallel": "tp", "pipeline_parallel": "pp"}  # label tag of each axis
CAP_TAGS = {"max_num_seqs": "seqs", "token_budget": "tok"}  # label tag of each batch cap
KINDS = ("colocated", "disagg")  # what a candidate is


@dataclass(frozen=True)
class Candidate:
    """One deployment unit to search: a policy entry and what it costs in GPUs."""

    label: str  # readable id, the policy entry's label (a plain file name)
    kind: str  # colocated | disagg
    gpu: str  # GPU type as the space names it
    num_gpus: int  # GPUs the unit holds (all instances, all their parallel GPUs)
    policy: str  # the entry's policy (the scheduler, or disagg)
    params: Mapping[str, Any] = field(default_factory=dict)  # the entry's policy parameters
    cluster: Mapping[str, Any] = field(default_factory=dict)  # its cluster overrides
    knobs: Mapping[str, Any] = field(default_factory=dict)  # the values it took (search.csv)

    def entry(self) -> dict[str, Any]:
        """The capacity-config policy entry."""
        out: dict[str, Any] = {"name": self.policy, "label": self.label}
        if self.params:
            out["params"] = dict(self.params)
        out["cluster"] = dict(self.cluster)
        return out


def gpu_tags(gpus: tuple[str, ...]) -> dict[str, str]:
    """A short label tag per GPU type: 'H100' for H100-80GB unless two types share it."""
    from sim.hardware.gpu_file import resolve_gpu

    names = {gpu: resolve_gpu(gpu).name for gpu in gpus}
    short = {gpu: name.split("-")[0] for gpu, name in names.items()}
    clash = len(set(short.values())) < len(short)
    return {gpu: re.sub(r"[^A-Za-z0-9_.-]", "_", names[gpu] if clash else short[gpu])
            for gpu in gpus}


def colocated(space: DeploymentSpace, gpu: str, tag: str) -> list[Candidate]:
    """Every colocated candidate of one GPU type (over max_gpus included)."""
    axes = space.parallel_axes()
    out = []
    for values in itertools.product(*axes.values()):
        parallel = dict(zip(axes, values))
        size = math.prod(values)
        axis_tag = "_".join(f"{AXIS_TAGS.get(k, k)}{v}" for k, v in parallel.items()
                            if k == "tensor_parallel" or v != 1)
        for scheduler in space.schedulers:
            caps = {cap: getattr(space, cap) or (None,) for cap in CAP_TAGS
                    if cap_param(scheduler, cap)}
            for picked in itertools.product(*caps.values()):
                chosen = {cap: v for cap, v in zip(caps, picked) if v is not None}
                params = {cap_param(scheduler, cap): v for cap, v in chosen.items()}
                cap_tag = "".join(f"_{CAP_TAGS[cap]}{v}" for cap, v in chosen.items())
                out.append(Candidate(
                    f"{tag}x{size}_{axis_tag}_{scheduler}{cap_tag}", "colocated", gpu, size,
                    scheduler, params, {"gpu": gpu, "num_instances": 1,
                                        **{k: v for k, v in parallel.items()
                                           if k == "tensor_parallel" or v != 1}},
                    {**parallel, "scheduler": scheduler, **chosen}))
    return out


def disaggregated(space: DeploymentSpace, gpu: str, tag: str) -> list[Candidate]:
    """Every disaggregated candidate of one GPU type (over max_gpus included)."""
    if space.disagg is None:
        return []
    out = []
    disagg = space.disagg
    for (p, d), ptp, dtp, ppp, dpp in itertools.product(
            disagg.pd_pairs(), disagg.prefill_tp, disagg.decode_tp, disagg.prefill_pp,
            disagg.decode_pp):
        size = p * ptp * ppp + d * dtp * dpp
        tp_tag = f"tp{ptp}" if ptp == dtp else f"ptp{ptp}_dtp{dtp}"
        pp_tag = "" if ppp == dpp == 1 else f"_ppp{ppp}_dpp{dpp}"
        groups = [{"tensor_parallel": ptp, "count": p}, {"tensor_parallel": dtp, "count": d}]
        for group, stages in zip(groups, (ppp, dpp)):
            if stages > 1:  # a pipeline: `stages` virtual instances each (docs/pipeline.md)
                group["pipeline_parallel"] = stages
        out.append(Candidate(
            f"{tag}x{size}_disagg_{p}P{d}D_{tp_tag}{pp_tag}", "disagg", gpu, size, "disagg",
            {"num_prefill": p * ppp, "link": disagg.link},
            {"gpu": gpu, "num_instances": p + d, "instances": groups},
            {"num_prefill": p, "num_decode": d, "prefill_tp": ptp, "decode_tp": dtp,
             "prefill_pp": ppp, "decode_pp": dpp, "scheduler": "disagg"}))
    return out


def enumerate_candidates(space: DeploymentSpace) -> tuple[list[Candidate], int]:
    """The candidates within max_gpus (colocated, then disaggregated, GPU by GPU) and how many
    combinations were left out for needing more GPUs."""
    tags = gpu_tags(space.gpus)
    every = [c for gpu in space.gpus for c in (*colocated(space, gpu, tags[gpu]),
                                               *disaggregated(space, gpu, tags[gpu]))]
    kept = [c for c in every if c.num_gpus <= space.max_gpus]
    return kept, len(every) - len(kept)
