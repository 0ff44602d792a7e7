"""Invariants every registered policy must keep, on random small traces (hypothesis)."""

import numpy as np
import pytest
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.registry import policy_names
from policies.simulate import simulate
from tests.factories import MIN_INSTANCES, LinearExecutor, generic_params, with_block_ids

POLICIES = policy_names()

traces = st.lists(
    st.tuples(st.floats(0, 3, allow_nan=False), st.integers(1, 300), st.integers(1, 60)),
    min_size=1, max_size=25,
).map(lambda rows: with_block_ids(pd.DataFrame(sorted(rows), columns=[
    "arrival_s", "prompt_tokens", "output_tokens"])))  # block ids: prefix caching finds hits


# extra parameter sets that stress a policy's limits on small capacities
VARIANTS: dict[str, list[dict]] = {
    "orca": [{"max_tokens": 64, "max_batch_size": 4}, {"router": "round_robin"}],
    "ccb": [{"router": "least_kv"}],
    "vanilla": [{"batch_size": 3, "on_oom": "split"}, {"batch_size": 4, "on_oom": "fail"}],
    "dynamic": [{"batch_size": 3, "max_batch_delay_ms": 0.0, "on_oom": "split"},
                {"batch_size": 4, "max_batch_delay_ms": None, "on_oom": "fail"}],
    "magnus": [{"predictor": {"kind": "noisy_oracle", "relative_error": 0.9}}],
    "abp": [{"predictor": {"kind": "noisy_oracle", "relative_error": 0.9}}],
    "glp": [{"batch_size": 4, "predictor": {"kind": "noisy_oracle", "relative_error": 0.9}}],
    "vllm_v0": [{"enable_prefix_caching": True, "block_size": 4},
             {"num_speculative_tokens": 3, "acceptance_rate": 0.6},
             {"num_speculative_tokens": 5, "acceptance_rate": 0.8,
              "acceptance_concentration": 2.0, "block_size": 4},
             {"enable_prefix_caching": True, "num_speculative_tokens": 2, "block_size": 8,
              "router": "session_affinity"}],
    "sarathi": [{"enable_prefix_caching": True, "token_budget": 300, "max_num_seqs": 8},
                {"num_speculative_tokens": 2, "acceptance_rate": 1.0},
                {"num_speculative_tokens": 4, "acceptance_rate": 0.5,
                 "acceptance_concentration": 5.0, "token_budget": 300, "max_num_seqs": 8},
                {"enable_prefix_caching": True, "num_speculative_tokens": 3,
                 "token_budget": 300, "router": "least_tokens"}],
    "vllm": [{"max_num_batched_tokens": 64, "max_num_seqs": 8, "block_size": 4},
                {"enable_prefix_caching": False, "long_prefill_token_threshold": 40},
                {"num_speculative_tokens": 3, "acceptance_rate": 0.6, "max_num_seqs": 8,
                 "max_num_batched_tokens": 300, "router": "least_tokens"},
                {"num_speculative_tokens": 2, "block_size": 8, "router": "session_affinity"}],
    "djl": [{"rolling_batch": "trtllm", "max_rolling_batch_size": 4, "max_num_tokens": 64},
            {"rolling_batch": "scheduler", "max_model_len": 128},
            {"enable_chunked_prefill": True, "max_rolling_batch_size": 8,
             "enable_prefix_caching": True}],
    "lacb": [{"predictor": "oracle", "max_wait_s": 0.5, "max_num_seqs": 4},
             {"kv_margin": 0.0, "aging_tokens_per_s": 50.0, "max_wait_s": None,
              "enable_prefix_caching": True},
             {"predictor": {"kind": "noisy_oracle", "relative_error": 0.9},
              "kv_margin": 3.0, "max_num_batched_tokens": 300, "prompt_weight": 0.0}],
}


def check_invariants(trace: pd.DataFrame, policy: str, executors: list,
                     params: dict | None = None,
                     statuses: set[str] = frozenset({"finished", "rejected", "failed"})) -> None:
    res = simulate(trace, policy, params or {}, executors)
    rec = res.records
    caps = {i: ex.kv_capacity_tokens for i, ex in enumerate(executors)}
    # each request reaches exactly one final state; finished ones have exactly their tokens
    assert len(rec) == len(trace) and rec["request_id"].is_unique
    assert set(rec["status"]) <= statuses
    done = rec[rec["status"] == "finished"]
    assert (done["output_tokens"] == done["target_output_tokens"]).all()
    # tokens conserved: computed = useful (prompt + outputs - 1 of finished requests) + padding
    # + recomputation, through OOMs, splits and failures too (docs/architecture.md)
    steps = res.steps
    useful = int((done["prompt_tokens"] + done["output_tokens"] - 1).sum())
    extra = int(rec["num_padding_tokens"].sum() + rec["num_recomputed_tokens"].sum()
                - rec["num_cached_tokens"].sum())  # prefix-cache hits are not computed
    assert int(steps["num_computed_tokens"].sum()) == useful + extra
    assert res.summary["num_computed_tokens"] == useful + extra
    # KV use and reservation never above capacity
    cap = steps["instance_id"].map(caps)
    assert (steps["kv_tokens"] <= cap).all()
    assert (steps["reserved_kv_tokens"] <= cap).all()
    # timestamps ordered
    eps = 1e-9
    assert (done["scheduled_s"] >= done["arrival_s"] - eps).all()
    assert (done["first_token_s"] >= done["scheduled_s"] - eps).all()
    assert (done["finish_s"] >= done["first_token_s"] - eps).all()
    # busy time of an instance equals the sum of its step durations, and steps never overlap
    for i, grp in steps.groupby("instance_id"):
        assert res.instances.loc[i, "busy_s"] == np.float64(grp["duration_s"].sum()) or \
            abs(res.instances.loc[i, "busy_s"] - grp["duration_s"].sum()) < 1e-9
        starts, ends = grp["start_s"].to_numpy(), (grp["start_s"] + grp["duration_s"]).to_numpy()
        assert (starts[1:] >= ends[:-1] - 1e-9).all()


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces, capacity=st.integers(200, 3000), instances=st.integers(1, 3),
       variant=st.integers(0, 4))
def test_invariants_hold_for_every_policy(policy, trace, capacity, instances, variant):
    ex = LinearExecutor(capacity=capacity, per_ctx_s=1e-6, draft_s=1e-3)  # draft: speculation
    params = ([{}] + VARIANTS.get(policy, []))[variant % (1 + len(VARIANTS.get(policy, [])))]
    instances = max(instances, MIN_INSTANCES.get(policy, 1))
    check_invariants(trace, policy, [ex] * instances, generic_params(policy, params))


def test_every_policy_is_covered():
    assert {"vanilla", "orca"} <= set(POLICIES)
