"""`vllm`: paged KV accounting, prefill-first scheduling, preemption by recomputation, exact
multi-iteration decodes; driven by hand-built step results and by whole simulations."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.registry import build_policy
from policies.simulate import simulate
from sim.core.executor import InstanceInfo, Step, StepResult
from sim.core.request import Request, RequestStatus
from sim.engine.simulation import Simulation
from sim.engine.trace_rows import requests_from_trace
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace, random_trace
from tests.test_properties import check_invariants


# ---- helpers shared with tests/test_policy_sarathi.py ---------------------------------------
def make_policy(name: str, capacity: int, **params):
    """A policy on one instance of `capacity` KV tokens, with its recorder."""
    return build_policy(name, params, [InstanceInfo(0, capacity)], Recorder(), 0)


def arrive(policy, rows: list[tuple[int, int]], now: float = 0.0) -> list[Request]:
    """Requests (prompt, outputs) arriving at `now`, ids in order."""
    reqs = [Request(i, now, p, o) for i, (p, o) in enumerate(rows)]
    for r in reqs:
        assert policy.add_request(r, now)
    return reqs


def run_step(policy, step: Step, now: float, dt: float = 0.1,
             num_iterations: int | None = None) -> list[Request]:
    """Hand the policy a result of `num_iterations` (default: all) iterations of `dt` seconds
    that ended at `now`; check the block accounting afterwards."""
    m = step.num_iterations if num_iterations is None else num_iterations
    done = policy.update(step, StepResult(m * dt, dt * np.arange(1, m + 1)), now)
    check_blocks(policy)
    return done


def check_blocks(policy) -> None:
    """allocated + free == total on every instance, and the reservation within capacity."""
    for i, s in enumerate(policy.state):
        s.blocks.check()
        assert s.blocks.num_used_blocks + s.blocks.num_free_blocks == s.blocks.num_total_blocks
        assert policy.num_reserved_kv_tokens(i) <= policy.instances[i].kv_capacity_tokens


class CheckingExecutor:
    """Wraps an executor; checks the policy's blocks and the step's bounds before each step."""

    def __init__(self, inner, policy, max_first_tokens: int = math.inf):
        self.inner, self.policy, self.max_first_tokens = inner, policy, max_first_tokens
        self.name = inner.name
        self.steps: list[Step] = []

    @property
    def kv_capacity_tokens(self) -> int:
        return self.inner.kv_capacity_tokens

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        check_blocks(self.policy)
        assert step.num_first_tokens <= self.max_first_tokens
        self.steps.append(step)
        return self.inner.execute(step, until_s)


def simulate_checked(trace: pd.DataFrame, name: str, params: dict, capacity: int,
                     max_first_tokens: float = math.inf) -> tuple[list[Request], list[Step]]:
    """Run a whole simulation, checking blocks before every step."""
    policy = make_policy(name, capacity, **params)
    ex = CheckingExecutor(LinearExecutor(capacity=capacity, per_ctx_s=1e-6), policy,
                          max_first_tokens)
    requests = requests_from_trace(trace)
    Simulation(requests, policy, [ex], policy.recorder).run()
    check_blocks(policy)
    assert all(s.blocks.num_used_blocks == 0 for s in policy.state)
    return requests, ex.steps


# ---- scheduling -------------------------------------------------------------------------------
def test_prefill_first_then_decode_all():
    p = make_policy("vllm_v0", 1000, block_size=4, watermark=0.0)
    a, b = arrive(p, [(10, 5), (6, 5)])
    step = p.next_step(0, 0.0)
    assert step.request_ids == (0, 1) and step.num_new_tokens == (10, 6)
    assert step.num_context_tokens == (0, 0) and step.samples == (True, True)
    assert step.num_iterations == 1
    assert p.state[0].blocks.num_used_blocks == 3 + 2  # whole prompts, allocated on admission
    run_step(p, step, 0.1)
    step = p.next_step(0, 0.1)  # nothing waits: every running request decodes
    assert step.num_new_tokens == (1, 1) and step.num_context_tokens == (10, 6)
    assert step.num_iterations == 4  # the fewest remaining outputs, blocks plentiful
    run_step(p, step, 0.3, num_iterations=2)  # cut by an arrival after 2 iterations
    assert [r.num_output_tokens for r in (a, b)] == [3, 3]
    assert [r.num_computed_tokens for r in (a, b)] == [12, 8]


def test_arrival_gets_a_prefill_only_step_while_others_decode():
    p = make_policy("vllm_v0", 1000, block_size=4, watermark=0.0)
    arrive(p, [(10, 50)])
    run_step(p, p.next_step(0, 0.0), 0.1)
    late = Request(1, 0.15, 20, 5)
    p.add_request(late, 0.15)
    step = p.next_step(0, 0.2)
    assert step.request_ids == (1,) and step.num_new_tokens == (20,)  # decodes stall
    run_step(p, step, 0.3)
    step = p.next_step(0, 0.3)
    assert step.request_ids == (0, 1) and step.num_new_tokens == (1, 1)


def test_token_budget_and_max_num_seqs_limit_admission():
    p = make_policy("vllm_v0", 10_000, max_num_batched_tokens=100, max_num_seqs=3)
    arrive(p, [(40, 5), (40, 5), (30, 5), (10, 5), (10, 5)])
    assert p.next_step(0, 0.0).request_ids == (0, 1)  # 40 + 40 + 30 > 100
    p2 = make_policy("vllm_v0", 10_000, max_num_batched_tokens=1000, max_num_seqs=3)
    arrive(p2, [(40, 5)] * 5)
    assert p2.next_step(0, 0.0).request_ids == (0, 1, 2)


def test_rejects_what_can_never_fit():
    p = make_policy("vllm_v0", 64, block_size=16, max_num_batched_tokens=100)
    assert not p.add_request(Request(0, 0.0, 64, 5), 0.0)  # prompt + 1 = 65 > 4 blocks
    assert p.add_request(Request(1, 0.0, 63, 5), 0.0)
    big = Request(2, 0.0, 50, 5)
    q = make_policy("vllm_v0", 10_000, max_num_batched_tokens=40)
    assert not q.add_request(big, 0.0) and big.status is RequestStatus.REJECTED


def test_watermark_keeps_blocks_free_except_in_an_empty_instance():
    p = make_policy("vllm_v0", 160, block_size=16, watermark=0.25)  # 10 blocks, 2 kept free
    arrive(p, [(150, 5), (20, 5)])  # the first needs all 10 blocks: admitted alone
    step = p.next_step(0, 0.0)
    assert step.request_ids == (0,)
    p2 = make_policy("vllm_v0", 160, block_size=16, watermark=0.25)
    arrive(p2, [(64, 5), (64, 5)])  # 4 + 4 blocks would leave 2 free: allowed
    assert p2.next_step(0, 0.0).request_ids == (0, 1)
    p3 = make_policy("vllm_v0", 160, block_size=16, watermark=0.25)
    arrive(p3, [(64, 5), (65, 5)])  # 4 + 5 blocks would leave 1 free: the second waits
    assert p3.next_step(0, 0.0).request_ids == (0,)


# ---- blocks, iterations, preemption -------------------------------------------------------------
def test_decode_run_length_is_limited_by_free_blocks():
    # 4 blocks of 4 tokens. A (prompt 5) holds 2 blocks, B (prompt 3) 1, one free.
    p = make_policy("vllm_v0", 16, block_size=4, watermark=0.0)
    arrive(p, [(5, 20), (3, 20)])
    run_step(p, p.next_step(0, 0.0), 0.1)
    step = p.next_step(0, 0.1)
    # A's slots 6..8 fit its 2 blocks, B's slot 4 fits, slot 5 takes the free block; slot 9 of
    # A and 9 of B would need two more: 3 iterations
    assert step.num_iterations == 3
    assert p.num_reserved_kv_tokens(0) == 16  # 3 blocks used + 1 pending for the run
    run_step(p, step, 0.4, num_iterations=2)  # an arrival cut it after 2
    assert p.state[0].blocks.num_tokens(0) == 7 and p.state[0].blocks.num_tokens(1) == 5
    assert [r.num_output_tokens for r in p.state[0].running] == [3, 3]


def test_preemption_takes_the_most_recently_admitted_and_requeues_at_the_head():
    # 4 blocks of 4: A (8 tokens) 2 blocks, B (4) 1, C (4) 1; after the prefill each needs one
    # more block. A preempts C (the latest admitted); B then finds none and preempts itself.
    p = make_policy("vllm_v0", 16, block_size=4, watermark=0.0)
    a, b, c = arrive(p, [(8, 10), (4, 10), (4, 10)])
    late = Request(3, 0.05, 4, 3)
    p.add_request(late, 0.05)  # waits behind: no blocks left
    step = p.next_step(0, 0.0)
    assert step.request_ids == (0, 1, 2)
    run_step(p, step, 0.1)
    step = p.next_step(0, 0.1)
    assert step.request_ids == (0,)
    assert list(p.state[0].waiting) == [b, c, late]  # admission order kept, at the head
    assert (b.num_preemptions, c.num_preemptions, a.num_preemptions) == (1, 1, 0)
    assert b.num_recomputed_tokens == 4 and c.num_recomputed_tokens == 4
    assert b.num_computed_tokens == 0 and b.status is RequestStatus.WAITING
    events = [(kind, rid) for _, kind, rid, _ in p.recorder.events]
    assert events == [("preempt", 2), ("preempt", 1)]
    check_blocks(p)


def test_preempted_request_finishes_with_exactly_its_outputs():
    trace = make_trace([(0.0, 40, 60), (0.0, 40, 60), (0.0, 40, 60), (0.01, 30, 20)])
    requests, _ = simulate_checked(trace, "vllm_v0", {"block_size": 8, "watermark": 0.0}, 240)
    assert sum(r.num_preemptions for r in requests) > 0
    for r in requests:
        assert r.status is RequestStatus.FINISHED
        assert r.num_output_tokens == r.target_output_tokens
    res = simulate(trace, "vllm_v0", {"block_size": 8, "watermark": 0.0},
                   [LinearExecutor(capacity=240, per_ctx_s=1e-6)])
    s = res.summary
    useful = int((res.records["prompt_tokens"] + res.records["output_tokens"] - 1).sum())
    assert s["num_recomputed_tokens"] > 0
    assert s["num_computed_tokens"] == useful + s["num_recomputed_tokens"]
    assert s["computed_token_throughput"] * s["duration_s"] == pytest.approx(
        useful + s["num_recomputed_tokens"])
    assert (res.events["kind"] == "preempt").sum() == s["num_preemptions"]


def test_request_outgrowing_the_whole_cache_fails():
    trace = make_trace([(0.0, 20, 100)])  # 20 + 100 tokens > 64
    requests, _ = simulate_checked(trace, "vllm_v0", {"block_size": 16}, 64)
    assert requests[0].status is RequestStatus.FAILED
    assert requests[0].num_tokens > 64


# ---- whole simulations -----------------------------------------------------------------------
small_traces = st.lists(
    st.tuples(st.floats(0, 2, allow_nan=False), st.integers(1, 120), st.integers(1, 40)),
    min_size=1, max_size=20,
).map(lambda rows: make_trace(sorted(rows)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces, capacity=st.integers(130, 600), block_size=st.sampled_from([1, 4, 16]),
       watermark=st.sampled_from([0.0, 0.1]))
def test_blocks_balance_before_every_step(trace, capacity, block_size, watermark):
    params = {"block_size": block_size, "watermark": watermark, "max_num_seqs": 8}
    requests, _ = simulate_checked(trace, "vllm_v0", params, capacity)
    assert all(r.is_finished for r in requests)


@pytest.mark.parametrize("params", [{"block_size": 4, "watermark": 0.05},
                                    {"max_num_seqs": 3, "max_num_batched_tokens": 200}])
def test_invariants_under_memory_pressure(params):
    for seed in range(3):
        trace = random_trace(np.random.default_rng(seed), 40, rate=30.0)
        check_invariants(trace, "vllm_v0", [LinearExecutor(capacity=500, per_ctx_s=1e-6)] * 2,
                         params)


def test_config_is_validated():
    for bad in ({"block_size": 0}, {"watermark": 1.0}, {"max_num_seqs": 0},
                {"max_num_batched_tokens": 0}, {"router": "nope"}):
        with pytest.raises(ConfigError):
            make_policy("vllm_v0", 1000, **bad)
    with pytest.raises(ConfigError):
        make_policy("vllm_v0", 8, block_size=16)  # not one block of KV
