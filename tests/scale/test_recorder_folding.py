"""Folded gap and step logs give exactly what keeping every add and row gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.records.recorder as recorder_module
from sim.records.recorder import STEP_COLUMNS, GapLog, Recorder

ADD = st.one_of(
    st.tuples(st.floats(0, 5), st.just(1)),
    st.tuples(st.floats(0, 5), st.integers(2, 4)),
    st.tuples(st.lists(st.floats(0, 5), max_size=5), st.integers(1, 3)),
    st.tuples(st.lists(st.floats(0, 5), min_size=2, max_size=2),
              st.just(np.array([1, 2]))))


def reference(adds: list) -> tuple[np.ndarray, np.ndarray]:
    """Every add kept: chunks in order, then single weight-1 gaps in order."""
    chunks, weights, scalars = [], [], []
    for gaps, w in adds:
        if isinstance(gaps, float) and isinstance(w, int) and w == 1:
            scalars.append(gaps)
            continue
        v = np.asarray([gaps] if isinstance(gaps, float) else gaps, dtype=np.float64)
        chunks.append(v)
        weights.append(np.broadcast_to(np.asarray(w, dtype=np.int64), v.shape))
    return (np.concatenate(chunks + [np.asarray(scalars, dtype=np.float64)]),
            np.concatenate(weights + [np.ones(len(scalars), dtype=np.int64)]))


@settings(max_examples=200, deadline=None)
@given(adds=st.lists(ADD, max_size=40), fold=st.integers(1, 7),
       as_lists=st.lists(st.booleans(), min_size=40, max_size=40))
def test_gap_log_folding_is_exact(adds: list, fold: int, as_lists: list[bool]) -> None:
    """Arrays and lists of floats (as token emission passes its first gaps) alike."""
    old, recorder_module.FOLD = recorder_module.FOLD, fold
    try:
        log = GapLog()
        for (gaps, w), as_list in zip(adds, as_lists):
            if isinstance(gaps, float):
                log.add(gaps, w)
            else:
                log.add([float(g) for g in gaps] if as_list else np.asarray(gaps), w)
        values, weights = log.arrays()
    finally:
        recorder_module.FOLD = old
    ref_values, ref_weights = reference(adds)
    assert values.dtype == np.float64 and weights.dtype == np.int64
    np.testing.assert_array_equal(values, ref_values)
    np.testing.assert_array_equal(weights, ref_weights)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(0, 25), fold=st.integers(1, 6), int_start=st.booleans())
def test_step_log_frame_matches_lists(n: int, fold: int, int_start: bool) -> None:
    rows = [(0, 0 if (i == 0 and int_start) else i * 0.5, 0.25, 1 + i % 3, 2, 3, 4, 5, 6, 7,
             i % 4 == 0, 0.0, 0.0, 1e-6 * i) for i in range(n)]
    old, recorder_module.FOLD = recorder_module.FOLD, fold
    try:
        rec = Recorder()
        for row in rows:
            rec.record_step(*row)
        frame = rec.steps_frame()
    finally:
        recorder_module.FOLD = old
    expected = pd.DataFrame({c: [r[i] for r in rows] for i, c in enumerate(STEP_COLUMNS)},
                            columns=list(STEP_COLUMNS))
    pd.testing.assert_frame_equal(frame, expected, check_exact=True)
    assert rec.num_oom_events == sum(r[10] for r in rows)
