"""Magnus' batch serving-time estimator: KNN regression on (size, L(B), G(B)).

The KNN model (scikit-learn `KNeighborsRegressor`, distance-weighted, on standardised features)
learns from executed batches: batch size, longest input, longest *actual* generation length
G(B), and the measured duration; a queued batch is estimated from its longest *predicted*
generation G'(B). Until it has been trained on at least `k` batches the estimator falls
back to a line through the origin in the iterations: (G(B) + 1) * the mean seconds
per iteration measured so far (`cold_iteration_s` before any batch ran). HRRN only compares
ratios, which a common scale factor does not change, so the fallback's constant matters little.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from sim.util.errors import check_positive


@dataclass(frozen=True, slots=True)
class BatchSample:
    """One executed batch."""

    size: int  # requests in the batch
    max_prompt: int  # L(B), tokens
    max_output: int  # G(B), the longest actual generation, tokens
    duration_s: float  # measured time from start to last token, seconds

    def features(self) -> tuple[int, int, int]:
        return (self.size, self.max_prompt, self.max_output)


class IterationTimer:
    """Running mean of seconds per iteration over executed batches (the cold-start fallback)."""

    def __init__(self, cold_iteration_s: float) -> None:
        check_positive("cold_iteration_s", cold_iteration_s)
        self.cold_iteration_s = cold_iteration_s  # seconds per iteration before any batch
        self.total_s = 0.0  # seconds of observed batches
        self.num_iterations = 0  # iterations of observed batches

    def observe(self, duration_s: float, num_iterations: int) -> None:
        self.total_s += duration_s
        self.num_iterations += num_iterations

    @property
    def iteration_s(self) -> float:
        """Mean seconds per iteration (the cold-start value before any batch)."""
        if self.num_iterations == 0:
            return self.cold_iteration_s
        return self.total_s / self.num_iterations

    def estimate(self, max_output: int) -> float:
        """Seconds of a batch of `max_output` iterations (+1 for the prefill)."""
        return (max_output + 1) * self.iteration_s


class BatchTimeEstimator:
    """A trained KNN model, or none yet (immutable: `fit` returns a new estimator)."""

    def __init__(self, knn_neighbors: int = 5, model: Pipeline | None = None) -> None:
        check_positive("knn_neighbors", knn_neighbors)
        self.knn_neighbors = knn_neighbors  # k
        self.model = model  # scaler + KNN, None until trained on >= k batches

    @property
    def trained(self) -> bool:
        return self.model is not None

    def fit(self, samples: Sequence[BatchSample]) -> BatchTimeEstimator:
        """An estimator trained on `samples` (untrained while fewer than k)."""
        if len(samples) < self.knn_neighbors:
            return BatchTimeEstimator(self.knn_neighbors)
        x = np.array([s.features() for s in samples], dtype=np.float64)
        y = np.array([s.duration_s for s in samples], dtype=np.float64)
        model = make_pipeline(StandardScaler(),
                              KNeighborsRegressor(self.knn_neighbors, weights="distance"))
        model.fit(x, y)
        return BatchTimeEstimator(self.knn_neighbors, model)

    def estimate(self, size: int, max_prompt: int, max_output: int,
                 fallback: IterationTimer) -> float:
        """Predicted seconds of a batch whose longest generation is `max_output` tokens (G'(B)
        when scheduling, G(B) when re-estimating a finished batch); the fallback while
        untrained."""
        if self.model is None:
            return fallback.estimate(max_output)
        x = np.array([[size, max_prompt, max_output]], dtype=np.float64)
        return max(float(self.model.predict(x)[0]), 1e-9)
