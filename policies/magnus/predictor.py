"""Generation-length predictors behind one protocol: semantic (Magnus), input length, oracles.

`SemanticPredictor` is Magnus' predictor: a random forest on the group-compressed embeddings of
the user input (16 values) and of the application instruction (4 values) plus the user input
length. `InputLengthPredictor` is the baseline on input length only. Both are immutable:
`fit` returns a new fitted predictor, so a retrained model can take effect later (continuous
learning). Before any training data they predict the user input length itself (the paper's
observation: output length grows with input length). `OraclePredictor` returns the true
length, `NoisyOraclePredictor` the true length times a seeded uniform error.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import LinearRegression

from sim.util.errors import ConfigError, check_positive

from policies.magnus.embedding import Embedder
from policies.magnus.features import semantic_features
from policies.magnus.queries import LengthQuery

REGRESSORS = ("rf", "linear")
MIN_SAMPLES_LEAF = 3  # samples per forest leaf: as accurate as 1 here, and faster to fit
MAX_FEATURES = 0.5  # share of features tried per split: bounds the fit time of a retrain


class LengthPredictor(Protocol):
    """Predicts generation lengths (tokens) of queries."""

    def predict(self, queries: Sequence[LengthQuery]) -> np.ndarray:
        """Predicted generation lengths, tokens (float)."""
        ...

    def fit(self, queries: Sequence[LengthQuery], lengths: np.ndarray) -> LengthPredictor:
        """A predictor trained on (queries, true lengths); `self` is left unchanged."""
        ...


def input_lengths(queries: Sequence[LengthQuery]) -> np.ndarray:
    return np.array([q.input_tokens for q in queries], dtype=np.float64)


def make_forest(num_trees: int, seed: int) -> RandomForestRegressor:
    """The random forest both learned predictors use (single-threaded, seeded)."""
    return RandomForestRegressor(n_estimators=num_trees, min_samples_leaf=MIN_SAMPLES_LEAF,
                                 max_features=MAX_FEATURES, random_state=seed, n_jobs=1)


def forest_predict(forest: RandomForestRegressor, x: np.ndarray) -> np.ndarray:
    """`forest.predict(x)` without sklearn's per-call checks (fast for one row at a time)."""
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    total = np.zeros(len(x32))
    for tree in forest.estimators_:
        total += tree.predict(x32, check_input=False)
    return total / len(forest.estimators_)


class OraclePredictor:
    """The true generation length."""

    def predict(self, queries: Sequence[LengthQuery]) -> np.ndarray:
        return np.array([q.true_output_tokens for q in queries], dtype=np.float64)

    def fit(self, queries: Sequence[LengthQuery], lengths: np.ndarray) -> OraclePredictor:
        return self


class NoisyOraclePredictor:
    """The true length times (1 + e), e uniform in [-relative_error, relative_error]."""

    def __init__(self, relative_error: float, rng: np.random.Generator) -> None:
        check_positive("relative_error", relative_error, allow_zero=True)
        self.relative_error = relative_error  # fraction of the true length
        self.rng = rng  # source of the errors (seeded by the policy)

    def predict(self, queries: Sequence[LengthQuery]) -> np.ndarray:
        truth = np.array([q.true_output_tokens for q in queries], dtype=np.float64)
        noise = self.rng.uniform(-self.relative_error, self.relative_error, len(truth))
        return truth * (1.0 + noise)

    def fit(self, queries: Sequence[LengthQuery], lengths: np.ndarray) -> NoisyOraclePredictor:
        return self


class InputLengthPredictor:
    """A regression of the generation length on the user input length only."""

    def __init__(self, regressor: str = "rf", num_trees: int = 30, seed: int = 0,
                 model: RandomForestRegressor | LinearRegression | None = None) -> None:
        if regressor not in REGRESSORS:
            raise ConfigError("regressor", regressor, f"must be one of {REGRESSORS}")
        check_positive("num_trees", num_trees)
        self.regressor = regressor  # "rf" or "linear"
        self.num_trees = num_trees  # trees of the forest
        self.seed = seed  # forest seed
        self.model = model  # fitted model; None: predict the input length

    def predict(self, queries: Sequence[LengthQuery]) -> np.ndarray:
        x = input_lengths(queries)
        if self.model is None:
            return x
        if isinstance(self.model, RandomForestRegressor):
            return forest_predict(self.model, x.reshape(-1, 1))
        return self.model.predict(x.reshape(-1, 1))

    def fit(self, queries: Sequence[LengthQuery], lengths: np.ndarray) -> InputLengthPredictor:
        if len(queries) == 0:
            return self
        model = (make_forest(self.num_trees, self.seed) if self.regressor == "rf"
                 else LinearRegression())
        model.fit(input_lengths(queries).reshape(-1, 1), np.asarray(lengths, np.float64))
        return InputLengthPredictor(self.regressor, self.num_trees, self.seed, model)


class SemanticPredictor:
    """Magnus' predictor: random forest on compressed user / application embeddings + length."""

    def __init__(self, embedder: Embedder, user_dims: int = 16, app_dims: int = 4,
                 num_trees: int = 30, seed: int = 0,
                 model: RandomForestRegressor | None = None) -> None:
        check_positive("user_dims", user_dims)
        check_positive("app_dims", app_dims)
        check_positive("num_trees", num_trees)
        self.embedder = embedder  # sentence embedder (usually cached on disk)
        self.user_dims = user_dims  # compressed user-input features (paper: 16)
        self.app_dims = app_dims  # compressed application features (paper: 4)
        self.num_trees = num_trees  # trees of the forest
        self.seed = seed  # forest seed
        self.model = model  # fitted forest; None: predict the input length
        self._app_vectors: dict[str, np.ndarray] = {}  # instruction -> vector (few distinct)

    def _instruction_vectors(self, queries: Sequence[LengthQuery]) -> np.ndarray:
        new = sorted({q.instruction for q in queries} - set(self._app_vectors))
        if new:
            self._app_vectors.update(zip(new, self.embedder.embed(new)))
        return np.stack([self._app_vectors[q.instruction] for q in queries])

    def features(self, queries: Sequence[LengthQuery]) -> np.ndarray:
        """The (n, user_dims + app_dims + 1) feature rows of `queries`."""
        users = self.embedder.embed([q.user_input for q in queries])
        return semantic_features(users, self._instruction_vectors(queries),
                                 input_lengths(queries), self.user_dims, self.app_dims)

    def predict(self, queries: Sequence[LengthQuery]) -> np.ndarray:
        if self.model is None:
            return input_lengths(queries)
        return forest_predict(self.model, self.features(queries))

    def fit(self, queries: Sequence[LengthQuery], lengths: np.ndarray) -> SemanticPredictor:
        if len(queries) == 0:
            return self
        model = make_forest(self.num_trees, self.seed)
        model.fit(self.features(queries), np.asarray(lengths, np.float64))
        fitted = SemanticPredictor(self.embedder, self.user_dims, self.app_dims,
                                   self.num_trees, self.seed, model)
        fitted._app_vectors = self._app_vectors
        return fitted
