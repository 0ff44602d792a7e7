"""Table I's input/output length correlations (experiments/papers/magnus_table1.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.papers.magnus_table1 import (claim_line, length_correlations, tasks_above,
                                       to_markdown)
from traces.magnus_workload import default_magnus_path, read_magnus_apps


def test_correlations_per_app_task_and_all():
    x = np.arange(1, 101)
    records = pd.DataFrame({
        "app": ["MT"] * 200 + ["CC"] * 100,
        "task": ["en2zh"] * 100 + ["zh2en"] * 100 + ["comment"] * 100,
        "input_tokens": np.concatenate([x, x, x]),
        "output_tokens": np.concatenate([2 * x, 3 * x + 1, 101 - x])})
    table = length_correlations(records).set_index("group")
    assert list(table.index) == ["CC", "MT", "MT/en2zh", "MT/zh2en", "all"]
    assert table.loc["MT/en2zh", "pearson"] == pytest.approx(1.0)
    assert table.loc["MT/zh2en", "spearman"] == pytest.approx(1.0)
    assert table.loc["CC", "pearson"] == pytest.approx(-1.0)
    assert table.loc["CC", "pearson_log"] < -0.7
    assert table.loc["all", "requests"] == 300
    assert "| MT/en2zh | 100 | 1.00 |" in to_markdown(length_correlations(records))


def test_the_papers_claim_is_counted_per_task():
    x = np.arange(1.0, 101.0)
    noise = np.where(np.arange(100) % 2 == 0, 1.0, -1.0)  # +-1, uncorrelated with x
    records = pd.DataFrame({
        "app": ["A"] * 300, "task": ["exact"] * 100 + ["flat"] * 100 + ["noisy"] * 100,
        "input_tokens": np.concatenate([x, x, x]),
        "output_tokens": np.concatenate([2 * x, 50 + noise, x + 100 * noise])})
    # by hand, population moments: var x = 833.25, cov(x, noise) = -0.5 (odd x carry +1)
    # flat: r = -0.5 / sqrt(833.25) = -0.017; noisy: cov = 833.25 - 50 = 783.25,
    # var = 833.25 + 10^4 - 100 = 10733.25, r = 783.25 / sqrt(833.25 x 10733.25) = 0.262
    above, below = tasks_above(records)
    assert above == ["exact"] and below == ["flat", "noisy"]
    assert claim_line(records) == "Pearson > 0.8 in 1 of 3 tasks (exact); not in flat, noisy."
    assert tasks_above(records, threshold=0.2)[0] == ["exact", "noisy"]


def test_missing_column_is_named():
    with pytest.raises(ValueError, match="output_tokens"):
        length_correlations(pd.DataFrame({"app": [], "task": [], "input_tokens": []}))


@pytest.mark.skipif(not default_magnus_path().exists(), reason="shared workload absent")
def test_shared_workload_keeps_the_papers_ordering():
    """Translation, grammar and code translation correlate strongly; code comment weakly."""
    table = length_correlations(read_magnus_apps()).set_index("group")
    for strong in ("GC", "MT/en2zh", "MT/zh2en", "CT/java2cs", "CT/cs2java"):
        assert table.loc[strong, "pearson"] > 0.85
    assert table.loc["CC", "pearson"] < 0.4
