"""Building a policy's length model from plain settings: predictor, training data, catalogue."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from policies.magnus.config import PredictorConfig
from policies.magnus.embedding import Embedder, make_embedder
from policies.magnus.embedding_cache import CachedEmbedder, EmbeddingCache, default_cache_dir
from policies.magnus.predictor import (InputLengthPredictor, LengthPredictor,
                                       NoisyOraclePredictor, OraclePredictor, SemanticPredictor)
from policies.magnus.queries import AppCatalog, LengthQuery, queries_from_frame


@dataclass
class LengthModel:
    """A fitted predictor with the data it was fitted on (kept for continuous learning)."""

    catalog: AppCatalog  # applications known from the training data
    predictor: LengthPredictor  # fitted on base_queries (or a cold-start prior)
    base_queries: list[LengthQuery]  # training requests
    base_lengths: np.ndarray  # their true generation lengths, tokens


def cached_embedder(config: PredictorConfig) -> CachedEmbedder:
    """The configured embedder behind the on-disk cache."""
    inner = make_embedder(config.model, config.max_seq_length)
    directory = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
    return CachedEmbedder(inner, EmbeddingCache(directory, inner.name))


def make_predictor(config: PredictorConfig, rng: np.random.Generator,
                   embedder: Embedder | None = None) -> LengthPredictor:
    """An unfitted predictor of `config.kind` (seeds drawn from `rng`)."""
    seed = int(rng.integers(2**31 - 1))
    if config.kind == "oracle":
        return OraclePredictor()
    if config.kind == "noisy_oracle":
        return NoisyOraclePredictor(config.relative_error, np.random.default_rng(seed))
    if config.kind == "input_length":
        return InputLengthPredictor(config.regressor, config.num_trees, seed)
    return SemanticPredictor(embedder if embedder is not None else cached_embedder(config),
                             config.user_dims, config.app_dims, config.num_trees, seed)


def build_length_model(config: PredictorConfig, rng: np.random.Generator,
                       embedder: Embedder | None = None) -> LengthModel:
    """The predictor fitted on the training split of `config.train_path` (if any)."""
    catalog, queries = AppCatalog(), []
    if config.train_path is not None:
        from traces.magnus_workload import training_frame  # only when there is training data

        frame = training_frame(config.train_path, max_per_task=config.max_train_per_task)
        catalog, queries = AppCatalog.from_frame(frame), queries_from_frame(frame)
    lengths = np.array([q.true_output_tokens for q in queries], dtype=np.float64)
    predictor = make_predictor(config, rng, embedder).fit(queries, lengths)
    return LengthModel(catalog, predictor, queries, lengths)
