"""The workload section of an experiment config: synthetic, trace or multi-turn sessions."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from experiments.config_checks import build, check_keys, check_positive_number, mapping, rebase
from sim.errors import ConfigError
from traces.sessions import SessionConfig
from traces.synthetic import LENGTH_PRESETS, LengthDist, SyntheticConfig

RETIMINGS = ("none", "poisson", "scale")  # raw replay | Poisson at each rate | rescale to rate


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


# ---- from plain dicts (parsed YAML) -------------------------------------------------------
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
