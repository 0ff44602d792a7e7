"""The Magnus workload builder on a small hand-written file (and on the shared one if present)."""

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from sim.util.errors import TraceError
from traces.magnus_workload import (MagnusSplit, default_magnus_path, load_magnus_trace,
                                    magnus_workload, read_magnus_apps, split_by_task,
                                    training_frame)
from traces.registry import load_trace

INSTRUCTIONS = {"upper": "Shout this:", "count": "Count the words in:"}


def write_apps(path, per_task=10, long_every=0):
    """A Magnus-format JSONL.gz: two tasks; output = input length (upper) or 1 (count)."""
    rows, i = [], 0
    for task, instruction in INSTRUCTIONS.items():
        for j in range(per_task):
            words = " ".join(f"w{k}" for k in range(j + 1))
            out = (j + 1 if task == "upper" else 1) + (3000 if long_every and j % long_every
                                                      == long_every - 1 else 0)
            rows.append({"id": i, "app": task.upper(), "task": task, "instruction": instruction,
                         "input": words, "reference": "r", "input_tokens": j + 1,
                         "prompt_tokens": j + 1 + 4, "output_tokens": out, "source": "test"})
            i += 1
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return path


def test_split_is_per_task_disjoint_and_seeded(tmp_path):
    records = read_magnus_apps(write_apps(tmp_path / "apps.jsonl.gz"))
    train, serve = split_by_task(records, MagnusSplit(train_fraction=0.3, seed=1))
    assert set(train["id"]).isdisjoint(serve["id"])
    assert len(train) + len(serve) == 20
    assert train.groupby("task").size().to_dict() == {"count": 3, "upper": 3}
    again, _ = split_by_task(records, MagnusSplit(train_fraction=0.3, seed=1))
    assert again["id"].tolist() == train["id"].tolist()
    other, _ = split_by_task(records, MagnusSplit(train_fraction=0.3, seed=2))
    assert other["id"].tolist() != train["id"].tolist()


def test_long_requests_are_dropped_after_the_split(tmp_path):
    records = read_magnus_apps(write_apps(tmp_path / "apps.jsonl.gz", long_every=5))
    kept_train, kept_serve = split_by_task(records, MagnusSplit(max_total_tokens=2048))
    all_train, all_serve = split_by_task(records, MagnusSplit(max_total_tokens=None))
    assert len(all_train) + len(all_serve) == 20
    assert len(kept_train) + len(kept_serve) == 16
    assert set(kept_train["id"]) <= set(all_train["id"])  # same split, filtered


def test_workload_is_a_schema_trace_with_poisson_arrivals(tmp_path):
    path = write_apps(tmp_path / "apps.jsonl.gz", per_task=200)
    w = magnus_workload(path, rate_per_s=4.0, seed=3, num_requests=150)
    serve = w.serve
    assert len(serve) == 150 and len(w.train) == 200
    assert serve["arrival_s"].iloc[0] == 0.0 and serve["arrival_s"].is_monotonic_increasing
    assert 150 / serve["arrival_s"].iloc[-1] == pytest.approx(4.0, rel=0.3)
    row = serve.iloc[0]
    assert row["text"] == INSTRUCTIONS[row["app"]] + "\n" + row["input"]
    assert set(serve["app"]) == {"upper", "count"}
    assert serve["prompt_tokens"].dtype == np.int64
    assert set(w.train["request_key"]).isdisjoint(serve["request_key"])


def test_training_frame_caps_requests_per_task(tmp_path):
    path = write_apps(tmp_path / "apps.jsonl.gz", per_task=20)
    frame = training_frame(path, max_per_task=4)
    assert frame.groupby("app").size().to_dict() == {"count": 4, "upper": 4}


def test_trace_format_loader_gives_the_serving_split(tmp_path):
    path = write_apps(tmp_path / "apps.jsonl.gz", per_task=20)
    df = load_trace(path, "magnus_apps", limit=7)
    assert len(df) == 7 and (df["arrival_s"] == 0).all()
    train = training_frame(path)
    assert set(df["request_key"]).isdisjoint(train["request_key"])
    assert len(load_magnus_trace(path)) == 20  # half of 2 x 20


def test_missing_field_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": 1, "app": "A"}) + "\n")
    with pytest.raises(TraceError, match="line 1"):
        read_magnus_apps(path)


@pytest.mark.skipif(not default_magnus_path().is_file(), reason="shared data not present")
def test_shared_file_splits_into_eight_tasks():
    w = magnus_workload(rate_per_s=2.0, num_requests=400)
    assert w.serve["app"].nunique() == 8
    assert ((w.serve["prompt_tokens"] + w.serve["output_tokens"]) <= 2048).all()
    assert isinstance(w.train, pd.DataFrame) and len(w.train) > 9000
