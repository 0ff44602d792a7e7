"""The fidelity report's monotone floor: what the measured rows themselves allow."""

import math

import numpy as np
import pandas as pd
import pytest

from experiments.fidelity.floor import monotone_errors
from experiments.fidelity.main import markdown, summarize


def _rows(stage: str, sizes, seconds, size_column: str = "num_tokens") -> pd.DataFrame:
    n = len(sizes)
    return pd.DataFrame({"gpu": "A100-80GB", "model": "llama-2-7b", "stage": stage, "tp": 2,
                         "regime": "decode_large", size_column: np.asarray(sizes, float),
                         "measured_s": np.asarray(seconds, float),
                         "predicted_s": np.ones(n), "error": np.zeros(n),
                         "abs_error": np.zeros(n)})


def test_rows_that_never_fall_have_no_floor() -> None:
    rows = _rows("dense", [1, 2, 4, 8], [1e-5, 1e-5, 2e-5, 5e-5])
    assert np.allclose(monotone_errors(rows), 0.0)


def test_a_zigzag_pools_its_violating_pair() -> None:
    # log-times 0, l3, 0, l3: pool-adjacent-violators merges the middle pair at l3 / 2, so the
    # curve is 1, sqrt 3, sqrt 3, 3 against 1, 3, 1, 3
    rows = _rows("allreduce", [1e3, 2e3, 4e3, 8e3], [1.0, 3.0, 1.0, 3.0], "size_bytes")
    got = monotone_errors(rows).to_numpy()
    assert got == pytest.approx([0.0, 1 - math.sqrt(3) / 3, math.sqrt(3) - 1, 0.0])


def test_groups_are_fitted_apart() -> None:
    # each TP its own curve: TP 4 faster than TP 2 at every size is no violation
    a = _rows("dense", [1, 2], [2.0, 3.0])
    b = _rows("dense", [1, 2], [1.0, 1.5]).assign(tp=4)
    assert np.allclose(monotone_errors(pd.concat([a, b], ignore_index=True)), 0.0)


def test_stages_without_one_size_get_none_and_print_a_dash() -> None:
    rows = _rows("attention", [1, 2], [2.0, 1.0]).assign(batch_size=1, kv_tokens=512)
    assert monotone_errors(rows).isna().all()
    summary = summarize(rows)
    assert summary["monotone_median_abs_error"].isna().all()
    assert markdown(summary).splitlines()[-1].endswith("| - / - |")


def test_summary_carries_the_floor_per_regime() -> None:
    rows = _rows("allreduce", [1e3, 2e3, 4e3, 8e3], [1.0, 3.0, 1.0, 3.0], "size_bytes")
    summary = summarize(rows)
    row = summary.iloc[0]
    assert row["monotone_median_abs_error"] == pytest.approx(
        np.median([0.0, 1 - math.sqrt(3) / 3, math.sqrt(3) - 1, 0.0]))
    assert "monotone floor" in markdown(summary).splitlines()[0]
