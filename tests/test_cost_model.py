"""Roofline cost model, deployments and the cost-model executor.

Measured in a scratch run (timeit, 1e5 calls, this machine): CostModelExecutor.execute on a
1-iteration step of 30 requests takes ~7-9 us; a 100-iteration step ~32 us.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cluster.cost_executor import CostModelExecutor
from sim.core.executor import Executor, Step
from sim.cost.cost_model import CostModelConfig, DeploymentSpec, RooflineCostModel
from sim.hardware.gpus import get_gpu
from sim.models.catalog import get_model
from sim.util.errors import ConfigError

A100 = get_gpu("A100-80GB")
LLAMA7B = get_model("llama-2-7b")


def deployment(model: str = "llama-2-7b", gpu: str = "A100-80GB",
               **kwargs: object) -> DeploymentSpec:
    return DeploymentSpec(get_model(model), get_gpu(gpu), **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def cm() -> RooflineCostModel:
    return RooflineCostModel(deployment())


def one(cm: RooflineCostModel, new: list[int], ctx: list[int], sampled: int | None = None) -> float:
    return float(cm.iteration_times(new, ctx, len(new) if sampled is None else sampled)[0])


def test_decode_batch1_is_weight_bandwidth_bound(cm: RooflineCostModel) -> None:
    floor = deployment().weight_bytes / A100.hbm_bandwidth
    t = one(cm, [1], [128])
    assert floor <= t <= 1.25 * floor


def test_prefill_4096_is_compute_bound(cm: RooflineCostModel) -> None:
    parts = cm.breakdown([4096], [0], 1)
    dense = parts["dense"]
    assert dense.flops / A100.peak_tensor_flops > dense.bytes / A100.hbm_bandwidth
    t = one(cm, [4096], [0])
    ideal = parts["total"].flops / A100.peak_tensor_flops
    assert ideal <= t <= 3 * ideal
    assert parts["total"].seconds == pytest.approx(t, rel=1e-12)


def test_monotonic_in_context_and_batch(cm: RooflineCostModel) -> None:
    by_ctx = [one(cm, [1] * 8, [c] * 8) for c in (0, 128, 1024, 4096, 16384)]
    assert all(a < b for a, b in zip(by_ctx, by_ctx[1:]))
    by_batch = [one(cm, [1] * b, [512] * b) for b in (1, 2, 8, 64, 256, 1024)]
    assert all(a < b for a, b in zip(by_batch, by_batch[1:]))
    by_chunk = [one(cm, [n], [0]) for n in (1, 64, 512, 2048, 8192)]
    assert all(a < b for a, b in zip(by_chunk, by_chunk[1:]))


def test_logits_only_for_sampled_sequences(cm: RooflineCostModel) -> None:
    assert one(cm, [512] * 4, [0] * 4, sampled=0) < one(cm, [512] * 4, [0] * 4, sampled=4)


def test_int4_decodes_faster_and_caches_more() -> None:
    fp16, int8, int4 = (deployment(weight_dtype=d) for d in ("fp16", "int8", "int4"))
    times = [one(RooflineCostModel(d), [1], [128]) for d in (fp16, int8, int4)]
    assert times[0] > times[1] > times[2]
    assert fp16.kv_capacity_tokens < int8.kv_capacity_tokens < int4.kv_capacity_tokens
    assert RooflineCostModel(int4).breakdown([1], [128], 1)["dequant"].seconds > 0


def test_fp8_kv_doubles_capacity_roughly() -> None:
    fp16, fp8 = deployment(), deployment(kv_dtype="fp8")
    assert fp8.kv_capacity_tokens == pytest.approx(2 * fp16.kv_capacity_tokens, rel=1e-4)
    assert "kv-fp8" in fp8.name


def test_kv_capacity_llama7b_a100() -> None:
    d = deployment()
    assert d.kv_bytes_per_token_per_gpu == 2**19
    assert 100_000 <= d.kv_capacity_tokens <= 120_000
    assert deployment(gpu_memory_utilization=0.5).kv_capacity_tokens < d.kv_capacity_tokens


def test_llama70b_needs_tensor_parallel() -> None:
    with pytest.raises(ConfigError) as err:
        deployment("llama-2-70b")
    msg = str(err.value)
    for part in ("tensor_parallel=1", "llama-2-70b", "fp16", "A100-80GB", "TP=1", "128.5 GiB",
                 "72.0 GiB"):
        assert part in msg
    tp2 = deployment("llama-2-70b", tensor_parallel=2)
    assert tp2.kv_capacity_tokens > 10_000
    assert tp2.weight_bytes_per_gpu == pytest.approx(tp2.weight_bytes / 2)
    assert deployment("llama-2-70b", weight_dtype="int4").kv_capacity_tokens > 0


def test_tensor_parallel_kv_heads_and_allreduce() -> None:
    tp8 = deployment("llama-2-70b", tensor_parallel=8)
    tp16 = deployment("llama-2-70b", tensor_parallel=16)
    assert tp8.kv_heads_per_gpu == 1 and tp16.kv_heads_per_gpu == 1  # replicated past 8
    assert tp16.kv_capacity_tokens > tp8.kv_capacity_tokens  # only from smaller weight shards
    with pytest.raises(ConfigError, match="tensor_parallel=3"):
        deployment("llama-2-70b", tensor_parallel=3)
    parts = RooflineCostModel(deployment(tensor_parallel=2)).breakdown([1] * 8, [100] * 8, 8)
    assert parts["allreduce"].seconds > 0 and parts["allreduce"].bytes > 0
    tp1, tp2 = (one(RooflineCostModel(deployment(tensor_parallel=t)), [1], [128]) for t in (1, 2))
    assert tp2 < tp1


@pytest.mark.parametrize("kwargs, field", [
    ({"tensor_parallel": 0}, "tensor_parallel=0"),
    ({"weight_dtype": "fp32"}, "weight_dtype='fp32'"),
    ({"kv_dtype": "int4"}, "kv_dtype='int4'"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization=1.5"),
    ({"activation_reserve_bytes": -1}, "activation_reserve_bytes=-1"),
])
def test_bad_deployment_fields(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace("(", r"\(")):
        deployment(**kwargs)


@pytest.mark.parametrize("kwargs, field", [
    ({"compute_efficiency": 0}, "compute_efficiency=0"),
    ({"memory_efficiency": 1.2}, "memory_efficiency=1.2"),
    ({"step_overhead_s": -1e-3}, "step_overhead_s=-0.001"),
    ({"activation_bytes_factor": math.nan}, "activation_bytes_factor=nan"),
])
def test_bad_cost_config_fields(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        CostModelConfig(**kwargs)  # type: ignore[arg-type]


def test_overheads_add_up() -> None:
    base = RooflineCostModel(deployment(), CostModelConfig(step_overhead_s=0.0))
    more = RooflineCostModel(deployment(), CostModelConfig(step_overhead_s=1e-3,
                                                           per_seq_overhead_s=1e-5))
    assert one(more, [1] * 10, [50] * 10) - one(base, [1] * 10, [50] * 10) == pytest.approx(1.1e-3)


chunks = st.lists(st.tuples(st.integers(1, 600), st.integers(0, 3000)), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(rows=chunks, iterations=st.integers(2, 40), tp=st.sampled_from([1, 2]),
       dtype=st.sampled_from(["fp16", "int4"]))
def test_multi_iteration_equals_single_calls(rows: list[tuple[int, int]], iterations: int,
                                             tp: int, dtype: str) -> None:
    model = RooflineCostModel(deployment(tensor_parallel=tp, weight_dtype=dtype),
                              CostModelConfig(per_seq_overhead_s=2e-6))
    new, ctx = [n for n, _ in rows], [c for _, c in rows]
    times = model.iteration_times(new, ctx, len(rows), iterations)
    assert times.shape == (iterations,)
    expected = [one(model, new, ctx)]
    grown = [c + n for n, c in rows]
    for _ in range(iterations - 1):
        expected.append(one(model, [1] * len(rows), grown))
        grown = [g + 1 for g in grown]
    np.testing.assert_allclose(times, expected, rtol=0, atol=1e-12)


def test_breakdown_matches_iteration_time(cm: RooflineCostModel) -> None:
    new, ctx = [1, 1, 37, 512], [90, 4000, 0, 128]
    parts = cm.breakdown(new, ctx, 3)
    assert set(parts) == {"dense", "dequant", "attention", "allreduce", "overhead", "total"}
    assert parts["total"].seconds == pytest.approx(float(cm.iteration_times(new, ctx, 3)[0]),
                                                   rel=1e-12)
    pairs = sum(n * c + n * (n + 1) / 2 for n, c in zip(new, ctx))
    assert parts["attention"].flops == pytest.approx(4 * 32 * 32 * 128 * pairs)


def step(new: tuple[int, ...], ctx: tuple[int, ...], iterations: int = 1) -> Step:
    return Step(0, tuple(range(len(new))), new, ctx, (True,) * len(new), iterations)


@pytest.fixture(scope="module")
def ex(cm: RooflineCostModel) -> CostModelExecutor:
    return CostModelExecutor(cm)


def test_executor_protocol_and_name(ex: CostModelExecutor) -> None:
    assert isinstance(ex, Executor)
    assert ex.name == "llama-2-7b fp16 on A100-80GB x1"
    assert ex.kv_capacity_tokens == deployment().kv_capacity_tokens
    assert ex.instance_info(3).kv_capacity_tokens == ex.kv_capacity_tokens


def test_executor_full_and_truncated(ex: CostModelExecutor, cm: RooflineCostModel) -> None:
    s = step((1, 1, 300), (100, 200, 0), iterations=10)
    times = cm.iteration_times(s.num_new_tokens, s.num_context_tokens, 3, 10)
    full = ex.execute(s)
    assert not full.oom and full.num_iterations == 10
    np.testing.assert_allclose(full.iteration_ends_s, np.cumsum(times), rtol=1e-15)
    assert full.duration_s == full.iteration_ends_s[-1]
    ends = np.cumsum(times)
    cut = ex.execute(s, until_s=float(ends[3]) - 1e-9)
    assert cut.num_iterations == 4 and cut.duration_s == pytest.approx(ends[3])
    exact = ex.execute(s, until_s=float(ends[3]))
    assert exact.num_iterations == 4
    assert ex.execute(s, until_s=0.0).num_iterations == 1
    single = ex.execute(step((5,), (0,)), until_s=1e-9)
    assert single.num_iterations == 1
    assert single.duration_s == single.iteration_ends_s[0] == pytest.approx(one(cm, [5], [0]))


def test_executor_oom_first_iteration(ex: CostModelExecutor, cm: RooflineCostModel) -> None:
    cap = ex.kv_capacity_tokens
    fits = ex.execute(step((cap,), (0,)))
    assert not fits.oom
    r = ex.execute(step((cap - 9,), (10,)))
    assert r.oom and r.num_iterations == 0
    assert r.duration_s == pytest.approx(one(cm, [cap - 9], [10]))


def test_executor_oom_later_iteration(ex: CostModelExecutor, cm: RooflineCostModel) -> None:
    cap = ex.kv_capacity_tokens
    s = step((1, 1), (cap - 10, 0), iterations=20)  # after iteration i: cap - 8 + 2 * (i - 1)
    assert s.kv_tokens_after(5) == cap and s.kv_tokens_after(6) > cap
    ends = np.cumsum(cm.iteration_times(s.num_new_tokens, s.num_context_tokens, 2, 20))
    r = ex.execute(s)
    assert r.oom and r.num_iterations == 5
    np.testing.assert_allclose(r.iteration_ends_s, ends[:5], rtol=1e-15)
    assert r.duration_s == pytest.approx(ends[5])  # the failed 6th iteration is charged
    early = ex.execute(s, until_s=float(ends[2]))  # stops before the failure
    assert not early.oom and early.num_iterations == 3
    late = ex.execute(s, until_s=float(ends[5]))  # would stop at 6 but 6 fails
    assert late.oom and late.num_iterations == 5


def test_executor_empty_step(ex: CostModelExecutor) -> None:
    r = ex.execute(Step(0, (), (), (), ()))
    assert not r.oom and r.num_iterations == 1
    assert r.duration_s == CostModelConfig().step_overhead_s  # no forward pass, only overhead
