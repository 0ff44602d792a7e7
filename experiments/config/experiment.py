"""An experiment's resolved, validated configuration (frozen dataclasses) built from plain dicts.

Every check runs when the config is built, before any simulation: unknown keys, unknown policy
names and parameters, unknown models / GPUs, impossible rates. Errors are `ConfigError`s naming
the field path (`policies[1].name`, `workload.synthetic.arrival`, `request_rates[0]`) and value.
The generic checks live in `config_checks`, the workload section in `workload_config`; the
public names of both are re-exported here.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from experiments.config.checks import check_positive_number, is_int, listed, mapping
from experiments.config.classes import (ClassSpec, admission_from_dict, check_classes_support,
                                        classes_from_dict, merge_classes)
from experiments.config.preflight import check_policy_build
from experiments.config.workload import INF_RATE, clients_at_rate, parse_rate
from experiments.config.workload import (SyntheticWorkload, TraceWorkload, WorkloadConfig,
                                         sessions_at_rate, workload_from_dict)
from experiments.config.workload_rtp import rtp_at_rate
from policies.kv_tier_config import check_kv_tiers_cluster
from policies.prefix_caching import check_cluster_model_causal, check_prefix_caching_backend
from sim.cluster.spec import ClusterSpec
from sim.engine.admission import AdmissionConfig
from sim.metrics.slo import SLO
from sim.util.errors import ConfigError, check_keys
from sim.util.schema import build, rebase

# re-exported so `from experiments.config.experiment import ...` serves for the whole config
__all__ = ["ExperimentConfig", "PolicyEntry", "SyntheticWorkload", "TraceWorkload",
           "WorkloadConfig", "cluster_from_dict", "experiment_from_dict", "mapping",
           "policy_from_dict", "rebase"]

TOP_LEVEL_KEYS = ("name", "workload", "cluster", "policies", "request_rates", "seeds",
                  "max_requests", "duration_s", "slo", "classes", "admission")
# a plain directory name: not '.', '..' or hidden, no separator, no leading '-'
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
NAME_RULE = ("must be 1-100 letters, digits, '_', '.' or '-', starting with a letter, digit or "
             "'_' (it names a directory)")


def rate_text(rate: float | None) -> str:
    """'2', '0.5', or 'trace' for a trace replayed as is."""
    return "trace" if rate is None else f"{rate:g}"


# ---- policies and the experiment ----------------------------------------------------------
@dataclass(frozen=True)
class PolicyEntry:
    """One policy to run: a registered name, a display label and its parameters."""

    name: str  # a policies.registry name
    label: str  # display / directory name (default: the policy name)
    params: dict[str, Any] = field(default_factory=dict)  # the policy's Config fields
    cluster: dict[str, Any] = field(default_factory=dict)  # ClusterSpec fields it overrides
    admission: AdmissionConfig | None = None  # its own admission control (with own_admission)
    own_admission: bool = False  # whether the entry sets `admission` (else the experiment's)
    classes: dict[str, ClassSpec] = field(default_factory=dict)  # laid over the experiment's

    def resolve(self, where: str) -> Any:
        """The policy's validated Config; errors named under `where` (e.g. policies[0])."""
        from policies.registry import get_policy, make_config, policy_names

        if self.name not in policy_names():
            raise ConfigError(f"{where}.name", self.name,
                              f"unknown policy; known: {', '.join(policy_names())}")
        try:
            return make_config(get_policy(self.name), self.params, where=f"{where}.params")
        except ConfigError as err:
            raise rebase(f"{where}.params", err) from None


@dataclass(frozen=True)
class ExperimentConfig:
    """A sweep: every policy x request rate x seed on one workload and cluster."""

    name: str
    workload: WorkloadConfig
    cluster: ClusterSpec
    policies: tuple[PolicyEntry, ...]
    request_rates: tuple[float, ...] = ()  # req/s; empty = replay a trace as is
    seeds: tuple[int, ...] = (0,)
    max_requests: int | None = None  # cap on requests per run (first N arrivals)
    duration_s: float | None = None  # cap on arrivals per run (seconds after the first)
    slo: SLO | None = None  # latency targets: every run reports goodput; capacity search uses them
    classes: dict[str, ClassSpec] = field(default_factory=dict)  # per request class settings
    admission: AdmissionConfig | None = None  # admission control of every run (docs/classes.md)

    def __post_init__(self) -> None:
        check_name("name", self.name)
        self._check_policies()
        self._check_rates()
        if not self.seeds:
            raise ConfigError("seeds", list(self.seeds), "list at least one seed")
        for i, seed in enumerate(self.seeds):
            if not is_int(seed) or seed < 0:
                raise ConfigError(f"seeds[{i}]", seed, "must be an int >= 0")
        check_distinct("seeds", self.seeds, str)
        if self.max_requests is not None:
            check_positive_number("max_requests", self.max_requests, integer=True)
        if self.duration_s is not None:
            check_positive_number("duration_s", self.duration_s)

    def _check_policies(self) -> None:
        if not self.policies:
            raise ConfigError("policies", [], "list at least one policy")
        labels: set[str] = set()
        for i, entry in enumerate(self.policies):
            config = entry.resolve(f"policies[{i}]")
            cluster = self.cluster_for(entry, f"policies[{i}].cluster")
            check_prefix_caching_backend(config, cluster.backend, f"policies[{i}].params")
            check_cluster_model_causal(config, cluster.model, f"policies[{i}].params")
            check_kv_tiers_cluster(config, cluster, f"policies[{i}].params")
            check_draft(config, cluster, f"policies[{i}]")
            check_policy_build(entry.name, config, cluster, f"policies[{i}]")
            check_classes_support(entry.name, cluster.backend, self.admission_for(entry),
                                  self.classes_for(entry), f"policies[{i}]")
            check_name(f"policies[{i}].label", entry.label)
            if entry.label in labels:
                raise ConfigError(f"policies[{i}].label", entry.label,
                                  "duplicate label; give each entry its own label")
            labels.add(entry.label)

    def _check_rates(self) -> None:
        for i, rate in enumerate(self.request_rates):
            if rate != INF_RATE:  # inf: every request at 0 (vllm bench serve --request-rate inf)
                check_positive_number(f"request_rates[{i}]", rate)
        check_distinct("request_rates", self.request_rates, rate_text)
        replay = self.workload.trace is not None and self.workload.trace.retime == "none"
        if replay and self.request_rates:
            raise ConfigError("request_rates", list(self.request_rates),
                              "a trace replayed as is (workload.trace.retime: none) takes no "
                              "rates; set retime: poisson or scale to sweep rates")
        if not replay and not self.request_rates:
            raise ConfigError("request_rates", [], "list at least one rate (req/s)")
        if self.workload.synthetic is not None:
            for rate in self.request_rates:
                self.workload.synthetic.at_rate(rate)
        if self.workload.sessions is not None:
            for i, rate in enumerate(self.request_rates):
                sessions_at_rate(self.workload.sessions, rate, f"request_rates[{i}]")
        if self.workload.clients is not None:
            for i, rate in enumerate(self.request_rates):
                clients_at_rate(self.workload.clients, rate, f"request_rates[{i}]")
        for rtp in (self.workload.plugin_calls, self.workload.ptuning):
            for i, rate in enumerate(self.request_rates if rtp is not None else ()):
                rtp_at_rate(rtp, rate, f"request_rates[{i}]")

    def cluster_for(self, entry: PolicyEntry, where: str = "cluster") -> ClusterSpec:
        """The cluster a policy entry runs on: the experiment's, with the entry's overrides
        (e.g. `weight_dtype: int8` for a quantized baseline)."""
        if not entry.cluster:
            return self.cluster
        return cluster_from_dict({**dataclasses.asdict(self.cluster), **entry.cluster}, where)

    def admission_for(self, entry: PolicyEntry) -> AdmissionConfig | None:
        """The admission control a policy entry runs with: its own, else the experiment's."""
        return entry.admission if entry.own_admission else self.admission

    def classes_for(self, entry: PolicyEntry | None) -> dict[str, ClassSpec]:
        """The class settings a policy entry's runs use: the experiment's, with its own."""
        if entry is None or not entry.classes:
            return self.classes
        return merge_classes(self.classes, entry.classes)

    def rates(self) -> list[float | None]:
        """The sweep's rates; [None] for a trace replayed as is."""
        return list(self.request_rates) if self.request_rates else [None]


def check_name(where: str, name: object) -> None:
    """ConfigError unless `name` is a plain directory name (not '.', '..', hidden or a path)."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name) or name.strip(".") == "":
        raise ConfigError(where, name, NAME_RULE)


def check_distinct(where: str, values: Sequence[Any], key: Callable[[Any], str]) -> None:
    """ConfigError naming both entries of `values` whose `key` (the text a run id shows)
    is equal: they would make duplicate summary rows sharing one run directory."""
    first: dict[str, int] = {}
    for j, value in enumerate(values):
        i = first.setdefault(key(value), j)
        if i != j:
            same = "duplicates" if values[i] == value else f"prints as {key(value)!r} like"
            raise ConfigError(f"{where}[{j}]", value,
                              f"{same} {where}[{i}]={values[i]!r}; the two runs would share "
                              f"one run directory and summary row")


def check_draft(config: Any, cluster: ClusterSpec, where: str) -> None:
    """ConfigError when a policy speculates (num_speculative_tokens > 0) on a cluster with
    no draft model (every run would fail when its policy is built)."""
    k = getattr(config, "num_speculative_tokens", 0)
    if k and getattr(config, "speculative_method", "draft") == "medusa":
        if cluster.medusa_heads < k:
            raise ConfigError(f"{where}.params.num_speculative_tokens", k,
                              f"Medusa needs cluster.medusa_heads >= {k} (or "
                              f"{where}.cluster.medusa_heads), got {cluster.medusa_heads}")
        return
    if k and cluster.draft_model is None:
        raise ConfigError(f"{where}.params.num_speculative_tokens", k,
                          f"speculative decoding needs a draft model: set cluster.draft_model "
                          f"(or {where}.cluster.draft_model), e.g. llama-68m")


# ---- from plain dicts (parsed YAML) -------------------------------------------------------
def experiment_from_dict(raw: object, default_name: str,
                         cls: type[ExperimentConfig] | None = None) -> ExperimentConfig:
    """Resolve and validate a parsed config; `default_name` when it has no `name`; `cls` a
    subclass with other checks (experiments.capacity.main: request_rates may be empty)."""
    raw = mapping("config", raw)
    check_keys("", raw, TOP_LEVEL_KEYS)
    return (cls or ExperimentConfig)(
        name=raw.get("name", default_name), workload=workload_from_dict(raw.get("workload")),
        cluster=cluster_from_dict(raw.get("cluster")),
        policies=tuple(policy_from_dict(i, p) for i, p in
                       enumerate(listed("policies", raw.get("policies")))),
        request_rates=tuple(map(parse_rate, listed("request_rates", raw.get("request_rates")))),
        seeds=tuple(listed("seeds", raw.get("seeds", [0]))),
        max_requests=raw.get("max_requests"), duration_s=raw.get("duration_s"),
        slo=None if raw.get("slo") is None else build(SLO, "slo", mapping("slo", raw["slo"]),
                                                      "slo."),
        classes=classes_from_dict(raw.get("classes")),
        admission=admission_from_dict(raw.get("admission")))


def cluster_from_dict(value: object, where: str = "cluster") -> ClusterSpec:
    """A ClusterSpec whose model and GPU are known (built-in, or a model config path)."""
    from sim.hardware.gpu_file import resolve_gpu
    from sim.models.catalog import resolve_model

    spec: ClusterSpec = build(ClusterSpec, where, mapping(where, value), "cluster.")
    try:
        resolve_model(spec.model)
        resolve_gpu(spec.gpu)  # a built-in name or a GPU file (docs/hardware.md)
    except ConfigError as err:
        raise rebase(where, err) from None
    return spec


def policy_from_dict(index: int, value: object) -> PolicyEntry:
    where = f"policies[{index}]"
    if isinstance(value, str):
        value = {"name": value}
    raw = mapping(where, value)
    check_keys(where, raw, ("name", "label", "params", "cluster", "admission", "classes"))
    if not isinstance(raw.get("name"), str):
        raise ConfigError(f"{where}.name", raw.get("name"), "must be a policy name")
    params = mapping(f"{where}.params", raw.get("params"))
    cluster = mapping(f"{where}.cluster", raw.get("cluster"))
    own = "admission" in raw
    admission = admission_from_dict(raw["admission"], f"{where}.admission") if own else None
    classes = classes_from_dict(raw.get("classes"), f"{where}.classes")
    return PolicyEntry(raw["name"], raw.get("label", raw["name"]), params, cluster, admission,
                       own, classes)
