"""How a batch's tokens spread over experts: closed forms used by the cost models (no sampling).

Each token picks `top_k` of E experts without replacement. Expert e's popularity weight is
w_e (uniform, or Zipf: w_e proportional to (e + 1)^-s); p_e is the probability a token's top-k
includes e. Tokens route independently, so for n tokens

    expected distinct experts   D(n) = sum_e 1 - (1 - p_e)^n        (exact given p_e)

which for uniform routing (p_e = k / E) is E (1 - (1 - k/E)^n). For skewed weights p_e of
successive sampling without replacement has no closed form; it is approximated as
p_e = 1 - exp(-w_e t) with t such that sum_e p_e = k (Rosen's order-sampling approximation: the
top-k of independent exponential keys of rates w_e IS successive sampling, and this treats the
k-th smallest key as a fixed threshold t). Against a seeded Monte-Carlo count D(n) is within a
few percent (tests/test_moe_routing.py).

Expert parallelism over `ep` ranks: expert e sits on rank e mod ep (popularity ranks dealt
round-robin: a balanced placement). Rank r's load, the token-expert rows it computes, is a sum
over tokens of independent per-token counts with mean k_r = sum_{e in r} p_e and variance
v_r = sum_{e in r} p_e (1 - p_e) (E - g) / (E - 1) (g = E / ep experts per rank; the factor is
the without-replacement correction, exact for uniform routing). The busiest rank's expected load
is approximated as

    R(n) = E[max_r X_r],  X_r independent normals N(n k_r, n v_r / (1 - 1/ep))

(the ranks' loads sum to n k, a negative correlation the 1 / (1 - 1/ep) undoes exactly for
identical ranks), which for uniform routing is n k / ep + sqrt(n v / (1 - 1/ep)) M(ep) with M(ep)
the expected maximum of ep standard normals, and otherwise is integrated numerically (a
1,025-point grid, cached per batch size by the caller); capped at n min(k, g); R(n) = n k at
ep = 1.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr

from sim.util.errors import ConfigError, check_positive


def popularity(num_experts: int, zipf_exponent: float = 0.0) -> np.ndarray:
    """Expert popularity weights summing to 1 (uniform at exponent 0)."""
    if isinstance(zipf_exponent, bool) or not math.isfinite(zipf_exponent):
        raise ConfigError("expert_zipf", zipf_exponent, "must be a finite number")
    check_positive("expert_zipf", zipf_exponent, allow_zero=True)
    w = np.arange(1, num_experts + 1, dtype=np.float64) ** -float(zipf_exponent)
    return w / w.sum()


def inclusion_probabilities(weights: np.ndarray, top_k: int) -> np.ndarray:
    """p_e, the chance a token's top-k includes expert e (k / E exactly when uniform)."""
    w = np.asarray(weights, dtype=np.float64)
    if np.all(w == w[0]):
        return np.full(len(w), top_k / len(w))
    lo, hi = 0.0, 1.0
    while (1.0 - np.exp(-w * hi)).sum() < top_k:
        hi *= 2.0
    for _ in range(200):  # bisection on t: sum_e 1 - exp(-w_e t) = k
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if (1.0 - np.exp(-w * mid)).sum() < top_k else (lo, mid)
    return 1.0 - np.exp(-w * hi)


def expected_distinct(probs: np.ndarray, num_tokens: float) -> float:
    """Expected number of experts (of `probs`' set) that num_tokens tokens touch at least once."""
    if num_tokens <= 0:
        return 0.0
    return float(np.sum(1.0 - (1.0 - probs) ** num_tokens))


def expected_distinct_uniform(num_experts: int, top_k: int, num_tokens: float) -> float:
    """E (1 - (1 - k/E)^n): expected distinct experts of n tokens under uniform top-k routing."""
    if num_tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


def expected_max_normal(count: int) -> float:
    """E[max of `count` independent standard normals] (0 for one), by quadrature."""
    if count <= 1:
        return 0.0
    x = np.linspace(-8.0, 8.0, 4001)
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    y = x * count * pdf * cdf ** (count - 1)
    return float(np.sum(y[1:] + y[:-1]) * 0.5 * (x[1] - x[0]))  # trapezoid rule


def rank_of_expert(num_experts: int, ranks: int) -> np.ndarray:
    """The EP rank holding each expert (popularity rank e on rank e mod ranks)."""
    return np.arange(num_experts) % ranks


def rank_load_moments(probs: np.ndarray, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, variance) per rank of one token's rows on that rank (module docstring)."""
    num_experts = len(probs)
    where = rank_of_expert(num_experts, ranks)
    per_rank = num_experts / ranks
    correction = (num_experts - per_rank) / (num_experts - 1) if num_experts > 1 else 0.0
    means = np.bincount(where, weights=probs, minlength=ranks)
    variances = np.bincount(where, weights=probs * (1.0 - probs), minlength=ranks) * correction
    return means, variances


def _expected_max(means: np.ndarray, sds: np.ndarray) -> float:
    """E[max] of independent normals N(means, sds^2): lo + integral of 1 - prod_r Phi."""
    lo = float(np.min(means - 8.0 * sds))
    hi = float(np.max(means + 8.0 * sds))
    x = np.linspace(lo, hi, 1025)
    cdf = np.prod(ndtr((x[:, None] - means[None, :]) / np.maximum(sds, 1e-300)[None, :]), axis=1)
    y = 1.0 - cdf
    return lo + float(np.sum(y[1:] + y[:-1]) * 0.5 * (x[1] - x[0]))


def busiest_rank_rows(probs: np.ndarray, ranks: int, num_tokens: float,
                      max_normal: float | None = None) -> float:
    """R(n): expected token-expert rows of the busiest of `ranks` EP ranks for n tokens."""
    top_k = float(np.sum(probs))
    if ranks <= 1 or num_tokens <= 0:
        return top_k * max(num_tokens, 0.0)
    means, variances = rank_load_moments(probs, ranks)
    inflate = 1.0 / (1.0 - 1.0 / ranks)  # the loads sum to n k: undo their negative correlation
    if np.allclose(means, means[0], rtol=1e-12, atol=0.0):  # identical ranks: closed form
        m = expected_max_normal(ranks) if max_normal is None else max_normal
        busiest = (num_tokens * float(means[0])
                   + math.sqrt(num_tokens * float(variances.max()) * inflate) * m)
    else:
        busiest = _expected_max(num_tokens * means, np.sqrt(num_tokens * variances * inflate))
    return min(busiest, num_tokens * min(top_k, len(probs) / ranks))


def _poisson_binomial_cdf(q: np.ndarray, size: int) -> np.ndarray:
    """P(sum of independent Bernoulli(q_i) <= d) for d = 0..size (convolution)."""
    pmf = np.zeros(size + 1)
    pmf[0] = 1.0
    for qi in q:
        pmf[1:] = pmf[1:] * (1.0 - qi) + pmf[:-1] * qi
        pmf[0] *= 1.0 - qi
    return np.minimum(np.cumsum(pmf), 1.0)


def busiest_rank_distinct(probs: np.ndarray, ranks: int, num_tokens: float) -> float:
    """E[max over ranks of the distinct experts a batch touches on each] (module docstring):
    the busiest rank's expert weights are what a step waits to read."""
    if ranks <= 1:
        return expected_distinct(probs, num_tokens)
    if num_tokens <= 0:
        return 0.0
    touched = 1.0 - (1.0 - probs) ** num_tokens
    where = rank_of_expert(len(probs), ranks)
    size = int(np.bincount(where).max())
    cdf = np.ones(size + 1)
    for r in range(ranks):
        cdf *= _poisson_binomial_cdf(touched[where == r], size)
    busiest = float(np.sum(1.0 - cdf[:-1]))  # E[max] = sum_d P(max > d)
    top_k = int(round(float(np.sum(probs))))
    return max(busiest, float(-(-top_k // ranks)))
