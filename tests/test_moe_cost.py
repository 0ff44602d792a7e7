"""MoE terms of both cost models: weights of the distinct experts a batch touches, grouped-GEMM
efficiency, memory holding every expert, MLA's compressed KV, expert parallelism's all-to-alls
(against a hand computation) and load imbalance; decode runs stay exact; dense models untouched."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cluster.cost_model_choice import build_cost_model
from sim.cluster.spec import ClusterSpec, build_executors
from sim.cost.cost_model import GIB, DeploymentSpec, RooflineCostModel
from sim.cost.gpu_params import stage_params_for
from sim.cost.moe_cost import MoEPlan
from sim.cost.stage_model import StageCostModel
from sim.hardware.gpus import get_gpu
from sim.models.catalog import get_model
from sim.util.errors import ConfigError

H100 = get_gpu("H100-80GB")
MIXTRAL = get_model("mixtral-8x7b")


def dep(model: str = "mixtral-8x7b", tp: int = 2, ep: int = 1, **kw: object) -> DeploymentSpec:
    return DeploymentSpec(get_model(model), get_gpu(str(kw.pop("gpu", "H100-80GB"))), tp,
                          expert_parallel=ep, **kw)  # type: ignore[arg-type]


def test_all_to_all_bytes_by_hand():
    # Mixtral, 2 GPUs, EP 2, 100 tokens: each GPU dispatches its 50 tokens x 2 experts x 4096 x
    # 2 bytes, half of which go to the other GPU -> 409,600 bytes per all-to-all per MoE layer
    plan = MoEPlan(MIXTRAL, 2, 2)
    assert plan.a2a_bytes(100) == 100 / 2 * 2 * 4096 * 2 / 2 == 409_600
    assert MoEPlan(MIXTRAL, 4, 4).a2a_bytes(100) == 100 / 4 * 2 * 4096 * 2 * 3 / 4
    assert MoEPlan(MIXTRAL, 2, 1).a2a_bytes(100) == 0
    roof = RooflineCostModel(dep(ep=2))
    stages = roof.breakdown([100], [0], 1)
    one = H100.interconnect_latency_s + 409_600 / (H100.interconnect_bandwidth * 0.8)
    assert stages["alltoall"].bytes == 2 * 32 * 409_600  # dispatch + combine, 32 MoE layers
    assert stages["alltoall"].seconds == pytest.approx(2 * 32 * one)
    total = sum(s.seconds for k, s in stages.items() if k != "total")
    assert stages["total"].seconds == pytest.approx(total)
    assert roof.iteration_times([100], [0], 1)[0] == pytest.approx(total)


def test_stage_all_to_all_uses_the_all_reduce_curve():
    p = stage_params_for(H100)
    stage = StageCostModel(dep(ep=2), p)
    lat, bus = p.allreduce.curve(2)
    assert stage._moe.a2a_s(100) == pytest.approx(p.allreduce_launch_s + lat + 409_600 / bus)
    # EP over the whole TP group: dispatch + combine replace the MoE layer's second all-reduce
    tp_only = StageCostModel(dep(ep=1), p)
    n = 100
    diff = stage._layers_s(n, 0.0) - tp_only._layers_s(n, 0.0)
    moe_diff = 32 * (stage._moe.moe_mlp_s(n) - tp_only._moe.moe_mlp_s(n))
    expected = moe_diff + 32 * (2 * stage._moe.a2a_s(n) - stage.allreduce_s(4096 * 2 * n))
    assert diff == pytest.approx(expected)


def test_expert_weights_read_follow_the_distinct_experts():
    roof = RooflineCostModel(dep())
    rest = roof._layer_bytes
    expert_bytes = 3 * 4096 * 14336 * 2 / 2  # one expert on one of 2 GPUs, bf16
    for n, distinct in ((1, 2.0), (2, 8 * (1 - 0.75 ** 2)), (10_000, 8.0)):
        flops, moved = roof._dense_work(n, 0)
        weights = moved - roof._act_bpt * n - rest
        assert weights == pytest.approx(32 * distinct * expert_bytes)
        assert flops == pytest.approx(roof._dense_fpt * n + 2 * 32 * 2 * n * expert_bytes / 2)


def test_grouped_gemm_runs_at_the_per_expert_batch():
    stage = StageCostModel(dep(tp=1, model="qwen3-30b-a3b"), stage_params_for(H100))
    per_token = [stage._moe.moe_mlp_s(n) / n for n in (1, 8, 64, 512, 4096)]
    assert per_token == sorted(per_token, reverse=True)  # cheaper per token as batches grow
    plan = stage._moe.plan
    rows, distinct = plan.rows_distinct(64)
    assert rows == 64 * 8 and distinct == pytest.approx(128 * (1 - (1 - 8 / 128) ** 64))


@pytest.mark.parametrize("kind", ["stage", "roofline"])
@pytest.mark.parametrize("model, tp, ep, zipf", [("mixtral-8x7b", 2, 1, 0.0),
                                                ("mixtral-8x7b", 2, 2, 1.0),
                                                ("qwen3-30b-a3b", 1, 1, 0.0),
                                                ("deepseek-v3", 8, 8, 0.0)])
def test_decode_runs_stay_exact(kind, model, tp, ep, zipf):
    """A multi-iteration step's later iterations equal one-iteration steps of the same batch."""
    d = dep(model, tp, ep, gpu="H200", expert_zipf=zipf,
            weight_dtype="fp8" if model == "deepseek-v3" else "bf16")
    cm = build_cost_model(d, {"kind": kind})
    b, ctx = 24, 24 * 700
    many = cm.iteration_times_from_sums(b, ctx, ctx, b, b, b, 6)
    for j in range(6):
        c = ctx + j * b
        assert many[j] == pytest.approx(cm.iteration_times_from_sums(b, c, c, b, b, b, 1)[0],
                                        rel=1e-12)


def test_memory_holds_every_expert():
    with pytest.raises(ConfigError, match="weights need"):  # 93 GB of bf16 on one 80 GB GPU
        dep(tp=1)
    d = dep(tp=2, weight_dtype="bf16")
    assert d.weight_bytes == pytest.approx(
        MIXTRAL.num_layer_params * 2 + (MIXTRAL.num_params - MIXTRAL.num_layer_params) * 2)
    assert d.weight_bytes_per_gpu > 46e9 / 2 * 2 * 0.99  # all 46.7 B, not the 12.9 B active
    per_token = 2 * 32 * 4 * 128 * 2  # 4 of 8 KV heads per GPU
    assert d.kv_bytes_per_token_per_gpu == per_token
    assert d.kv_capacity_tokens == int(d.kv_bytes_per_gpu // per_token)


def test_mla_compressed_kv_is_on_every_gpu():
    for tp in (8,):
        d = dep("deepseek-v3", tp, gpu="H200", weight_dtype="fp8")
        assert d.kv_bytes_per_token_per_gpu == 61 * 576 * 2
        assert StageCostModel(d, stage_params_for(d.gpu))._kv_bpt == 576 * 2


@pytest.mark.parametrize("kw, field, match", [
    ({"ep": 4}, "expert_parallel", "data-parallel attention"),
    ({"tp": 4, "ep": 3}, "expert_parallel", "must divide"),
    ({"model": "llama-2-13b", "ep": 2}, "expert_parallel", "dense model"),
    ({"model": "llama-2-13b", "expert_zipf": 1.0}, "expert_zipf", "dense model"),
    ({"expert_zipf": -1.0}, "expert_zipf", ">= 0"),
])
def test_expert_parallel_layouts_refused_clearly(kw, field, match):
    with pytest.raises(ConfigError, match=match) as err:
        dep(**kw)
    assert err.value.field == field


def test_imbalance_and_skew_slow_the_busiest_rank():
    p = stage_params_for(H100)
    even = StageCostModel(dep(ep=2), p)
    skew = StageCostModel(dep(ep=2, expert_zipf=1.2), p)
    rows_even, _ = even._moe.plan.rows_distinct(256)
    rows_skew, _ = skew._moe.plan.rows_distinct(256)
    assert 256 * 2 / 2 < rows_even < rows_skew <= 256 * 2
    assert skew._moe.moe_mlp_s(256) > even._moe.moe_mlp_s(256)


def test_dense_models_never_reach_the_moe_terms():
    d = DeploymentSpec(get_model("llama-2-7b"), get_gpu("A100-80GB"), 2)
    assert StageCostModel(d, stage_params_for(d.gpu))._moe is None
    assert RooflineCostModel(d)._moe is None
    assert d.name == "llama-2-7b fp16 on A100-80GB x2"


def test_a_cluster_builds_moe_executors():
    spec = ClusterSpec(model="mixtral-8x7b", gpu="H100-80GB", tensor_parallel=2,
                       expert_parallel=2, weight_dtype="bf16")
    (executor,) = build_executors(spec)
    assert executor.kv_capacity_tokens > 100_000
    assert np.all(np.diff([executor.cost_model.iteration_times_from_sums(
        n, 0, 0, n, n, n)[0] for n in (1, 16, 256)]) > 0)
    assert dep(ep=2).weight_bytes_per_gpu / GIB == pytest.approx(
        dep(ep=1).weight_bytes_per_gpu / GIB)


def test_instance_groups_set_their_own_expert_parallelism():
    from sim.cluster.spec import ClusterSpec, build_executors
    from sim.util.errors import ConfigError

    spec = ClusterSpec(model="mixtral-8x7b", gpu="H100-80GB", tensor_parallel=2,
                       instances=({"expert_parallel": 2}, {"tensor_parallel": 4, "count": 2}))
    layouts = [(e.cost_model.deployment.tensor_parallel, e.cost_model.deployment.expert_parallel)
               for e in build_executors(spec)]
    assert layouts == [(2, 2), (4, 1), (4, 1)]
    with pytest.raises(ConfigError) as err:
        build_executors(ClusterSpec(model="mixtral-8x7b", gpu="H100-80GB", tensor_parallel=2,
                                    instances=({"expert_parallel": 3},)))
    assert err.value.field == "cluster.instances[0].expert_parallel"
