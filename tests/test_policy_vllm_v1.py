"""`vllm`: today's vLLM (V1) scheduler: one token budget per step, running requests first
(decodes before new prefills), chunked prefill with blocks allocated per chunk, prefix caching
on by default, preemption of the most recently admitted by recomputation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.run import main as run_main
from policies.registry import BUILTIN_POLICIES, FOLLOWS
from policies.simulate import simulate
from sim.core.request import Request, RequestStatus
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, random_trace
from tests.test_engine import OneIterationExecutor
from tests.test_policy_vllm import arrive, check_blocks, make_policy, run_step, simulate_checked
from tests.test_policy_vllm import small_traces
from tests.test_prefix_cache import trace_with_ids
from tests.test_properties import check_invariants


def test_defaults_follow_vllm_serve():
    p = make_policy("vllm", 10_000)
    c = p.config
    assert (c.max_num_batched_tokens, c.max_num_seqs) == (None, None)  # follow the GPU
    # an instance of unknown GPU gets vLLM's large-GPU defaults (tests/test_vllm_batch_defaults)
    assert (p.token_budgets[0], p.state[0].max_num_seqs) == (8192, 1024)
    assert c.enable_prefix_caching and c.watermark == 0.0 and c.block_size == 16
    assert c.long_prefill_token_threshold == 0


def test_decodes_come_before_new_prefills_in_one_step():
    p = make_policy("vllm", 10_000, max_num_batched_tokens=256, max_num_seqs=8)
    arrive(p, [(30, 20)])
    step = p.next_step(0, 0.0)
    assert step.num_new_tokens == (30,) and step.samples == (True,)
    run_step(p, step, 0.1)
    p.add_request(Request(1, 0.1, 40, 5), 0.1)
    step = p.next_step(0, 0.1)  # no prefill-only step: the decode shares it, first
    assert step.request_ids == (0, 1) and step.num_new_tokens == (1, 40)
    assert step.num_context_tokens == (30, 0) and step.num_iterations == 1


def test_long_prompt_is_chunked_with_blocks_per_chunk():
    p = make_policy("vllm", 10_000, max_num_batched_tokens=64, max_num_seqs=8)
    arrive(p, [(20, 30)])
    run_step(p, p.next_step(0, 0.0), 0.1)
    long = Request(1, 0.1, 200, 5)
    p.add_request(long, 0.1)
    sizes, now = [], 0.1
    while long.num_output_tokens == 0:
        step = p.next_step(0, now)
        assert step.request_ids[0] == 0 and step.num_new_tokens[0] == 1
        assert step.num_first_tokens <= 64 and step.num_iterations == 1
        sizes.append(step.num_new_tokens[1])
        # V1 allocates slots for the scheduled tokens only, not for the whole prompt
        assert p.state[0].blocks.num_tokens(1) == sum(sizes)
        now += 0.1
        run_step(p, step, now)
    assert sizes == [63, 63, 63, 11] and long.num_computed_tokens == 200


def test_long_prefill_token_threshold_caps_a_chunk():
    p = make_policy("vllm", 10_000, max_num_batched_tokens=256, max_num_seqs=8,
                    long_prefill_token_threshold=50)
    arrive(p, [(120, 5), (30, 5)])
    step = p.next_step(0, 0.0)
    assert step.num_new_tokens == (50, 30) and step.samples == (False, True)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces, capacity=st.integers(130, 600), budget=st.integers(8, 64),
       block_size=st.sampled_from([1, 4, 16]))
def test_the_token_budget_is_never_exceeded_and_blocks_balance(trace, capacity, budget,
                                                               block_size):
    params = {"max_num_batched_tokens": budget, "max_num_seqs": 8, "block_size": block_size}
    requests, steps = simulate_checked(trace, "vllm", params, capacity,
                                       max_first_tokens=budget)
    assert all(r.is_finished for r in requests)
    for step in steps:
        assert sum(step.num_new_tokens) <= budget
        if step.num_iterations > 1:
            assert step.num_new_tokens == (1,) * step.num_seqs


def test_prefix_caching_hits_by_default_and_can_be_turned_off():
    ex = LinearExecutor(capacity=4000, base_s=0.01, per_token_s=1e-3, per_ctx_s=1e-5)
    df = trace_with_ids([(0.0, 100, 4), (5.0, 100, 4)])
    on = simulate(df, "vllm", {}, [ex])
    assert on.records["num_cached_tokens"].tolist() == [0, 96]  # 6 full blocks of 16
    assert on.records["ttft_s"].iloc[1] == pytest.approx(0.01 + 4 * 1e-3 + 96 * 1e-5)
    off = simulate(df, "vllm", {"enable_prefix_caching": False}, [ex])
    assert off.records["num_cached_tokens"].sum() == 0
    assert off.records["ttft_s"].iloc[1] == pytest.approx(0.01 + 100 * 1e-3)


def test_preemption_recomputes_the_latest_admitted_and_admits_nothing_that_step():
    # 5 blocks of 4: A and B take 2 each for their prompts; A's 9th slot takes the last block,
    # B's 9th finds none: B, the latest admitted, is preempted (its 8 tokens to be recomputed)
    p = make_policy("vllm", 20, max_num_batched_tokens=16, max_num_seqs=2, block_size=4)
    a, b = arrive(p, [(8, 10), (8, 5)])
    step = p.next_step(0, 0.0)
    assert step.num_new_tokens == (8, 8) and p.state[0].blocks.num_used_blocks == 4
    run_step(p, step, 0.1)
    step = p.next_step(0, 0.1)
    assert step.request_ids == (0,) and step.num_iterations == 1  # no jump in a preempting step
    assert list(p.state[0].waiting) == [b] and b.num_computed_tokens == 0
    assert (b.num_preemptions, b.num_recomputed_tokens, a.num_preemptions) == (1, 8, 0)
    assert [(kind, rid) for _, kind, rid, _ in p.recorder.events] == [("preempt", 1)]
    now = 0.1
    while not b.is_finished:
        now += 0.1
        run_step(p, step, now)
        step = p.next_step(0, now)
    assert a.status is RequestStatus.FINISHED and b.status is RequestStatus.FINISHED
    assert (a.num_output_tokens, b.num_output_tokens) == (10, 5)
    check_blocks(p)


def test_preempted_requests_finish_with_exactly_their_outputs():
    params = {"max_num_batched_tokens": 32, "max_num_seqs": 16, "block_size": 8}
    trace = random_trace(np.random.default_rng(1), 40, rate=40.0, max_prompt=120, max_output=60)
    requests, _ = simulate_checked(trace, "vllm", params, 400)
    assert sum(r.num_preemptions for r in requests) > 0
    for r in requests:
        if r.status is RequestStatus.FINISHED:
            assert r.num_output_tokens == r.target_output_tokens
    check_invariants(trace, "vllm", [LinearExecutor(capacity=400, per_ctx_s=1e-6)], params)


@pytest.mark.parametrize("params", [{"max_num_batched_tokens": 64, "max_num_seqs": 8,
                                     "block_size": 4},
                                    {"max_num_batched_tokens": 32, "max_num_seqs": 16,
                                     "block_size": 8},
                                    {"long_prefill_token_threshold": 40, "max_num_seqs": 8,
                                     "max_num_batched_tokens": 128}])
def test_jumps_are_exact_with_prefix_cache_hits_and_evictions(params):
    # shared prefixes and outputs, little KV: admissions wait on blocks, cached blocks are
    # evicted and re-cached; decode jumps must still equal one-iteration steps
    for seed in (1, 5, 7, 9, 11):
        trace = random_trace(np.random.default_rng(seed), 60, rate=20.0, block_tokens=8)
        ex = LinearExecutor(capacity=400, per_ctx_s=1e-6)
        jump = simulate(trace, "vllm", params, [ex, ex])
        step = simulate(trace, "vllm", params, [OneIterationExecutor(ex)] * 2)
        assert jump.records["num_cached_tokens"].sum() > 0
        for col in ("first_token_s", "finish_s", "scheduled_s", "max_itl_s"):
            np.testing.assert_allclose(jump.records[col], step.records[col], rtol=1e-9,
                                       atol=1e-9)
        assert len(jump.steps) < len(step.steps)


def test_config_is_validated():
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        make_policy("vllm", 10_000, max_num_batched_tokens=512, max_num_seqs=1024)
    with pytest.raises(ConfigError, match="long_prefill_token_threshold"):
        make_policy("vllm", 10_000, long_prefill_token_threshold=-1)
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        make_policy("vllm", 10_000, max_num_batched_tokens=0)


def test_list_prints_every_policy_with_what_it_follows(capsys):
    assert run_main(["--list"]) == 0
    out = capsys.readouterr().out
    assert set(FOLLOWS) == set(BUILTIN_POLICIES)
    for name, follows in FOLLOWS.items():
        assert f"  {name}  (follows: {follows})" in out
    assert "vLLM V1" in FOLLOWS["vllm"] and "V0" in FOLLOWS["vllm_v0"]
