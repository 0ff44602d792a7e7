"""`dynamic` batching: dispatch on size or on the oldest request's delay (exact times through the
engine's wake-up timer), or on size only, flushed when arrivals end (no timeout)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policies.registry import build_policy
from policies.simulate import simulate
from sim.core.executor import InstanceInfo
from sim.core.request import Request
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace, random_trace
from tests.test_properties import check_invariants

EX = LinearExecutor(base_s=0.01, per_token_s=0.0)  # every iteration takes 10 ms


def scheduled(trace_rows, params, policy="dynamic", executors=(EX,)):
    res = simulate(make_trace(trace_rows), policy, params, list(executors))
    return res.records["scheduled_s"].to_numpy(), res


def test_dispatches_when_the_batch_is_full():
    times, _ = scheduled([(0.0, 10, 5), (0.01, 10, 5), (0.02, 10, 5)],
                         {"batch_size": 3, "max_batch_delay_ms": 100})
    np.testing.assert_allclose(times, [0.02] * 3, atol=1e-12)


def test_dispatches_when_the_oldest_has_waited_the_delay():
    times, res = scheduled([(0.0, 10, 5), (0.03, 10, 5)],
                           {"batch_size": 4, "max_batch_delay_ms": 50})
    np.testing.assert_allclose(times, [0.05, 0.05], atol=1e-12)
    # one static batch of 5 iterations of 10 ms from the dispatch
    np.testing.assert_allclose(res.records["finish_s"], [0.10, 0.10], atol=1e-12)


def test_delay_runs_from_each_batch_oldest_request():
    rows = [(0.0, 10, 2), (0.2, 10, 2), (0.25, 10, 2), (0.26, 10, 2)]
    times, _ = scheduled(rows, {"batch_size": 3, "max_batch_delay_ms": 100})
    # first alone at 0.1; then 0.2, 0.25, 0.26 fill a batch of 3 at 0.26
    np.testing.assert_allclose(times, [0.1, 0.26, 0.26, 0.26], atol=1e-12)


def test_a_busy_instance_dispatches_late_requests_when_it_frees():
    rows = [(0.0, 10, 30), (0.01, 10, 3), (0.02, 10, 3)]
    times, _ = scheduled(rows, {"batch_size": 1, "max_batch_delay_ms": 5})
    # each batch of one is full at once; the first runs 30 iterations (0.30 s)
    np.testing.assert_allclose(times, [0.0, 0.30, 0.33], atol=1e-12)
    times, _ = scheduled(rows, {"batch_size": 4, "max_batch_delay_ms": 5})
    # the first waits its 5 ms alone; the others wait for the instance, past their delay
    np.testing.assert_allclose(times, [0.005, 0.305, 0.305], atol=1e-12)


def test_zero_delay_is_vanilla():
    trace = random_trace(np.random.default_rng(0), 40, rate=8.0)
    dyn = simulate(trace, "dynamic", {"batch_size": 4, "max_batch_delay_ms": 0}, [EX])
    van = simulate(trace, "vanilla", {"batch_size": 4}, [EX])
    for col in ("scheduled_s", "finish_s"):
        np.testing.assert_allclose(dyn.records[col], van.records[col], atol=1e-12)


def test_next_wakeup_is_the_oldest_request_deadline():
    p = build_policy("dynamic", {"batch_size": 4, "max_batch_delay_ms": 250},
                     [InstanceInfo(0, 10_000)], Recorder(), 0)
    assert p.next_wakeup_s(0, 0.0) == math.inf
    p.add_request(Request(0, 1.0, 10, 5), 1.0)
    p.add_request(Request(1, 1.1, 10, 5), 1.1)
    assert p.next_step(0, 1.1) is None
    assert p.next_wakeup_s(0, 1.1) == pytest.approx(1.25)
    step = p.next_step(0, 1.25)
    assert step.request_ids == (0, 1) and step.stop_on_arrival is False


def test_two_instances_share_the_queue():
    rows = [(0.0, 10, 20), (0.0, 10, 20), (0.05, 10, 2)]
    times, res = scheduled(rows, {"batch_size": 2, "max_batch_delay_ms": 20},
                           executors=(EX, EX))
    np.testing.assert_allclose(times, [0.0, 0.0, 0.07], atol=1e-12)
    assert res.records.loc[2, "instance_id"] == 1


def test_without_a_timeout_only_full_batches_run_until_arrivals_end():
    rows = [(0.0, 10, 2), (0.5, 10, 2), (1.0, 10, 2), (1.5, 10, 2), (2.0, 10, 2)]
    times, _ = scheduled(rows, {"batch_size": 2, "max_batch_delay_ms": None})
    np.testing.assert_allclose(times, [0.5, 0.5, 1.5, 1.5, 2.0], atol=1e-12)
    times, _ = scheduled(rows, {"batch_size": 2}, policy="vanilla")
    np.testing.assert_allclose(times, [0.0, 0.5, 1.0, 1.5, 2.0], atol=1e-12)


@pytest.mark.parametrize("params", [
    {"batch_size": 3, "max_batch_delay_ms": 30, "on_oom": "split"},
    {"batch_size": 3, "max_batch_delay_ms": None, "on_oom": "split"}])
def test_invariants_hold(params):
    for seed in range(3):
        trace = random_trace(np.random.default_rng(seed), 30, rate=10.0)
        check_invariants(trace, "dynamic", [LinearExecutor(capacity=800)] * 2, params)


@pytest.mark.parametrize("on_oom", ["split", "fail"])
def test_invariants_hold_through_oom(on_oom):
    # 400 KV tokens: batches of 4 prompts up to 200 tokens run out of memory, some on the padded
    # prefill itself; computed tokens must still equal useful + padding + recomputed
    params = {"batch_size": 4, "max_batch_delay_ms": 30, "on_oom": on_oom}
    trace = random_trace(np.random.default_rng(0), 30, rate=10.0)
    ex = LinearExecutor(capacity=400)
    oom = simulate(trace, "dynamic", params, [ex]).steps.query("oom")
    assert (oom["num_iterations"] > 0).any() and (oom["num_iterations"] == 0).any()
    check_invariants(trace, "dynamic", [ex], params)


def test_config_is_validated():
    for bad in ({"batch_size": 0}, {"max_batch_delay_ms": -1.0},
                {"max_batch_delay_ms": math.inf}, {"on_oom": "retry"}):
        with pytest.raises(ConfigError):
            build_policy("dynamic", bad, [InstanceInfo(0, 100)], Recorder(), 0)
