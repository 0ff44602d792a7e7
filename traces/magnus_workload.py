"""Magnus' paired-text workload: per-task training / serving splits with Poisson arrivals.

The source is a JSON-lines file of requests with the fields of the shared
`workloads/magnus_apps.jsonl.gz` (20,000 requests, 8 tasks of the Magnus paper's 6 applications):
`id, app, task, instruction, input, reference, input_tokens, prompt_tokens, output_tokens,
source`. A user can point the builder at their own file with the same fields.

Each task's requests are split at random (seeded) into a training part, which a length
predictor may learn from, and a serving part, which is replayed. A request's text is its
instruction + "\\n" + its user input, its generation length is `output_tokens`, and its `app` is
its task. Requests longer than `max_total_tokens` (prompt + output) can be dropped: ChatGLM-6B,
the paper's model, has a 2048-token context.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError, TraceError
from traces.arrivals import arrivals
from traces.files import check_limit, existing_file, iter_jsonl
from traces.paths import default_data_dir
from traces.schema import validate_trace

MAGNUS_APPS_RELPATH = "workloads/magnus_apps.jsonl.gz"  # path under the shared data directory
MAGNUS_FIELDS: tuple[str, ...] = ("id", "app", "task", "instruction", "input", "input_tokens",
                                  "prompt_tokens", "output_tokens")
TOKEN_FIELDS: tuple[str, ...] = ("input_tokens", "prompt_tokens", "output_tokens")
TRAIN_FRACTION = 0.5  # share of each task's requests in the training split
SPLIT_SEED = 0  # seed of the train / serve split
CHATGLM_CONTEXT_TOKENS = 2048  # tokens, ChatGLM-6B's context window (the paper's model)


@dataclass(frozen=True)
class MagnusSplit:
    """How the source file is split into training and serving requests."""

    train_fraction: float = TRAIN_FRACTION  # share of each task's requests used for training
    seed: int = SPLIT_SEED  # seed of the per-task shuffles
    max_total_tokens: int | None = CHATGLM_CONTEXT_TOKENS  # tokens (prompt + output); None: keep

    def __post_init__(self) -> None:
        if not 0.0 <= self.train_fraction < 1.0:
            raise ConfigError("train_fraction", self.train_fraction, "must be in [0, 1)")
        if self.max_total_tokens is not None and self.max_total_tokens < 2:
            raise ConfigError("max_total_tokens", self.max_total_tokens, "must be >= 2 or None")


@dataclass(frozen=True)
class MagnusWorkload:
    """A training frame (for predictors) and a serving trace (in the trace schema)."""

    train: pd.DataFrame  # training requests, schema columns plus instruction / input / tokens
    serve: pd.DataFrame  # serving requests with arrival_s, in arrival order


def default_magnus_path() -> Path:
    """The shared `magnus_apps.jsonl.gz` under the data directory ($SIMSERVE_DATA_DIR)."""
    return default_data_dir() / MAGNUS_APPS_RELPATH


def read_magnus_apps(path: str | Path | None = None, *, limit: int | None = None) -> pd.DataFrame:
    """Every record of a Magnus-format JSON-lines file (validated), in file order."""
    path = existing_file(path if path is not None else default_magnus_path())
    check_limit(limit)
    rows: list[dict] = []
    for lineno, obj in iter_jsonl(path, limit):
        for key in MAGNUS_FIELDS:
            if key not in obj:
                raise TraceError(str(path), f"missing key {key!r} on line {lineno}",
                                 row=lineno, field=key, value=None)
        for key in TOKEN_FIELDS:
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TraceError(str(path), f"token count must be an int >= 1 (line {lineno})",
                                 row=lineno, field=key, value=value)
        rows.append({key: obj[key] for key in MAGNUS_FIELDS})
    if not rows:
        raise TraceError(str(path), "file has no requests")
    return pd.DataFrame(rows, columns=list(MAGNUS_FIELDS))


def split_by_task(records: pd.DataFrame, split: MagnusSplit = MagnusSplit()
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, serve): each task's records shuffled and cut at `train_fraction`; the serving
    records are then shuffled together so tasks interleave. Over-long requests are dropped after
    the split, so the split itself does not depend on `max_total_tokens`."""
    rng = np.random.default_rng(split.seed)
    train_parts, serve_parts = [], []
    for _, group in sorted(records.groupby("task", sort=True), key=lambda kv: str(kv[0])):
        order = rng.permutation(len(group))
        cut = int(round(split.train_fraction * len(group)))
        train_parts.append(group.iloc[order[:cut]])
        serve_parts.append(group.iloc[order[cut:]])
    train = pd.concat(train_parts, ignore_index=True)
    serve = pd.concat(serve_parts, ignore_index=True)
    serve = serve.iloc[rng.permutation(len(serve))].reset_index(drop=True)
    return _fits(train, split.max_total_tokens), _fits(serve, split.max_total_tokens)


def _fits(df: pd.DataFrame, max_total_tokens: int | None) -> pd.DataFrame:
    if max_total_tokens is None:
        return df.reset_index(drop=True)
    keep = (df["prompt_tokens"] + df["output_tokens"]) <= max_total_tokens
    return df[keep].reset_index(drop=True)


def to_trace(records: pd.DataFrame, arrival_s: np.ndarray, source: str) -> pd.DataFrame:
    """Records as a schema trace: text = instruction + "\\n" + input, app = task."""
    if len(arrival_s) != len(records):
        raise ValueError(f"{len(arrival_s)} arrival times for {len(records)} records")
    text = records["instruction"].astype(str) + "\n" + records["input"].astype(str)
    frame = pd.DataFrame({
        "arrival_s": np.asarray(arrival_s, dtype=np.float64),
        "prompt_tokens": records["prompt_tokens"].to_numpy(),
        "output_tokens": records["output_tokens"].to_numpy(),
        "text": text.to_numpy(), "app": records["task"].astype(str).to_numpy(),
        "instruction": records["instruction"].to_numpy(), "input": records["input"].to_numpy(),
        "input_tokens": records["input_tokens"].to_numpy(), "request_key": records["id"].to_numpy(),
        "application": records["app"].to_numpy()})
    return validate_trace(frame, source)


def training_frame(path: str | Path | None = None, *, split: MagnusSplit = MagnusSplit(),
                   max_per_task: int | None = None) -> pd.DataFrame:
    """The training split as a trace-like frame (arrivals 0), at most `max_per_task` per task."""
    train, _ = split_by_task(read_magnus_apps(path), split)
    if max_per_task is not None:
        train = train.groupby("task", sort=True).head(max_per_task).reset_index(drop=True)
    return to_trace(train, np.zeros(len(train)), "magnus training split")


def magnus_workload(path: str | Path | None = None, *, rate_per_s: float, seed: int = 0,
                    num_requests: int | None = None, split: MagnusSplit = MagnusSplit(),
                    max_train_per_task: int | None = None) -> MagnusWorkload:
    """Training frame plus the first `num_requests` serving requests at Poisson `rate_per_s`."""
    records = read_magnus_apps(path)
    train, serve = split_by_task(records, split)
    if max_train_per_task is not None:
        train = train.groupby("task", sort=True).head(max_train_per_task)
        train = train.reset_index(drop=True)
    if num_requests is not None:
        serve = serve.head(num_requests)
    times = arrivals(rate_per_s, len(serve), rng=np.random.default_rng(seed))
    return MagnusWorkload(to_trace(train, np.zeros(len(train)), "magnus training split"),
                          to_trace(serve, times, "magnus serving split"))


def load_magnus_trace(path: str | Path, *, limit: int | None = None) -> pd.DataFrame:
    """Trace-format loader (`format: magnus_apps`): the serving split of the default
    `MagnusSplit` (half of each task, requests within ChatGLM-6B's 2048-token context), tasks
    interleaved, every arrival at 0 (re-time it, e.g. `retime: poisson`); `limit` keeps the
    first serving requests."""
    check_limit(limit)
    _, serve = split_by_task(read_magnus_apps(path), MagnusSplit())
    if limit is not None:
        serve = serve.head(limit)
    return to_trace(serve, np.zeros(len(serve)), str(path))
