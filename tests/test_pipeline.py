"""Pipeline parallelism (sim/cluster/pipeline.py): vLLM's layer split, memory per stage, the GPipe
closed form of the bubble, one request's latency as the cost model's sum plus the transfers,
and every refusal by name."""

from __future__ import annotations

import dataclasses

import pytest

from policies.simulate import simulate
from sim.cluster.pipeline import PipelineClock
from sim.cluster.run_cost import run_cost_summary
from sim.cluster.spec import ClusterSpec, build_executors
from sim.cost.deployment import DeploymentSpec, stage_layers
from sim.hardware.gpu_file import resolve_gpu
from sim.memory.kv_transfer import Link
from sim.models.catalog import resolve_model
from sim.util.errors import ConfigError
from tests.factories import make_trace

FREE_LINK = Link("free", 0.0, 1e30)  # no transfer time: the closed forms' assumption


@pytest.mark.parametrize("layers,pp,want", [
    (32, 1, (32,)), (32, 2, (16, 16)), (32, 5, (6, 6, 7, 7, 6)), (80, 3, (27, 27, 26)),
    (80, 8, (10,) * 8), (7, 7, (1,) * 7)])
def test_layers_split_as_vllm_splits_them(layers, pp, want):
    assert stage_layers(layers, pp) == want
    assert sum(want) == layers


@pytest.mark.parametrize("p,m", [(2, 1), (2, 2), (4, 4), (4, 8), (8, 3)])
def test_uniform_passes_leave_after_the_gpipe_closed_form(p, m):
    """m equal passes entering together through p stages of s seconds each: the last leaves
    after (m + p - 1) s; the pipeline is busy p m s of p (m + p - 1) s, the bubble (p - 1) /
    (m + p - 1)."""
    s, clock = 0.01, PipelineClock((4,) * p, FREE_LINK)
    ends = [clock.pass_through(0.0, [s] * p, 0.0) for _ in range(m)]
    assert ends == pytest.approx([(p + i) * s for i in range(m)])
    assert ends[-1] == pytest.approx((m + p - 1) * s)
    bubble = 1 - p * m * s / (p * ends[-1])
    assert bubble == pytest.approx((p - 1) / (m + p - 1))


def test_a_pass_pays_each_transfer_and_waits_for_a_busy_stage():
    clock = PipelineClock((2, 2, 2), FREE_LINK)
    first = clock.pass_through(0.0, [1.0, 3.0, 1.0], 0.5)  # 1 + .5 + 3 + .5 + 1
    assert first == pytest.approx(6.0)
    second = clock.pass_through(0.0, [1.0, 3.0, 1.0], 0.5)  # stage 1 busy until 4.5
    assert second == pytest.approx(4.5 + 3.0 + 0.5 + 1.0)


def test_stage_memory_is_the_busiest_stages():
    model, gpu = resolve_model("llama-3.1-70b"), resolve_gpu("H100-80GB")
    tp8 = DeploymentSpec(model, gpu, tensor_parallel=8)
    pp2 = DeploymentSpec(model, gpu, tensor_parallel=4, pipeline_parallel=2)
    stages = pp2.stage_weight_bytes
    assert sum(stages) == pytest.approx(tp8.weight_bytes)
    assert pp2.weight_bytes_per_gpu == pytest.approx(max(stages) / 4)
    per_token = 2 * 40 * 2 * model.head_dim * 2  # 40 layers, 8 KV heads / TP 4, fp16
    assert pp2.kv_bytes_per_token_per_gpu == per_token
    assert pp2.name.endswith("x4 pp2")
    with pytest.raises(ConfigError, match="pipeline_parallel.*more stages than"):
        DeploymentSpec(resolve_model("llama-2-7b"), gpu, pipeline_parallel=33)


def _one_request_ttft(pp: int, link: str | None = None) -> tuple[float, float]:
    spec = ClusterSpec(model="llama-2-7b", gpu="A100-80GB", pipeline_parallel=pp,
                       pipeline_link=link)
    res = simulate(make_trace([(0.0, 1000, 4)]), "vllm", {}, build_executors(spec))
    return float(res.records["ttft_s"].iloc[0]), float(res.records["e2e_s"].iloc[0])


def test_one_request_alone_pays_the_cost_models_sum_plus_the_transfers():
    """Alone, a pass's stages add up to the whole model's iteration (linear in the layers),
    plus one activation transfer per stage boundary."""
    ttft1, e2e1 = _one_request_ttft(1)
    ttft4, e2e4 = _one_request_ttft(4, "rdma_400g")
    link = ClusterSpec(pipeline_link="rdma_400g").pipeline_link
    from sim.memory.kv_transfer import link_preset
    one = link_preset(link)
    hidden = resolve_model("llama-2-7b").hidden_size

    def xfer(tokens: int) -> float:
        return one.latency_s + 2 * hidden * 2 * tokens / one.bandwidth_bytes_per_s

    assert ttft4 - ttft1 == pytest.approx(3 * xfer(1000), rel=1e-6)
    assert (e2e4 - ttft4) - (e2e1 - ttft1) == pytest.approx(3 * 3 * xfer(1), rel=1e-6)


def test_a_pipeline_is_seen_as_one_virtual_instance_a_stage_and_costs_its_gpus():
    spec = ClusterSpec(model="llama-2-7b", gpu="A100-80GB", tensor_parallel=2,
                       pipeline_parallel=2, num_instances=2)
    executors = build_executors(spec)
    assert len(executors) == 4
    whole = DeploymentSpec(resolve_model("llama-2-7b"), resolve_gpu("A100-80GB"),
                           tensor_parallel=2, pipeline_parallel=2).kv_capacity_tokens
    assert {ex.kv_capacity_tokens for ex in executors} == {whole // 2}
    assert executors[0].clock is executors[1].clock
    assert executors[1].clock is not executors[2].clock
    trace = make_trace([(0.1 * i, 200, 20) for i in range(8)])
    res = simulate(trace, "vllm", {}, executors)
    assert res.records["status"].eq("finished").all()
    duration = float(res.summary["duration_s"])
    cost = run_cost_summary(spec, res.records, res.instances, duration)
    assert cost["gpu_hours"] == pytest.approx(8 * duration / 3600)  # 2 x (2 stages x TP 2)


@pytest.mark.parametrize("overrides,field", [
    ({"pipeline_parallel": 0}, "cluster.pipeline_parallel"),
    ({"pipeline_parallel": 2.0}, "cluster.pipeline_parallel"),
    ({"pipeline_parallel": True}, "cluster.pipeline_parallel"),
    ({"pipeline_link": "carrier_pigeon"}, "cluster.pipeline_link"),
    ({"pipeline_parallel": 2, "draft_model": "tinyllama-1.1b"}, "cluster.pipeline_parallel"),
    ({"pipeline_parallel": 2, "backend": "real"}, "cluster.pipeline_parallel"),
    ({"pipeline_parallel": 2, "medusa_heads": 2}, "cluster.pipeline_parallel"),
    ({"pipeline_parallel": 2, "scheduling_overhead": {"mode": "sync"}},
     "cluster.pipeline_parallel"),
])
def test_bad_or_unmodelled_pipeline_options_are_refused_by_name(overrides, field):
    with pytest.raises(ConfigError) as err:
        ClusterSpec(**overrides)
    assert err.value.field == field


def test_moe_models_and_static_batches_are_refused_by_name():
    with pytest.raises(ConfigError, match="mixture-of-experts") as err:
        build_executors(ClusterSpec(model="mixtral-8x7b", gpu="H100-80GB", tensor_parallel=2,
                                    pipeline_parallel=2))
    assert err.value.field == "cluster.pipeline_parallel"
    executors = build_executors(ClusterSpec(model="llama-2-7b", pipeline_parallel=2))
    with pytest.raises(ConfigError, match="static batches") as err:
        simulate(make_trace([(0.0, 100, 10)]), "vanilla", {}, executors)
    assert err.value.field == "cluster.pipeline_parallel"


def test_an_instance_group_may_run_a_pipeline_for_a_disaggregated_pool():
    spec = ClusterSpec(model="llama-2-7b", gpu="A100-80GB", instances=(
        {"tensor_parallel": 2, "pipeline_parallel": 2, "count": 1},
        {"tensor_parallel": 1, "count": 2}))
    executors = build_executors(spec)
    assert [type(ex).__name__ for ex in executors] == ["PipelineExecutor"] * 2 + \
        ["CostModelExecutor"] * 2
    infos = {ex.instance_info(0).kv_bytes_per_token for ex in executors}
    assert len(infos) == 1  # the pools serve one model: the whole model's KV per token
    trace = make_trace([(0.1 * i, 300, 20) for i in range(10)])
    res = simulate(trace, "disagg", {"num_prefill": 2}, executors)  # 2 virtual prefill instances
    assert res.records["status"].eq("finished").all()
    duration = float(res.summary["duration_s"])
    cost = run_cost_summary(spec, res.records, res.instances, duration)
    assert cost["gpu_hours"] == pytest.approx(6 * duration / 3600)  # 2 x 2 + 2 x 1 GPUs
    with pytest.raises(ConfigError) as err:  # a cluster-wide pipeline with groups: ambiguous
        ClusterSpec(pipeline_parallel=2, instances=({"tensor_parallel": 2},))
    assert err.value.field == "cluster.pipeline_parallel"


def test_a_model_with_sliding_window_layers_runs_in_a_pipeline():
    executors = build_executors(ClusterSpec(model="gemma-2-9b", gpu="H100-80GB",
                                            pipeline_parallel=2))
    res = simulate(make_trace([(0.0, 500, 5)]), "vllm", {}, executors, max_model_len=4096)
    assert res.records["status"].eq("finished").all()


def test_pipeline_of_one_stage_is_the_plain_deployment():
    spec = ClusterSpec(model="llama-2-7b")
    assert dataclasses.replace(spec, pipeline_parallel=1) == spec
    assert type(build_executors(spec)[0]).__name__ == "CostModelExecutor"
