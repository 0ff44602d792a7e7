"""bench.json's per-second peaks in bounded memory, the same numbers as before (issue 28).

Before: `peak_buckets` allocated one int64 per second of the run's span and several arrays of
one entry per output token: a valid 28-year trace simulated, then died asking for 6.6 GiB per
array when bench.json was written. Now the peaks are a sweep (experiments/bench/peaks.py) whose
arrays are bounded by WINDOW_BUCKETS and CHUNK_UNITS whatever the span and token count; the
allocation bound is asserted with tracemalloc (numpy reports each array buffer to it), and the
numbers are checked against the former whole-span computation, kept here as the reference.
"""

from __future__ import annotations

import json
import tracemalloc
from collections import Counter
from typing import Callable

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments.bench.peaks import CHUNK_UNITS, WINDOW_BUCKETS, peak_buckets
from experiments.bench.vllm_bench import BenchOptions, write_bench
from experiments.run import main
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from traces.synthetic import SyntheticConfig, synthetic_trace

YEAR_S = 365.25 * 86400  # seconds per Julian year
# bytes the sweep may allocate at once: a few window-long and a dozen chunk-long arrays, 1 MiB
# of the rest (the records here are a few rows)
ALLOCATION_BOUND = 8 * (4 * WINDOW_BUCKETS + 16 * CHUNK_UNITS) + 2**20


def dense_reference(done: pd.DataFrame) -> tuple[float, int]:
    """The former implementation: every token and every second of the span in arrays."""
    start = float(done["arrival_s"].min())
    n = int(np.ceil(float(done["finish_s"].max()) - start)) + 1
    outs = done["output_tokens"].to_numpy(dtype=np.int64)
    first = done["first_token_s"].to_numpy(dtype=np.float64)
    gap = (done["finish_s"].to_numpy(dtype=np.float64) - first) / np.maximum(outs - 1, 1)
    k = np.arange(outs.sum()) - np.repeat(np.cumsum(outs) - outs, outs)
    times = np.repeat(first, outs) + k * np.repeat(gap, outs)
    tokens = np.bincount(np.clip((times - start).astype(np.int64), 0, n - 1), minlength=n)
    lo = (done["arrival_s"].to_numpy(dtype=np.float64) - start).astype(np.int64)
    hi = (done["finish_s"].to_numpy(dtype=np.float64) - start).astype(np.int64)
    delta = np.zeros(n + 1, dtype=np.int64)
    np.add.at(delta, lo, 1)
    np.add.at(delta, hi + 1, -1)
    return float(tokens.max()), int(np.cumsum(delta)[:n].max())


def sparse_reference(done: pd.DataFrame) -> tuple[float, int]:
    """The same counts kept per occupied bucket only (for long spans with few tokens)."""
    start = float(done["arrival_s"].min())
    last = int(np.ceil(float(done["finish_s"].max()) - start))
    tokens: Counter[int] = Counter()
    active: Counter[int] = Counter()
    for r in done.itertuples(index=False):
        gap = (r.finish_s - r.first_token_s) / max(r.output_tokens - 1, 1)
        k = np.arange(r.output_tokens, dtype=np.int64)
        times = np.full(r.output_tokens, r.first_token_s) + k * np.full(r.output_tokens, gap)
        tokens.update(np.clip((times - start).astype(np.int64), 0, last).tolist())
        active[int(r.arrival_s - start)] += 1
        active[int(r.finish_s - start) + 1] -= 1
    running, best = 0, 0
    for b in sorted(active):
        running += active[b]
        best = max(best, running) if b <= last else best
    return float(max(tokens.values(), default=0)), best


def allocated_peak(fn: Callable[[], object]) -> tuple[object, int]:
    """fn()'s result and the most bytes it held allocated at once (tracemalloc)."""
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def random_done(rng: np.random.Generator) -> pd.DataFrame:
    n = int(rng.integers(1, 40))
    arrival = np.sort(rng.uniform(0, rng.choice([1.0, 30.0, 3000.0]), n)) + rng.choice(
        [0.0, 0.37, 1e6])
    first = arrival + rng.exponential(rng.choice([0.01, 1.0, 30.0]), n)
    outs = rng.integers(1, rng.choice([3, 60, 2000]), n)
    finish = first + rng.exponential(rng.choice([0.001, 1.0, 100.0]), n) * (outs > 1)
    return pd.DataFrame({"arrival_s": arrival, "first_token_s": first, "finish_s": finish,
                         "output_tokens": outs})


def test_peaks_equal_the_whole_span_count_on_random_runs():
    rng = np.random.default_rng(28)
    for _ in range(300):
        done = random_done(rng)
        want = dense_reference(done)
        assert peak_buckets(done) == want
        window, chunk = int(rng.integers(1, 50)), int(rng.integers(1, 300))
        assert peak_buckets(done, window, chunk) == want, (window, chunk)


@pytest.mark.parametrize("policy, params", [("vllm", None), ("vanilla", {"batch_size": 8}),
                                            ("orca", {"max_batch_size": 16})])
def test_peaks_equal_the_whole_span_count_on_simulated_runs(policy, params):
    trace = synthetic_trace(SyntheticConfig(rate_per_s=4.0, num_requests=300), 0)
    res = simulate(trace, policy, params, build_executors(ClusterSpec()))
    done = res.records[res.records["status"] == "finished"]
    want = dense_reference(done)
    for window, chunk in ((WINDOW_BUCKETS, CHUNK_UNITS), (1, 1), (7, 333)):
        got = peak_buckets(done, window, chunk)
        assert got == want and type(got[0]) is float and type(got[1]) is int


def test_a_28_year_trace_writes_bench_json_in_bounded_memory(tmp_path):
    trace = pd.DataFrame({"arrival_s": [0.0, 0.3, 10 * YEAR_S, 28 * YEAR_S],
                          "prompt_tokens": [100, 80, 200, 50],
                          "output_tokens": [20, 40, 30, 5]})
    trace.to_csv(tmp_path / "years.csv", index=False)
    config = {"name": "years", "workload": {"trace": {"path": str(tmp_path / "years.csv")}},
              "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
              "policies": [{"name": "vllm"}], "seeds": [0]}
    (tmp_path / "years.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main([str(tmp_path / "years.yaml"), "--out", str(tmp_path / "out"),
                 "--no-progress"]) == 0
    run_dir = next((tmp_path / "out" / "runs").iterdir())
    written = json.loads((run_dir / "bench.json").read_text())
    assert written["duration"] > 28 * YEAR_S and written["completed"] == 4
    done = pd.read_parquet(run_dir / "records.parquet")
    assert peak_buckets(done) == sparse_reference(done)
    assert (written["max_output_tokens_per_s"], written["max_concurrent_requests"]) == \
        sparse_reference(done)
    assert written["max_concurrent_requests"] == 2  # the two first requests overlap
    result, peak = allocated_peak(lambda: write_bench(run_dir, BenchOptions()))
    assert peak < ALLOCATION_BOUND  # the whole-span arrays took 8 bytes x 8.8e8 buckets
    assert {k: v for k, v in result.items() if k != "date"} == \
        {k: v for k, v in written.items() if k != "date"}


def test_millions_of_tokens_are_counted_in_bounded_memory():
    done = pd.DataFrame({"arrival_s": [0.0, 0.5, 40.0], "first_token_s": [0.25, 1.0, 40.5],
                         "finish_s": [0.25, 1.0, 90.0],
                         "output_tokens": [6_000_000, 3_000_000, 4_000_000]})
    (tokens, active), peak = allocated_peak(lambda: peak_buckets(done))
    assert (tokens, active) == (6_000_000.0, 2)  # all at 0.25 s, then all at 1.0 s
    assert peak < ALLOCATION_BOUND  # the per-token arrays took 8 bytes x 1.3e7, several times


def test_a_request_spanning_ages_costs_its_tokens_not_its_span():
    # two tokens 2**50 s apart, beside short requests: only the windows holding an arrival or a
    # token are counted (each window is a pass over the records)
    done = pd.DataFrame({"arrival_s": [0.0, 0.2, 2.0**49],
                         "first_token_s": [0.5, 0.7, 2.0**49 + 1],
                         "finish_s": [2.0**50, 1.7, 2.0**49 + 9], "output_tokens": [2, 30, 3]})
    (tokens, active), peak = allocated_peak(lambda: peak_buckets(done))
    assert (tokens, active) == sparse_reference(done) == (21.0, 2)
    assert peak < ALLOCATION_BOUND


def test_records_with_impossible_times_are_named():
    done = pd.DataFrame({"request_id": [7], "arrival_s": [0.0], "first_token_s": [2.0],
                         "finish_s": [1.0], "output_tokens": [3]})
    with pytest.raises(ValueError, match="request 7 .*first token <= finish"):
        peak_buckets(done)
    with pytest.raises(ValueError, match="window=0"):
        peak_buckets(done.assign(finish_s=3.0), window=0)


def test_no_finished_request_gives_zero_peaks():
    empty = pd.DataFrame({c: [] for c in ("arrival_s", "first_token_s", "finish_s",
                                          "output_tokens")})
    assert peak_buckets(empty) == (0.0, 0)
