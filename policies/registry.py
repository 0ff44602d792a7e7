"""One decorator registry of policies, with lazy imports of the built-in modules.

`@register_policy("orca")` on a Policy subclass registers it; `get_policy("orca")` imports
`policies.orca` on first use, so simulation never imports what it does not run (e.g. torch).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Mapping, Sequence, TypeVar

import numpy as np

from sim.core.executor import InstanceInfo
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError
from sim.util.field_types import check_fields

from policies.base import Policy, PolicyConfig, PolicyFactory

# policy name -> module that registers it (imported lazily)
BUILTIN_POLICIES: dict[str, str] = {
    "vanilla": "policies.vanilla",
    "orca": "policies.orca",
    "dynamic": "policies.dynamic",
    "vllm_v0": "policies.vllm",
    "vllm": "policies.vllm_v1",
    "sarathi": "policies.sarathi",
    "ccb": "policies.ccb",
    "glp": "policies.magnus.policy",
    "abp": "policies.magnus.policy",
    "magnus": "policies.magnus.policy",
    "djl": "policies.djl",
    "lacb": "policies.length_aware.policy",
    "disagg": "policies.disagg",
}

# policy name -> the real system (and version) it follows, one line (`--list`, docs/policies.md)
FOLLOWS: dict[str, str] = {
    "vanilla": "static batching, FCFS, greedy (TF Serving / Triton; Magnus' VS baseline)",
    "dynamic": "dynamic batching: full batch or max delay (Triton dynamic batcher, DJL Serving)",
    "orca": "iteration-level scheduling, max_tokens reservation (ORCA, OSDI 2022)",
    "ccb": "conservative continuous batching (the Magnus paper's CCB baseline)",
    "vllm_v0": "vLLM's V0 scheduler: prefill-only steps, no chunking (PagedAttention, SOSP 2023; "
            "the default before vLLM 0.8)",
    "vllm": "today's vLLM V1 scheduler: one token budget per step, chunked prefill, prefix "
               "caching (vLLM >= 0.8; main at 00024d31)",
    "sarathi": "chunked prefills, stall-free batching (Sarathi-Serve, OSDI 2024; budget 512)",
    "djl": "DJL Serving LMI rolling batch, its option names (runs as vllm_v0 / sarathi / orca)",
    "lacb": "length-aware continuous batching on predicted lengths (the direction Magnus leaves "
            "open; docs/length_aware.md)",
    "glp": "Magnus ablation: length prediction + WMA batching, fixed batch size (ICWS 2024)",
    "abp": "Magnus ablation: GLP without the batch size cap (ICWS 2024)",
    "magnus": "Magnus: length prediction, adaptive batches, HRRN (Cheng et al., ICWS 2024)",
    "disagg": "prefill/decode disaggregation with KV transfer over a modelled link (DistServe, "
              "OSDI 2024; Splitwise, ISCA 2024); a paged policy per pool",
}

_REGISTRY: dict[str, type[Policy]] = {}
P = TypeVar("P", bound=type[Policy])


def register_policy(name: str) -> Callable[[P], P]:
    """Class decorator: register a Policy subclass under `name`."""

    def deco(cls: P) -> P:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"policy {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def policy_names() -> list[str]:
    """Every policy name known: built-in and registered."""
    return sorted(set(BUILTIN_POLICIES) | set(_REGISTRY))


def get_policy(name: str) -> type[Policy]:
    """The Policy class registered under `name` (importing its module on first use)."""
    if name not in _REGISTRY and name in BUILTIN_POLICIES:
        importlib.import_module(BUILTIN_POLICIES[name])
    if name not in _REGISTRY:
        raise ConfigError("policy", name, f"unknown policy; known: {', '.join(policy_names())}")
    return _REGISTRY[name]


def make_config(cls: type[Policy], params: Mapping[str, Any] | None,
                where: str = "policy") -> PolicyConfig:
    """Build the policy's Config dataclass from a mapping, naming unknown fields
    (`<where>.<field>`) and values whose type does not fit the field's annotation (the bare
    field, like the Config's own checks; no coercion: a bool or 8.0 is not an int, "8" is not
    a number)."""
    if params is not None and not isinstance(params, Mapping):
        raise ConfigError(where, params, "must be a mapping of parameters")
    params = dict(params or {})
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", params[unknown[0]],
                          f"unknown parameter of policy {cls.name!r}; known: "
                          f"{', '.join(sorted(fields)) or '(none)'}")
    check_fields(cls.Config, "", params)
    try:
        return cls.Config(**params)
    except TypeError as exc:
        raise ConfigError(where, params, str(exc)) from exc


def policy_factory(name: str, params: Mapping[str, Any] | None, seed: int = 0) -> PolicyFactory:
    """What sim.engine.simulate.run_simulation takes: builds policy `name` with `params` (checked when
    called, as build_policy checks them) for the run's instances and recorder."""

    def make(instances: Sequence[InstanceInfo], recorder: Recorder) -> Policy:
        return build_policy(name, params, instances, recorder, seed)

    return make


def build_policy(name: str, params: Mapping[str, Any] | None,
                 instances: Sequence[InstanceInfo], recorder: Recorder,
                 seed: int = 0) -> Policy:
    """Instantiate policy `name` with `params` for a cluster."""
    cls = get_policy(name)
    config = make_config(cls, params, where=f"policies.{name}")
    return cls(config, instances, recorder, np.random.default_rng(seed))
