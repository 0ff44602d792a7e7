"""TorchExecutor against the Executor contract, and replays through the simulator's engine."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from policies.registry import policy_names  # noqa: E402
from real.executor import TorchExecutor  # noqa: E402
from real.replay import replay  # noqa: E402
from sim.calibrated import CalibratedExecutor  # noqa: E402
from sim.executor import Executor, Step  # noqa: E402
from tests.factories import make_trace, random_trace  # noqa: E402


@pytest.fixture(scope="module")
def engine() -> TorchExecutor:
    return TorchExecutor("tiny", "cpu", kv_tokens=8192, warmup_iterations=1, num_threads=1)


def test_implements_the_executor_protocol(engine):
    assert isinstance(engine, Executor)
    assert engine.kv_capacity_tokens == 8192 and engine.attention_backend == "sdpa"
    assert "tiny" in engine.name and "sdpa" in engine.name


def test_multi_iteration_step_equals_single_iterations():
    one = TorchExecutor("tiny", "cpu", kv_tokens=1024, warmup_iterations=0)
    many = TorchExecutor("tiny", "cpu", kv_tokens=1024, warmup_iterations=0)
    res = many.execute(Step(0, (1, 2), (17, 5), (0, 0), (True, True), num_iterations=6))
    assert res.num_iterations == 6 and not res.oom
    assert np.all(np.diff(res.iteration_ends_s) > 0) and res.duration_s == res.iteration_ends_s[-1]
    one.execute(Step(0, (1, 2), (17, 5), (0, 0), (True, True)))
    for j in range(5):
        one.execute(Step(0, (1, 2), (1, 1), (17 + j, 5 + j), (True, True)))
    for rid, n in ((1, 17), (2, 5)):
        assert (one.tokens.get(rid, 0, n + 6) == many.tokens.get(rid, 0, n + 6)).all()
        assert many.cache.num_tokens(rid) == n + 5  # the last sampled token is not fed back


def test_until_s_cuts_after_the_first_iteration_reaching_it(engine):
    engine.reset()
    first = engine.execute(Step(0, (1,), (8,), (0,), (True,), num_iterations=20), until_s=0.0)
    assert first.num_iterations == 1
    full = engine.execute(Step(0, (1,), (1,), (8,), (True,), num_iterations=20))
    assert full.num_iterations == 20
    until = float(full.iteration_ends_s[4])  # a time some 5 iterations in
    cut = engine.execute(Step(0, (1,), (1,), (28,), (True,), num_iterations=20), until_s=until)
    ends = cut.iteration_ends_s
    assert ends[-1] >= until and (len(ends) == 1 or ends[-2] < until)
    assert cut.num_iterations < 20 and engine.cache.num_tokens(1) == 28 + cut.num_iterations
    engine.check()


def test_out_of_blocks_ends_the_step_where_the_simulator_says():
    # 4 blocks of 16: two requests of 20 tokens hold 2 blocks each until their 33rd token
    ex = TorchExecutor("tiny", "cpu", kv_tokens=64, block_size=16, warmup_iterations=0)
    step = Step(0, (1, 2), (20, 20), (0, 0), (True, True), num_iterations=30,
                stop_on_arrival=False)
    res = ex.execute(step)
    assert res.oom and res.num_iterations == 13 and res.duration_s >= res.iteration_ends_s[-1]
    sim = CalibratedExecutor(_ConstantTimes(), 64, block_size=16)
    assert sim.execute(step).oom and sim.execute(step).num_iterations == 13
    ex.check()


class _ConstantTimes:
    def iteration_times(self, step, num_iterations):
        return np.full(num_iterations, 1e-3)


def test_padded_static_batch_computes_the_padding(engine):
    engine.reset()
    res = engine.execute(Step(0, (1, 2, 3), (30, 30, 30), (0, 0, 0), (True,) * 3,
                              num_iterations=4, stop_on_arrival=False))
    assert res.num_iterations == 4
    assert [engine.cache.num_tokens(r) for r in (1, 2, 3)] == [33, 33, 33]


def test_release_wrapper_frees_finished_requests(engine):
    seen = []

    class Recording:
        def __init__(self, inner):
            self.inner, self.name = inner, inner.name

        @property
        def kv_capacity_tokens(self):
            return self.inner.kv_capacity_tokens

        def execute(self, step, until_s=math.inf):
            seen.append(step)
            return self.inner.execute(step, until_s)

        def reset(self):
            self.inner.reset()

    trace = make_trace([(0.0, 40, 3), (0.0, 30, 12), (0.5, 20, 4)])
    res = replay(trace, "orca", {"max_tokens": 64}, [Recording(engine)])
    assert res.summary["completed"] == 3
    freed = [rid for step in seen for rid in step.freed_request_ids]
    assert 0 in freed and 1 in freed  # request 2 finishes last: nothing runs after it
    assert engine.cache.has(2) and not engine.cache.has(0)


@pytest.mark.parametrize("policy,params", [
    ("orca", {"max_tokens": 64, "max_batch_size": 8}),
    ("vanilla", {"batch_size": 4}),
])
def test_replay_serves_every_request_exactly(engine, policy, params):
    trace = random_trace(np.random.default_rng(1), 24, rate=40.0, max_prompt=80, max_output=24)
    res = replay(trace, policy, params, [engine])
    rec = res.records
    assert (rec["status"] == "finished").all()
    assert (rec["output_tokens"] == trace["output_tokens"]).all()
    assert (res.steps["duration_s"] > 0).all()
    useful = int((rec["prompt_tokens"] + rec["output_tokens"] - 1).sum())
    extra = int(rec["num_padding_tokens"].sum() + rec["num_recomputed_tokens"].sum())
    assert int(res.steps["num_computed_tokens"].sum()) == useful + extra
    engine.check()


def test_oom_recovery_policy_works_on_the_real_engine():
    ex = TorchExecutor("tiny", "cpu", kv_tokens=512, block_size=16, warmup_iterations=0,
                       num_threads=1)
    trace = make_trace([(0.0, 100, 120), (0.0, 100, 10), (0.0, 60, 30), (0.0, 90, 20)])
    res = replay(trace, "vanilla", {"batch_size": 4, "on_oom": "split"}, [ex])
    assert res.summary["num_oom_events"] >= 1
    assert res.summary["completed"] == 4 and res.summary["num_recomputed_tokens"] > 0
    ex.check()


@pytest.mark.skipif("vllm" not in policy_names(), reason="needs the vllm policy")
def test_preempting_policy_recomputes_on_the_real_engine():
    ex = TorchExecutor("tiny", "cpu", kv_tokens=320, block_size=16, warmup_iterations=0,
                       num_threads=1)
    trace = random_trace(np.random.default_rng(4), 12, rate=100.0, max_prompt=60, max_output=60)
    res = replay(trace, "vllm", {}, [ex])
    done = res.records[res.records["status"] == "finished"]
    assert (done["output_tokens"] == done["target_output_tokens"]).all()
    assert res.summary["num_preemptions"] > 0
    ex.check()
