"""Seeded request-length distributions, named presets, and joint resampling from real traces.

Presets (prompt, output) follow the vLLM paper (SOSP'23, Fig. 11) dataset statistics:
ShareGPT has mean input 161 and output 338 tokens with long tails; Alpaca has mean input ~20
and output ~58 tokens. Lognormals stand in for the empirical shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError, TraceError

LENGTH_KINDS: tuple[str, ...] = ("constant", "uniform", "lognormal", "zipf")


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution; samples are ints in [min_tokens, max_tokens].

    constant: round(mean). uniform: integers in [min_tokens, max_tokens]. lognormal: given mean
    and CV before rounding and clipping. zipf: min_tokens - 1 + K with P(K = k) ~ k^-zipf_a.
    """

    kind: str = "constant"  # one of LENGTH_KINDS
    mean: float = 128.0  # tokens (constant value; lognormal mean before clipping)
    cv: float = 1.0  # lognormal std / mean, dimensionless
    min_tokens: int = 1  # tokens, lower clip (uniform lower bound)
    max_tokens: int = 1_000_000  # tokens, upper clip (uniform upper bound)
    zipf_a: float = 2.0  # zipf exponent (> 1), dimensionless

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            raise ConfigError("length.kind", self.kind,
                              f"unknown; known: {', '.join(LENGTH_KINDS)}")
        if not _is_int(self.min_tokens) or self.min_tokens < 1:
            raise ConfigError("length.min_tokens", self.min_tokens, "must be an int >= 1")
        if not _is_int(self.max_tokens) or self.max_tokens < self.min_tokens:
            raise ConfigError("length.max_tokens", self.max_tokens, "must be an int >= min_tokens")
        if self.kind in ("constant", "lognormal") and not (
                self.min_tokens <= self.mean <= self.max_tokens):
            raise ConfigError("length.mean", self.mean, "must lie in [min_tokens, max_tokens]")
        if self.kind == "lognormal" and not (0 < self.cv < math.inf):
            raise ConfigError("length.cv", self.cv, "must be finite and > 0")
        if self.kind == "zipf" and not (1 < self.zipf_a < math.inf):
            raise ConfigError("length.zipf_a", self.zipf_a, "must be finite and > 1")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """`n` lengths (int64 tokens)."""
        if isinstance(n, bool) or not _is_int(n) or n < 0:
            raise ConfigError("length.n", n, "must be an int >= 0")
        n = int(n)
        if self.kind == "constant":
            values = np.full(n, round(self.mean), dtype=np.float64)
        elif self.kind == "uniform":
            values = rng.integers(self.min_tokens, self.max_tokens, n, endpoint=True)
        elif self.kind == "lognormal":
            sigma2 = math.log1p(self.cv * self.cv)
            mu = math.log(self.mean) - sigma2 / 2
            values = np.round(rng.lognormal(mu, math.sqrt(sigma2), n))
        else:
            values = self.min_tokens - 1 + rng.zipf(self.zipf_a, n).astype(np.float64)
        return np.clip(values, self.min_tokens, self.max_tokens).astype(np.int64)


def _is_int(value: object) -> bool:
    """True for ints and integral numpy integers (not bools)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


LENGTH_PRESETS: dict[str, tuple[LengthDist, LengthDist]] = {  # name -> (prompt, output)
    "sharegpt": (LengthDist("lognormal", mean=161.0, cv=1.4, max_tokens=4096),
                 LengthDist("lognormal", mean=338.0, cv=1.1, max_tokens=4096)),
    "alpaca": (LengthDist("lognormal", mean=20.0, cv=0.6, max_tokens=1024),
               LengthDist("lognormal", mean=58.0, cv=0.9, max_tokens=1024)),
}


def resample_lengths(trace_df: pd.DataFrame, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """`n` (prompt_tokens, output_tokens) pairs drawn jointly, with replacement, from a trace."""
    for col in ("prompt_tokens", "output_tokens"):
        if col not in trace_df.columns:
            raise TraceError("resample_lengths", f"missing column {col!r}", field=col)
    if len(trace_df) == 0:
        raise TraceError("resample_lengths", "trace has no requests")
    if isinstance(n, bool) or not _is_int(n) or n < 0:
        raise ConfigError("resample.n", n, "must be an int >= 0")
    idx = rng.integers(0, len(trace_df), int(n))
    return pd.DataFrame({
        "prompt_tokens": trace_df["prompt_tokens"].to_numpy(dtype=np.int64)[idx],
        "output_tokens": trace_df["output_tokens"].to_numpy(dtype=np.int64)[idx],
    })
