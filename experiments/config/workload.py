"""The workload section of an experiment config: synthetic, vLLM's random dataset, trace,
multi-turn sessions, a multi-client mix, or RTP-LLM's plugin-call / P-tuning patterns, and the
closed-loop `max_concurrency` (docs/workloads.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from experiments.config.checks import check_positive_number, mapping
from experiments.config.workload_rtp import rtp_from_dict
from sim.util.errors import ConfigError, check_keys
from sim.util.schema import build, rebase
from traces.clients import ClientSpec, MultiClientConfig
from traces.mapping import TimestampFormat, TraceMapping
from traces.plugin_calls import PluginCallConfig
from traces.ptuning import PTuningConfig
from traces.random_dataset import RandomDataset
from traces.sessions import SessionConfig
from traces.synthetic import LENGTH_PRESETS, LengthDist, SyntheticConfig

KINDS = ("synthetic", "trace", "sessions", "clients", "random", "plugin_calls",
         "ptuning")  # workload keys: give one
RETIMINGS = ("none", "poisson", "gamma", "scale", "vllm")  # replay | Poisson | Gamma | rescale
# to rate | vllm bench serve's own schedule (Gamma, last send at n / rate; traces/bench_arrivals)
CLIENT_KEYS = ("num_requests", "duration_s")  # workload keys beside `clients`
INF_RATE = float("inf")  # req/s: every request at 0 (vllm bench serve --request-rate inf)


def parse_rate(value: object) -> object:
    """A request_rates entry with the YAML string `inf` (also `.inf`) read as an infinite rate;
    anything else unchanged (checked by the config)."""
    return INF_RATE if isinstance(value, str) and value.strip().lower() == "inf" else value


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
    retime: str = "none"  # none: replay | poisson / gamma: fresh arrivals | scale: rescale gaps
    rate_scale: float = 1.0  # with retime none: arrival gaps divided by this factor
    burstiness: float = 1.0  # retime gamma / vllm: Gamma shape as vLLM's --burstiness (gap CV
    # 1/sqrt(b))
    columns: dict[str, str] | None = None  # schema column -> file column (traces/mapping.py)
    timestamp: TimestampFormat | None = None  # how the arrival column is written (default: s)
    session_blocks: int | None = None  # session_id = the first N prompt block ids (a trace with
    # block_ids and no session ids, e.g. mooncake: 2; traces/session_keys.py)
    skip_bad_rows: bool = False  # drop malformed rows (counted, reported) instead of stopping

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
        if self.session_blocks is not None:
            check_positive_number("workload.trace.session_blocks", self.session_blocks,
                                  integer=True)
        if self.retime not in RETIMINGS:
            raise ConfigError("workload.trace.retime", self.retime,
                              f"unknown; known: {', '.join(RETIMINGS)}")
        check_positive_number("workload.trace.rate_scale", self.rate_scale)
        if self.retime != "none" and self.rate_scale != 1:
            raise ConfigError("workload.trace.rate_scale", self.rate_scale,
                              "only with retime: none (other retimings take request_rates)")
        check_positive_number("workload.trace.burstiness", self.burstiness)
        if self.retime not in ("gamma", "vllm") and self.burstiness != 1:
            raise ConfigError("workload.trace.burstiness", self.burstiness,
                              "only with retime: gamma or vllm")
        if not isinstance(self.skip_bad_rows, bool):
            raise ConfigError("workload.trace.skip_bad_rows", self.skip_bad_rows,
                              "must be true or false")
        self.mapping()

    def mapping(self) -> TraceMapping | None:
        """The column mapping and timestamp format; None when the file is in the schema."""
        if self.columns is None and self.timestamp is None:
            return None
        if self.name is not None:
            raise ConfigError("workload.trace.columns", self.columns,
                              "a shared trace has its own loader; map columns of a path")
        return TraceMapping.from_columns(self.columns, self.timestamp)


@dataclass(frozen=True)
class WorkloadConfig:
    synthetic: SyntheticWorkload | None = None
    trace: TraceWorkload | None = None
    sessions: SessionConfig | None = None  # multi-turn sessions (traces/sessions.py)
    clients: MultiClientConfig | None = None  # a multi-client mix (traces/clients.py)
    max_concurrency: int | None = None  # requests in the system at once (closed loop); None: open
    random: RandomDataset | None = None  # vLLM's random dataset (traces/random_dataset.py)
    plugin_calls: PluginCallConfig | None = None  # RTP-LLM's plugin calls (traces/plugin_calls)
    ptuning: PTuningConfig | None = None  # RTP-LLM's P-tuning prefixes (traces/ptuning.py)

    def __post_init__(self) -> None:
        kinds = [self.synthetic, self.trace, self.sessions, self.clients, self.random,
                 self.plugin_calls, self.ptuning]
        if kinds.count(None) != len(kinds) - 1:
            raise ConfigError("workload", None, f"give exactly one of {' / '.join(KINDS)}")
        if self.max_concurrency is not None:
            check_positive_number("workload.max_concurrency", self.max_concurrency,
                                  integer=True)


# ---- from plain dicts (parsed YAML) -------------------------------------------------------
def workload_from_dict(value: object) -> WorkloadConfig:
    raw = mapping("workload", value)
    check_keys("workload", raw, (*KINDS, *CLIENT_KEYS, "max_concurrency"))
    synthetic, trace = None, None
    if "synthetic" in raw:
        fields = mapping("workload.synthetic", raw["synthetic"])
        for name in ("prompt", "output"):
            if fields.get(name) is not None:
                where = f"workload.synthetic.{name}"
                fields[name] = build(LengthDist, where, mapping(where, fields[name]), "length.")
        synthetic = build(SyntheticWorkload, "workload.synthetic", fields)
    if "trace" in raw:
        trace = trace_from_dict(raw["trace"])
    sessions = sessions_from_dict(raw["sessions"]) if "sessions" in raw else None
    random = None
    if "random" in raw:
        random = build(RandomDataset, "workload.random", mapping("workload.random", raw["random"]),
                       "random.")
    clients = clients_from_dict(raw) if "clients" in raw else None
    for key in CLIENT_KEYS:
        if key in raw and clients is None:
            raise ConfigError(f"workload.{key}", raw[key], "only beside workload.clients")
    concurrency = raw.get("max_concurrency")
    if concurrency is not None:
        check_positive_number("workload.max_concurrency", concurrency, integer=True)
    rtp = {kind: rtp_from_dict(kind, raw[kind]) for kind in ("plugin_calls", "ptuning")
           if kind in raw}
    return WorkloadConfig(synthetic, trace, sessions, clients, concurrency, random, **rtp)


def trace_from_dict(value: object) -> TraceWorkload:
    """`workload.trace`, with `columns` a {schema column: file column} mapping and `timestamp`
    a {unit, format} mapping."""
    where = "workload.trace"
    fields = mapping(where, value)
    if fields.get("columns") is not None:
        fields["columns"] = mapping(f"{where}.columns", fields["columns"])
    if fields.get("timestamp") is not None:
        fields["timestamp"] = build(TimestampFormat, f"{where}.timestamp",
                                    mapping(f"{where}.timestamp", fields["timestamp"]),
                                    "workload.trace.timestamp.")
    return build(TraceWorkload, where, fields)


def clients_from_dict(raw: dict) -> MultiClientConfig:
    """`workload.clients` (a list of ClientSpec mappings) with `workload.num_requests` /
    `duration_s`; the total rate comes from request_rates."""
    items = raw["clients"]
    if not isinstance(items, list):
        raise ConfigError("workload.clients", items, "must be a list of clients")
    clients = []
    for i, item in enumerate(items):
        where = f"workload.clients[{i}]"
        fields = mapping(where, item)
        for name in ("prompt", "output"):
            if fields.get(name) is not None:
                fields[name] = build(LengthDist, f"{where}.{name}",
                                     mapping(f"{where}.{name}", fields[name]), "length.")
        if "class" in fields:  # YAML `class`: the field request_class (a Python keyword)
            if "request_class" in fields:
                raise ConfigError(f"{where}.class", fields["class"], "give class or "
                                                                     "request_class, not both")
            fields["request_class"] = fields.pop("class")
        clients.append(build(ClientSpec, where, fields))
    counts = _checked({key: raw[key] for key in CLIENT_KEYS if key in raw})
    try:
        return MultiClientConfig(tuple(clients), 1.0, **counts)
    except ConfigError as err:
        raise rebase("workload", err) from None


def _checked(counts: dict) -> dict:
    """num_requests / duration_s type-checked under `workload.`."""
    for key, value in counts.items():
        if value is not None:
            check_positive_number(f"workload.{key}", value, integer=key == "num_requests")
    return counts


def clients_at_rate(clients: MultiClientConfig, rate: float, where: str) -> MultiClientConfig:
    """The multi-client workload at a total of `rate` requests per second."""
    try:
        return dataclasses.replace(clients, rate_per_s=rate)
    except ConfigError as err:
        raise rebase(where, err) from None


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
