"""TorchExecutor against the Executor contract, and replays through the simulator's engine."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from policies.registry import policy_names  # noqa: E402
from policies.simulate import simulate  # noqa: E402
from real.executor import TorchExecutor  # noqa: E402
from real.replay import replay  # noqa: E402
from real.timing import CPU_CLOCKS  # noqa: E402
from sim.core.executor import Executor, Step  # noqa: E402
from sim.measured.calibrated import CalibratedExecutor  # noqa: E402
from tests.factories import LinearExecutor, make_trace, random_trace  # noqa: E402


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


def test_until_s_cuts_after_the_first_iteration_reaching_it(engine, monkeypatch):
    # a fake CPU clock that advances 1 s per reading (start, then one mark per iteration): the
    # j-th iteration ends at j s, so the cut does not depend on how fast this machine is
    ticks = itertools.count()
    monkeypatch.setitem(CPU_CLOCKS, engine.cpu_clock, lambda: float(next(ticks)))
    engine.reset()
    first = engine.execute(Step(0, (1,), (8,), (0,), (True,), num_iterations=20), until_s=0.0)
    assert first.num_iterations == 1 and engine.cache.num_tokens(1) == 8
    full = engine.execute(Step(0, (1,), (1,), (8,), (True,), num_iterations=20))
    assert full.num_iterations == 20 and full.iteration_ends_s.tolist() == list(range(1, 21))
    cut = engine.execute(Step(0, (1,), (1,), (28,), (True,), num_iterations=20), until_s=4.5)
    assert cut.iteration_ends_s.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]  # first end >= 4.5
    assert cut.duration_s == 5.0 and not cut.oom
    exact = engine.execute(Step(0, (1,), (1,), (33,), (True,), num_iterations=20), until_s=3.0)
    assert exact.num_iterations == 3  # an end exactly at until_s stops the step
    assert engine.cache.num_tokens(1) == 28 + 5 + 3
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

    # all at t = 0 and at most two running: 0 and 1 start, 2 takes 0's slot after its 3 tokens
    # and runs alone after 1's 5 tokens; no arrival is left, so no measured time changes a step
    trace = make_trace([(0.0, 40, 3), (0.0, 30, 5), (0.0, 20, 12)])
    res = replay(trace, "orca", {"max_tokens": 64, "max_batch_size": 2}, [Recording(engine)])
    assert res.summary["completed"] == 3
    freed = [rid for step in seen for rid in step.freed_request_ids]
    assert freed == [0, 1]  # request 2 finishes last: nothing runs after it
    assert engine.cache.has(2) and not engine.cache.has(0) and not engine.cache.has(1)


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


def token_identity(res) -> tuple[int, int]:
    """(computed tokens of all steps, useful + padding + recomputed tokens)."""
    rec = res.records
    done = rec[rec["status"] == "finished"]
    useful = int((done["prompt_tokens"] + done["output_tokens"] - 1).sum())
    extra = int(rec["num_padding_tokens"].sum() + rec["num_recomputed_tokens"].sum())
    return int(res.steps["num_computed_tokens"].sum()), useful + extra


@pytest.mark.parametrize("rows,oom_iterations,recomputed", [
    # 32 blocks of 16: four prompts padded to 100 hold 28; at 129 tokens each needs 9 blocks,
    # so the batch runs out at iteration 30 after 29 complete (100 + 28 tokens each)
    ([(0.0, 100, 120), (0.0, 100, 10), (0.0, 60, 30), (0.0, 90, 20)], 29, 128),
    # four prompts padded to 200 need 52 blocks: the padded prefill itself runs out
    ([(0.0, 200, 5), (0.0, 20, 5), (0.0, 20, 5), (0.0, 20, 5)], 0, 0),
])
def test_oom_recovery_policy_works_on_the_real_engine(rows, oom_iterations, recomputed):
    ex = TorchExecutor("tiny", "cpu", kv_tokens=512, block_size=16, warmup_iterations=0,
                       num_threads=1)
    res = replay(make_trace(rows), "vanilla", {"batch_size": 4, "on_oom": "split"}, [ex])
    assert res.summary["num_oom_events"] == 1
    assert res.steps.loc[res.steps["oom"], "num_iterations"].tolist() == [oom_iterations]
    assert res.summary["completed"] == 4
    assert (res.records["num_recomputed_tokens"] == recomputed).all()
    computed, accounted = token_identity(res)
    assert computed == accounted
    ex.check()


@pytest.mark.skipif("vllm_v0" not in policy_names(), reason="needs the vllm policy")
def test_preempting_policy_recomputes_on_the_real_engine():
    # 20 blocks of 16 tokens. Every request arrives at t = 0, so no step depends on measured
    # time. vLLM admits the first two prompts (7 blocks each; a third does not fit); each needs
    # 14 blocks by its last token (100 + 120 - 1), so at 160 tokens each the two hold all 20
    # blocks before either can finish, and the later one is preempted: unavoidable.
    ex = TorchExecutor("tiny", "cpu", kv_tokens=320, block_size=16, warmup_iterations=0,
                       num_threads=1)
    trace = make_trace([(0.0, 100, 120)] * 3 + [(0.0, 30, 40)])
    res = replay(trace, "vllm_v0", {"block_size": 16}, [ex])
    rec = res.records
    assert (rec["status"] == "finished").all()
    assert (rec["output_tokens"] == rec["target_output_tokens"]).all()
    assert res.summary["num_preemptions"] >= 1
    assert rec.loc[1, "num_preemptions"] >= 1
    assert rec.loc[1, "num_recomputed_tokens"] == 160  # the 160 tokens it held when preempted
    computed, accounted = token_identity(res)
    assert computed == accounted
    # with no arrival left, the policy's decisions do not depend on time: the simulator with
    # any cost model makes the same ones
    sim = simulate(trace, "vllm_v0", {"block_size": 16}, [LinearExecutor(capacity=320)])
    for col in ("num_preemptions", "num_recomputed_tokens", "instance_id"):
        assert rec[col].tolist() == sim.records[col].tolist(), col
    assert res.steps["num_computed_tokens"].tolist() == sim.steps["num_computed_tokens"].tolist()
    ex.check()
