"""Accuracy of Magnus' generation-length predictor on held-out requests, per task.

    python -m experiments.papers.magnus_predictor_eval [--path FILE] [--train-per-task N]
        [--test-per-task M] [--model NAME] [--out DIR]

Trains the semantic predictor (compressed user / instruction embeddings + input length, random
forest) and the input-length-only baseline (random forest on the user input length) on the
training split of a Magnus-format file, then scores both on the serving split, which the
simulations replay. Reports per task the mean absolute error (tokens) and the share of requests
predicted within 10 tokens or 10% of the true length (those continuous learning would not
collect). Embeddings land in the on-disk cache, so later simulations do not embed them again.
Writes OUT/magnus_predictor_eval.csv and prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from policies.magnus.config import PredictorConfig
from policies.magnus.length_model import make_predictor
from policies.magnus.queries import AppCatalog, queries_from_frame
from sim.util.errors import ConfigError, TraceError
from traces.magnus_workload import MagnusSplit, read_magnus_apps, split_by_task, to_trace

ERROR_TOKENS = 10.0  # tokens: an error within this is "accurate" ...
ERROR_FRACTION = 0.1  # ... as is one within this share of the true length


def within(predicted: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Whether each prediction is within 10 tokens or within 10% of the truth."""
    error = np.abs(predicted - truth)
    return (error <= ERROR_TOKENS) | (error <= ERROR_FRACTION * truth)


def splits(path: str | None, train_per_task: int,
           test_per_task: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, test) frames: the first N / M requests per task of the two splits."""
    train, test = split_by_task(read_magnus_apps(path), MagnusSplit())
    train = train.groupby("task", sort=True).head(train_per_task).reset_index(drop=True)
    test = test.groupby("task", sort=True).head(test_per_task).reset_index(drop=True)
    return (to_trace(train, np.zeros(len(train)), "train"),
            to_trace(test, np.zeros(len(test)), "test"))


def evaluate(train: pd.DataFrame, test: pd.DataFrame, model: str,
             seed: int = 0) -> pd.DataFrame:
    """Per-task (and overall) MAE and within-10-tokens-or-10% share of both predictors."""
    queries_train, queries_test = queries_from_frame(train), queries_from_frame(test)
    y_train = train["output_tokens"].to_numpy(dtype=np.float64)
    y_test = test["output_tokens"].to_numpy(dtype=np.float64)
    predictions = {}
    for kind in ("semantic", "input_length"):
        config = PredictorConfig(kind=kind, model=model)
        start = time.perf_counter()
        predictor = make_predictor(config, np.random.default_rng(seed))
        predictor = predictor.fit(queries_train, y_train)
        predictions[kind] = predictor.predict(queries_test)
        print(f"{kind}: trained and predicted in {time.perf_counter() - start:.1f} s",
              file=sys.stderr)
    rows = []
    groups = [(str(t), np.flatnonzero(test["app"].to_numpy() == t))
              for t in sorted(test["app"].unique())] + [("all", np.arange(len(test)))]
    for task, idx in groups:
        row: dict[str, object] = {"task": task, "num_test": len(idx),
                                  "mean_output_tokens": float(y_test[idx].mean())}
        for kind, pred in predictions.items():
            row[f"{kind}_mae"] = float(np.abs(pred[idx] - y_test[idx]).mean())
            row[f"{kind}_within"] = float(within(pred[idx], y_test[idx]).mean())
        rows.append(row)
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    """The table as markdown (MAE in tokens, shares in %)."""
    lines = ["| task | test requests | mean output | MAE semantic | MAE input-length | "
             "within 10 tok/10% semantic | within input-length |",
             "|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r['task']} | {r['num_test']} | {r['mean_output_tokens']:.1f} | "
                     f"{r['semantic_mae']:.1f} | {r['input_length_mae']:.1f} | "
                     f"{100 * r['semantic_within']:.1f}% | "
                     f"{100 * r['input_length_within']:.1f}% |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.papers.magnus_predictor_eval")
    parser.add_argument("--path", default=None, help="Magnus-format JSONL (default: shared)")
    parser.add_argument("--train-per-task", type=int, default=1000)
    parser.add_argument("--test-per-task", type=int, default=500)
    parser.add_argument("--model", default="all-MiniLM-L6-v2",
                        help="sentence-transformers model (paper: sentence-transformers/LaBSE)")
    parser.add_argument("--out", default="results/magnus", help="output directory")
    args = parser.parse_args(argv)
    for flag in ("train_per_task", "test_per_task"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')}={getattr(args, flag)}: must be >= 1")
    try:
        train, test = splits(args.path, args.train_per_task, args.test_per_task)
    except (ConfigError, TraceError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    catalog = AppCatalog.from_frame(train)
    print(f"{len(train)} training / {len(test)} test requests, "
          f"{len(catalog.apps)} applications", file=sys.stderr)
    table = evaluate(train, test, args.model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "magnus_predictor_eval.csv", index=False)
    print(markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
