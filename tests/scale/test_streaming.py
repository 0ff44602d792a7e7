"""Bounded-memory runs give what keeping everything gives: gaps spilled to disk (exact ITL
statistics in chunks), records kept as columns of final requests, requests built lazily."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.records.gap_stats as gap_stats
import sim.records.recorder as recorder_module
from policies.registry import policy_factory
from sim.engine.request_source import TraceRequests
from sim.engine.simulate import run_simulation
from sim.engine.simulation import Simulation
from sim.engine.trace_rows import requests_from_trace
from sim.metrics.summary import ITL_PERCENTILES, itl_summary, request_records
from sim.records.record_log import RecordLog, compact
from sim.records.recorder import GapLog, Recorder
from tests.factories import LinearExecutor

GAPS = st.lists(st.tuples(st.lists(st.sampled_from([0.0, 0.01, 0.02, 0.025, 0.1, 1.5]),
                                   min_size=1, max_size=6),
                          st.integers(0, 5)), min_size=1, max_size=60)


def _filled(adds: list, spill_after: int) -> Recorder:
    rec = Recorder(gaps=GapLog(spill_after=spill_after))
    for values, w in adds:
        if len(values) == 1 and w == 1:
            rec.gaps.add(float(values[0]))
        else:
            rec.gaps.add(np.asarray(values), w)
    return rec


@settings(max_examples=150, deadline=None)
@given(adds=GAPS, spill_after=st.integers(0, 20), leaf=st.integers(1, 300),
       chunk=st.integers(1, 50), fold=st.integers(1, 4))
def test_spilled_gaps_give_the_same_itl_summary(adds: list, spill_after: int, leaf: int,
                                                chunk: int, fold: int) -> None:
    old = gap_stats.LEAF, gap_stats.CHUNK, recorder_module.FOLD
    gap_stats.LEAF, gap_stats.CHUNK, recorder_module.FOLD = leaf, chunk, fold
    try:
        kept, spilled = _filled(adds, 10**9), _filled(adds, spill_after)
        expected, got = itl_summary(kept), itl_summary(spilled)
        np.testing.assert_array_equal(kept.gaps.arrays()[0], spilled.gaps.arrays()[0])
        np.testing.assert_array_equal(kept.gaps.arrays()[1], spilled.gaps.arrays()[1])
    finally:
        gap_stats.LEAF, gap_stats.CHUNK, recorder_module.FOLD = old
    singles = sum(len(v) == 1 and w == 1 for v, w in adds)  # single gaps fold separately
    assert spilled.gaps.store is not None or spill_after or max(singles,
                                                                len(adds) - singles) < fold
    assert list(got) == list(expected)
    for key in expected:  # to the last bit (NaN where no weight)
        assert (got[key] == expected[key]) or (got[key] != got[key] and
                                               expected[key] != expected[key]), key


def test_large_pairwise_sum_and_selection_match_numpy() -> None:
    rng = np.random.default_rng(3)
    v = np.round(rng.gamma(2.0, 0.01, 300_001), 4)
    w = rng.integers(1, 130, len(v))
    read = lambda a, b: (v[a:b], w[a:b])  # noqa: E731
    total = gap_stats.total_weight(read, len(v))
    mean, std = gap_stats.weighted_mean_std(read, len(v), total)
    kept = Recorder()
    kept.gaps.add(v, w)
    expected = itl_summary(kept)
    assert (mean, std) == (expected["mean_itl_s"], expected["std_itl_s"])
    pcts = gap_stats.weighted_percentiles(read, len(v), total, ITL_PERCENTILES)
    assert pcts[1] == expected["median_itl_s"] and pcts[-1] == expected["p99.9_itl_s"]


def test_compact_columns_infer_as_pandas() -> None:
    for values in ([1, 2], [1, 2.5], [float("nan"), 3], ["a", None], [None, None], [1, None],
                   [True, 1]):
        log_values = compact(values)
        got = pd.DataFrame({"c": log_values})["c"]
        pd.testing.assert_series_equal(got, pd.DataFrame({"c": values})["c"])


def _trace(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    return pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(0.05, n)),
                         "prompt_tokens": rng.integers(1, 400, n),
                         "output_tokens": rng.integers(1, 60, n),
                         "app": [None if i % 3 else f"app{i % 2}" for i in range(n)]})


def test_lazy_requests_equal_built_ones() -> None:
    trace = _trace(50)
    source, built = TraceRequests(trace), requests_from_trace(trace)
    assert len(source) == len(built)
    assert all(source.request(i) == built[i] or repr(source.request(i)) == repr(built[i])
               for i in range(len(built)))


def test_streamed_records_equal_records_of_kept_requests(monkeypatch) -> None:
    import sim.records.record_log as record_log
    monkeypatch.setattr(record_log, "FOLD", 7)  # many chunks, finished out of order
    trace = _trace(300)
    for name, params in (("vllm_v0", {"max_num_seqs": 8}), ("sarathi", {"max_num_seqs": 8}),
                         ("orca", {"max_batch_size": 8})):
        streamed = run_simulation(trace, policy_factory(name, params, 0),
                                  [LinearExecutor(capacity=3000)]).records
        requests = requests_from_trace(trace)
        recorder = Recorder()
        from sim.core.executor import InstanceInfo
        policy = policy_factory(name, params, 0)([InstanceInfo(0, 3000, "linear", False)],
                                                 recorder)
        Simulation(requests, policy, [LinearExecutor(capacity=3000)], recorder,
                   max_model_len=None).run()
        pd.testing.assert_frame_equal(streamed, request_records(requests), check_exact=True)


def test_record_log_fold_order(monkeypatch) -> None:
    import sim.records.record_log as record_log
    monkeypatch.setattr(record_log, "FOLD", 2)
    requests = requests_from_trace(_trace(9))
    log = RecordLog()
    for r in reversed(requests):
        log.add([r])
    got = pd.DataFrame(log.columns())
    pd.testing.assert_frame_equal(got, pd.DataFrame(record_log.record_columns(requests)))


def test_weighted_summary_reads_the_gaps_four_times_for_the_same_floats() -> None:
    """Total, mean, std and percentiles in one call: the functions' floats one at a time, and
    every gap read four times (not seven)."""
    rng = np.random.default_rng(5)
    v = np.round(rng.gamma(2.0, 0.01, 200_003), 5)
    w = rng.integers(1, 90, len(v))
    read_items = [0]

    def read(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        read_items[0] += b - a
        return v[a:b], w[a:b]

    old = gap_stats.LEAF, gap_stats.CHUNK
    gap_stats.LEAF, gap_stats.CHUNK = 1 << 14, 1 << 13
    try:
        total, mean, std, pcts = gap_stats.weighted_summary(read, len(v), ITL_PERCENTILES)
        assert read_items[0] == 4 * len(v)
        want_total = gap_stats.total_weight(read, len(v))
        assert (total, (mean, std)) == (want_total, gap_stats.weighted_mean_std(read, len(v),
                                                                                 want_total))
        assert pcts == gap_stats.weighted_percentiles(read, len(v), want_total, ITL_PERCENTILES)
        assert gap_stats.weighted_summary(lambda a, b: (v[a:b], 0 * w[a:b]), len(v),
                                          ITL_PERCENTILES)[0] == 0  # no weight: NaN figures
    finally:
        gap_stats.LEAF, gap_stats.CHUNK = old
