"""Medusa heads: tokens per verify against the closed form, one request's latency against the
cost model's sum, the heads' bytes / FLOPs / memory, and configuration errors."""

import math

import pytest

from policies.simulate import simulate
from policies.speculative import check_method, expected_tokens_per_step
from sim.cluster.medusa import MedusaHeads
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.executor import Step
from sim.cost.cost_model import CostModelConfig, RooflineCostModel
from sim.util.errors import ConfigError
from tests.factories import make_trace
from tests.test_properties import check_invariants

K, TREE = 4, 64  # heads used, tree tokens per verify row (Medusa's defaults)
MEDUSA = {"num_speculative_tokens": K, "speculative_method": "medusa", "medusa_tree_size": TREE}


def medusa_executor(heads: int = 4):
    return build_executors(ClusterSpec(medusa_heads=heads, cost_model={"kind": "roofline"}))[0]


# ---- acceptance ---------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.5, 0.8])
def test_tokens_per_verify_match_closed_form(alpha):
    trace = make_trace([(0.0, 100, 1500), (0.0, 120, 1500)])
    s = simulate(trace, "vllm_v0", {**MEDUSA, "acceptance_rate": alpha}, [medusa_executor()],
                 seed=2).summary
    want = expected_tokens_per_step(alpha, K)  # (1 - a^(K+1)) / (1 - a): per head, not per tree
    assert abs(s["spec_tokens_per_step"] - want) < 4 * 2.5 / math.sqrt(s["spec_verify_steps"])
    assert s["spec_draft_tokens"] == K * s["spec_verify_steps"]  # one proposal per head


def test_padding_counts_the_tree_positions_not_emitted():
    rec = simulate(make_trace([(0.0, 30, 41)]), "sarathi",
                   {**MEDUSA, "acceptance_rate": 1.0}, [medusa_executor()]).records.iloc[0]
    assert rec["num_spec_steps"] == 8  # 40 tokens after the first, K + 1 = 5 per verify
    assert rec["num_padding_tokens"] == 8 * (TREE - (K + 1))


# ---- cost ---------------------------------------------------------------------------------------
def test_heads_bytes_and_flops():
    ex = medusa_executor()
    h, d, v = ex.medusa, 4096, 32000  # llama-2-7b: hidden 4096, vocabulary 32,000
    per_head = d * d + d + d * v  # one residual block (weight + bias) and a vocab projection
    assert h.params_per_head == per_head
    assert h.weight_bytes_per_gpu == 4 * per_head * 2  # fp16
    assert h.flops(3) == 2 * 3 * 4 * per_head
    assert h.bytes(3) == 4 * per_head * 2 + 3 * 4 * v * 2  # weights once + fp16 logits
    gpu, cfg = ex.cost_model.deployment.gpu, CostModelConfig()
    assert h.seconds(3) == pytest.approx(max(h.flops(3) / (gpu.peak_tensor_flops * 0.6),
                                             h.bytes(3) / (gpu.hbm_bandwidth * 0.85)))
    assert cfg.memory_efficiency == 0.85 and h.seconds(0) == 0.0
    target = ex.cost_model.deployment  # the heads' weights come out of the KV budget
    want = int((target.kv_bytes_per_gpu - h.weight_bytes_per_gpu)
               // target.kv_bytes_per_token_per_gpu)
    assert ex.kv_capacity_tokens == want < target.kv_capacity_tokens
    assert ex.instance_info(0).medusa_heads == 4


def test_tensor_parallel_splits_the_heads():
    one = MedusaHeads(4, 1, 8192, 32000, 1, 1e14, 1e12)
    four = MedusaHeads(4, 1, 8192, 32000, 4, 1e14, 1e12)
    assert four.weight_bytes_per_gpu == one.weight_bytes_per_gpu / 4
    assert four.flops(7) == one.flops(7) / 4


def test_verify_step_is_tree_chunk_plus_heads():
    ex, ctx = medusa_executor(), (100, 700)
    step = Step(0, (0, 1), (TREE,) * 2, ctx, (True, True), num_draft_tokens=TREE - 1,
                num_verify_seqs=2)
    target = RooflineCostModel(ex.cost_model.deployment, CostModelConfig())
    want = target.iteration_times([TREE] * 2, ctx, num_sampled=2 * TREE)[0] + ex.medusa.seconds(2)
    assert ex.execute(step).duration_s == pytest.approx(want, rel=1e-12)
    plain = Step(0, (0, 1), (1, 1), ctx, (True, True), num_iterations=3)  # heads idle
    assert ex.execute(plain).duration_s == pytest.approx(
        target.iteration_times([1, 1], ctx, 2, 3).sum(), rel=1e-12)


def test_one_request_latency_is_the_cost_models_sum():
    prompt, m = 200, 6  # alpha 1: every verify emits K + 1 tokens; 1 + 5 m outputs
    ex = medusa_executor()
    res = simulate(make_trace([(0.0, prompt, 1 + (K + 1) * m)]), "vllm_v0",
                   {**MEDUSA, "acceptance_rate": 1.0}, [ex])
    target = RooflineCostModel(ex.cost_model.deployment, CostModelConfig())
    want = target.iteration_times([prompt], [0], 1)[0] + ex.medusa.seconds(1)  # prefill + heads
    for j in range(m):  # verify j: a tree of TREE tokens at context prompt + 5 j
        want += (target.iteration_times([TREE], [prompt + (K + 1) * j], TREE)[0]
                 + ex.medusa.seconds(1))
    rec = res.records.iloc[0]
    assert rec["finish_s"] - rec["arrival_s"] == pytest.approx(want, rel=1e-9)
    assert rec["num_spec_steps"] == m


@pytest.mark.parametrize("policy", ["vllm_v0", "sarathi"])
def test_tokens_conserved(policy):
    trace = make_trace([(0.01 * i, 30 + 17 * i, 20 + 9 * i) for i in range(12)])
    params = {**MEDUSA, "acceptance_rate": 0.6, "acceptance_concentration": 3.0,
              "medusa_tree_size": 16}
    check_invariants(trace, policy, [medusa_executor()], params)


# ---- errors ---------------------------------------------------------------------------------------
def test_medusa_needs_enough_heads():
    with pytest.raises(ConfigError) as err:
        simulate(make_trace([(0.0, 10, 10)]), "vllm_v0", MEDUSA, [medusa_executor(heads=3)])
    assert err.value.field == "num_speculative_tokens" and "medusa_heads" in str(err.value)
    with pytest.raises(ConfigError):
        simulate(make_trace([(0.0, 10, 10)]), "vllm_v0", MEDUSA,
                 build_executors(ClusterSpec(cost_model={"kind": "roofline"})))


@pytest.mark.parametrize("method,k,tree,field", [
    ("eagle", 4, 64, "speculative_method"), ("medusa", 4, 4, "medusa_tree_size"),
    ("medusa", 4, 2000, "medusa_tree_size"), ("medusa", 4, 8.0, "medusa_tree_size")])
def test_bad_method_or_tree(method, k, tree, field):
    with pytest.raises(ConfigError) as err:
        check_method(method, k, tree)
    assert err.value.field == field


@pytest.mark.parametrize("changes,field", [
    ({"medusa_heads": 4, "draft_model": "llama-68m"}, "cluster.medusa_heads"),
    ({"medusa_heads": 4, "backend": "real"}, "cluster.medusa_heads"),
    ({"medusa_heads": 17}, "cluster.medusa_heads"),
    ({"medusa_heads": 4, "medusa_head_layers": -1}, "cluster.medusa_head_layers")])
def test_bad_cluster_heads(changes, field):
    with pytest.raises(ConfigError) as err:
        ClusterSpec(**changes)
    assert err.value.field == field
