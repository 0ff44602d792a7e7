"""Closed-loop arrivals (`max_concurrency`, as vllm bench serve's semaphore) and rate inf."""

import numpy as np
import pandas as pd
import pytest

from policies.simulate import simulate
from tests.factories import LinearExecutor, random_trace
from tests.test_engine import OneIterationExecutor

POLICIES = ["orca", "vanilla", "vllm_v0", "sarathi"]


def max_in_flight(records: pd.DataFrame) -> int:
    """Most requests between arrival and finish at once (a finish at t frees its slot before an
    arrival at t takes it)."""
    events = sorted([(float(t), 1) for t in records["arrival_s"]]
                    + [(float(t), -1) for t in records["finish_s"]])
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("limit", [1, 3, 8])
def test_max_concurrency_is_never_exceeded(policy, limit):
    trace = random_trace(np.random.default_rng(5), 80, rate=50.0)
    res = simulate(trace, policy, {}, [LinearExecutor(capacity=20_000)],
                   max_concurrency=limit)
    assert (res.records["status"] == "finished").all()
    assert max_in_flight(res.records) <= limit
    assert max_in_flight(res.records) == limit  # the rate is high enough to fill every slot
    # a request is sent no earlier than its trace time
    sent = res.records.sort_values("request_id")["arrival_s"].to_numpy()
    assert (sent >= trace["arrival_s"].to_numpy() - 1e-12).all()


@pytest.mark.parametrize("policy", POLICIES)
def test_max_concurrency_above_the_workload_equals_the_open_loop_run(policy):
    trace = random_trace(np.random.default_rng(8), 40, rate=20.0)
    ex = LinearExecutor(capacity=20_000)
    plain = simulate(trace, policy, {}, [ex])
    closed = simulate(trace, policy, {}, [ex], max_concurrency=len(trace))
    pd.testing.assert_frame_equal(plain.records, closed.records)
    simulated = [k for k in plain.summary if "host" not in k]  # host time is wall-clock
    assert {k: plain.summary[k] for k in simulated} == pytest.approx(
        {k: closed.summary[k] for k in simulated}, rel=0, abs=0, nan_ok=True)


@pytest.mark.parametrize("policy", ["orca", "vllm_v0", "sarathi"])
def test_closed_loop_jumps_match_one_iteration_at_a_time(policy):
    trace = random_trace(np.random.default_rng(3), 60, rate=30.0)
    ex = LinearExecutor(capacity=20_000, per_ctx_s=1e-6)
    jump = simulate(trace, policy, {}, [ex, ex], max_concurrency=5)
    step = simulate(trace, policy, {}, [OneIterationExecutor(ex)] * 2, max_concurrency=5)
    for col in ("arrival_s", "first_token_s", "finish_s", "scheduled_s"):
        np.testing.assert_allclose(jump.records[col], step.records[col], rtol=1e-9, atol=1e-9)


def test_rate_inf_closed_loop_keeps_n_in_flight_from_time_zero():
    trace = random_trace(np.random.default_rng(1), 30, rate=10.0)
    trace["arrival_s"] = 0.0  # --request-rate inf
    res = simulate(trace, "orca", {}, [LinearExecutor(capacity=20_000)], max_concurrency=4)
    rec = res.records.sort_values("request_id")
    assert (rec["arrival_s"].iloc[:4] == 0).all() and (rec["arrival_s"].iloc[4:] > 0).all()
    assert max_in_flight(rec) == 4


def test_bad_max_concurrency_is_an_error():
    trace = random_trace(np.random.default_rng(1), 3)
    with pytest.raises(ValueError, match="max_concurrency=0"):
        simulate(trace, "orca", {}, [LinearExecutor()], max_concurrency=0)
