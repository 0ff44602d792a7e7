"""An experiment's resolved, validated configuration (frozen dataclasses) built from plain dicts.

Every check runs when the config is built, before any simulation: unknown keys, unknown policy
names and parameters, unknown models / GPUs, impossible rates. Errors are `ConfigError`s naming
the field path (`policies[1].name`, `workload.synthetic.arrival`, `request_rates[0]`) and value.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from policies.prefix_caching import check_prefix_caching_backend
from sim.cluster import ClusterSpec
from sim.errors import ConfigError
from sim.slo import SLO
from traces.sessions import SessionConfig
from traces.synthetic import LENGTH_PRESETS, LengthDist, SyntheticConfig

TOP_LEVEL_KEYS = ("name", "workload", "cluster", "policies", "request_rates", "seeds",
                  "max_requests", "duration_s", "slo")
RETIMINGS = ("none", "poisson", "scale")  # raw replay | Poisson at each rate | rescale to rate
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")


# ---- small checks -------------------------------------------------------------------------
def rebase(prefix: str, err: ConfigError) -> ConfigError:
    """`err` with its field path placed under `prefix` (unchanged if already there)."""
    if err.field == prefix or err.field.startswith((prefix + ".", prefix + "[")):
        return err
    head = f"{err.field}={err.value!r}: "
    text = str(err)
    reason = text[len(head):] if text.startswith(head) else text
    return ConfigError(f"{prefix}.{err.field}", err.value, reason)


def mapping(where: str, value: object) -> dict[str, Any]:
    """`value` as a dict (None -> {}); ConfigError unless it is a mapping."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(where, value, "must be a mapping")
    return dict(value)


def check_keys(where: str, raw: Mapping[str, Any], known: Sequence[str]) -> None:
    """ConfigError naming the first key of `raw` not in `known`."""
    for key in raw:
        if key not in known:
            path = f"{where}.{key}" if where else str(key)
            raise ConfigError(path, raw[key], f"unknown key; known: {', '.join(known)}")


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_positive_number(where: str, value: object, *, integer: bool = False) -> None:
    """ConfigError unless value is a finite number > 0 (an int when `integer`)."""
    ok = is_int(value) if integer else is_number(value)
    if not ok or not (0 < value < math.inf):  # type: ignore[operator]
        raise ConfigError(where, value, f"must be {'an int' if integer else 'a number'} > 0")


def field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


# ---- workload -----------------------------------------------------------------------------
@dataclass(frozen=True)
class SyntheticWorkload:
    """A generated workload; its rate comes from the sweep's request_rates."""

    num_requests: int | None = None  # requests (or use duration_s; whichever ends first)
    duration_s: float | None = None  # seconds of arrivals
    arrival: str = "poisson"  # poisson | gamma
    cv: float = 1.0  # inter-arrival std / mean (gamma only)
    lengths: str = "sharegpt"  # a traces.synthetic.LENGTH_PRESETS name
    prompt: LengthDist | None = None  # prompt length distribution (overrides the preset's)
    output: LengthDist | None = None  # output length distribution (overrides the preset's)

    def __post_init__(self) -> None:
        if self.lengths not in LENGTH_PRESETS:
            raise ConfigError("workload.synthetic.lengths", self.lengths,
                              f"unknown preset; known: {', '.join(LENGTH_PRESETS)}")
        self.at_rate(1.0)

    def at_rate(self, rate_per_s: float) -> SyntheticConfig:
        """The traces.synthetic config for one sweep rate."""
        prompt, output = LENGTH_PRESETS[self.lengths]
        try:
            return SyntheticConfig(rate_per_s=rate_per_s, num_requests=self.num_requests,
                                   duration_s=self.duration_s, arrival=self.arrival, cv=self.cv,
                                   prompt=self.prompt or prompt, output=self.output or output)
        except ConfigError as err:
            raise rebase("workload", err) from None


@dataclass(frozen=True)
class TraceWorkload:
    """A trace file replayed as is, or its requests re-timed at each sweep rate."""

    name: str | None = None  # shared trace: azure_conv | azure_code | mooncake
    path: str | None = None  # or a trace file
    format: str | None = None  # a traces.registry.TRACE_FORMATS name; inferred when None
    limit: int | None = None  # first N requests of the file
    retime: str = "none"  # none: replay | poisson: fresh Poisson arrivals | scale: rescale gaps
    rate_scale: float = 1.0  # with retime none: arrival gaps divided by this factor

    def __post_init__(self) -> None:
        from traces.paths import SHARED_TRACES
        from traces.registry import TRACE_FORMATS

        if (self.name is None) == (self.path is None):
            raise ConfigError("workload.trace.name", self.name, "give exactly one of name / path")
        if self.name is not None and self.name not in SHARED_TRACES:
            raise ConfigError("workload.trace.name", self.name,
                              f"unknown shared trace; known: {', '.join(SHARED_TRACES)}")
        if self.path is not None and not isinstance(self.path, str):
            raise ConfigError("workload.trace.path", self.path, "must be a string")
        if self.format is not None and self.format not in TRACE_FORMATS:
            raise ConfigError("workload.trace.format", self.format,
                              f"unknown; known: {', '.join(TRACE_FORMATS)}")
        if self.limit is not None:
            check_positive_number("workload.trace.limit", self.limit, integer=True)
        if self.retime not in RETIMINGS:
            raise ConfigError("workload.trace.retime", self.retime,
                              f"unknown; known: {', '.join(RETIMINGS)}")
        check_positive_number("workload.trace.rate_scale", self.rate_scale)
        if self.retime != "none" and self.rate_scale != 1:
            raise ConfigError("workload.trace.rate_scale", self.rate_scale,
                              "only with retime: none (other retimings take request_rates)")


@dataclass(frozen=True)
class WorkloadConfig:
    synthetic: SyntheticWorkload | None = None
    trace: TraceWorkload | None = None
    sessions: SessionConfig | None = None  # multi-turn sessions (traces/sessions.py)

    def __post_init__(self) -> None:
        if [self.synthetic, self.trace, self.sessions].count(None) != 2:
            raise ConfigError("workload", None, "give exactly one of synthetic / trace / sessions")


# ---- policies and the experiment ----------------------------------------------------------
@dataclass(frozen=True)
class PolicyEntry:
    """One policy to run: a registered name, a display label and its parameters."""

    name: str  # a policies.registry name
    label: str  # display / directory name (default: the policy name)
    params: dict[str, Any] = field(default_factory=dict)  # the policy's Config fields
    cluster: dict[str, Any] = field(default_factory=dict)  # ClusterSpec fields it overrides

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

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.match(self.name):
            raise ConfigError("name", self.name, "must be letters, digits, '_', '.' or '-'")
        self._check_policies()
        self._check_rates()
        if not self.seeds:
            raise ConfigError("seeds", list(self.seeds), "list at least one seed")
        for i, seed in enumerate(self.seeds):
            if not is_int(seed) or seed < 0:
                raise ConfigError(f"seeds[{i}]", seed, "must be an int >= 0")
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
            if not isinstance(entry.label, str) or not NAME_PATTERN.match(entry.label):
                raise ConfigError(f"policies[{i}].label", entry.label,
                                  "must be letters, digits, '_', '.' or '-'")
            if entry.label in labels:
                raise ConfigError(f"policies[{i}].label", entry.label,
                                  "duplicate label; give each entry its own label")
            labels.add(entry.label)

    def _check_rates(self) -> None:
        for i, rate in enumerate(self.request_rates):
            check_positive_number(f"request_rates[{i}]", rate)
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

    def cluster_for(self, entry: PolicyEntry, where: str = "cluster") -> ClusterSpec:
        """The cluster a policy entry runs on: the experiment's, with the entry's overrides
        (e.g. `weight_dtype: int8` for a quantized baseline)."""
        if not entry.cluster:
            return self.cluster
        return cluster_from_dict({**dataclasses.asdict(self.cluster), **entry.cluster}, where)

    def rates(self) -> list[float | None]:
        """The sweep's rates; [None] for a trace replayed as is."""
        return list(self.request_rates) if self.request_rates else [None]


# ---- from plain dicts (parsed YAML) -------------------------------------------------------
def experiment_from_dict(raw: object, default_name: str) -> ExperimentConfig:
    """Resolve and validate a parsed config; `default_name` when it has no `name`."""
    raw = mapping("config", raw)
    check_keys("", raw, TOP_LEVEL_KEYS)
    return ExperimentConfig(
        name=raw.get("name", default_name), workload=workload_from_dict(raw.get("workload")),
        cluster=cluster_from_dict(raw.get("cluster")),
        policies=tuple(policy_from_dict(i, p) for i, p in
                       enumerate(listed("policies", raw.get("policies")))),
        request_rates=tuple(listed("request_rates", raw.get("request_rates"))),
        seeds=tuple(listed("seeds", raw.get("seeds", [0]))),
        max_requests=raw.get("max_requests"), duration_s=raw.get("duration_s"),
        slo=None if raw.get("slo") is None else build(SLO, "slo", mapping("slo", raw["slo"]),
                                                      "slo."))


def listed(where: str, value: object) -> list[Any]:
    """`value` as a list (None -> [], a lone scalar -> [scalar])."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, Mapping):
        raise ConfigError(where, value, "must be a list")
    return [value]


SIMPLE_TYPES = {"int": is_int, "float": is_number, "str": lambda v: isinstance(v, str),
                "bool": lambda v: isinstance(v, bool)}


def check_types(cls: type, where: str, raw: Mapping[str, Any]) -> None:
    """ConfigError for a value whose type does not match a simple annotation (int, float...)."""
    for f in dataclasses.fields(cls):
        if f.name not in raw or not isinstance(f.type, str):
            continue
        kinds = [k.strip() for k in f.type.split("|")]
        value = raw[f.name]
        if value is None and "None" in kinds:
            continue
        checks = [SIMPLE_TYPES[k] for k in kinds if k in SIMPLE_TYPES]
        if checks and len(checks) == len([k for k in kinds if k != "None"]) and \
                not any(check(value) for check in checks):
            raise ConfigError(f"{where}.{f.name}", value, f"must be of type {f.type}")


def build(cls: type, where: str, raw: Mapping[str, Any], inner: str = "") -> Any:
    """`cls(**raw)` with unknown keys and bad types reported under `where`; `inner` is a
    prefix that `cls` puts on its own error fields (dropped)."""
    check_keys(where, raw, field_names(cls))
    check_types(cls, where, raw)
    try:
        return cls(**raw)
    except ConfigError as err:
        if inner and err.field.startswith(inner):
            err = rebase(where, ConfigError(err.field.removeprefix(inner), err.value,
                                            str(err).partition(": ")[2]))
        raise rebase(where, err) from None
    except TypeError as exc:  # e.g. comparing a string with a number
        raise ConfigError(where, dict(raw), f"bad value type: {exc}") from None


def workload_from_dict(value: object) -> WorkloadConfig:
    raw = mapping("workload", value)
    check_keys("workload", raw, ("synthetic", "trace", "sessions"))
    synthetic, trace = None, None
    if "synthetic" in raw:
        fields = mapping("workload.synthetic", raw["synthetic"])
        for name in ("prompt", "output"):
            if fields.get(name) is not None:
                where = f"workload.synthetic.{name}"
                fields[name] = build(LengthDist, where, mapping(where, fields[name]), "length.")
        synthetic = build(SyntheticWorkload, "workload.synthetic", fields)
    if "trace" in raw:
        trace = build(TraceWorkload, "workload.trace", mapping("workload.trace", raw["trace"]))
    sessions = sessions_from_dict(raw["sessions"]) if "sessions" in raw else None
    return WorkloadConfig(synthetic, trace, sessions)


def sessions_from_dict(value: object) -> SessionConfig:
    """`workload.sessions`: SessionConfig fields (lengths as LengthDist mappings) but the
    rate, which comes from request_rates."""
    where = "workload.sessions"
    fields = mapping(where, value)
    if "rate_per_s" in fields:
        raise ConfigError(f"{where}.rate_per_s", fields["rate_per_s"],
                          "set the request rate with request_rates")
    for name in ("new_input", "output"):
        if fields.get(name) is not None:
            fields[name] = build(LengthDist, f"{where}.{name}",
                                 mapping(f"{where}.{name}", fields[name]), "length.")
    return build(SessionConfig, where, fields, "sessions.")


def sessions_at_rate(sessions: SessionConfig, rate: float, where: str) -> SessionConfig:
    """The session workload at `rate` requests per second."""
    try:
        return dataclasses.replace(sessions, rate_per_s=rate)
    except ConfigError as err:
        raise ConfigError(where, rate, str(err)) from None


def cluster_from_dict(value: object, where: str = "cluster") -> ClusterSpec:
    """A ClusterSpec whose model and GPU are known (built-in, or a model config path)."""
    from sim.hardware import get_gpu
    from sim.models import resolve_model

    spec: ClusterSpec = build(ClusterSpec, where, mapping(where, value), "cluster.")
    try:
        resolve_model(spec.model)
        get_gpu(spec.gpu)
    except ConfigError as err:
        raise rebase(where, err) from None
    return spec


def policy_from_dict(index: int, value: object) -> PolicyEntry:
    where = f"policies[{index}]"
    if isinstance(value, str):
        value = {"name": value}
    raw = mapping(where, value)
    check_keys(where, raw, ("name", "label", "params", "cluster"))
    if not isinstance(raw.get("name"), str):
        raise ConfigError(f"{where}.name", raw.get("name"), "must be a policy name")
    params = mapping(f"{where}.params", raw.get("params"))
    cluster = mapping(f"{where}.cluster", raw.get("cluster"))
    return PolicyEntry(raw["name"], raw.get("label", raw["name"]), params, cluster)
