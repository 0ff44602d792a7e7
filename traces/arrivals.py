"""Seeded arrival processes: Poisson (exponential gaps), Gamma and Weibull renewal processes.

Burstiness is the coefficient of variation (CV = std / mean) of inter-arrival gaps: Poisson has
CV 1; Gamma gaps with shape k = 1 / CV^2 have any CV (CV < MIN_CV = evenly spaced arrivals);
Weibull gaps have the shape whose CV is the one asked for (`weibull_shape`). vLLM's
`--burstiness` b is the Gamma shape: CV = 1 / sqrt(b) (`cv_from_burstiness`).
Arrival times start at 0: n arrivals span n - 1 gaps. A rate of inf puts every arrival at 0
(`vllm bench serve --request-rate inf`).
"""

from __future__ import annotations

import math

import numpy as np

from sim.util.errors import ConfigError, check_positive

_CHUNK = 4096  # gaps drawn per step when generating up to a duration
MIN_CV = 1e-6  # dimensionless; below it gaps are evenly spaced (gamma shape would overflow)
PROCESSES: tuple[str, ...] = ("gamma", "weibull")  # gap distributions (gamma at cv 1: Poisson)
WEIBULL_CV_RANGE = (0.05, 20.0)  # dimensionless; CVs whose Weibull shape is solved reliably


def cv_from_burstiness(burstiness: float) -> float:
    """Gap CV of vLLM's Gamma arrivals with shape `burstiness` (1 = Poisson): 1 / sqrt(b)."""
    check_positive("arrival.burstiness", burstiness)
    if not math.isfinite(burstiness):
        raise ConfigError("arrival.burstiness", burstiness, "must be finite")
    return 1.0 / math.sqrt(burstiness)


def weibull_cv(shape: float) -> float:
    """CV of Weibull gaps with shape k: sqrt(G(1 + 2/k) / G(1 + 1/k)^2 - 1)."""
    log_ratio = math.lgamma(1 + 2 / shape) - 2 * math.lgamma(1 + 1 / shape)
    return math.sqrt(max(math.expm1(log_ratio), 0.0))


def weibull_shape(cv: float) -> float:
    """The Weibull shape k whose gap CV is `cv` (bisection on log k; CV falls as k grows)."""
    low_cv, high_cv = WEIBULL_CV_RANGE
    if not low_cv <= cv <= high_cv:
        raise ConfigError("arrival.cv", cv, f"weibull arrivals take cv in [{low_cv:g}, "
                                            f"{high_cv:g}]")
    lo, hi = math.log(0.05), math.log(50.0)  # k in [0.05, 50] spans CV ~ [0.03, 4e5]
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if weibull_cv(math.exp(mid)) > cv:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


def interarrival_gaps(rate_per_s: float, n: int, *, cv: float = 1.0,
                      rng: np.random.Generator, process: str = "gamma") -> np.ndarray:
    """`n` gaps (seconds) with mean 1 / rate_per_s and the given CV, Gamma-distributed
    (exponential at cv 1) or Weibull-distributed (`process`)."""
    if process not in PROCESSES:
        raise ConfigError("arrival.process", process, f"unknown; known: {', '.join(PROCESSES)}")
    check_positive("arrival.rate_per_s", rate_per_s)
    check_positive("arrival.cv", cv, allow_zero=True)
    if not np.isfinite(rate_per_s) or not np.isfinite(cv):
        raise ConfigError("arrival.rate_per_s/cv", (rate_per_s, cv), "must be finite")
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ConfigError("arrival.n", n, "must be an int >= 0")
    mean = 1.0 / rate_per_s
    if cv < MIN_CV:
        return np.full(int(n), mean)
    if process == "weibull":
        shape = weibull_shape(cv)
        return mean / math.exp(math.lgamma(1 + 1 / shape)) * rng.weibull(shape, int(n))
    if cv == 1:
        return rng.exponential(mean, int(n))
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, mean / shape, int(n))


def arrivals(rate_per_s: float, n: int, *, cv: float = 1.0,
             rng: np.random.Generator, process: str = "gamma") -> np.ndarray:
    """`n` non-decreasing arrival times (seconds), the first at 0; cv=1 is Poisson; a rate of
    inf puts all `n` at 0."""
    if rate_per_s == math.inf and not isinstance(n, bool) and int(n) == n and n >= 0:
        return np.zeros(int(n), dtype=np.float64)
    gaps = interarrival_gaps(rate_per_s, max(int(n) - 1, 0), cv=cv, rng=rng, process=process)
    if n <= 0:
        return np.empty(0, dtype=np.float64)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def arrivals_until(rate_per_s: float, duration_s: float, *, cv: float = 1.0,
                   rng: np.random.Generator, max_n: int | None = None,
                   process: str = "gamma") -> np.ndarray:
    """Arrival times (seconds) in [0, duration_s), the first at 0, at most `max_n` of them."""
    check_positive("arrival.duration_s", duration_s)
    times = [np.zeros(1)]
    last = 0.0
    count = 1
    while last < duration_s and (max_n is None or count < max_n):
        gaps = interarrival_gaps(rate_per_s, _CHUNK, cv=cv, rng=rng, process=process)
        chunk = last + np.cumsum(gaps)
        times.append(chunk)
        last = float(chunk[-1])
        count += chunk.size
    out = np.concatenate(times)
    out = out[out < duration_s]
    return out if max_n is None else out[:max_n]
