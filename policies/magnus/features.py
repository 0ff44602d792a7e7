"""Magnus' length-predictor features: group-compressed semantic vectors plus the input length.

A d-dimensional sentence vector is cut into `k` contiguous groups; each group's values are
summed and the sum divided by the square root of the group's size (a sum of m unit-variance
values has variance m, so every compressed value keeps the scale of one coordinate). The paper
compresses the user-input vector to 16 values and the instruction vector to 4.
"""

from __future__ import annotations

import numpy as np

from sim.util.errors import ConfigError


def group_sizes(dim: int, num_groups: int) -> np.ndarray:
    """Sizes of `num_groups` contiguous groups covering `dim` coordinates (differ by <= 1)."""
    if not 1 <= num_groups <= dim:
        raise ConfigError("num_groups", num_groups, f"must be in [1, {dim}] (vector dimension)")
    base, extra = divmod(dim, num_groups)
    return np.array([base + 1] * extra + [base] * (num_groups - extra), dtype=np.int64)


def compress_groups(vectors: np.ndarray, num_groups: int) -> np.ndarray:
    """(n, d) vectors -> (n, num_groups): per group, sum / sqrt(group size)."""
    vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float64))
    sizes = group_sizes(vectors.shape[1], num_groups)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    sums = np.add.reduceat(vectors, starts, axis=1)
    return sums / np.sqrt(sizes)


def semantic_features(user_vectors: np.ndarray, app_vectors: np.ndarray,
                      input_tokens: np.ndarray, user_dims: int = 16,
                      app_dims: int = 4) -> np.ndarray:
    """Rows [user features (user_dims), application features (app_dims), input length]."""
    n = len(input_tokens)
    if len(user_vectors) != n or len(app_vectors) != n:
        raise ValueError("one user vector, one application vector and one length per request")
    lengths = np.asarray(input_tokens, dtype=np.float64).reshape(n, 1)
    return np.hstack([compress_groups(user_vectors, user_dims),
                      compress_groups(app_vectors, app_dims), lengths])
