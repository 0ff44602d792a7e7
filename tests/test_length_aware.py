"""`lacb`: admission order by predicted work, the starvation bound, KV reservation from the
predicted length, outgrowing a prediction, the oracle predictor, learning and config errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policies.length_aware.admission import (Ordering, admission_order, outstanding_blocks,
                                             planned_tokens, priority_key, reservation_tokens)
from policies.magnus.config import PredictorConfig
from policies.magnus.length_service import LearningSettings, LengthService
from policies.simulate import simulate
from sim.core.request import Request, RequestStatus
from sim.memory.block_manager import BlockManager
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace, random_trace
from tests.test_engine import OneIterationExecutor
from tests.test_policy_vllm import arrive, check_blocks, make_policy, run_step, simulate_checked


def req(rid: int, arrival: float, prompt: int, outputs: int, predicted: float) -> Request:
    r = Request(rid, arrival, prompt, outputs)
    r.predicted_output_tokens = predicted
    return r


# ---- ordering ------------------------------------------------------------------------------
def test_order_is_shortest_predicted_work_first_with_preempted_and_starving_ahead():
    a = req(0, 0.0, 10, 99, predicted=100)  # work 110
    b = req(1, 1.0, 50, 99, predicted=5)  # work 55
    c = req(2, 2.0, 5, 99, predicted=30)  # work 35
    d = req(3, 3.0, 10, 99, predicted=500)  # preempted: goes first whatever its work
    d.num_preemptions = 1
    order = admission_order([a, b, c, d], 5.0, Ordering())
    assert [(r.request_id, blocks) for r, blocks in order] == [
        (3, True), (2, False), (1, False), (0, False)]
    # prompt_weight 0: outputs alone decide
    assert [r.request_id for r, _ in admission_order([a, b, c], 5.0, Ordering(0.0))] == [1, 2, 0]
    # a and b have waited longer than 3.5 s: they go first, oldest first, and block
    order = admission_order([a, b, c], 5.0, Ordering(max_wait_s=3.5))
    assert [(r.request_id, blocks) for r, blocks in order] == [(0, True), (1, True), (2, False)]


def test_aging_credits_waiting_time_and_the_order_does_not_change_while_waiting():
    old = req(0, 0.0, 10, 99, predicted=90)  # work 100, arrived 0
    new = req(1, 9.0, 10, 99, predicted=40)  # work 50, arrived 9
    o = Ordering(aging_tokens_per_s=10.0)  # 9 s of waiting = 90 tokens of credit > 50
    assert [r.request_id for r, _ in admission_order([new, old], 9.0, o)] == [0, 1]
    assert priority_key(old, o)[0] == pytest.approx(100.0)
    assert priority_key(new, o)[0] == pytest.approx(50.0 + 90.0)
    o2 = Ordering(aging_tokens_per_s=5.0)  # 45 tokens of credit < 50: the short one first
    assert [r.request_id for r, _ in admission_order([old, new], 9.0, o2)] == [1, 0]


def test_policy_admits_the_shortest_predicted_request_first():
    p = make_policy("lacb", 10_000, predictor="oracle", max_num_seqs=1, block_size=4)
    arrive(p, [(10, 50), (10, 5), (10, 20)])
    assert [r.predicted_output_tokens for r in p.state[0].waiting] == [50, 5, 20]
    step = p.next_step(0, 0.0)
    assert step.request_ids == (1,)
    assert [r.request_id for r in p.state[0].waiting] == [0, 2]  # queue order kept


# ---- starvation bound ----------------------------------------------------------------------
def stream_with_one_long(long_row: tuple[int, int], short_row: tuple[int, int],
                         gap_s: float, until_s: float):
    rows = [(i * gap_s, *short_row) for i in range(int(until_s / gap_s))]
    rows.append((0.05 + 1e-6, *long_row))  # arrives just after the stream started
    return make_trace(sorted(rows))


@pytest.mark.parametrize("params,long_row,short_row,gap_s,slack_s", [
    ({"max_num_seqs": 1}, (10, 100), (10, 5), 0.02, 0.2),  # one slot: shorts keep it busy
    ({"block_size": 10}, (100, 250), (30, 10), 0.004, 0.5),  # memory: shorts backfill it
])
def test_wait_bound_admits_a_long_request_under_a_stream_of_short_ones(
        params, long_row, short_row, gap_s, slack_s):
    trace = stream_with_one_long(long_row, short_row, gap_s, until_s=5.0)
    long_id = int(np.flatnonzero(trace["output_tokens"].to_numpy() == long_row[1])[0])
    ex = [LinearExecutor(capacity=400, per_ctx_s=1e-6)]
    base = {"predictor": "oracle", "kv_margin": 1.0, "watermark": 0.0, **params}
    starved = simulate(trace, "lacb", {**base, "max_wait_s": None}, ex).records
    bounded = simulate(trace, "lacb", {**base, "max_wait_s": 1.0}, ex).records
    wait = lambda rec: rec.loc[long_id, "scheduled_s"] - rec.loc[long_id, "arrival_s"]  # noqa
    assert wait(starved) > 4.0  # shortest-first alone: admitted only when the stream ends
    assert 1.0 < wait(bounded) <= 1.0 + slack_s  # within the bound + draining what runs
    assert (bounded["status"] == "finished").all()


# ---- reservation -----------------------------------------------------------------------------
def test_reservation_math():
    r = req(0, 0.0, 100, 999, predicted=40.2)
    assert planned_tokens(r, 1.5) == 100 + math.ceil(1.5 * 40.2) == 161
    assert reservation_tokens(r, 1.5, 10_000) == 161
    assert reservation_tokens(r, 1.5, 150) == 150  # never more than the cache
    assert reservation_tokens(r, 0.0, 10_000) == 101  # known tokens + 1 at least
    r.num_output_tokens = 90  # outgrew its prediction: at least its tokens + 1
    assert reservation_tokens(r, 1.0, 10_000) == 191
    blocks = BlockManager(100, block_size=10)
    a, b = req(1, 0.0, 95, 999, predicted=100), req(2, 0.0, 30, 999, predicted=5)
    blocks.allocate(1, 95)  # 10 blocks of a plan of 195 tokens = 20 blocks
    blocks.allocate(2, 80)  # b has outgrown its plan of 35 tokens: owes nothing
    assert outstanding_blocks(blocks, [a, b], 1.0) == 10


def test_admission_waits_for_the_predicted_kv_that_vllm_would_not_reserve():
    # 100 blocks of 10 tokens. A: prompt 100, predicted 400 -> reserves 50 blocks, holds 10.
    # B: prompt 100, predicted 450 -> needs 55 > 100 - 10 - 40 = 50 unreserved blocks.
    params = dict(predictor="oracle", kv_margin=1.0, block_size=10, watermark=0.0)
    p = make_policy("lacb", 1000, **params)
    arrive(p, [(100, 400)])
    step = p.next_step(0, 0.0)
    assert step.request_ids == (0,) and p.num_reserved_kv_tokens(0) == 500
    run_step(p, step, 0.1)
    p.add_request(Request(1, 0.1, 100, 450), 0.1)
    assert p.available_blocks(p.state[0]) == 50
    step = p.next_step(0, 0.1)
    assert step.request_ids == (0,) and step.num_new_tokens == (1,)  # A decodes, B waits
    assert [r.request_id for r in p.state[0].waiting] == [1]
    q = make_policy("vllm_v0", 1000, block_size=10, watermark=0.0)  # vllm takes both at once
    arrive(q, [(100, 400), (100, 450)])
    assert q.next_step(0, 0.0).request_ids == (0, 1)


def test_request_outgrowing_its_prediction_grows_on_demand_and_finishes():
    # input_length without training data predicts the prompt length (10): every request here
    # outgrows it by far, so blocks run short and preemption by recomputation takes over
    trace = make_trace([(0.0, 10, 120), (0.0, 10, 120), (0.01, 10, 120), (0.02, 10, 5)])
    requests, _ = simulate_checked(trace, "lacb", {"block_size": 8, "watermark": 0.0,
                                                   "kv_margin": 1.0}, 240)
    assert [r.predicted_output_tokens for r in requests] == [10, 10, 10, 10]
    assert sum(r.num_preemptions for r in requests) > 0
    for r in requests:
        assert r.status is RequestStatus.FINISHED
        assert r.num_output_tokens == r.target_output_tokens


# ---- oracle predictor --------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oracle_reservations_never_preempt_where_vllm_does(seed):
    trace = random_trace(np.random.default_rng(seed), 40, rate=40.0, max_prompt=100,
                         max_output=120)
    params = {"block_size": 4, "watermark": 0.0}
    lacb, _ = simulate_checked(trace, "lacb", {**params, "predictor": "oracle",
                                               "kv_margin": 1.0}, 500)
    vllm, _ = simulate_checked(trace, "vllm_v0", params, 500)
    assert all(r.predicted_output_tokens == r.target_output_tokens for r in lacb)
    assert all(r.status is RequestStatus.FINISHED for r in lacb)
    assert sum(r.num_preemptions for r in lacb) == 0
    assert sum(r.num_preemptions for r in vllm) > 0


def test_stressed_variant_jumps_exactly():
    trace = random_trace(np.random.default_rng(5), 60, rate=40.0, max_output=80)
    params = {"predictor": {"kind": "noisy_oracle", "relative_error": 0.8}, "kv_margin": 0.5,
              "max_wait_s": 0.3, "block_size": 4, "aging_tokens_per_s": 20.0}
    ex = LinearExecutor(capacity=700, per_ctx_s=1e-6)
    jump = simulate(trace, "lacb", params, [ex])
    step = simulate(trace, "lacb", params, [OneIterationExecutor(ex)])
    assert jump.summary["num_preemptions"] > 0
    for col in ("first_token_s", "finish_s", "scheduled_s"):
        np.testing.assert_allclose(jump.records[col], step.records[col], rtol=1e-9, atol=1e-9)
    assert len(jump.steps) < len(step.steps)


# ---- continuous learning ------------------------------------------------------------------------
def test_badly_predicted_requests_retrain_the_predictor():
    cfg = PredictorConfig(kind="input_length", regressor="linear")
    lengths = LengthService(cfg, LearningSettings(retrain_period_s=10.0, retrain_delay_s=0.0),
                            np.random.default_rng(0), Recorder())
    done = [Request(i, 0.0, p, 3 * p) for i, p in enumerate([10, 20, 40, 80])]
    assert [lengths.predict(r) for r in done] == [10, 20, 40, 80]  # untrained: input length
    for r in done:
        r.num_output_tokens = r.target_output_tokens
    lengths.observe(done)
    assert lengths.learner.num_new == 4 and not lengths.queries
    lengths.poll(10.0)
    assert lengths.predict(Request(9, 10.0, 30, 1)) == 90  # learned output = 3 x input


def test_policy_records_its_predictions_and_learns_when_requests_finish():
    trace = random_trace(np.random.default_rng(1), 30, rate=5.0)
    params = {"predictor": {"kind": "input_length", "regressor": "linear"},
              "predictor_retrain_period_s": 1.0, "retrain_delay_s": 0.0}
    res = simulate(trace, "lacb", params, [LinearExecutor(capacity=5000)])
    assert (res.records["status"] == "finished").all()
    assert (res.events["kind"] == "retrain_predictor").any()


# ---- config errors ------------------------------------------------------------------------
@pytest.mark.parametrize("bad,field", [
    ({"kv_margin": -0.5}, "kv_margin"),
    ({"kv_margin": math.inf}, "kv_margin"),
    ({"prompt_weight": -1.0}, "prompt_weight"),
    ({"aging_tokens_per_s": -2.0}, "aging_tokens_per_s"),
    ({"max_wait_s": 0.0}, "max_wait_s"),
    ({"predictor_retrain_period_s": -1.0}, "predictor_retrain_period_s"),
    ({"predictor_error_fraction": 1.5}, "predictor_error_fraction"),
    ({"predictor_error_tokens": -1.0}, "predictor_error_tokens"),
    ({"retrain_delay_s": -1.0}, "retrain_delay_s"),
    ({"max_learning_samples": 0}, "max_learning_samples"),
    ({"predictor": {"kind": "psychic"}}, "predictor.kind"),
    ({"predictor": {"colour": 1}}, "predictor.colour"),
    ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
])
def test_config_errors_name_the_field(bad, field):
    with pytest.raises(ConfigError) as err:
        make_policy("lacb", 1000, **bad)
    assert err.value.field == field


def test_blocks_balance_after_hand_driven_steps():
    p = make_policy("lacb", 400, predictor="oracle", block_size=4, watermark=0.0)
    arrive(p, [(20, 10), (30, 3)])
    for t in range(1, 20):
        step = p.next_step(0, 0.1 * t)
        if step is None:
            break
        run_step(p, step, 0.1 * t)
    check_blocks(p)
    assert not p.state[0].running and p.num_reserved_kv_tokens(0) == 0
