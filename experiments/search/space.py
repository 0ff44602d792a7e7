"""The `search:` section of a deployment search config: the space the candidates come from.

Every list is one dimension of the space; a candidate takes one value of each (the enumeration:
experiments/search/candidates.py). The per-instance parallelism dimensions are listed in
`DeploymentSpace.parallel_axes()`, so another one (pipeline parallelism, when the cluster models
it) is one more field and one more entry there. Every bad value is a ConfigError naming its
field, e.g. `search.tensor_parallel[2]` or `search.disagg.ratios[1]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from experiments.config.checks import is_int, is_number, listed, mapping
from sim.util.errors import ConfigError, check_keys

WHERE = "search"  # the section's name in the config, the prefix of every error field
TOKEN_BUDGET_PARAMS = ("token_budget", "max_num_batched_tokens")  # a policy's name for it


def int_list(where: str, values: tuple[Any, ...], *, allow_empty: bool = False) -> None:
    """ConfigError unless `values` are distinct ints >= 1 (and some, unless allow_empty)."""
    if not values and not allow_empty:
        raise ConfigError(where, list(values), "list at least one value")
    for i, value in enumerate(values):
        if not is_int(value) or value < 1:
            raise ConfigError(f"{where}[{i}]", value, "must be an int >= 1")
        if value in values[:i]:
            raise ConfigError(f"{where}[{i}]", value, "duplicates an earlier value")


def parse_ratio(where: str, text: object) -> tuple[int, int]:
    """'1:2' -> (1, 2): prefill and decode instances; ConfigError naming `where`."""
    parts = text.split(":") if isinstance(text, str) else []
    try:
        p, d = (int(x) for x in parts)
    except ValueError:
        p = d = 0
    if len(parts) != 2 or p < 1 or d < 1:
        raise ConfigError(where, text, "must be 'P:D' with P and D ints >= 1 (prefill and "
                          "decode instances), e.g. '1:2'")
    return p, d


@dataclass(frozen=True)
class DisaggSpace:
    """Disaggregated units: P prefill + D decode instances (`disagg` policy), each pool its TP."""

    prefill_tp: tuple[int, ...] = (1,)  # GPUs per prefill instance (tensor parallelism) tried
    decode_tp: tuple[int, ...] = (1,)  # GPUs per decode instance tried
    prefill_pp: tuple[int, ...] = (1,)  # pipeline stages per prefill instance tried
    decode_pp: tuple[int, ...] = (1,)  # pipeline stages per decode instance tried
    ratios: tuple[str, ...] = ("1:1",)  # 'P:D' instance counts tried, e.g. '1:2'
    link: str = "rdma_400g"  # KV link between the pools (a sim/memory/kv_transfer.py preset)

    def __post_init__(self) -> None:
        from sim.memory.kv_transfer import link_preset

        int_list(f"{WHERE}.disagg.prefill_tp", self.prefill_tp)
        int_list(f"{WHERE}.disagg.decode_tp", self.decode_tp)
        int_list(f"{WHERE}.disagg.prefill_pp", self.prefill_pp)
        int_list(f"{WHERE}.disagg.decode_pp", self.decode_pp)
        if not self.ratios:
            raise ConfigError(f"{WHERE}.disagg.ratios", [], "list at least one 'P:D' ratio")
        seen: list[tuple[int, int]] = []
        for i, text in enumerate(self.ratios):
            ratio = parse_ratio(f"{WHERE}.disagg.ratios[{i}]", text)
            if ratio in seen:
                raise ConfigError(f"{WHERE}.disagg.ratios[{i}]", text, "duplicates an earlier "
                                  "ratio")
            seen.append(ratio)
        link_preset(self.link, f"{WHERE}.disagg.link")

    def pd_pairs(self) -> list[tuple[int, int]]:
        """The (P, D) instance counts, in the order listed."""
        return [parse_ratio("ratio", text) for text in self.ratios]


@dataclass(frozen=True)
class DeploymentSpace:
    """What a deployment search tries (one value of each list per candidate)."""

    gpus: tuple[str, ...]  # GPU types (built-in names or GPU files), e.g. (H100-80GB, A100-80GB)
    max_gpus: int  # GPUs one unit (a colocated instance or a P+D disagg unit) may use at most
    tensor_parallel: tuple[int, ...] = (1, 2, 4, 8)  # GPUs per colocated instance tried
    pipeline_parallel: tuple[int, ...] = (1,)  # pipeline stages per colocated instance tried
    # (docs/pipeline.md); the instance's GPUs are tensor_parallel x pipeline_parallel
    schedulers: tuple[str, ...] = ("vllm",)  # colocated policies (policies.registry names)
    max_num_seqs: tuple[int, ...] = ()  # requests per batch tried (): the policy's default
    token_budget: tuple[int, ...] = ()  # tokens per step tried (the policy's token_budget or
    # max_num_batched_tokens); (): the policy's default
    disagg: DisaggSpace | None = None  # disaggregated units too (None: colocated only)
    target_rate: float | None = None  # req/s the deployment must serve (replicas, $ / hour)

    def __post_init__(self) -> None:
        from sim.hardware.gpu_file import resolve_gpu

        if not self.gpus:
            raise ConfigError(f"{WHERE}.gpus", [], "list at least one GPU type, e.g. "
                              "[H100-80GB, A100-80GB]")
        for i, gpu in enumerate(self.gpus):
            try:
                resolve_gpu(gpu)
            except ConfigError as err:
                raise ConfigError(f"{WHERE}.gpus[{i}]", gpu, err.reason) from None
            if gpu in self.gpus[:i]:
                raise ConfigError(f"{WHERE}.gpus[{i}]", gpu, "duplicates an earlier GPU")
        if not is_int(self.max_gpus) or self.max_gpus < 1:
            raise ConfigError(f"{WHERE}.max_gpus", self.max_gpus, "must be an int >= 1 (GPUs "
                              "one unit may use)")
        int_list(f"{WHERE}.tensor_parallel", self.tensor_parallel)
        int_list(f"{WHERE}.pipeline_parallel", self.pipeline_parallel)
        self._check_schedulers()
        if self.target_rate is not None and (not is_number(self.target_rate) or
                                             not 0 < self.target_rate < math.inf):
            raise ConfigError(f"{WHERE}.target_rate", self.target_rate,
                              "must be a finite number > 0 (req/s)")

    def _check_schedulers(self) -> None:
        from policies.registry import policy_names

        if not self.schedulers:
            raise ConfigError(f"{WHERE}.schedulers", [], "list at least one policy, e.g. [vllm]")
        for i, name in enumerate(self.schedulers):
            if name not in policy_names() or name == "disagg":
                raise ConfigError(f"{WHERE}.schedulers[{i}]", name, "must be a colocated "
                                  f"policy (disagg units come from search.disagg); known: "
                                  f"{', '.join(n for n in policy_names() if n != 'disagg')}")
            if name in self.schedulers[:i]:
                raise ConfigError(f"{WHERE}.schedulers[{i}]", name, "duplicates an earlier one")
        for cap in ("max_num_seqs", "token_budget"):
            int_list(f"{WHERE}.{cap}", getattr(self, cap), allow_empty=True)
            if getattr(self, cap) and not any(cap_param(s, cap) for s in self.schedulers):
                raise ConfigError(f"{WHERE}.{cap}", list(getattr(self, cap)),
                                  f"none of the schedulers ({', '.join(self.schedulers)}) has "
                                  f"this parameter")

    def parallel_axes(self) -> dict[str, tuple[int, ...]]:
        """Per-instance parallelism of a colocated instance: cluster field -> values tried
        (its GPUs are the product)."""
        return {"tensor_parallel": self.tensor_parallel,
                "pipeline_parallel": self.pipeline_parallel}


def cap_param(scheduler: str, cap: str) -> str | None:
    """The parameter of `scheduler` that sets batch cap `cap` (max_num_seqs | token_budget),
    None when the policy has none."""
    import dataclasses

    from policies.registry import get_policy

    names = {f.name for f in dataclasses.fields(get_policy(scheduler).Config)}
    wanted = TOKEN_BUDGET_PARAMS if cap == "token_budget" else (cap,)
    return next((name for name in wanted if name in names), None)


def space_from_dict(value: object) -> DeploymentSpace:
    """The `search:` section as a DeploymentSpace (lists become tuples)."""
    raw = mapping(WHERE, value)
    check_keys(WHERE, raw, ("gpus", "max_gpus", "tensor_parallel", "pipeline_parallel",
                            "schedulers",
                            "max_num_seqs", "token_budget", "disagg", "target_rate"))
    if "max_gpus" not in raw:
        raise ConfigError(f"{WHERE}.max_gpus", None, "required: GPUs one unit may use")
    lists = {key: tuple(listed(f"{WHERE}.{key}", raw[key])) for key in
             ("gpus", "tensor_parallel", "pipeline_parallel", "schedulers", "max_num_seqs",
              "token_budget")
             if key in raw}
    disagg = None
    if raw.get("disagg") is not None:
        inner = mapping(f"{WHERE}.disagg", raw["disagg"])
        check_keys(f"{WHERE}.disagg", inner, ("prefill_tp", "decode_tp", "prefill_pp",
                                              "decode_pp", "ratios", "link"))
        disagg = DisaggSpace(**{k: (v if k == "link" else
                                    tuple(listed(f"{WHERE}.disagg.{k}", v)))
                                for k, v in inner.items()})
    return DeploymentSpace(**lists, max_gpus=raw["max_gpus"], disagg=disagg,
                           target_rate=raw.get("target_rate"))


def describe(space: DeploymentSpace) -> dict[str, Any]:
    """The space as plain data (search.json)."""
    import dataclasses

    return dataclasses.asdict(space)


__all__ = ["DeploymentSpace", "DisaggSpace", "cap_param", "describe", "parse_ratio",
           "space_from_dict"]
