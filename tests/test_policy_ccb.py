"""`ccb`: conservative continuous batching reserves prompt + max_gen_tokens per request."""

from __future__ import annotations

import numpy as np
import pytest

from policies.registry import build_policy
from policies.simulate import simulate
from sim.core.executor import InstanceInfo, StepResult
from sim.core.request import Request, RequestStatus
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace, random_trace
from tests.test_properties import check_invariants


def make(capacity: int, **params):
    return build_policy("ccb", params, [InstanceInfo(0, capacity)], Recorder(), 0)


def test_reserves_prompt_plus_max_generation_length():
    p = make(1000, max_gen_tokens=200)
    for i in range(4):
        assert p.add_request(Request(i, 0.0, 100, 10), 0.0)
    step = p.next_step(0, 0.0)
    assert step.request_ids == (0, 1, 2)  # 3 x (100 + 200) <= 1000 < 4 x 300
    assert p.num_reserved_kv_tokens(0) == 900
    assert step.num_iterations == 10  # iteration-level: decodes until the first finishes
    done = p.update(step, StepResult(1.0, np.linspace(0.1, 1.0, 10)), 1.0)
    assert len(done) == 3 and p.num_reserved_kv_tokens(0) == 0
    assert p.next_step(0, 1.0).request_ids == (3,)


def test_rejects_requests_asking_more_than_max_gen_tokens():
    p = make(10_000, max_gen_tokens=64)
    r = Request(0, 0.0, 10, 65)
    assert not p.add_request(r, 0.0) and r.status is RequestStatus.REJECTED
    too_big = Request(1, 0.0, 9_990, 5)  # 9990 + 64 > 10000
    assert not p.add_request(too_big, 0.0)


def test_is_orca_with_magnus_names():
    trace = random_trace(np.random.default_rng(2), 50, rate=20.0)
    ex = [LinearExecutor(capacity=2000, per_ctx_s=1e-6)] * 2
    ccb = simulate(trace, "ccb", {"max_gen_tokens": 100, "max_batch_size": 16}, ex)
    orca = simulate(trace, "orca", {"max_tokens": 100, "max_batch_size": 16}, ex)
    for col in ("scheduled_s", "first_token_s", "finish_s", "status"):
        assert ccb.records[col].equals(orca.records[col])


def test_batch_is_limited_by_memory_not_by_a_batch_size():
    trace = make_trace([(0.0, 50, 20)] * 40)
    res = simulate(trace, "ccb", {}, [LinearExecutor(capacity=2098 * 10)])
    assert res.steps["num_seqs"].max() == 10  # 10 reservations of 50 + 2048
    assert res.steps["reserved_kv_tokens"].max() <= 20_980
    check_invariants(trace, "ccb", [LinearExecutor(capacity=20_980)], {})


def test_config_is_validated():
    for bad in ({"max_gen_tokens": 0}, {"max_batch_size": 0}, {"router": "x"}):
        with pytest.raises(ConfigError):
            make(1000, **bad)
