"""The shared public traces load and match the facts measured in shared/data/README.md."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traces.mooncake import MOONCAKE_BLOCK_TOKENS
from traces.paths import default_data_dir, shared_trace_path
from traces.registry import infer_format, load_trace
from traces.schema import REQUIRED_COLUMNS, trace_stats

# name -> (format, rows, rate req/s, CV, prompt mean, prompt median, output mean, output median)
FACTS = {
    "azure_conv": ("azure", 19_366, 5.53, 1.09, 1155, 1020, 211, 129),
    "azure_code": ("azure", 8_819, 2.57, 13.2, 2048, 1469, 28, 13),
    "mooncake": ("mooncake", 12_031, 3.40, None, 12035, 6909, 343, 350),
}


@pytest.fixture(scope="module")
def shared_traces() -> dict[str, pd.DataFrame]:
    if not (default_data_dir() / "traces").is_dir():
        pytest.skip(f"shared data dir absent: {default_data_dir()}")
    try:
        return {name: load_trace(shared_trace_path(name)) for name in FACTS}
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("name", list(FACTS))
def test_shared_trace_matches_facts(shared_traces: dict[str, pd.DataFrame], name: str) -> None:
    fmt, rows, rate, cv, p_mean, p_median, o_mean, o_median = FACTS[name]
    df = shared_traces[name]
    assert infer_format(shared_trace_path(name)) == fmt
    assert list(df.columns[:3]) == list(REQUIRED_COLUMNS)
    assert df["arrival_s"].dtype == np.float64
    assert df["prompt_tokens"].dtype == np.int64 and df["output_tokens"].dtype == np.int64
    assert df["arrival_s"].iloc[0] == 0.0 and df["arrival_s"].is_monotonic_increasing
    s = trace_stats(df)
    assert s["num_requests"] == rows
    assert s["rate_per_s"] == pytest.approx(rate, rel=0.01)
    if cv is not None:
        assert s["interarrival_cv"] == pytest.approx(cv, rel=0.02)
    assert s["prompt_mean"] == pytest.approx(p_mean, rel=0.005)
    assert s["prompt_median"] == p_median
    assert s["output_mean"] == pytest.approx(o_mean, rel=0.005)
    assert s["output_median"] == o_median


def test_azure_p99(shared_traces: dict[str, pd.DataFrame]) -> None:
    s = trace_stats(shared_traces["azure_conv"])
    assert s["prompt_p99"] == pytest.approx(4142, rel=0.01)
    assert s["output_p99"] == pytest.approx(601, rel=0.01)


def test_mooncake_blocks(shared_traces: dict[str, pd.DataFrame]) -> None:
    df = shared_traces["mooncake"]
    blocks = df["block_ids"]
    assert all(isinstance(b, tuple) for b in blocks)
    assert all(isinstance(x, int) for x in blocks.iloc[0])
    n_blocks = blocks.map(len).to_numpy()
    expected = -(-df["prompt_tokens"].to_numpy() // MOONCAKE_BLOCK_TOKENS)
    assert np.mean(n_blocks == expected) > 0.99
    assert trace_stats(df)["block_reuse_frac"] == pytest.approx(0.366, abs=0.002)
    gaps = np.diff(df["arrival_s"].to_numpy())
    assert np.mean(gaps == 0) > 0.5  # 3-second timestamp buckets


def test_limit_keeps_first_rows(shared_traces: dict[str, pd.DataFrame]) -> None:
    for name in FACTS:
        head = load_trace(shared_trace_path(name), limit=100)
        assert len(head) == 100
        full = shared_traces[name]
        pd.testing.assert_frame_equal(head, full.head(100))
