"""Seeded synthetic traces: an arrival process plus prompt / output length distributions.

Also re-exports the building blocks (`arrivals`, `LengthDist`, `LENGTH_PRESETS`,
`resample_lengths`, `scale_rate`, `poisson_from_lengths`) so one import serves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError
from traces.arrivals import arrivals, arrivals_until, interarrival_gaps, weibull_shape
from traces.lengths import LENGTH_KINDS, LENGTH_PRESETS, LengthDist, resample_lengths
from traces.schema import validate_trace
from traces.transform import poisson_from_lengths, scale_rate

__all__ = ["ARRIVAL_KINDS", "LENGTH_KINDS", "LENGTH_PRESETS", "LengthDist", "SyntheticConfig",
           "arrivals", "arrivals_until", "interarrival_gaps", "poisson_from_lengths",
           "resample_lengths", "scale_rate", "synthetic_trace"]

ARRIVAL_KINDS: tuple[str, ...] = ("poisson", "gamma", "weibull")


@dataclass(frozen=True)
class SyntheticConfig:
    """A synthetic workload. Set num_requests, duration_s, or both (stop at whichever first)."""

    rate_per_s: float = 1.0  # requests per second (mean); inf: every request at 0 (num_requests)
    num_requests: int | None = None  # requests
    duration_s: float | None = None  # seconds; arrivals lie in [0, duration_s)
    arrival: str = "poisson"  # "poisson" (cv must be 1), "gamma" or "weibull"
    cv: float = 1.0  # inter-arrival std / mean, dimensionless (gamma shape = 1 / cv^2)
    prompt: LengthDist = LENGTH_PRESETS["sharegpt"][0]  # prompt length distribution, tokens
    output: LengthDist = LENGTH_PRESETS["sharegpt"][1]  # output length distribution, tokens

    def __post_init__(self) -> None:
        if not (0 < self.rate_per_s <= math.inf):
            raise ConfigError("synthetic.rate_per_s", self.rate_per_s, "must be > 0")
        if self.rate_per_s == math.inf and (self.num_requests is None
                                            or self.duration_s is not None):
            raise ConfigError("synthetic.rate_per_s", self.rate_per_s,
                              "an infinite rate (every request at 0) takes num_requests and "
                              "no duration_s")
        if self.num_requests is None and self.duration_s is None:
            raise ConfigError("synthetic.num_requests", None, "set num_requests or duration_s")
        n = self.num_requests
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ConfigError("synthetic.num_requests", n, "must be an int >= 1")
        d = self.duration_s
        if d is not None and not (0 < d < math.inf):
            raise ConfigError("synthetic.duration_s", d, "must be finite and > 0")
        if self.arrival not in ARRIVAL_KINDS:
            raise ConfigError("synthetic.arrival", self.arrival,
                              f"unknown; known: {', '.join(ARRIVAL_KINDS)}")
        if not (0 <= self.cv < math.inf):
            raise ConfigError("synthetic.cv", self.cv, "must be finite and >= 0")
        if self.arrival == "weibull":
            try:
                weibull_shape(self.cv)
            except ConfigError as err:
                raise ConfigError("synthetic.cv", self.cv, err.reason) from None
        if self.arrival == "poisson" and self.cv != 1:
            raise ConfigError("synthetic.cv", self.cv, "poisson arrivals have cv = 1; "
                                                       "use arrival='gamma' for other cv")
        for name in ("prompt", "output"):
            if not isinstance(getattr(self, name), LengthDist):
                raise ConfigError(f"synthetic.{name}", getattr(self, name), "must be a LengthDist")

    @classmethod
    def from_preset(cls, preset: str, **kwargs: object) -> SyntheticConfig:
        """A config whose prompt / output lengths come from LENGTH_PRESETS[preset]."""
        if preset not in LENGTH_PRESETS:
            raise ConfigError("synthetic.preset", preset,
                              f"unknown; known: {', '.join(LENGTH_PRESETS)}")
        prompt, output = LENGTH_PRESETS[preset]
        return cls(prompt=prompt, output=output, **kwargs)  # type: ignore[arg-type]


def synthetic_trace(cfg: SyntheticConfig, seed: int) -> pd.DataFrame:
    """A validated trace drawn from `cfg`; the same seed gives the same frame."""
    rng = np.random.default_rng(seed)
    process = "weibull" if cfg.arrival == "weibull" else "gamma"
    if cfg.duration_s is None:
        times = arrivals(cfg.rate_per_s, int(cfg.num_requests or 0), cv=cfg.cv, rng=rng,
                         process=process)
    else:
        times = arrivals_until(cfg.rate_per_s, cfg.duration_s, cv=cfg.cv, rng=rng,
                               max_n=cfg.num_requests, process=process)
    prompt = cfg.prompt.sample(times.size, rng)
    output = cfg.output.sample(times.size, rng)
    df = pd.DataFrame({"arrival_s": times, "prompt_tokens": prompt, "output_tokens": output},
                      copy=False)
    del times, prompt, output  # the frame holds the only copy while it is validated
    return validate_trace(df, f"synthetic(seed={seed})")
