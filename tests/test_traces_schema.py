"""validate_trace, trace_stats, the registry and the shared-data paths."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.util.errors import ConfigError, TraceError
from traces.paths import DATA_DIR_ENV, default_data_dir, shared_trace_path
from traces.registry import TRACE_FORMATS, infer_format, load_trace
from traces.schema import UnsortedTraceWarning, trace_stats, validate_trace


def frame(**overrides: object) -> pd.DataFrame:
    cols: dict[str, object] = {"arrival_s": [0.0, 1.0, 2.5], "prompt_tokens": [3, 4, 5],
                               "output_tokens": [1, 2, 3]}
    cols.update(overrides)
    return pd.DataFrame(cols)


def test_validate_cleans_dtypes_and_index() -> None:
    df = frame(prompt_tokens=["3", 4.0, 5], arrival_s=[1, 2, 3], app=["a", None, np.nan],
               extra=["x", "y", "z"]).set_axis([10, 11, 12])
    out = validate_trace(df, "mem")
    assert out.index.tolist() == [0, 1, 2]
    assert out["prompt_tokens"].dtype == np.int64 and out["arrival_s"].dtype == np.float64
    assert out["app"].tolist() == ["a", None, None]
    assert out["extra"].tolist() == ["x", "y", "z"]
    assert df.index.tolist() == [10, 11, 12]  # input untouched


@pytest.mark.parametrize("col, values, row, reason", [
    ("prompt_tokens", [3, 0, 5], 1, ">= 1"),
    ("output_tokens", [1, 2, -4], 2, ">= 1"),
    ("output_tokens", [1, np.nan, 2], 1, "missing"),
    ("prompt_tokens", [3, "abc", 5], 1, "not a number"),
    ("prompt_tokens", [3, 4.5, 5], 1, "not an integer"),
    ("arrival_s", [0.0, -1.0, 2.0], 1, ">= 0"),
    ("arrival_s", [0.0, math.inf, 2.0], 1, "not finite"),
    ("arrival_s", [0.0, 1.0, None], 2, "missing"),
    ("block_ids", [(1,), "oops", (2,)], 1, "block ids"),
    ("block_ids", [(1,), None, (2,)], 1, "block ids"),
])
def test_validate_rejects(col: str, values: list, row: int, reason: str) -> None:
    with pytest.raises(TraceError, match=reason) as info:
        validate_trace(frame(**{col: values}), "mem")
    assert info.value.source == "mem" and info.value.row == row and info.value.field == col


def test_validate_reports_lines_when_known() -> None:
    with pytest.raises(TraceError, match="line 12") as info:
        validate_trace(frame(prompt_tokens=[1, 1, 0]), "f.csv", lines=[10, 11, 12])
    assert info.value.row == 12


def test_validate_missing_column_and_not_a_frame() -> None:
    with pytest.raises(TraceError, match="output_tokens"):
        validate_trace(frame().drop(columns=["output_tokens"]), "mem")
    with pytest.raises(TraceError, match="DataFrame"):
        validate_trace([1, 2], "mem")  # type: ignore[arg-type]


def test_validate_sorts_stably_with_warning() -> None:
    df = frame(arrival_s=[2.0, 1.0, 1.0], prompt_tokens=[1, 2, 3])
    with pytest.warns(UnsortedTraceWarning, match="3 of 3 rows"):
        out = validate_trace(df, "mem")
    assert out["prompt_tokens"].tolist() == [2, 3, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate_trace(frame(arrival_s=[1.0, 1.0, 1.0]), "mem")  # ties: no warning


def test_trace_stats_simple() -> None:
    s = trace_stats(frame(arrival_s=[0.0, 1.0, 2.0, 3.0], prompt_tokens=[1, 2, 3, 4],
                          output_tokens=[4, 4, 4, 4]))
    assert s["num_requests"] == 4 and s["duration_s"] == 3.0
    assert s["rate_per_s"] == pytest.approx(4 / 3) and s["interarrival_cv"] == 0.0
    assert s["prompt_mean"] == 2.5 and s["prompt_median"] == 2.5 and s["output_p99"] == 4
    s = trace_stats(frame(block_ids=[(1, 2), (1, 3), (4,)]))
    assert s["block_reuse_frac"] == pytest.approx(1 / 5)


def test_infer_format(tmp_path: Path) -> None:
    moon = tmp_path / "conv.jsonl"
    moon.write_text(json.dumps({"timestamp": 0, "input_length": 1, "output_length": 1,
                                "hash_ids": [0]}) + "\n")
    plain = tmp_path / "mine.jsonl"
    plain.write_text(json.dumps({"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}) + "\n")
    azure = tmp_path / "trace.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1,1\n")
    assert infer_format(moon) == "mooncake" and infer_format(plain) == "jsonl"
    assert infer_format(azure) == "azure" and infer_format("azure_x.csv") == "azure"
    assert infer_format("x.csv") == "csv" and infer_format("x.parquet") == "parquet"
    assert infer_format("mooncake_trace.jsonl.gz") == "mooncake"
    assert len(load_trace(moon)) == 1 and len(load_trace(plain)) == 1
    assert len(load_trace(azure)) == 1
    with pytest.raises(ConfigError, match="trace.format"):
        infer_format("x.txt")


def test_load_trace_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown; known: azure, mooncake, csv") as info:
        load_trace(tmp_path / "x.csv", format="excel")
    assert info.value.field == "trace.format" and info.value.value == "excel"
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        load_trace(tmp_path / "missing.csv")
    assert {"azure", "mooncake", "csv", "parquet", "jsonl"} <= set(TRACE_FORMATS)


def test_data_dir_env_and_missing_shared_file(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    assert default_data_dir() == Path(__file__).resolve().parents[2] / "shared" / "data"
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert default_data_dir() == tmp_path.resolve()
    with pytest.raises(FileNotFoundError, match="AzurePublicDataset") as info:
        shared_trace_path("azure_conv")
    assert "AzureLLMInferenceTrace_conv.csv" in str(info.value)
    with pytest.raises(FileNotFoundError, match="conversation_trace.jsonl"):
        shared_trace_path("mooncake")
    with pytest.raises(ConfigError, match="trace.name"):
        shared_trace_path("sharegpt")
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "azure_llm_2023_code.csv").write_text("x")
    assert shared_trace_path("azure_code") == tmp_path.resolve() / "traces" / \
        "azure_llm_2023_code.csv"
