"""Generation-length prediction with continuous learning, shared by `magnus` and `lacb`.

The predictor, its training data, the application catalogue and the embedding cache come from
`policies.magnus.length_model`; finished requests whose prediction missed by more
than both `error_tokens` and `error_fraction` of the truth are collected and the predictor is
refitted every `retrain_period_s` seconds, taking effect `retrain_delay_s` later
(`policies.magnus.learning`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.core.request import Request
from sim.records.recorder import Recorder

from policies.magnus.config import PredictorConfig
from policies.magnus.embedding import Embedder
from policies.magnus.learning import ContinuousLearner, is_large_error
from policies.magnus.length_model import build_length_model
from policies.magnus.predictor import LengthPredictor
from policies.magnus.queries import LengthQuery


@dataclass(frozen=True)
class LearningSettings:
    """When the predictor learns from served requests."""

    retrain_period_s: float | None = 180.0  # seconds between retrains; None: never
    error_tokens: float = 10.0  # tokens: a sample needs a larger error ...
    error_fraction: float = 0.1  # ... and one larger than this share of the true length
    retrain_delay_s: float = 10.0  # seconds from a retrain until the new model serves
    max_samples: int = 5000  # most recent collected samples kept


class LengthService:
    """Predicts each arriving request's generation length and learns from finished ones."""

    def __init__(self, config: PredictorConfig, learning: LearningSettings,
                 rng: np.random.Generator, recorder: Recorder,
                 embedder: Embedder | None = None) -> None:
        self.model = build_length_model(config, rng, embedder)  # fitted on the training split
        self.predictor: LengthPredictor = self.model.predictor  # the one serving now
        self.learning = learning
        self.learner: ContinuousLearner[tuple[LengthQuery, int], LengthPredictor] = \
            ContinuousLearner("predictor", learning.retrain_period_s, learning.retrain_delay_s,
                              learning.max_samples, self._retrain, recorder)
        self.queries: dict[int, LengthQuery] = {}  # request id -> what was predicted from

    def _retrain(self, samples: list[tuple[LengthQuery, int]]) -> LengthPredictor:
        queries = self.model.base_queries + [q for q, _ in samples]
        lengths = np.concatenate([self.model.base_lengths,
                                  np.array([n for _, n in samples], dtype=np.float64)])
        return self.predictor.fit(queries, lengths)

    def poll(self, now: float) -> None:
        """Retrain when a period has elapsed; swap in a model that is due."""
        predictor = self.learner.poll(now)
        if predictor is not None:
            self.predictor = predictor

    def predict(self, request: Request) -> int:
        """Predicted generation length of `request` (tokens, >= 1), also stored on it."""
        query = self.model.catalog.query(request)
        predicted = max(1, int(round(float(self.predictor.predict([query])[0]))))
        request.predicted_output_tokens = predicted
        self.queries[request.request_id] = query
        return predicted

    def observe(self, done: list[Request]) -> None:
        """Collect finished requests whose prediction missed; forget the others."""
        s = self.learning
        for r in done:
            query = self.queries.pop(r.request_id, None)
            if query is None or r.num_output_tokens < r.target_output_tokens:
                continue  # rejected or failed: its length was never observed
            if is_large_error(r.predicted_output_tokens, r.target_output_tokens,
                              s.error_tokens, s.error_fraction):
                self.learner.collect((query, r.target_output_tokens))

    def forget(self, request_id: int) -> None:
        """Drop what a request was predicted from (it failed: its length is never observed)."""
        self.queries.pop(request_id, None)
