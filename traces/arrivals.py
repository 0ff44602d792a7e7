"""Seeded arrival processes: Poisson (exponential gaps) and Gamma renewal (any burstiness).

Burstiness is the coefficient of variation (CV = std / mean) of inter-arrival gaps: Poisson has
CV 1; Gamma gaps with shape k = 1 / CV^2 have any CV (CV < MIN_CV = evenly spaced arrivals).
Arrival times start at 0: n arrivals span n - 1 gaps.
"""

from __future__ import annotations

import numpy as np

from sim.errors import ConfigError, check_positive

_CHUNK = 4096  # gaps drawn per step when generating up to a duration
MIN_CV = 1e-6  # dimensionless; below it gaps are evenly spaced (gamma shape would overflow)


def interarrival_gaps(rate_per_s: float, n: int, *, cv: float = 1.0,
                      rng: np.random.Generator) -> np.ndarray:
    """`n` gaps (seconds) with mean 1 / rate_per_s and the given CV."""
    check_positive("arrival.rate_per_s", rate_per_s)
    check_positive("arrival.cv", cv, allow_zero=True)
    if not np.isfinite(rate_per_s) or not np.isfinite(cv):
        raise ConfigError("arrival.rate_per_s/cv", (rate_per_s, cv), "must be finite")
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ConfigError("arrival.n", n, "must be an int >= 0")
    mean = 1.0 / rate_per_s
    if cv < MIN_CV:
        return np.full(int(n), mean)
    if cv == 1:
        return rng.exponential(mean, int(n))
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, mean / shape, int(n))


def arrivals(rate_per_s: float, n: int, *, cv: float = 1.0,
             rng: np.random.Generator) -> np.ndarray:
    """`n` non-decreasing arrival times (seconds), the first at 0; cv=1 is Poisson."""
    gaps = interarrival_gaps(rate_per_s, max(int(n) - 1, 0), cv=cv, rng=rng)
    if n <= 0:
        return np.empty(0, dtype=np.float64)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def arrivals_until(rate_per_s: float, duration_s: float, *, cv: float = 1.0,
                   rng: np.random.Generator, max_n: int | None = None) -> np.ndarray:
    """Arrival times (seconds) in [0, duration_s), the first at 0, at most `max_n` of them."""
    check_positive("arrival.duration_s", duration_s)
    times = [np.zeros(1)]
    last = 0.0
    count = 1
    while last < duration_s and (max_n is None or count < max_n):
        chunk = last + np.cumsum(interarrival_gaps(rate_per_s, _CHUNK, cv=cv, rng=rng))
        times.append(chunk)
        last = float(chunk[-1])
        count += chunk.size
    out = np.concatenate(times)
    out = out[out < duration_s]
    return out if max_n is None else out[:max_n]
