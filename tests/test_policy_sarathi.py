"""`sarathi`: stall-free batching under a token budget (decodes first, then partial prefills,
then new requests), chunk sizes, paged KV and preemption shared with `vllm`."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.request import Request, RequestStatus
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, random_trace
from tests.test_policy_vllm import (arrive, check_blocks, make_policy, run_step, simulate_checked,
                                    small_traces)
from tests.test_properties import check_invariants


def test_long_prompt_is_chunked_and_never_stalls_decodes():
    p = make_policy("sarathi", 10_000, token_budget=64, max_num_seqs=8, block_size=16)
    a, b = arrive(p, [(30, 20), (20, 20)])
    step = p.next_step(0, 0.0)
    assert step.num_new_tokens == (30, 20) and step.samples == (True, True)
    run_step(p, step, 0.1)
    long = Request(2, 0.1, 200, 5)
    p.add_request(long, 0.1)
    sizes = []
    now = 0.1
    while long.num_output_tokens == 0:
        step = p.next_step(0, now)
        # decodes first, one token each, then the long prompt's chunk fills the budget
        assert step.request_ids[:2] == (0, 1) and step.num_new_tokens[:2] == (1, 1)
        assert step.num_first_tokens <= 64 and step.num_iterations == 1
        sizes.append(step.num_new_tokens[2])
        assert step.samples[2] == (sum(sizes) == 200)
        now += 0.1
        run_step(p, step, now)
    assert sizes == [62, 62, 62, 14]
    assert long.num_computed_tokens == 200 and a.num_output_tokens == 5


def test_partial_prefills_come_before_new_requests():
    p = make_policy("sarathi", 10_000, token_budget=100, max_num_seqs=4)
    arrive(p, [(150, 5), (80, 5)])
    step = p.next_step(0, 0.0)
    assert step.request_ids == (0,) and step.num_new_tokens == (100,)
    assert step.samples == (False,)
    run_step(p, step, 0.1)
    step = p.next_step(0, 0.1)
    assert step.request_ids == (0, 1) and step.num_new_tokens == (50, 50)
    assert step.samples == (True, False)
    run_step(p, step, 0.2)
    step = p.next_step(0, 0.2)
    assert step.request_ids == (0, 1) and step.num_new_tokens == (1, 30)
    assert step.num_context_tokens == (150, 50)


def test_decode_only_steps_jump_and_mixed_steps_do_not():
    p = make_policy("sarathi", 10_000, token_budget=256, max_num_seqs=4, block_size=16)
    arrive(p, [(10, 30), (20, 12)])
    run_step(p, p.next_step(0, 0.0), 0.1)
    step = p.next_step(0, 0.1)
    assert step.num_new_tokens == (1, 1) and step.num_iterations == 11  # fewest remaining
    run_step(p, step, 0.5, num_iterations=3)
    p.add_request(Request(2, 0.45, 40, 4), 0.45)
    step = p.next_step(0, 0.5)
    assert step.num_new_tokens == (1, 1, 40) and step.num_iterations == 1


def test_preempts_a_partial_prefill_when_it_was_admitted_last():
    # 5 blocks of 4: A (prompt 8) takes 2, B (prompt 12) 3 on admission; a budget of 10 leaves
    # B with 2 of its 12 tokens computed
    p = make_policy("sarathi", 20, token_budget=10, max_num_seqs=2, block_size=4,
                    watermark=0.0)
    a, b = arrive(p, [(8, 30), (12, 5)])
    step = p.next_step(0, 0.0)
    assert step.num_new_tokens == (8, 2) and step.samples == (True, False)
    run_step(p, step, 0.1)
    # A's 9th slot needs a 3rd block and none is free: B, the latest admitted, is preempted
    # (its 2 computed tokens will be recomputed) and cannot come back while A holds 3 blocks
    step = p.next_step(0, 0.1)
    assert step.request_ids == (0,) and step.num_new_tokens == (1,)
    assert list(p.state[0].waiting) == [b]
    assert (b.num_preemptions, b.num_recomputed_tokens, a.num_preemptions) == (1, 2, 0)
    assert [(kind, rid) for _, kind, rid, _ in p.recorder.events] == [("preempt", 1)]
    # A alone may decode until its 3 + 2 free blocks are full: slots 9..20, 12 iterations
    assert step.num_iterations == 12
    check_blocks(p)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces, capacity=st.integers(130, 600), budget=st.integers(8, 64),
       block_size=st.sampled_from([1, 4, 16]))
def test_chunks_never_exceed_the_budget_and_blocks_balance(trace, capacity, budget, block_size):
    params = {"token_budget": budget, "max_num_seqs": 8, "block_size": block_size}
    requests, steps = simulate_checked(trace, "sarathi", params, capacity,
                                       max_first_tokens=budget)
    assert all(r.is_finished for r in requests)
    for step in steps:
        if step.num_iterations > 1:
            assert step.num_new_tokens == (1,) * step.num_seqs


def test_preempted_requests_finish_with_exactly_their_outputs():
    trace = random_trace(np.random.default_rng(1), 40, rate=40.0, max_prompt=120, max_output=60)
    requests, _ = simulate_checked(trace, "sarathi",
                                   {"token_budget": 32, "max_num_seqs": 16, "block_size": 8},
                                   400)
    assert sum(r.num_preemptions for r in requests) > 0
    for r in requests:
        if r.status is RequestStatus.FINISHED:
            assert r.num_output_tokens == r.target_output_tokens
    check_invariants(trace, "sarathi", [LinearExecutor(capacity=400, per_ctx_s=1e-6)],
                     {"token_budget": 32, "max_num_seqs": 16, "block_size": 8})


def test_config_is_validated():
    with pytest.raises(ConfigError, match="token_budget"):
        make_policy("sarathi", 10_000, token_budget=100)  # below max_num_seqs=256
    with pytest.raises(ConfigError):
        make_policy("sarathi", 10_000, token_budget=0)
    assert make_policy("sarathi", 10_000).config.token_budget == 512
