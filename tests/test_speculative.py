"""Speculative decoding: acceptance against its closed form, token conservation, verify-step cost,
KV trimming and configuration errors."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from policies.simulate import simulate
from policies.speculative import (Speculator, accepted_counts, check_speculative,
                                  expected_tokens_per_step)
from sim.cluster.draft import draft_deployment, shared_kv_capacity
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.executor import Step
from sim.core.request import Request
from sim.cost.cost_model import CostModelConfig, RooflineCostModel
from sim.memory.block_manager import BlockManager
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace
from tests.test_properties import check_invariants

SPEC = {"num_speculative_tokens": 4, "acceptance_rate": 0.7}


def long_trace(n: int = 8, prompt: int = 50, output: int = 600) -> pd.DataFrame:
    return make_trace([(0.05 * i, prompt, output) for i in range(n)])


# ---- acceptance -----------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.7, 0.9, 1.0])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_tokens_per_verify_match_closed_form(alpha, k):
    draws = accepted_counts(np.random.default_rng(7), np.full(100_000, alpha), k) + 1
    expected = expected_tokens_per_step(alpha, k)
    assert draws.min() >= 1 and draws.max() <= k + 1
    se = draws.std() / math.sqrt(len(draws))
    assert abs(draws.mean() - expected) <= 4 * se + 1e-12
    if alpha == 1.0:
        assert expected == k + 1 and (draws == k + 1).all()


def test_simulated_tokens_per_step_match_closed_form():
    ex = LinearExecutor(capacity=50_000, draft_s=1e-3)
    res = simulate(long_trace(), "vllm_v0", SPEC, [ex], seed=3)
    s = res.summary
    expected = expected_tokens_per_step(0.7, 4)
    # a + 1 has variance below (k + 1)^2 / 4; a verify per request-step
    assert abs(s["spec_tokens_per_step"] - expected) < 4 * 2.5 / math.sqrt(s["spec_verify_steps"])
    assert s["spec_draft_tokens"] == 4 * s["spec_verify_steps"]
    assert s["spec_acceptance_rate"] == pytest.approx((expected - 1) / 4, abs=0.03)


def test_per_request_rates_follow_the_beta_draw():
    spec = Speculator(4, 0.7, 5.0, np.random.default_rng(0))
    rates = np.array([spec.acceptance(Request(i, 0.0, 10, 10)) for i in range(20_000)])
    assert rates.mean() == pytest.approx(0.7, abs=0.01)
    assert rates.var() == pytest.approx(0.7 * 0.3 / 6.0, rel=0.05)  # Beta: m(1-m)/(c+1)
    r = Request(0, 0.0, 10, 10)
    assert spec.acceptance(r) == spec.acceptance(r)  # drawn once per request


# ---- conservation and equivalence -----------------------------------------------------------
@pytest.mark.parametrize("policy", ["vllm_v0", "sarathi"])
@pytest.mark.parametrize("capacity", [400, 50_000])
def test_tokens_conserved(policy, capacity):
    trace = make_trace([(0.01 * i, 30 + 17 * i, 20 + 9 * i) for i in range(20)])
    params = {**SPEC, "acceptance_concentration": 3.0, "block_size": 8}
    ex = LinearExecutor(capacity=capacity, per_ctx_s=1e-6, draft_s=1e-3)
    check_invariants(trace, policy, [ex, ex], params)
    rec = simulate(trace, policy, params, [ex, ex]).records
    done = rec[rec["status"] == "finished"]
    assert (done["output_tokens"] == done["target_output_tokens"]).all()
    assert (done["num_accepted_tokens"] <= done["num_draft_tokens"]).all()


@pytest.mark.parametrize("policy", ["vllm_v0", "sarathi"])
def test_k0_is_the_plain_policy(policy):
    trace = make_trace([(0.02 * i, 40 + 13 * i, 15 + 7 * i) for i in range(15)])
    ex = LinearExecutor(capacity=900, per_ctx_s=1e-6, draft_s=1e-3)
    plain = simulate(trace, policy, {}, [ex], seed=1)
    k0 = simulate(trace, policy, {"num_speculative_tokens": 0, "acceptance_rate": 0.2}, [ex],
                  seed=1)
    pd.testing.assert_frame_equal(plain.records, k0.records)
    measured = [c for c in plain.steps.columns if "host" in c]  # wall-clock policy time
    pd.testing.assert_frame_equal(plain.steps.drop(columns=measured),
                                  k0.steps.drop(columns=measured))
    assert plain.summary["spec_verify_steps"] == 0


def test_bursts_keep_tpot_and_mean_itl_equal():
    ex = LinearExecutor(capacity=50_000, draft_s=2e-3)
    res = simulate(make_trace([(0.0, 20, 41)]), "vllm_v0",
                   {"num_speculative_tokens": 3, "acceptance_rate": 1.0}, [ex])
    rec, s = res.records.iloc[0], res.summary
    assert rec["num_spec_steps"] == 10  # 40 tokens after the first, 4 per verify
    assert s["mean_itl_s"] == pytest.approx(rec["tpot_s"])
    verify = 0.01 + 1e-4 * 4 + 3 * 2e-3  # target chunk of k + 1 tokens + k draft iterations
    assert rec["max_itl_s"] == pytest.approx(verify)
    assert s["median_itl_s"] == 0.0  # 3 of every 4 tokens arrive with the one before


# ---- cost and memory --------------------------------------------------------------------------
def draft_executor(draft: str = "llama-68m"):
    return build_executors(ClusterSpec(model="llama-2-7b", gpu="A100-80GB", draft_model=draft,
                                       cost_model={"kind": "roofline"}))[0]


def test_verify_step_costs_k_draft_iterations_plus_target_chunk():
    ex, k, ctx = draft_executor(), 4, (100, 300, 700)
    step = Step(0, (0, 1, 2), (k + 1,) * 3, ctx, (True,) * 3, num_draft_tokens=k,
                num_verify_seqs=3)
    target = RooflineCostModel(ex.cost_model.deployment, CostModelConfig())
    draft = RooflineCostModel(draft_deployment(target.deployment, "llama-68m"), CostModelConfig())
    want = target.iteration_times([k + 1] * 3, ctx, num_sampled=3 * (k + 1))[0]
    for j in range(k):  # draft iteration j: one token per request at context c + j
        want += draft.iteration_times([1] * 3, [c + j for c in ctx], num_sampled=3)[0]
    assert ex.execute(step).duration_s == pytest.approx(want, rel=1e-12)


def test_draft_prefills_prompt_chunks_too():
    ex = draft_executor()
    target = RooflineCostModel(ex.cost_model.deployment, CostModelConfig())
    draft = RooflineCostModel(draft_deployment(target.deployment, "llama-68m"), CostModelConfig())
    step = Step(0, (0, 1), (512, 1), (0, 900), (True, True))  # a prefill and a plain decode
    want = (target.iteration_times([512, 1], [0, 900], 2)[0]
            + draft.iteration_times([512], [0], 0)[0])  # the decode row costs the draft nothing
    assert ex.execute(step).duration_s == pytest.approx(want, rel=1e-12)


def test_draft_weights_and_kv_shrink_capacity():
    plain = build_executors(ClusterSpec())[0]
    for name in ("llama-68m", "tinyllama-1.1b"):
        ex = draft_executor(name)
        t, d = ex.cost_model.deployment, ex.draft.cost_model.deployment
        per_token = t.kv_bytes_per_token_per_gpu + d.kv_bytes_per_token_per_gpu
        want = int((t.kv_bytes_per_gpu - d.weight_bytes_per_gpu) // per_token)
        assert ex.kv_capacity_tokens == want == shared_kv_capacity(t, d)
        assert ex.kv_capacity_tokens < plain.kv_capacity_tokens and ex.has_draft
    assert not plain.has_draft


def test_trim_drops_the_tail():
    bm = BlockManager(10, 4)
    bm.allocate(0, 6)
    bm.append(0, 5)  # 11 tokens: 3 blocks
    assert bm.trim(0, 4) == 1 and bm.num_tokens(0) == 7 and len(bm.block_table(0)) == 2
    assert bm.trim(0, 0) == 0
    bm.check()
    with pytest.raises(ValueError):
        bm.trim(0, 8)
    with pytest.raises(ValueError):
        bm.trim(5, 1)


def test_cost_model_sweep_speeds_up_light_load():
    trace = make_trace([(0.5 * i, 200, 150) for i in range(6)])
    plain = simulate(trace, "sarathi", {}, build_executors(ClusterSpec()))
    spec = simulate(trace, "sarathi", {**SPEC, "acceptance_rate": 0.9}, [draft_executor()])
    assert spec.summary["mean_tpot_s"] < 0.5 * plain.summary["mean_tpot_s"]
    assert spec.summary["completed"] == 6


# ---- errors -----------------------------------------------------------------------------------
def test_speculation_needs_a_draft_model():
    with pytest.raises(ConfigError) as err:
        simulate(long_trace(1), "vllm_v0", SPEC, [LinearExecutor()])
    assert err.value.field == "num_speculative_tokens" and "draft_model" in str(err.value)
    with pytest.raises(ConfigError, match="draft"):
        simulate(long_trace(1), "sarathi", SPEC, build_executors(ClusterSpec()))


@pytest.mark.parametrize("field,value", [
    ("num_speculative_tokens", -1), ("num_speculative_tokens", 65),
    ("num_speculative_tokens", 2.5), ("acceptance_rate", 1.5), ("acceptance_rate", -0.1),
    ("acceptance_concentration", -1.0), ("acceptance_concentration", math.inf)])
def test_bad_speculative_parameters(field, value):
    params = {**SPEC, field: value}
    with pytest.raises(ConfigError) as err:
        check_speculative(params["num_speculative_tokens"], params["acceptance_rate"], 0.0
                          if field != "acceptance_concentration" else value)
    assert err.value.field == field
    with pytest.raises(ConfigError):
        simulate(long_trace(1), "vllm_v0", params, [LinearExecutor(draft_s=1e-3)])


def test_beta_draws_need_an_open_acceptance_rate():
    with pytest.raises(ConfigError) as err:
        check_speculative(4, 1.0, 2.0)
    assert err.value.field == "acceptance_concentration"


@pytest.mark.parametrize("changes", [{"backend": "real"},
                                     {"cost_model": {"calibration": "x.json"}}])
def test_draft_model_only_on_the_cost_model(changes):
    with pytest.raises(ConfigError) as err:
        ClusterSpec(draft_model="llama-68m", **changes)
    assert err.value.field == "cluster.draft_model"


@pytest.mark.parametrize("draft", ["no-such-model", "llama-2-70b"])
def test_bad_draft_model(draft):
    with pytest.raises(ConfigError) as err:
        draft_executor(draft)
    assert err.value.field == "cluster.draft_model"


def test_draft_must_shard_like_the_target():
    spec = dataclasses.replace(ClusterSpec(model="llama-2-70b", tensor_parallel=8),
                               draft_model="llama-68m")  # 12 heads do not split over 8 GPUs
    with pytest.raises(ConfigError) as err:
        build_executors(spec)
    assert err.value.field == "cluster.draft_model"


@pytest.mark.parametrize("kwargs", [
    {"num_draft_tokens": 2, "num_verify_seqs": 0}, {"num_draft_tokens": 0, "num_verify_seqs": 1},
    {"num_draft_tokens": 2, "num_verify_seqs": 3}, {"num_draft_tokens": 1, "num_verify_seqs": 1},
    {"num_draft_tokens": 2, "num_verify_seqs": 1, "num_iterations": 2}])
def test_bad_verify_steps(kwargs):
    with pytest.raises(ValueError):
        Step(0, (0, 1), (3, 3), (10, 10), (True, True), **kwargs)


# ---- report -----------------------------------------------------------------------------------
def test_report_draws_figures_and_table(tmp_path):
    import json

    from experiments.figures import main
    from experiments.figures.speculative import breakeven_alpha, draw

    rows, policies = [], [{"label": "plain", "params": {}, "cluster": {}}]
    for k in (0, 2):
        label = "plain" if k == 0 else "k2_a0.7"
        if k:
            policies.append({"label": label, "cluster": {"draft_model": "llama-68m"},
                             "params": {"num_speculative_tokens": 2, "acceptance_rate": 0.7}})
        for rate in (1.0, 4.0):
            rows.append({"label": label, "rate": rate, "mean_tpot_s": 0.02 / (1 + k),
                         "output_throughput": 100 * rate * (1 + k), "mean_batch_size": 3.0,
                         "spec_tokens_per_step": 2.19 if k else float("nan")})
    pd.DataFrame(rows).to_csv(tmp_path / "summary.csv", index=False)
    (tmp_path / "config.json").write_text(json.dumps(
        {"policies": policies, "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"}}))
    written = draw([tmp_path], tmp_path / "fig", k=2)
    assert tmp_path / "speculative_table.md" in written
    assert len(list((tmp_path / "fig").glob("speculative_*.png"))) == 3
    assert "break-even" in (tmp_path / "speculative_table.md").read_text()
    assert breakeven_alpha(expected_tokens_per_step(0.6, 4), 4) == pytest.approx(0.6, abs=1e-6)
    assert math.isnan(breakeven_alpha(5.0, 4))
    assert main(["speculative", "--draw-only", "--results", str(tmp_path / "missing")]) == 2


def test_unknown_draft_model_names_the_field():
    with pytest.raises(ConfigError) as err:
        build_executors(ClusterSpec(draft_model="nope"))
    assert err.value.field == "cluster.draft_model" and "nope" in str(err.value)


def test_stage_model_draft_iterations_pay_no_engine_host_work():
    """Scheduling and output processing happen once per engine step: under the stage model a
    draft iteration costs its GPU work (and sampler), not another cpu_step_s."""
    ex = build_executors(ClusterSpec(model="llama-2-7b", gpu="A100-80GB",
                                     draft_model="llama-68m"))[0]
    draft = ex.draft.cost_model
    assert draft.params.cpu_step_s == 0.0 and draft.params.cpu_per_seq_s == 0.0
    assert ex.cost_model.params.cpu_step_s > 0.0  # the target keeps its host terms
    one = draft.iteration_times_from_sums(3, 300, 300, 3, 3, 3)[0]
    assert one < ex.cost_model.params.cpu_step_s  # llama-68m's GPU work is well under 2.5 ms
