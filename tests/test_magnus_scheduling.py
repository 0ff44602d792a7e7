"""HRRN / FCFS batch order, the KNN batch-time estimator, and the continuous-learning filters."""

import pytest

from policies.magnus.batcher import QueuedBatch
from policies.magnus.estimator import BatchSample, BatchTimeEstimator, IterationTimer
from policies.magnus.learning import ContinuousLearner, is_large_error
from policies.magnus.scheduler import pick_fcfs, pick_hrrn, response_ratio
from sim.core.request import Request
from sim.records.recorder import Recorder


def batch(batch_id, arrival_s, predicted=10):
    b = QueuedBatch(batch_id)
    b.add(Request(batch_id, arrival_s, 10, 5), 10, predicted)
    return b


def test_response_ratio_is_one_plus_wait_over_service():
    assert response_ratio(0.0, 2.0) == 1.0
    assert response_ratio(6.0, 2.0) == 4.0


def test_hrrn_prefers_short_batches_that_waited():
    old_long, new_short = batch(0, 0.0), batch(1, 5.0)
    estimates = {0: 40.0, 1: 1.0}
    # at t=10: old_long (10 + 40) / 40 = 1.25, new_short (5 + 1) / 1 = 6
    assert pick_hrrn([old_long, new_short], 10.0, lambda b: estimates[b.batch_id]) is new_short
    # FCFS runs the oldest regardless of length
    assert pick_fcfs([new_short, old_long]) is old_long


def test_hrrn_ages_long_batches_until_they_run():
    old_long, fresh_short = batch(0, 0.0), batch(1, 99.0)
    estimates = {0: 40.0, 1: 1.0}
    # at t=100: old_long (100 + 40) / 40 = 3.5 beats fresh_short (1 + 1) / 1 = 2
    assert pick_hrrn([fresh_short, old_long], 100.0, lambda b: estimates[b.batch_id]) is old_long


def test_hrrn_ties_go_to_the_earliest_arrival():
    a, b, c = batch(2, 1.0), batch(0, 3.0), batch(1, 1.0)
    # same wait / estimate ratio for all three at t=5 with estimates proportional to the wait
    estimates = {2: 4.0, 0: 2.0, 1: 4.0}
    assert pick_hrrn([b, a, c], 5.0, lambda x: estimates[x.batch_id]) is c  # arrival 1, id 1


def test_knn_estimator_recovers_training_batches_and_falls_back_when_cold():
    timer = IterationTimer(cold_iteration_s=0.05)
    cold = BatchTimeEstimator(knn_neighbors=3)
    assert not cold.trained
    assert cold.estimate(4, 100, 9, timer) == pytest.approx(10 * 0.05)
    timer.observe(3.0, 100)  # 0.03 s per iteration measured
    assert cold.estimate(4, 100, 9, timer) == pytest.approx(10 * 0.03)
    samples = [BatchSample(s, p, g, 0.01 * s * g + 0.001 * p)
               for s in (1, 8, 32) for p in (50, 200) for g in (10, 100)]
    assert not cold.fit(samples[:2]).trained  # fewer than k samples
    warm = cold.fit(samples)
    assert warm.trained and not cold.trained  # fit returns a new estimator
    for s in samples:
        assert warm.estimate(s.size, s.max_prompt, s.max_output, timer) == \
            pytest.approx(s.duration_s)
    between = warm.estimate(8, 200, 90, timer)
    assert 0.01 * 8 * 10 < between < 0.01 * 32 * 100


@pytest.mark.parametrize("predicted, actual, expected", [
    (100, 85, True),     # 15 tokens and 17.6% off
    (105, 100, False),   # 5 tokens: below 10 tokens
    (110, 100, False),   # exactly 10 tokens is not above
    (1000, 985, False),  # 15 tokens but only 1.5%
    (150, 200, True),    # under-prediction counts too
])
def test_predictor_sample_filter_needs_both_absolute_and_relative_error(predicted, actual,
                                                                        expected):
    assert is_large_error(predicted, actual, 10.0, 0.1) is expected


@pytest.mark.parametrize("estimate, actual, expected", [
    (10.0, 13.0, True),   # 3 s and 23%
    (10.0, 11.5, False),  # 1.5 s
    (30.0, 32.5, False),  # 2.5 s but 7.7%
    (1.0, 2.5, False),    # 150% but 1.5 s
])
def test_estimator_sample_filter(estimate, actual, expected):
    assert is_large_error(estimate, actual, 2.0, 0.2) is expected


def test_learner_retrains_each_period_and_swaps_after_the_delay():
    fits = []

    def train(samples):
        fits.append(list(samples))
        return f"model{len(fits)}"

    rec = Recorder()
    learner = ContinuousLearner("predictor", period_s=180.0, delay_s=10.0, max_samples=3,
                                train=train, recorder=rec)
    assert learner.poll(179.9) is None  # before the first period nothing is trained
    learner.collect("a")
    assert learner.poll(100.0) is None
    assert learner.poll(180.0) is None and fits == [["a"]]  # trained, not yet in effect
    assert learner.poll(189.9) is None
    assert learner.poll(190.0) == "model1"
    assert learner.poll(400.0) is None and len(fits) == 1  # no new samples: no retrain
    for s in "bcde":
        learner.collect(s)
    assert learner.poll(545.0) is None and fits[-1] == ["c", "d", "e"]  # bounded to 3
    assert learner.next_retrain_s == 720.0  # periods stay on the 180 s grid
    assert learner.poll(1000.0) == "model2"
    kinds = [e[1] for e in rec.events]
    assert kinds == ["retrain_predictor", "swap_predictor", "retrain_predictor",
                     "swap_predictor"]


def test_learner_without_period_never_trains():
    learner = ContinuousLearner("estimator", None, 0.0, 10, lambda s: "m", Recorder())
    learner.collect(1)
    assert learner.poll(1e9) is None
