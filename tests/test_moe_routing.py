"""The closed forms of sim/cost/moe_routing.py against Monte-Carlo counts (seeded numpy Generator):
expected distinct experts under uniform and Zipf-skewed top-k routing, and the busiest expert-
parallel rank's expected load."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.cost.moe_routing import (busiest_rank_distinct, busiest_rank_rows, expected_distinct,
                             expected_distinct_uniform, expected_max_normal,
                             inclusion_probabilities, popularity, rank_of_expert)


def route(rng: np.random.Generator, weights: np.ndarray, top_k: int, tokens: int,
          trials: int) -> np.ndarray:
    """[trials, tokens, top_k] experts: top-k without replacement, successive sampling by
    popularity (the k smallest exponential keys of rates w_e: numpy's choice(replace=False, p=w)
    draws the same distribution)."""
    keys = rng.exponential(size=(trials, tokens, len(weights))) / weights
    return np.argpartition(keys, top_k - 1, axis=2)[:, :, :top_k]


def mc_distinct(choice: np.ndarray) -> float:
    trials = choice.shape[0]
    return float(np.mean([len(np.unique(choice[t])) for t in range(trials)]))


@pytest.mark.parametrize("experts, top_k", [(8, 2), (64, 6), (128, 8), (256, 8)])
@pytest.mark.parametrize("tokens", [1, 3, 16, 100])
def test_uniform_expected_distinct_matches_monte_carlo(experts, top_k, tokens):
    rng = np.random.default_rng(1)
    choice = route(rng, np.full(experts, 1.0 / experts), top_k, tokens, 400)
    formula = expected_distinct_uniform(experts, top_k, tokens)
    assert formula == pytest.approx(experts * (1 - (1 - top_k / experts) ** tokens))
    assert mc_distinct(choice) == pytest.approx(formula, rel=0.02)
    probs = inclusion_probabilities(popularity(experts), top_k)
    assert expected_distinct(probs, tokens) == pytest.approx(formula, rel=1e-12)


def test_numpy_choice_without_replacement_is_the_same_sampling():
    rng = np.random.default_rng(2)
    w = popularity(8, 1.0)
    direct = np.array([rng.choice(8, 2, replace=False, p=w) for _ in range(20000)])
    keys = route(rng, w, 2, 20000, 1)[0]
    assert np.bincount(direct.ravel(), minlength=8) / 20000 == pytest.approx(
        np.bincount(keys.ravel(), minlength=8) / 20000, abs=0.015)


@pytest.mark.parametrize("experts, top_k, zipf", [(8, 2, 1.0), (64, 6, 1.0), (128, 8, 1.2),
                                                   (256, 8, 0.8)])
@pytest.mark.parametrize("tokens", [1, 4, 16, 64])
def test_skewed_expected_distinct_within_5_percent_of_monte_carlo(experts, top_k, zipf, tokens):
    """The one approximation: p_e = 1 - exp(-w_e t), sum p_e = k (Rosen's order sampling)."""
    rng = np.random.default_rng(3)
    w = popularity(experts, zipf)
    probs = inclusion_probabilities(w, top_k)
    assert probs.sum() == pytest.approx(top_k) and probs.max() <= 1.0
    choice = route(rng, w, top_k, tokens, 300)
    assert expected_distinct(probs, tokens) == pytest.approx(mc_distinct(choice), rel=0.05)
    if tokens > 1:  # skew touches fewer experts than uniform routing
        assert expected_distinct(probs, tokens) < expected_distinct_uniform(experts, top_k,
                                                                            tokens)


def test_expected_max_normal():
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    rng = np.random.default_rng(4)
    assert expected_max_normal(8) == pytest.approx(rng.standard_normal((200000, 8)).max(1).mean(),
                                                   rel=0.01)


@pytest.mark.parametrize("experts, top_k, ranks, zipf", [
    (8, 2, 2, 0.0), (8, 2, 4, 0.0), (64, 6, 8, 0.0), (256, 8, 8, 0.0), (128, 8, 4, 0.0),
    (8, 2, 2, 1.0), (64, 6, 4, 1.0), (256, 8, 8, 0.8)])
@pytest.mark.parametrize("tokens", [16, 256])
def test_busiest_rank_load_matches_monte_carlo(experts, top_k, ranks, zipf, tokens):
    rng = np.random.default_rng(5)
    w = popularity(experts, zipf)
    probs = inclusion_probabilities(w, top_k)
    choice = route(rng, w, top_k, tokens, 400)
    on_rank = rank_of_expert(experts, ranks)[choice]  # [trials, tokens, k] -> rank
    loads = np.stack([(on_rank == r).sum(axis=(1, 2)) for r in range(ranks)], axis=1)
    formula = busiest_rank_rows(probs, ranks, tokens)
    assert formula == pytest.approx(loads.max(axis=1).mean(), rel=0.04)
    assert formula >= tokens * top_k / ranks  # never below the balanced share
    distinct = np.stack([[len(np.unique(choice[t][on_rank[t] == r])) for r in range(ranks)]
                         for t in range(choice.shape[0])])
    # the busiest rank's distinct experts: the expectation of the maximum over ranks
    assert busiest_rank_distinct(probs, ranks, tokens) == pytest.approx(
        distinct.max(axis=1).mean(), rel=0.05)


def test_one_rank_is_the_whole_batch():
    probs = inclusion_probabilities(popularity(8), 2)
    assert busiest_rank_rows(probs, 1, 10) == pytest.approx(20.0)
    assert busiest_rank_rows(probs, 8, 10) <= 10 * 1  # a rank of one expert: a row per token


@pytest.mark.parametrize("experts, top_k, ranks, zipf", [
    (256, 8, 8, 0.0),  # DeepSeek-V3, EP 8 (issue 25: 2.57 by Monte Carlo at one token)
    (128, 8, 4, 0.0),  # Qwen3-30B-A3B, EP 4 (3.48 at one token)
    (8, 2, 8, 0.0),  # one expert per rank: the busiest always holds one
    (8, 2, 4, 0.0), (64, 6, 8, 1.0), (256, 8, 8, 1.2)])
@pytest.mark.parametrize("tokens", [1, 2, 4])
def test_busiest_rank_distinct_is_the_expected_maximum_at_small_batches(experts, top_k, ranks,
                                                                         zipf, tokens):
    """A step waits for the rank touching the most experts: E[max over ranks], which at small
    batches is well above the largest rank's expectation (the old value)."""
    rng = np.random.default_rng(11)
    w = popularity(experts, zipf)
    probs = inclusion_probabilities(w, top_k)
    choice = route(rng, w, top_k, tokens, 2000)
    on_rank = rank_of_expert(experts, ranks)[choice]
    most = np.array([max(len(np.unique(choice[t][on_rank[t] == r])) for r in range(ranks))
                     for t in range(choice.shape[0])])
    assert busiest_rank_distinct(probs, ranks, tokens) == pytest.approx(most.mean(), rel=0.04)
