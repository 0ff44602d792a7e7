"""Spilled step logs (sim/records/step_store.py) give the same frame, and the same parquet bytes, as
keeping every row; a run that streams its steps to a file gives the same steps back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.records.recorder as recorder_module
import sim.records.step_store as step_store
from sim.records.recorder import STEP_COLUMNS, StepLog

VALUE = st.one_of(st.integers(0, 9), st.floats(0, 5))  # int and float chunks in one column


def rows_strategy() -> st.SearchStrategy:
    cells = [st.booleans() if c == "oom" else VALUE for c in STEP_COLUMNS]
    return st.lists(st.tuples(*cells), max_size=30)


@settings(max_examples=40, deadline=None)
@given(rows=rows_strategy(), fold=st.integers(1, 5), spill=st.integers(0, 12),
       group=st.integers(1, 9))
def test_spilled_log_is_exact(tmp_path_factory, rows: list, fold: int, spill: int,
                              group: int) -> None:
    tmp = tmp_path_factory.mktemp("spill")
    old = recorder_module.FOLD, step_store.ROW_GROUP
    recorder_module.FOLD, step_store.ROW_GROUP = fold, group
    try:
        kept, spilled = StepLog(spill_after=1 << 30), StepLog(spill_after=spill)
        for row in rows:
            kept.append(row)
            spilled.append(row)
        ref = pd.DataFrame({c: list(v) for c, v in zip(STEP_COLUMNS, zip(*rows))}
                           if rows else {c: [] for c in STEP_COLUMNS}, columns=list(STEP_COLUMNS))
        for name in STEP_COLUMNS:
            a, b = kept.column(name), spilled.column(name)
            assert np.asarray(a).dtype == np.asarray(b).dtype
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            for log in (kept, spilled):  # the column a part at a time, in row order
                parts = list(log.column_parts(name, rows=group))
                assert [v for part in parts for v in list(part)] == list(np.asarray(a).tolist())
                if log.store is not None:
                    assert all(len(part) <= max(group, fold) for part in parts)
        assert spilled.frame().equals(kept.frame())
        # bytes as the whole frame's to_parquet, with row groups of `group` rows on both sides
        frame = kept.frame()
        frame.to_parquet(tmp / "ref.parquet", index=False, row_group_size=group)
        spilled.write_parquet(tmp / "new.parquet")
        if spilled.store is not None:
            assert (tmp / "new.parquet").read_bytes() == (tmp / "ref.parquet").read_bytes()
        assert pd.read_parquet(tmp / "new.parquet").equals(pd.read_parquet(tmp / "ref.parquet"))
        assert len(ref) == len(frame)
        spilled.close()
    finally:
        recorder_module.FOLD, step_store.ROW_GROUP = old


def test_streamed_steps_read_back(tmp_path: Path) -> None:
    """`simulate(..., steps_path=...)` writes the steps file the in-memory frame would."""
    from policies.simulate import simulate
    from sim.cluster.spec import ClusterSpec, build_executors

    rng = np.random.default_rng(0)
    trace = pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(0.2, 300)),
                          "prompt_tokens": rng.integers(10, 400, 300),
                          "output_tokens": rng.integers(1, 200, 300)})
    ex = build_executors(ClusterSpec(model="llama-2-7b", gpu="A100-80GB",
                                     cost_model={"kind": "roofline"}))
    old = recorder_module.FOLD, recorder_module.STEP_SPILL
    recorder_module.FOLD = 16
    try:
        ref = simulate(trace, "vllm_v0", {}, ex, seed=0)
        streamed = simulate(trace, "vllm_v0", {}, ex, seed=0, steps_path=tmp_path / "s.parquet")
    finally:
        recorder_module.FOLD, recorder_module.STEP_SPILL = old
    assert streamed.steps_path == tmp_path / "s.parquet"
    keep = [c for c in STEP_COLUMNS if c != "policy_host_s"]  # measured host time
    assert streamed.num_steps == len(ref.steps)
    assert streamed.steps[keep].equals(ref.steps[keep])
    assert streamed.records.equals(ref.records)
    streamed.write_steps(tmp_path / "moved.parquet")
    assert not (tmp_path / "s.parquet").exists()
    assert streamed.steps[keep].equals(ref.steps[keep])
