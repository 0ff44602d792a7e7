"""A learned step-time correction stored as plain JSON trees, and its numpy evaluator.

`python -m real.calibrate` fits scikit-learn's `GradientBoostingRegressor` (`real/fit.py`) and
writes each regression tree as five arrays (children_left / children_right, feature, threshold,
value) plus the ensemble's initial constant and learning rate. `TreeEnsemble.predict` walks the
trees as scikit-learn does (inputs rounded to float32, `x <= threshold` goes left, the sum
`init + learning_rate * leaf value` accumulated tree by tree), so it returns the same numbers.
Nothing here unpickles or executes anything: a calibration holds data only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from sim.util.errors import ConfigError

FORMAT = "gradient_boosted_trees"  # the `format` key of a stored learned model
FORMAT_VERSION = 1  # the layout below
TREE_KEYS = ("children_left", "children_right", "feature", "threshold", "value")
LEAF = -1  # children_left / children_right of a leaf (scikit-learn's TREE_LEAF)
MAX_TREES = 100_000  # trees a stored model may hold
MAX_NODES = 1_000_000  # nodes one tree may hold


@dataclass(frozen=True, eq=False)
class Tree:
    """One regression tree as scikit-learn's `tree_` arrays (node 0 is the root)."""

    children_left: np.ndarray  # node index of the left child; -1 at a leaf (int64)
    children_right: np.ndarray  # node index of the right child; -1 at a leaf (int64)
    feature: np.ndarray  # input column a split node tests; ignored at a leaf (int64)
    threshold: np.ndarray  # split value: x[feature] <= threshold goes left (float64)
    value: np.ndarray  # prediction of a leaf, in the target's units (float64)

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Leaf index of each row of `x` [rows, inputs]."""
        node = np.zeros(len(x), dtype=np.int64)
        rows = np.arange(len(x))
        active = self.children_left[node] != LEAF
        while active.any():  # children have larger indices than parents: this terminates
            n = node[active]
            left = x[rows[active], self.feature[n]] <= self.threshold[n]
            node[active] = np.where(left, self.children_left[n], self.children_right[n])
            active = self.children_left[node] != LEAF
        return node


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """Gradient-boosted regression trees: init + learning_rate * sum of leaf values."""

    init: float  # prediction before any tree (the mean target of the fit)
    learning_rate: float  # factor on every tree's leaf value
    num_inputs: int  # input columns a row must have
    trees: tuple[Tree, ...]  # in fitting order

    def predict(self, x: Any) -> np.ndarray:
        """Predictions for the rows of `x` [rows, num_inputs] (as scikit-learn's predict)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.num_inputs:
            raise ValueError(f"expected rows of {self.num_inputs} inputs, got shape {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError("learned model inputs must be finite")
        x32 = x.astype(np.float32).astype(np.float64)  # sklearn compares float32 inputs
        out = np.full(len(x), self.init, dtype=np.float64)
        for tree in self.trees:
            out += self.learning_rate * tree.value[tree.apply(x32)]
        return out


# ---- reading the JSON form ------------------------------------------------------------------
def _array(raw: Mapping[str, Any], key: str, where: str, integer: bool) -> np.ndarray:
    value = raw.get(key)
    if not isinstance(value, list) or not value or len(value) > MAX_NODES:
        raise ConfigError(f"{where}.{key}", value, f"must be a list of 1 to {MAX_NODES} numbers")
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}.{key}", value, "must hold numbers only") from None
    if arr.ndim != 1 or not np.isfinite(arr).all():
        raise ConfigError(f"{where}.{key}", value, "must be a flat list of finite numbers")
    if integer:
        if (arr != np.round(arr)).any():
            raise ConfigError(f"{where}.{key}", value, "must hold integers")
        return arr.astype(np.int64)
    return arr


def tree_from_dict(raw: Any, where: str, num_inputs: int) -> Tree:
    """A Tree from its JSON object, checked so that evaluating it cannot loop or index out."""
    if not isinstance(raw, Mapping):
        raise ConfigError(where, raw, f"must be an object with {', '.join(TREE_KEYS)}")
    left, right, feature = (_array(raw, k, where, True) for k in TREE_KEYS[:3])
    threshold, value = (_array(raw, k, where, False) for k in TREE_KEYS[3:])
    n = len(left)
    for key, arr in zip(TREE_KEYS[1:], (right, feature, threshold, value)):
        if len(arr) != n:
            raise ConfigError(f"{where}.{key}", len(arr), f"length must equal children_left's {n}")
    leaf = left == LEAF
    split = ~leaf
    index = np.arange(n)
    if (right[leaf] != LEAF).any() or (right[split] == LEAF).any():
        raise ConfigError(f"{where}.children_right", raw.get("children_right"),
                          "must be -1 exactly where children_left is -1")
    for key, child in (("children_left", left), ("children_right", right)):
        if ((child[split] <= index[split]) | (child[split] >= n)).any():
            raise ConfigError(f"{where}.{key}", raw.get(key), "a child must be a later node")
    if ((feature[split] < 0) | (feature[split] >= num_inputs)).any():
        raise ConfigError(f"{where}.feature", raw.get("feature"),
                          f"split features must be in [0, {num_inputs})")
    return Tree(left, right, np.where(split, feature, 0), threshold, value)


def ensemble_from_dict(raw: Mapping[str, Any], where: str) -> TreeEnsemble:
    """A TreeEnsemble from the JSON object `real.fit.export_trees` writes."""
    if raw.get("format") != FORMAT or raw.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"{where}.format", raw.get("format"), f"expected {FORMAT!r} version "
                          f"{FORMAT_VERSION}; re-run python -m real.calibrate")
    num_inputs = raw.get("num_inputs")
    if not isinstance(num_inputs, int) or isinstance(num_inputs, bool) or num_inputs < 1:
        raise ConfigError(f"{where}.num_inputs", num_inputs, "must be an int >= 1")
    for key in ("init", "learning_rate"):
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not np.isfinite(value):
            raise ConfigError(f"{where}.{key}", value, "must be a finite number")
    trees = raw.get("trees")
    if not isinstance(trees, list) or not trees or len(trees) > MAX_TREES:
        raise ConfigError(f"{where}.trees", trees, f"must be a list of 1 to {MAX_TREES} trees")
    return TreeEnsemble(float(raw["init"]), float(raw["learning_rate"]), num_inputs,
                        tuple(tree_from_dict(t, f"{where}.trees[{i}]", num_inputs)
                              for i, t in enumerate(trees)))
