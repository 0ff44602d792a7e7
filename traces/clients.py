"""A multi-client workload: several clients, each with its own arrival process, rate share and
length distributions, merged into one trace (a production mix as serving benchmarks describe).

Each client is a renewal process at `share / sum(shares)` of the total rate: Poisson, Gamma
(vLLM's burstiness b = Gamma shape, gap CV 1 / sqrt(b); or give the CV) or Weibull (give the
CV). Every client draws from its own seeded stream (`default_rng([seed, index])`), so adding a
client leaves the others' requests unchanged. Requests carry their client's name in `app`, and
its `class` and `priority` when any client sets them (docs/classes.md; a client without one
leaves the cell empty: class `default`, priority 0). A client's lengths may be resampled
jointly from a shared trace (`lengths_trace: azure_code`) instead of drawn from distributions.
A total rate of inf puts every request at 0, each drawn from a client with probability = share.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError
from traces.arrivals import PROCESSES, cv_from_burstiness, interarrival_gaps, weibull_shape
from traces.class_columns import CLASS_NAME, PRIORITY_RANGE
from traces.lengths import LENGTH_PRESETS, LengthDist, resample_lengths
from traces.paths import SHARED_TRACES, shared_trace_path
from traces.registry import load_trace
from traces.schema import validate_trace

CLIENT_ARRIVALS: tuple[str, ...] = ("poisson", "gamma", "weibull")
_CHUNK = 4096  # gaps drawn per step


@dataclass(frozen=True)
class ClientSpec:
    """One client of a multi-client workload."""

    name: str  # written to each of its requests' `app`
    share: float = 1.0  # weight of the total request rate (normalized over clients)
    arrival: str = "poisson"  # poisson | gamma | weibull
    burstiness: float | None = None  # gamma only: Gamma shape (vLLM); gap CV = 1 / sqrt(b)
    cv: float | None = None  # gamma / weibull: inter-arrival std / mean, dimensionless
    lengths: str = "sharegpt"  # a LENGTH_PRESETS name
    prompt: LengthDist | None = None  # prompt length distribution, tokens (overrides the preset)
    output: LengthDist | None = None  # output length distribution, tokens (overrides the preset)
    request_class: str | None = None  # its requests' class (YAML key `class`), docs/classes.md
    priority: int | None = None  # its requests' priority: lower is more important (vLLM's)
    lengths_trace: str | None = None  # a shared trace whose (prompt, output) pairs it resamples

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError("name", self.name, "must be a non-empty string")
        if not (0 < self.share < math.inf):
            raise ConfigError("share", self.share, "must be finite and > 0")
        if self.arrival not in CLIENT_ARRIVALS:
            raise ConfigError("arrival", self.arrival,
                              f"unknown; known: {', '.join(CLIENT_ARRIVALS)}")
        if self.lengths not in LENGTH_PRESETS:
            raise ConfigError("lengths", self.lengths,
                              f"unknown preset; known: {', '.join(LENGTH_PRESETS)}")
        for name in ("prompt", "output"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, LengthDist):
                raise ConfigError(name, value, "must be a LengthDist")
        self._check_class()
        self.gap_cv()

    def _check_class(self) -> None:
        """The class, priority and lengths_trace fields."""
        if self.request_class is not None and not (isinstance(self.request_class, str)
                                                   and CLASS_NAME.match(self.request_class)):
            raise ConfigError("class", self.request_class, "must be 1-64 letters, digits, "
                              "'_', '-', '.' or ':'")
        p = self.priority
        if p is not None and (isinstance(p, bool) or not isinstance(p, int)
                              or not PRIORITY_RANGE[0] <= p <= PRIORITY_RANGE[1]):
            raise ConfigError("priority", p, "must be an int (lower is more important)")
        if self.lengths_trace is None:
            return
        if self.lengths_trace not in SHARED_TRACES:
            raise ConfigError("lengths_trace", self.lengths_trace,
                              f"unknown shared trace; known: {', '.join(SHARED_TRACES)}")
        if self.prompt is not None or self.output is not None:
            raise ConfigError("lengths_trace", self.lengths_trace,
                              "resamples (prompt, output) pairs: give no prompt / output")

    def gap_cv(self) -> float:
        """The inter-arrival CV this client's settings give."""
        if self.burstiness is not None and self.cv is not None:
            raise ConfigError("burstiness", self.burstiness, "give burstiness or cv, not both")
        if self.arrival == "poisson":
            if self.burstiness is not None or self.cv is not None:
                field = "burstiness" if self.burstiness is not None else "cv"
                raise ConfigError(field, getattr(self, field),
                                  "poisson arrivals take neither; use arrival: gamma")
            return 1.0
        if self.arrival == "weibull" and self.burstiness is not None:
            raise ConfigError("burstiness", self.burstiness, "a Gamma shape; weibull takes cv")
        if self.burstiness is not None:
            return _rebased("burstiness", self.burstiness, cv_from_burstiness)
        cv = 1.0 if self.cv is None else self.cv
        if not (0 <= cv < math.inf):
            raise ConfigError("cv", cv, "must be finite and >= 0")
        if self.arrival == "weibull":
            _rebased("cv", cv, weibull_shape)
        return cv

    def process(self) -> str:
        """The traces.arrivals gap distribution."""
        return "weibull" if self.arrival == "weibull" else PROCESSES[0]

    def lengths_dists(self) -> tuple[LengthDist, LengthDist]:
        """(prompt, output) length distributions."""
        prompt, output = LENGTH_PRESETS[self.lengths]
        return self.prompt or prompt, self.output or output


def _rebased(field: str, value: float, check: Callable[[float], float]) -> float:
    """`check(value)`, its ConfigError renamed to the client's `field`."""
    try:
        return float(check(value))
    except ConfigError as err:
        raise ConfigError(field, value, err.reason) from None


@dataclass(frozen=True)
class MultiClientConfig:
    """Several clients sharing a total rate; stop at num_requests or duration_s (first)."""

    clients: tuple[ClientSpec, ...]  # at least one, distinct names
    rate_per_s: float = 1.0  # total requests per second; inf: every request at 0
    num_requests: int | None = None  # requests in all
    duration_s: float | None = None  # seconds; arrivals lie in (0, duration_s)

    def __post_init__(self) -> None:
        if not self.clients:
            raise ConfigError("clients", [], "list at least one client")
        names = [c.name for c in self.clients]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ConfigError(f"clients[{i}].name", name, "duplicate client name")
        if not (0 < self.rate_per_s <= math.inf):
            raise ConfigError("rate_per_s", self.rate_per_s, "must be > 0")
        n, d = self.num_requests, self.duration_s
        if n is None and d is None:
            raise ConfigError("num_requests", None, "set num_requests or duration_s")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ConfigError("num_requests", n, "must be an int >= 1")
        if d is not None and not (0 < d < math.inf):
            raise ConfigError("duration_s", d, "must be finite and > 0")
        if self.rate_per_s == math.inf and (n is None or d is not None):
            raise ConfigError("rate_per_s", self.rate_per_s, "an infinite rate (every request "
                                                             "at 0) takes num_requests only")

    def shares(self) -> np.ndarray:
        """Each client's fraction of the total rate."""
        weights = np.array([c.share for c in self.clients], dtype=np.float64)
        return weights / weights.sum()


def multi_client_trace(cfg: MultiClientConfig, seed: int) -> pd.DataFrame:
    """A validated trace of every client's requests, merged by arrival (ties: client order)."""
    if cfg.rate_per_s == math.inf:
        return _all_at_once(cfg, seed)
    parts = []
    for i, (client, share) in enumerate(zip(cfg.clients, cfg.shares())):
        rng = np.random.default_rng([seed, i])
        times = _client_times(client, cfg.rate_per_s * share, cfg, rng)
        parts.append(_client_frame(client, times, rng, cfg))
    df = pd.concat(parts, ignore_index=True)
    df = df.iloc[np.argsort(df["arrival_s"].to_numpy(), kind="stable")]
    if cfg.duration_s is not None:
        df = df[df["arrival_s"] < cfg.duration_s]
    if cfg.num_requests is not None:
        df = df.head(cfg.num_requests)
    return validate_trace(df.reset_index(drop=True), f"clients(seed={seed})")


def _client_times(client: ClientSpec, rate: float, cfg: MultiClientConfig,
                  rng: np.random.Generator) -> np.ndarray:
    """Arrival times (seconds) of one client, the first one gap after 0, until enough to cover
    num_requests of all clients or duration_s."""
    chunks: list[np.ndarray] = []
    last, count = 0.0, 0
    cv, process = client.gap_cv(), client.process()
    while not ((cfg.duration_s is not None and last >= cfg.duration_s)
               or (cfg.num_requests is not None and count >= cfg.num_requests)):
        size = _CHUNK if cfg.num_requests is None else min(_CHUNK, cfg.num_requests - count)
        chunk = last + np.cumsum(interarrival_gaps(rate, size, cv=cv, rng=rng, process=process))
        chunks.append(chunk)
        last, count = float(chunk[-1]), count + chunk.size
    return np.concatenate(chunks) if chunks else np.empty(0)


def _client_frame(client: ClientSpec, times: np.ndarray, rng: np.random.Generator,
                  cfg: MultiClientConfig) -> pd.DataFrame:
    """One client's requests: times, lengths drawn from its distributions (or resampled from
    its trace), app = its name, and its class and priority when the workload has them."""
    if client.lengths_trace is not None:
        pairs = resample_lengths(load_trace(shared_trace_path(client.lengths_trace)),
                                 times.size, rng)
        prompts, outputs = pairs["prompt_tokens"].to_numpy(), pairs["output_tokens"].to_numpy()
    else:
        prompt, output = client.lengths_dists()
        prompts, outputs = prompt.sample(times.size, rng), output.sample(times.size, rng)
    frame = pd.DataFrame({"arrival_s": times, "prompt_tokens": prompts,
                          "output_tokens": outputs, "app": [client.name] * times.size})
    if any(c.request_class is not None for c in cfg.clients):
        frame["class"] = [client.request_class] * times.size
    if any(c.priority is not None for c in cfg.clients):
        frame["priority"] = np.full(times.size, client.priority or 0, dtype=np.int64)
    return frame


def _all_at_once(cfg: MultiClientConfig, seed: int) -> pd.DataFrame:
    """num_requests requests at 0, each from a client drawn with probability = its share."""
    rng = np.random.default_rng([seed, len(cfg.clients)])
    n = int(cfg.num_requests or 0)
    which = rng.choice(len(cfg.clients), size=n, p=cfg.shares())
    parts = []
    for i, client in enumerate(cfg.clients):
        count = int(np.count_nonzero(which == i))
        part = _client_frame(client, np.zeros(count), np.random.default_rng([seed, i]), cfg)
        parts.append(part.assign(_order=np.flatnonzero(which == i)))
    df = pd.concat(parts, ignore_index=True).sort_values("_order", kind="stable")
    return validate_trace(df.drop(columns="_order").reset_index(drop=True),
                          f"clients(seed={seed})")
