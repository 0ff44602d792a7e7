"""The glp / abp / magnus policies driven directly with hand-built step results, and end to end."""

import numpy as np
import pytest

from policies.magnus.config import ABPConfig, GLPConfig, MagnusConfig
from policies.magnus.estimator import BatchSample, BatchTimeEstimator
from policies.registry import build_policy
from policies.simulate import simulate
from sim.core.executor import InstanceInfo, StepResult
from sim.core.request import Request, RequestStatus
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, random_trace
from tests.test_magnus_workload import write_apps
from traces.magnus_workload import magnus_workload


def make(name="magnus", capacity=1000, **params):
    return build_policy(name, params, [InstanceInfo(0, capacity)], Recorder(), seed=0)


def run_to_end(policy, step, start, per_iteration_s=0.01):
    ends = per_iteration_s * np.arange(1, step.num_iterations + 1)
    return policy.update(step, StepResult(float(ends[-1]), ends), start + float(ends[-1]))


def test_defaults_differ_only_as_the_ablations_do():
    glp, abp, magnus = GLPConfig(), ABPConfig(), MagnusConfig()
    assert (glp.batch_size, glp.scheduler) == (8, "fcfs")
    assert (abp.batch_size, abp.scheduler) == (None, "fcfs")
    assert (magnus.batch_size, magnus.scheduler) == (None, "hrrn")
    assert magnus.predictor.kind == "input_length" and magnus.predictor.train_path is None
    assert MagnusConfig(predictor={"kind": "oracle"}).predictor.kind == "oracle"
    with pytest.raises(ConfigError, match="predictor.dims"):
        MagnusConfig(predictor={"dims": 3})
    with pytest.raises(ConfigError, match="scheduler"):
        MagnusConfig(scheduler="sjf")


def test_oom_splits_the_batch_into_two_halves_that_queue_again():
    p = make("abp", capacity=1000)  # cold input-length predictor: G' = prompt = 10
    reqs = [Request(i, 0.0, 10, 300) for i in range(4)]
    for r in reqs:
        assert p.add_request(r, 0.0)
    assert [b.size for b in p.batcher.batches] == [4]  # 4 * (10 + 10) fits easily
    step = p.next_step(0, 0.0)
    assert step.num_seqs == 4 and step.num_iterations == 300
    assert p.num_reserved_kv_tokens(0) <= 1000
    # true footprint 40 + 4 (k - 1) exceeds 1000 at iteration 242: 241 completed
    ends = 0.01 * np.arange(1, 242)
    assert p.update(step, StepResult(2.42, ends, oom=True), 2.42) == []
    assert [(b.size, b.sealed) for b in p.batcher.batches] == [(2, True), (2, True)]
    for r in reqs:
        assert r.status is RequestStatus.WAITING and r.num_computed_tokens == 0
        assert r.num_recomputed_tokens == 10 + 241 - 1  # prefill + 240 decode iterations lost
    assert [e[1] for e in p.recorder.events] == ["oom"]
    first = p.next_step(0, 2.42)
    assert first.request_ids == (0, 1)
    done = run_to_end(p, first, 2.42)  # 2 * 310 = 620 tokens fit
    assert [r.request_id for r in done] == [0, 1]
    assert p.next_step(0, 5.42).request_ids == (2, 3)
    assert p.num_reserved_kv_tokens(0) == 2 * (10 + 300 - 1)  # KV at its last iteration


def test_a_lone_request_that_cannot_fit_fails():
    p = make("magnus", capacity=100)
    r = Request(0, 0.0, 10, 200)
    p.add_request(r, 0.0)
    step = p.next_step(0, 0.0)
    ends = 0.01 * np.arange(1, 90)
    assert p.update(step, StepResult(0.9, ends, oom=True), 0.9) == [r]
    assert r.status is RequestStatus.FAILED and not p.batcher.batches


def test_prompt_larger_than_memory_is_rejected():
    p = make("glp", capacity=100)
    r = Request(0, 0.0, 100, 5)
    assert not p.add_request(r, 0.0) and r.status is RequestStatus.REJECTED


@pytest.mark.parametrize("name, first", [("magnus", 1), ("abp", 0), ("glp", 0)])
def test_hrrn_runs_the_short_batch_that_waited_fcfs_the_oldest(name, first):
    p = make(name, capacity=10_000, predictor={"kind": "oracle"})
    p.add_request(Request(0, 0.0, 10, 500), 0.0)  # long
    p.add_request(Request(1, 1.0, 10, 5), 1.0)  # short: wastes too much to share a batch
    assert len(p.batcher.batches) == 2
    # at t=10 (cold estimate (G' + 1) x 0.02 s): long (10 + 10.02) / 10.02 ~ 2,
    # short (9 + 0.12) / 0.12 = 76
    assert p.next_step(0, 10.0).request_ids == (first,)


def test_glp_caps_the_batch_size_abp_does_not():
    for name, sizes in (("glp", [3, 3, 1]), ("abp", [7])):
        p = make(name, capacity=10_000, batch_size=3 if name == "glp" else None)
        for i in range(7):
            p.add_request(Request(i, 0.0, 10, 5), 0.0)
        assert [b.size for b in p.batcher.batches] == sizes


def test_only_badly_predicted_requests_and_batches_are_learned_from():
    p = make("magnus", capacity=10_000, cold_iteration_s=1.0, retrain_delay_s=10.0,
             estimator_warmup_batches=0)
    good, bad = Request(0, 0.0, 50, 52), Request(1, 0.0, 50, 100)  # predicted 50 each
    p.add_request(good, 0.0)
    p.add_request(bad, 0.0)
    step = p.next_step(0, 0.0)
    assert step.request_ids == (0, 1)  # one batch
    finished = run_to_end(p, step, 0.0)  # 100 iterations of 0.01 s = 1 s
    assert {r.request_id for r in finished} == {0, 1}
    assert [(q.input_tokens, n) for q, n in p.lengths.learner.samples] == [(50, 100)]
    # re-estimated with the actual G(B) = 100: (100 + 1) x 1.0 s = 101 s for a 1 s batch,
    # a large error; the sample carries G(B) = 100
    assert list(p.time_learner.samples) == [BatchSample(2, 50, 100, 1.0)]
    cold = p.lengths.predictor
    assert p.next_step(0, 185.0) is None  # retrained at 185 s, effective at 195 s
    assert p.lengths.predictor is cold and p.lengths.predictor.model is None
    p.next_step(0, 195.0)
    assert p.lengths.predictor is not cold and p.lengths.predictor.model is not None
    kinds = [e[1] for e in p.recorder.events]
    assert "retrain_predictor" in kinds and "swap_predictor" in kinds


def test_a_batch_estimated_well_once_its_actual_length_is_known_is_not_learned_from():
    # the paper's filter: re-estimate with the actual G(B), not the dispatch estimate on G'(B)
    p = make("magnus", capacity=10_000, cold_iteration_s=0.1, estimator_warmup_batches=0)
    r = Request(0, 0.0, 10, 300)  # the cold input-length predictor says G' = 10
    p.add_request(r, 0.0)
    step = p.next_step(0, 0.0)
    run_to_end(p, step, 0.0, per_iteration_s=0.1)  # 300 x 0.1 s = 30 s
    # dispatch estimate (10 + 1) x 0.1 = 1.1 s: off by 28.9 s (> 2 s and > 20% of 30 s), which
    # the old filter collected; the re-estimate (300 + 1) x 0.1 = 30.1 s is off by 0.1 s
    assert list(p.time_learner.samples) == []


def test_a_batch_whose_dispatch_estimate_was_right_by_luck_is_learned_from():
    p = make("magnus", capacity=10_000, cold_iteration_s=0.1, estimator_warmup_batches=0)
    r = Request(0, 0.0, 100, 10)  # predicted G' = 100, runs 10 iterations
    p.add_request(r, 0.0)
    step = p.next_step(0, 0.0)
    assert step.num_iterations == 10
    run_to_end(p, step, 0.0, per_iteration_s=1.01)  # 10 x 1.01 s = 10.1 s
    # dispatch estimate (100 + 1) x 0.1 = 10.1 s: exact, the old filter dropped it; the
    # re-estimate (10 + 1) x 0.1 = 1.1 s is off by 9.0 s (> 2 s and > 20% x 10.1 = 2.02 s)
    [sample] = p.time_learner.samples
    assert (sample.size, sample.max_prompt, sample.max_output) == (1, 100, 10)
    assert sample.duration_s == pytest.approx(10.1)


def test_the_knn_estimator_re_estimates_with_the_actual_length():
    p = make("magnus", capacity=10_000, estimator_warmup_batches=0, knn_neighbors=2)
    p.estimator = BatchTimeEstimator(2).fit([BatchSample(1, 10, 10, 1.0),
                                             BatchSample(1, 10, 300, 30.0)])
    p.add_request(Request(0, 0.0, 10, 300), 0.0)  # cold input-length predictor: G' = 10
    queued = p.batcher.batches[0]
    assert p.estimate_s(queued) == pytest.approx(1.0)  # on G' = 10: the first sample exactly
    run_to_end(p, p.next_step(0, 0.0), 0.0, per_iteration_s=0.1)  # 30 s
    assert list(p.time_learner.samples) == []  # re-estimate on G = 300: 30.0 s, exact
    p.add_request(Request(1, 40.0, 10, 300), 40.0)
    run_to_end(p, p.next_step(0, 40.0), 40.0, per_iteration_s=0.2)  # 60 s against 30 s
    assert list(p.time_learner.samples) == [BatchSample(1, 10, 300, pytest.approx(60.0))]


def test_invariants_end_to_end_with_an_oracle_never_run_out_of_memory():
    trace = random_trace(np.random.default_rng(0), 120, rate=30.0, max_output=80)
    ex = LinearExecutor(capacity=3000, per_ctx_s=1e-6)
    res = simulate(trace, "magnus", {"predictor": {"kind": "oracle"}}, [ex, ex])
    assert res.summary["completed"] == 120 and res.summary["num_oom_events"] == 0
    assert (res.steps["kv_tokens"] <= 3000).all()
    assert (res.records["predicted_output_tokens"] == res.records["output_tokens"]).all()


def test_semantic_predictor_end_to_end_on_a_text_workload(tmp_path):
    path = write_apps(tmp_path / "apps.jsonl.gz", per_task=60)
    trace = magnus_workload(path, rate_per_s=20.0, num_requests=40).serve
    params = {"predictor": {"kind": "semantic", "train_path": str(path), "model": "hashing",
                            "cache_dir": str(tmp_path / "cache"), "num_trees": 10}}
    res = simulate(trace, "magnus", params, [LinearExecutor(capacity=5000)])
    assert res.summary["completed"] == 40
    rec = res.records
    error = (rec["predicted_output_tokens"] - rec["output_tokens"]).abs()
    assert error.mean() < 5  # "count" outputs 1 token, "upper" its input length


def test_estimator_keeps_every_warm_up_batch_then_only_bad_estimates():
    p = make("magnus", capacity=10_000, predictor={"kind": "oracle"},
             estimator_warmup_batches=2, cold_iteration_s=0.01)
    for i in range(4):  # one request per batch; each runs 20 x 0.01 s as estimated
        p.add_request(Request(i, float(i), 10, 20), float(i))
        run_to_end(p, p.next_step(0, float(i)), float(i))
    assert len(p.time_learner.samples) == 2  # the two warm-up batches only
    p.add_request(Request(9, 5.0, 10, 20), 5.0)
    run_to_end(p, p.next_step(0, 5.0), 5.0, per_iteration_s=0.5)  # 10 s, estimated 0.21 s
    assert len(p.time_learner.samples) == 3
