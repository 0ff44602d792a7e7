"""Magnus' WMA objective and adaptive batch assembler: hand-computed cases and properties."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.magnus.batcher import AdaptiveBatcher
from policies.magnus.wma import batch_kv_tokens, batch_wma, request_wma, wma_after_insert
from sim.core.request import Request


def brute_force_wma(prompt, gen):
    """The definition, term by term: G(p)(L(B) - L(p)) + sum_{g=G(p)}^{G(B)} (g + L(B))."""
    lb, gb = max(prompt), max(gen)
    return [g * (lb - p) + sum(x + lb for x in range(g, gb + 1)) for p, g in zip(prompt, gen)]


def test_wma_of_a_two_request_batch_by_hand():
    # L = (10, 30), G = (5, 8): L(B) = 30, G(B) = 8
    # p0: gen 5 * (30 - 10) = 100; wait sum_{g=5}^{8} (g + 30) = 35 + 36 + 37 + 38 = 146
    # p1: gen 8 * 0 = 0;           wait sum_{g=8}^{8} (g + 30) = 38
    assert request_wma(np.array([10, 30]), np.array([5, 8])).tolist() == [246.0, 38.0]
    assert batch_wma(np.array([10, 30]), np.array([5, 8])) == 246.0
    assert batch_wma(np.array([10, 30]), np.array([5, 8]), aggregate="sum") == 284.0


def test_lone_request_wastes_only_its_own_last_iteration():
    # sum_{g=G}^{G} (g + L) = G + L
    assert batch_wma(np.array([40]), np.array([7])) == 47.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(1, 200)), min_size=1, max_size=8))
def test_closed_form_matches_definition(rows):
    prompt, gen = zip(*rows)
    np.testing.assert_allclose(request_wma(np.array(prompt), np.array(gen)),
                               brute_force_wma(prompt, gen))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(1, 200)), min_size=1, max_size=8),
       st.integers(1, 300), st.integers(1, 200))
def test_inserting_never_lowers_max_wma(rows, new_prompt, new_gen):
    prompt, gen = (np.array(c) for c in zip(*rows))
    after = wma_after_insert(prompt, gen, new_prompt, new_gen, capacity_tokens=10**9)
    assert after >= batch_wma(prompt, gen)


def test_memory_cap_makes_wma_infinite():
    prompt, gen = np.array([100, 100]), np.array([50, 50])
    # 3 * (100 + 50) = 450 tokens
    assert batch_kv_tokens(3, 100, 50) == 450
    assert wma_after_insert(prompt, gen, 100, 50, capacity_tokens=450) < math.inf
    assert wma_after_insert(prompt, gen, 100, 50, capacity_tokens=449) == math.inf
    # a longer prediction raises G(B) for the whole batch: 3 * (100 + 60) = 480
    assert wma_after_insert(prompt, gen, 10, 60, capacity_tokens=479) == math.inf


def test_batch_size_cap_makes_wma_infinite():
    prompt, gen = np.array([10, 10]), np.array([5, 5])
    assert wma_after_insert(prompt, gen, 10, 5, 10**6, max_batch_size=3) < math.inf
    assert wma_after_insert(prompt, gen, 10, 5, 10**6, max_batch_size=2) == math.inf


def req(i, prompt=10, out=5, t=0.0):
    return Request(i, t, prompt, out)


def test_request_joins_least_wasting_batch_below_threshold():
    batcher = AdaptiveBatcher(capacity_tokens=10**6, threshold=500)
    a = batcher.insert(req(0), 10, 5)  # empty queue: new batch
    b = batcher.insert(req(1), 10, 100)  # with a: wait of a = sum_{5}^{100}(g+10) > 500
    assert a is not b and len(batcher) == 2
    # (10, 6) in a: a's request wastes sum_{5}^{6}(g + 10) = 31; itself 16 -> 31
    # (10, 6) in b: it wastes sum_{6}^{100}(g + 10) > 500
    assert batcher.insert(req(2), 10, 6) is a
    assert batcher.insert(req(3), 10, 98) is b
    assert [r.request_id for r in a.requests] == [0, 2]
    assert [r.request_id for r in b.requests] == [1, 3]


def test_request_at_or_above_threshold_opens_a_new_batch():
    batcher = AdaptiveBatcher(capacity_tokens=10**6, threshold=31)
    a = batcher.insert(req(0), 10, 5)
    # joining a gives WMA 31 (see above): not below the threshold
    assert batcher.insert(req(1), 10, 6) is not a
    assert len(batcher) == 2


def test_memory_cap_forces_a_new_batch_even_with_zero_waste():
    batcher = AdaptiveBatcher(capacity_tokens=300, threshold=1e9)
    a = batcher.insert(req(0, 100, 50), 100, 50)
    assert batcher.insert(req(1, 100, 50), 100, 50) is a  # 2 * 150 = 300 fits
    assert batcher.insert(req(2, 100, 50), 100, 50) is not a  # 3 * 150 > 300


def test_sealed_batches_take_no_new_requests():
    batcher = AdaptiveBatcher(capacity_tokens=10**6, threshold=1e9)
    r = req(0)
    r.predicted_output_tokens = 5
    sealed = batcher.requeue([r])
    assert sealed.sealed
    assert batcher.insert(req(1), 10, 5) is not sealed


def test_ties_go_to_the_older_batch():
    batcher = AdaptiveBatcher(capacity_tokens=10**6, threshold=1e9, max_batch_size=1)
    first = batcher.insert(req(0), 10, 5)
    second = batcher.insert(req(1), 10, 5)
    batcher.max_batch_size = 2
    assert batcher.best_batch(10, 5)[0] is first
    assert second is not first


@pytest.mark.parametrize("aggregate", ["max", "sum"])
def test_sum_aggregate_bounds_batch_size_by_threshold(aggregate):
    batcher = AdaptiveBatcher(capacity_tokens=10**6, threshold=100, aggregate=aggregate)
    for i in range(10):
        batcher.insert(req(i), 10, 5)  # identical requests: each wastes G + L = 15
    # max: 15 < 100 always, one batch; sum: 15 * n < 100 -> batches of at most 6
    expected = [10] if aggregate == "max" else [6, 4]
    assert [b.size for b in batcher.batches] == expected
