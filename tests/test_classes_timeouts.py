"""Client timeouts (sim/engine/timeouts.py): cancelled requests free their KV, tokens stay conserved,
cancellations are counted apart from rejections, and jumps stay exact."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.registry import build_policy
from policies.simulate import simulate
from sim.core.executor import InstanceInfo
from sim.engine.simulation import Simulation
from sim.engine.trace_rows import requests_from_trace
from sim.metrics.summary import request_records
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace, random_trace, with_block_ids
from tests.test_engine import OneIterationExecutor
from tests.test_properties import check_invariants

CANCELLING = ("vllm", "vllm_v0", "sarathi", "orca")
PARAMS = {"vllm": {"max_num_batched_tokens": 256, "max_num_seqs": 8},
          "vllm_v0": {"max_num_batched_tokens": 512, "max_num_seqs": 8},
          "sarathi": {"token_budget": 256, "max_num_seqs": 8},
          "orca": {"max_batch_size": 8, "max_tokens": 64}}


def timed_trace(seed: int, n: int = 100, rate: float = 100.0) -> pd.DataFrame:
    """An overloaded random trace whose clients give up after 0.05-0.6 s (some never)."""
    rng = np.random.default_rng(seed)
    df = random_trace(rng, n, rate=rate, max_prompt=150, max_output=40)
    df["timeout_s"] = np.where(rng.random(n) < 0.2, np.nan, rng.uniform(0.05, 0.6, n))
    return df


def run_with_policy(trace, name, params, executors):
    """Simulate and return (records frame, steps frame, the policy after the run)."""
    infos = [InstanceInfo(i, ex.kv_capacity_tokens, ex.name) for i, ex in enumerate(executors)]
    recorder = Recorder()
    policy = build_policy(name, params, infos, recorder)
    requests = requests_from_trace(trace)
    Simulation(requests, policy, executors, recorder).run()
    return request_records(requests, ("timeout_s",)), recorder.steps_frame(), policy


@pytest.mark.parametrize("policy", CANCELLING)
def test_cancelled_requests_free_their_kv_and_tokens_stay_conserved(policy):
    trace = timed_trace(0)
    ex = LinearExecutor(capacity=900, per_ctx_s=1e-6)
    rec, steps, pol = run_with_policy(trace, policy, PARAMS[policy], [ex, ex])
    cancelled = rec[rec["status"] == "cancelled"]
    assert len(cancelled) > 10 and (cancelled["reason"] == "client_timeout").all()
    assert (cancelled["num_padding_tokens"] > 0).any()  # some were cancelled while running
    assert (cancelled["output_tokens"] > 0).any() and (cancelled["output_tokens"] == 0).any()
    # every cancellation at its deadline, or at the end of the step that was running it
    deadline = cancelled["arrival_s"] + cancelled["timeout_s"]
    assert (cancelled["finish_s"] >= deadline - 1e-12).all()
    assert (cancelled["finish_s"] <= deadline + 0.1).all()
    # KV: never above capacity, and all of it back when the run ends
    assert (steps["kv_tokens"] <= ex.capacity).all()
    assert (steps["reserved_kv_tokens"] <= ex.capacity).all()
    for i in range(2):
        assert pol.num_reserved_kv_tokens(i) == 0
        assert not pol.state[i].waiting and not pol.state[i].running
    # tokens conserved: what a cancelled request computed is padding (wasted)
    done = rec[rec["status"] == "finished"]
    useful = int((done["prompt_tokens"] + done["output_tokens"] - 1).sum())
    extra = int(rec["num_padding_tokens"].sum() + rec["num_recomputed_tokens"].sum()
                - rec["num_cached_tokens"].sum())
    assert int(steps["num_computed_tokens"].sum()) == useful + extra
    # no request outlives its deadline
    finished_late = done["finish_s"] > done["arrival_s"] + done["timeout_s"] + 0.1
    assert not finished_late.any()


@pytest.mark.parametrize("policy", CANCELLING)
def test_cancellations_are_counted_apart_from_rejections(policy):
    trace = timed_trace(1)
    trace.loc[3, "prompt_tokens"] = 5000  # never fits: rejected, not cancelled
    res = simulate(trace, policy, PARAMS[policy], [LinearExecutor(capacity=900)])
    rec, summary, events = res.records, res.summary, res.events
    n = int((rec["status"] == "cancelled").sum())
    assert summary["cancelled"] == n > 0 and summary["reason_client_timeout"] == n
    assert summary["rejected"] == 1
    assert summary["completed"] + summary["rejected"] + summary["cancelled"] == len(trace)
    assert (rec.loc[rec["status"] == "cancelled", "finish_reason"] == "cancelled").all()
    kinds = events.loc[events["kind"] == "cancelled"]
    assert len(kinds) == n and kinds["info"].str.startswith("client_timeout: ").all()
    assert "timeout_s" in rec.columns


@pytest.mark.parametrize("policy", CANCELLING)
def test_timeout_jumps_are_exact(policy):
    trace = timed_trace(2, n=80, rate=25.0)
    ex = LinearExecutor(capacity=1200, per_ctx_s=1e-6)
    jump = simulate(trace, policy, PARAMS[policy], [ex, ex])
    step = simulate(trace, policy, PARAMS[policy], [OneIterationExecutor(ex)] * 2)
    assert (jump.records["status"] == step.records["status"]).all()
    assert (jump.records["status"] == "cancelled").sum() > 5
    for col in ("first_token_s", "finish_s", "scheduled_s", "max_itl_s", "output_tokens"):
        np.testing.assert_allclose(jump.records[col], step.records[col], rtol=1e-9, atol=1e-9)
    assert jump.summary["num_computed_tokens"] == step.summary["num_computed_tokens"]
    assert len(jump.steps) < len(step.steps)


def test_a_running_request_is_cancelled_at_its_deadline_iteration():
    # one request alone: 10 ms per iteration; its client gives up after 0.105 s
    trace = make_trace([(0.0, 10, 100)])
    trace["timeout_s"] = 0.105
    ex = LinearExecutor(base_s=0.01, per_token_s=0.0)
    res = simulate(trace, "vllm", {}, [ex])
    r = res.records.iloc[0]
    assert r["status"] == "cancelled"
    assert r["finish_s"] == pytest.approx(0.11)  # the boundary after the deadline
    assert r["output_tokens"] == 11  # the tokens of the 11 iterations that ran
    assert r["num_padding_tokens"] == 10 + 11 - 1  # its KV, wasted


def test_a_queued_request_is_cancelled_at_its_deadline_exactly():
    trace = make_trace([(0.0, 10, 100), (0.001, 10, 5)])
    trace["timeout_s"] = [np.nan, 0.05]
    res = simulate(trace, "orca", {"max_batch_size": 1, "max_tokens": 128},
                   [LinearExecutor(base_s=0.01)])
    r = res.records.iloc[1]
    assert r["status"] == "cancelled" and r["output_tokens"] == 0
    assert r["finish_s"] == pytest.approx(0.051, abs=1e-12)
    assert np.isnan(r["scheduled_s"]) and r["num_padding_tokens"] == 0
    assert res.records.iloc[0]["status"] == "finished"


def test_policies_that_cannot_cancel_refuse_timeouts():
    trace = make_trace([(0.0, 10, 5)])
    trace["timeout_s"] = 1.0
    with pytest.raises(ConfigError, match="cannot cancel"):
        simulate(trace, "vanilla", {}, [LinearExecutor()])


traces = st.lists(
    st.tuples(st.floats(0, 2, allow_nan=False), st.integers(1, 300), st.integers(1, 60),
              st.one_of(st.none(), st.floats(0.01, 1.0))),
    min_size=1, max_size=25,
).map(lambda rows: pd.DataFrame(sorted(rows, key=lambda r: r[0]), columns=[
    "arrival_s", "prompt_tokens", "output_tokens", "timeout_s"]).astype({"timeout_s": float}))


@pytest.mark.parametrize("policy", CANCELLING)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces, capacity=st.integers(200, 3000), instances=st.integers(1, 3),
       caching=st.booleans(), priority=st.booleans(), speculate=st.booleans())
def test_invariants_hold_with_timeouts(policy, trace, capacity, instances, caching, priority,
                                       speculate):
    params = {} if policy == "orca" else {"enable_prefix_caching": caching}
    if priority and policy != "orca":
        trace = trace.assign(priority=np.arange(len(trace)) % 3)
        params.update(scheduling_policy="priority", priority_aging_s=0.1)
    if speculate and policy != "orca":
        params.update(num_speculative_tokens=2, acceptance_rate=0.6)
    ex = LinearExecutor(capacity=capacity, per_ctx_s=1e-6, draft_s=1e-3)
    check_invariants(with_block_ids(trace), policy, [ex] * instances, params,
                     statuses={"finished", "rejected", "failed", "cancelled"})
