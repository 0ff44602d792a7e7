"""Frozen, validated parameters of the Magnus policies (`glp`, `abp`, `magnus`).

The three registered policies share one parameter set and differ only in their defaults:
`glp` caps batches at a fixed size and runs them first-come first-served, `abp` drops the cap
(batches grow until memory or the WMA threshold stops them), and `magnus` adds the batch-time
estimator and HRRN batch scheduling. YAML stays at the edge: `predictor` arrives as a plain
mapping and becomes a `PredictorConfig` here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from sim.util.errors import ConfigError, check_fraction, check_positive

from policies.base import PolicyConfig
from policies.magnus.memory import MEMORY_CHECKS
from policies.magnus.predictor import REGRESSORS

PREDICTOR_KINDS = ("input_length", "semantic", "oracle", "noisy_oracle")
SCHEDULERS = ("hrrn", "fcfs")
WMA_AGGREGATES = ("max", "sum")
ESTIMATOR_TRAINING = ("auto", "offline", "online")  # auto: offline where the engine is timeable


@dataclass(frozen=True)
class PredictorConfig:
    """Which generation-length predictor to use and what it learns from."""

    kind: str = "input_length"  # input_length | semantic | oracle | noisy_oracle
    train_path: str | None = None  # Magnus-format JSONL; its training split is learned from
    max_train_per_task: int | None = None  # requests per task taken from the training split
    model: str = "all-MiniLM-L6-v2"  # sentence-transformers model (paper: LaBSE), or "hashing"
    max_seq_length: int = 128  # word pieces the embedder reads per text
    user_dims: int = 16  # compressed user-input features (paper: 16)
    app_dims: int = 4  # compressed application-instruction features (paper: 4)
    regressor: str = "rf"  # input_length only: "rf" (random forest) or "linear"
    num_trees: int = 30  # trees per random forest
    relative_error: float = 0.2  # noisy_oracle: prediction = truth * (1 + U(-e, e))
    cache_dir: str | None = None  # embedding cache; None: ~/.cache/servesim/embeddings

    def __post_init__(self) -> None:
        if self.kind not in PREDICTOR_KINDS:
            raise ConfigError("predictor.kind", self.kind, f"must be one of {PREDICTOR_KINDS}")
        if self.regressor not in REGRESSORS:
            raise ConfigError("predictor.regressor", self.regressor,
                              f"must be one of {REGRESSORS}")
        if self.max_train_per_task is not None:
            check_positive("predictor.max_train_per_task", self.max_train_per_task)
        for name in ("max_seq_length", "user_dims", "app_dims", "num_trees"):
            check_positive(f"predictor.{name}", getattr(self, name))
        check_positive("predictor.relative_error", self.relative_error, allow_zero=True)

    @classmethod
    def from_value(cls, value: PredictorConfig | Mapping[str, Any] | str) -> PredictorConfig:
        """A config from a mapping (YAML), a kind name, or a config."""
        if isinstance(value, PredictorConfig):
            return value
        if isinstance(value, str):
            return cls(kind=value)
        if not isinstance(value, Mapping):
            raise ConfigError("predictor", value, "must be a mapping or a predictor kind")
        known = {f.name for f in fields(cls)}
        for key in value:
            if key not in known:
                raise ConfigError(f"predictor.{key}", value[key],
                                  f"unknown key; known: {', '.join(sorted(known))}")
        return cls(**dict(value))


def check_optional_seconds(name: str, value: float | None) -> None:
    """ConfigError unless `value` is None (never) or a finite number of seconds > 0."""
    if value is not None and not (0 < value < math.inf):
        raise ConfigError(name, value, "must be a number > 0 (seconds) or null (never)")


@dataclass(frozen=True)
class MagnusConfig(PolicyConfig):
    predictor: PredictorConfig | Mapping[str, Any] = field(  # length predictor (or mapping)
        default_factory=PredictorConfig)
    batch_size: int | None = None  # requests per batch at most; None: memory decides (ABP)
    wma_threshold: float = 20_000.0  # Φ, token reads: a request joins only below it
    wma_aggregate: str = "max"  # batch WMA = max (issue 4) or sum over its requests
    memory_fraction: float = 1.0  # Θ: share of the KV capacity a batch may plan to fill
    memory_check: str = "engine"  # Θ in the engine's bytes where it reports them, or kv_tokens
    scheduler: str = "hrrn"  # hrrn (Magnus) or fcfs (GLP / ABP): which queued batch runs next
    knn_neighbors: int = 5  # neighbours of the batch-time KNN regressor
    cold_iteration_s: float = 0.02  # seconds per iteration assumed before any batch ran
    predictor_retrain_period_s: float | None = 180.0  # seconds between predictor retrains
    predictor_error_tokens: float = 10.0  # tokens: a sample needs a larger error ...
    predictor_error_fraction: float = 0.1  # ... and one larger than this share of the truth
    estimator_retrain_period_s: float | None = 120.0  # seconds between estimator retrains
    estimator_warmup_batches: int = 32  # online: first executed batches all kept as data
    estimator_training: str = "auto"  # offline (profiled on the training split), online, auto
    estimator_profile_requests: int = 2000  # offline: training requests batched and timed
    estimator_error_s: float = 2.0  # seconds: a batch sample needs a larger error ...
    estimator_error_fraction: float = 0.2  # ... and one larger than this share of the truth
    retrain_delay_s: float = 10.0  # seconds from a retrain until the new model takes effect
    max_learning_samples: int = 5000  # most recent collected samples kept per learner

    def __post_init__(self) -> None:
        object.__setattr__(self, "predictor", PredictorConfig.from_value(self.predictor))
        if self.batch_size is not None:
            check_positive("batch_size", self.batch_size)
        check_positive("wma_threshold", self.wma_threshold)
        check_fraction("memory_fraction", self.memory_fraction)
        if self.wma_aggregate not in WMA_AGGREGATES:
            raise ConfigError("wma_aggregate", self.wma_aggregate,
                              f"must be one of {WMA_AGGREGATES}")
        if self.memory_check not in MEMORY_CHECKS:
            raise ConfigError("memory_check", self.memory_check,
                              f"must be one of {MEMORY_CHECKS}")
        if self.estimator_training not in ESTIMATOR_TRAINING:
            raise ConfigError("estimator_training", self.estimator_training,
                              f"must be one of {ESTIMATOR_TRAINING}")
        check_positive("estimator_profile_requests", self.estimator_profile_requests)
        if self.scheduler not in SCHEDULERS:
            raise ConfigError("scheduler", self.scheduler, f"must be one of {SCHEDULERS}")
        check_positive("knn_neighbors", self.knn_neighbors)
        check_positive("cold_iteration_s", self.cold_iteration_s)
        check_optional_seconds("predictor_retrain_period_s", self.predictor_retrain_period_s)
        check_optional_seconds("estimator_retrain_period_s", self.estimator_retrain_period_s)
        check_positive("predictor_error_tokens", self.predictor_error_tokens, allow_zero=True)
        check_positive("estimator_error_s", self.estimator_error_s, allow_zero=True)
        check_fraction("predictor_error_fraction", self.predictor_error_fraction)
        check_fraction("estimator_error_fraction", self.estimator_error_fraction)
        check_positive("retrain_delay_s", self.retrain_delay_s, allow_zero=True)
        check_positive("max_learning_samples", self.max_learning_samples)
        check_positive("estimator_warmup_batches", self.estimator_warmup_batches,
                       allow_zero=True)


@dataclass(frozen=True)
class GLPConfig(MagnusConfig):
    """GLP: length-aware batching with a fixed batch size, batches first-come first-served."""

    batch_size: int | None = 8  # requests per batch at most
    scheduler: str = "fcfs"  # batches run in order of their oldest request


@dataclass(frozen=True)
class ABPConfig(MagnusConfig):
    """ABP: GLP without the batch-size cap (memory and the WMA threshold bound batches)."""

    scheduler: str = "fcfs"  # batches run in order of their oldest request
