"""The engine time model (sim/cost/engine_time.py) and first-run shapes (sim/cost/engine_shapes.py)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.executor import Step
from sim.cost.engine_shapes import ShapeCache, iteration_shapes, warmup_step
from sim.cost.engine_time import (EngineTimeModel, EngineTimeParams, EngineWork,
                             step_iteration_features)
from sim.hardware.gpus import get_gpu
from sim.measured.calibrated import load_calibrated_executor
from sim.models.catalog import get_model
from sim.util.errors import ConfigError

WORK = EngineWork.of(get_model("llama-2-7b"), get_gpu("H100-80GB"), "bf16")


def iterations_by_hand(step: Step, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(new tokens, context tokens) of each iteration, run one by one."""
    n = np.asarray(step.num_new_tokens)
    c = np.asarray(step.num_context_tokens)
    out = []
    for _ in range(k):
        out.append((n.copy(), c.copy()))
        c, n = c + n, np.ones_like(n)
    return out


steps = st.builds(
    lambda rows, k: Step(0, tuple(range(len(rows))), tuple(r[0] for r in rows),
                         tuple(r[1] for r in rows), (True,) * len(rows), num_iterations=k),
    st.lists(st.tuples(st.integers(1, 300), st.integers(0, 2000)), min_size=1, max_size=6),
    st.integers(1, 40))


@settings(max_examples=60, deadline=None)
@given(steps)
def test_features_of_a_multi_iteration_step_equal_its_iterations_run_one_by_one(step):
    k = step.num_iterations
    f = step_iteration_features(step, k)
    for j, (n, c) in enumerate(iterations_by_hand(step, k)):
        dec = n == 1
        kv = c + n
        assert f.num_tokens[j] == n.sum() and f.num_seqs[j] == len(n)
        assert f.num_prefill[j] == (~dec).sum()
        assert f.pairs[j] == (n * c).sum() + (n * (n + 1)).sum() / 2
        assert f.kv_paged[j] == kv[dec].sum()
        assert f.kv_padded[j] == dec.sum() * (kv[dec].max() if dec.any() else 0)
        assert f.first[j] == (j == 0)
        assert f.kv_longest[j] == (kv[dec].max() if dec.any() else 0)


@settings(max_examples=60, deadline=None)
@given(steps, st.sampled_from([1, 16, 256]))
def test_shapes_are_those_of_every_iteration_each_at_its_first_iteration(step, granularity):
    first: dict = {}
    for j, (n, c) in enumerate(iterations_by_hand(step, step.num_iterations)):
        dec, kv = n == 1, c + n
        if dec.any():
            first.setdefault(("decode", int(dec.sum()),
                              int(-(-kv[dec].max() // granularity) * granularity)), j)
        for q, x in zip(n[~dec], c[~dec]):
            first.setdefault(("prefill", int(q), int(q + x), bool(x > 0)), j)
    got = iteration_shapes(step, step.num_iterations, granularity)
    assert {key for _, key in got} == set(first)
    assert all(first[key] == j for j, key in got if key in first and j == min(
        i for i, k in got if k == key))


def test_serial_engine_is_host_plus_device_and_overlapped_is_the_larger():
    step = Step(0, (1, 2, 3), (1, 1, 200), (500, 900, 0), (True,) * 3)
    params = EngineTimeParams(iteration_host_s=0.02, per_seq_host_s=1e-4, step_host_s=1e-3,
                              overlap=1.0)
    model = EngineTimeModel(params, WORK)
    f = step_iteration_features(step, 1)
    host, device = model.host_s(f)[0], model.device_s(f)[0]
    assert host == pytest.approx(0.02 + 3e-4 + 1e-3)
    assert model.times(f)[0] == pytest.approx(host + device)
    sharp = EngineTimeModel(dataclasses.replace(params, overlap=64.0), WORK)
    assert sharp.times(f)[0] == pytest.approx(max(host, device), rel=0.02)


def test_decode_weight_streaming_is_the_bound_at_batch_one():
    """A batch-1 decode on a device-bound engine streams the weights: bytes / bandwidth."""
    params = EngineTimeParams(weight_efficiency=1.0, kv_efficiency=1.0, overlap=64.0)
    t = EngineTimeModel(params, WORK).iteration_times(Step(0, (1,), (1,), (511,), (True,)), 1)
    bound = (WORK.weight_bytes + 512 * WORK.kv_bytes_per_token) / WORK.hbm_bandwidth
    assert t[0] == pytest.approx(bound, rel=1e-3)


def test_padded_decode_reads_the_longest_kv_for_every_row():
    step = Step(0, (1, 2), (1, 1), (99, 999), (True, True))
    f = step_iteration_features(step, 1)
    assert f.kv_paged[0] == 100 + 1000 and f.kv_padded[0] == 2 * 1000


@pytest.mark.parametrize("field,value", [("overlap", 0.5), ("kv_efficiency", 1.5),
                                         ("new_shape_s", -1.0), ("decode_kv", "ragged"),
                                         ("iteration_host_s", float("nan")),
                                         ("eager_host_s", -1e-3), ("mixed_host_s", -1e-3),
                                         ("kv_programs", -1.0), ("max_graph_batch", -1),
                                         ("decode_split_sms", -1), ("max_graph_tokens", -16),
                                         ("chunk_graph_host_s", -1e-3),
                                         ("roofline_p", 0.5)])
def test_bad_params_are_refused_by_name(field, value):
    with pytest.raises(ConfigError, match=field):
        EngineTimeParams(**{field: value})


def test_a_new_shape_is_charged_once_and_only_when_its_iteration_runs(tmp_path):
    path = tmp_path / "cal.json"
    model, gpu = get_model("llama-2-7b"), get_gpu("H100-80GB")
    path.write_text(json.dumps({
        "model": dataclasses.asdict(model), "device": dataclasses.asdict(gpu),
        "roofline": {}, "engine_dtype": "bf16", "kv_capacity_tokens": 100_000, "block_size": 16,
        "engine": {"params": dataclasses.asdict(EngineTimeParams(
            iteration_host_s=0.02, new_shape_s=0.04, decode_kv="padded",
            shape_granularity=16))}}))
    ex = load_calibrated_executor(path)  # the engine kind is the default when present
    step = Step(0, (1, 2), (300, 1), (0, 77), (True, True), num_iterations=3)
    first = ex.execute(step)
    again = ex.execute(step)
    assert first.duration_s - again.duration_s == pytest.approx(0.04 * 3, rel=1e-9)
    cut = load_calibrated_executor(path)
    assert cut.execute(step, until_s=0.0).num_iterations == 1  # the arrival cuts it short
    later = cut.execute(step)  # the first iteration's shapes are known, the others not
    assert later.duration_s - again.duration_s == pytest.approx(0.04 * 1, rel=1e-9)


def test_warmup_shapes_are_known_before_the_first_request():
    cache = ShapeCache.after_warmup(16, 100_000, 2)
    warm = warmup_step(100_000, 2)
    assert cache.new_per_iteration(warm, 2).sum() == 0
    assert ShapeCache(0).new_per_iteration(warm, 2).sum() == 0  # plan-free engines


GRAPHS = EngineTimeParams(iteration_host_s=1e-3, eager_host_s=9e-3, mixed_host_s=3e-3,
                          weight_efficiency=0.8, kv_efficiency=0.8, overlap=6.0,
                          max_graph_batch=256)


def one_iteration_s(params: EngineTimeParams, new: tuple[int, ...], ctx: tuple[int, ...]
                    ) -> float:
    step = Step(0, tuple(range(len(new))), new, ctx, (True,) * len(new))
    return float(EngineTimeModel(params, WORK).iteration_times(step, 1)[0])


def test_graph_replays_skip_the_eager_launches_that_prefill_and_big_batches_pay():
    model = EngineTimeModel(GRAPHS, WORK)
    f = step_iteration_features(Step(0, (0, 1), (1, 1), (100, 200), (True, True)), 3)
    assert np.all(model.eager(f) == 0)
    assert np.all(model.host_s(f) == pytest.approx(1e-3 + 0.0 * f.num_seqs, abs=1e-12))
    mixed = step_iteration_features(Step(0, (0, 1), (1, 40), (100, 0), (True, True)), 3)
    assert list(model.eager(mixed)) == [1.0, 0.0, 0.0]  # later iterations decode: replayed
    assert model.host_s(mixed)[0] == pytest.approx(1e-3 + 9e-3 + 3e-3)
    big = step_iteration_features(Step(0, tuple(range(300)), (1,) * 300, (10,) * 300,
                                       (True,) * 300), 1)
    assert model.eager(big)[0] == 1.0 and model.host_s(big)[0] == pytest.approx(1e-2)
    no_graphs = dataclasses.replace(GRAPHS, max_graph_batch=0)
    assert one_iteration_s(no_graphs, (1,), (100,)) == one_iteration_s(
        dataclasses.replace(no_graphs, eager_host_s=0.0), (1,), (100,))


def test_only_an_iteration_with_prefill_and_decode_rows_pays_the_mixed_launches():
    prefill = one_iteration_s(GRAPHS, (40, 40), (0, 0))
    both = one_iteration_s(GRAPHS, (40, 1), (0, 39))
    unmixed = dataclasses.replace(GRAPHS, mixed_host_s=0.0)
    assert prefill == one_iteration_s(unmixed, (40, 40), (0, 0))
    assert both > one_iteration_s(unmixed, (40, 1), (0, 39))


def test_split_plan_is_the_kernels_and_a_lopsided_decode_batch_waits_for_its_longest_row():
    from real.kernels.schedule import choose_num_splits
    from sim.cost.split_kv import longest_split_tokens, num_splits_of

    rows = np.arange(0, 400)
    assert list(num_splits_of(rows, 8, 8192, 132)) == [
        choose_num_splits(int(b), 8, 8192, 132) for b in rows]
    assert longest_split_tokens(np.array([4000.0]), np.array([1]), 32, 4096, 132)[0] == 500
    split = dataclasses.replace(GRAPHS, decode_split_sms=132, kv_programs=264.0)
    even = one_iteration_s(split, (1,) * 6, (2000,) * 6)
    lopsided = one_iteration_s(split, (1,) * 6, (9000,) + (600,) * 5)  # same total KV
    assert lopsided > even
    assert one_iteration_s(dataclasses.replace(split, kv_programs=0.0), (1,) * 6,
                           (9000,) + (600,) * 5) == pytest.approx(
        one_iteration_s(dataclasses.replace(split, kv_programs=0.0), (1,) * 6, (2000,) * 6))


def test_token_buckets_pad_under_an_eighth_beyond_256_tokens():
    from sim.cost.graph_plan import token_bucket, token_buckets

    sizes = token_buckets(2048)
    assert sizes[:3] == [16, 32, 48] and sizes[-1] == 2048 and len(sizes) == 40
    for n in range(257, 2049):
        assert (token_bucket(n, 2048) - n) / n < 1 / 8
    assert token_bucket(2049, 2048) == 0 and token_buckets(0) == []


def test_mixed_graph_replays_skip_the_launches_and_compute_the_bucket_padding():
    """With max_graph_tokens, an iteration with a prefill chunk replays a graph: no eager or
    mixed launch cost, and its dense layers run on the bucket's tokens (41 -> 48)."""
    graphs = dataclasses.replace(GRAPHS, max_graph_tokens=64)
    model = EngineTimeModel(graphs, WORK)
    mixed = step_iteration_features(Step(0, (0, 1), (1, 40), (100, 0), (True, True)), 1)
    assert model.eager(mixed)[0] == 0.0 and model.graph_tokens(mixed)[0] == 48
    assert model.host_s(mixed)[0] == pytest.approx(1e-3)
    padded = step_iteration_features(Step(0, (0, 1), (1, 47), (100, 0), (True, True)), 1)
    np.testing.assert_allclose(model.device_s(mixed), model.device_s(padded) - (
        WORK.flops_per_pair * (47 * 48 - 40 * 41) / 2 / (WORK.peak_flops
                                                          * graphs.attention_efficiency)))
    big = step_iteration_features(Step(0, (0,), (65,), (0,), (True,)), 1)
    assert model.eager(big)[0] == 1.0 and model.graph_tokens(big)[0] == 0


@pytest.mark.parametrize("value", [-1, True, 2.5, 20000])
def test_a_bad_real_max_graph_tokens_is_refused_by_name(value):
    from real.options import RealOptions

    with pytest.raises(ConfigError, match="real.max_graph_tokens"):
        RealOptions(max_graph_tokens=value)
