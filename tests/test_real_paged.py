"""The serving-engine path on CPU: paged attention, the CUDA-graph buffers run eagerly, and
random weights that are the same bits on every device."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from real.cuda_graphs import DecodeGraphs, capture_sizes  # noqa: E402
from real.executor import TorchExecutor  # noqa: E402
from real.init_hash import hash_uniform_, hash_uniform_numpy  # noqa: E402
from real.mixed_graphs import MixedGraphs  # noqa: E402
from real.model import hf_parameter_views  # noqa: E402
from real.weights import INIT_STD  # noqa: E402
from sim.core.executor import Step  # noqa: E402

ATOL = 2e-5  # fp32 rounding of two attention implementations


def engine(attention: str, block_size: int = 16) -> TorchExecutor:
    return TorchExecutor("tiny", "cpu", "fp32", kv_tokens=4096, attention=attention,
                         block_size=block_size, warmup_iterations=0)


def mixed(ex: TorchExecutor) -> torch.Tensor:
    """Logits of a batch mixing a chunk after context, decodes over different contexts and a
    fresh prompt (the shapes a chunked-prefill scheduler produces)."""
    rng = np.random.default_rng(0)
    ex.runner.logits((1, 2), (300, 40), (0, 0), rng.integers(0, 256, 340))
    ex.runner.logits((3,), (70,), (0,), rng.integers(0, 256, 70))
    return ex.runner.logits((1, 2, 3, 4), (64, 1, 1, 29), (300, 40, 70, 0),
                            rng.integers(0, 256, 95))


@pytest.mark.parametrize("block_size", [16, 256])
def test_paged_backend_equals_sdpa(block_size):
    paged = engine("paged", block_size)
    assert paged.attention_backend == "paged"
    torch.testing.assert_close(mixed(paged), mixed(engine("sdpa", block_size)), atol=ATOL,
                               rtol=0)


def graph_engine(max_batch: int) -> TorchExecutor:
    """A CPU engine whose decode iterations go through the CUDA-graph buffers, run eagerly."""
    ex = engine("paged")
    ex.runner.graphs = DecodeGraphs(ex.model, ex.cache.kv, ex.backend, ex.device, max_batch,
                                    4096 // 16)
    ex.runner.graph_replay = False
    return ex


def test_graph_buffers_decode_the_same_tokens_as_eager_iterations():
    """Three requests (a bucket of 4: one padding row) prefill, then decode 20 tokens in one
    Step; the graph path's tokens and KV equal the eager engine's."""
    step = Step(0, (1, 2, 3), (37, 5, 90), (0, 0, 0), (True,) * 3, num_iterations=20)
    eager, graphs = engine("paged"), graph_engine(max_batch=8)
    for ex in (eager, graphs):
        ex.execute(step)
    assert graphs.runner.graphs.bucket(3) == 4
    for rid, n in zip((1, 2, 3), (37, 5, 90)):
        np.testing.assert_array_equal(graphs.tokens.get(rid, 0, n + 20),
                                      eager.tokens.get(rid, 0, n + 20))
    torch.testing.assert_close(graphs.runner.logits((1, 2, 3), (1, 1, 1), (56, 24, 109)),
                               eager.runner.logits((1, 2, 3), (1, 1, 1), (56, 24, 109)),
                               atol=ATOL, rtol=0)


class ReplayedForward:
    """Stands in for a captured graph on CPU: a replay reruns the captured forward, which reads
    the static buffers as they are then (what a CUDA graph's kernels do)."""

    def __init__(self, graphs: DecodeGraphs, b: int) -> None:
        self.graphs, self.b, self.replays = graphs, b, 0

    def replay(self) -> None:
        self.replays += 1
        self.graphs._forward(self.b)


def test_captured_graphs_serve_decode_iterations_after_the_warmup(monkeypatch):
    """Before the capture (the warm-up) decodes run eagerly; after it, every pure-decode
    iteration replays its bucket's graph and the tokens equal the eager engine's."""
    ex = graph_engine(max_batch=8)
    ex.runner.graph_replay = True
    graphs = ex.runner.graphs
    assert not graphs.captured
    ex.warm_up(2)  # a decode iteration with no graph yet: eager
    graphs.graphs = {b: ReplayedForward(graphs, b) for b in graphs.buckets}
    eager = engine("paged")
    step = Step(0, (1, 2, 3), (37, 5, 90), (0, 0, 0), (True,) * 3, num_iterations=6)
    for e in (ex, eager):
        e.execute(step)
    assert graphs.graphs[4].replays == 5  # iterations 2-6 of a 3-row batch
    for rid, n in zip((1, 2, 3), (43, 11, 96)):
        np.testing.assert_array_equal(ex.tokens.get(rid, 0, n), eager.tokens.get(rid, 0, n))


def test_batches_beyond_the_largest_bucket_run_eagerly():
    ex = graph_engine(max_batch=2)
    step = Step(0, (1, 2, 3), (4, 4, 4), (0, 0, 0), (True,) * 3, num_iterations=3)
    assert ex.execute(step).num_iterations == 3  # 3 rows > 2: eager decodes


def test_capture_sizes_follow_vllm():
    assert capture_sizes(64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert capture_sizes(3) == [1, 2, 3]


def test_random_weights_are_the_hash_of_name_and_index_on_any_device():
    """The same bits on CPU and CUDA: each tensor is a pure function of (seed, name, index);
    numpy's uint64 arithmetic is the reference (tests/test_real_gpu.py runs it on CUDA)."""
    ex = engine("sdpa")
    views = hf_parameter_views(ex.model)
    name = "model.layers.1.self_attn.k_proj.weight"  # a slice of the fused qkv weight
    ref = hash_uniform_numpy(views[name].numel(), zlib.crc32(name.encode()), INIT_STD)
    np.testing.assert_array_equal(views[name].numpy().ravel(), ref)
    big = torch.empty(3 * (1 << 24) // 2 + 7)  # crosses a chunk boundary
    hash_uniform_(big, 99, 0.02)
    np.testing.assert_array_equal(big.numpy(), hash_uniform_numpy(big.numel(), 99, 0.02))
    assert abs(float(big.std()) - 0.02) < 1e-4 and abs(float(big.mean())) < 1e-4


def mixed_engine(max_tokens: int, max_rows: int = 8, num_sms: int = 1) -> TorchExecutor:
    """A CPU engine whose iterations with prefill chunks go through the mixed graphs' buffers,
    run eagerly (`num_sms` sets the split-KV plan the graphs follow)."""
    ex = graph_engine(max_batch=max_rows)
    ex.backend.num_sms = num_sms
    ex.runner.mixed = MixedGraphs(ex.model, ex.cache.kv, ex.backend, ex.device, max_tokens,
                                  max_rows, 4096 // 16)
    return ex


def run_schedule(ex: TorchExecutor) -> None:
    """Prompts alone, then a chunk after context beside decodes and a fresh prompt, then
    decodes: the shapes a chunked-prefill scheduler produces."""
    ex.execute(Step(0, (1, 2, 3), (37, 5, 90), (0, 0, 0), (True,) * 3, num_iterations=2))
    ex.execute(Step(0, (1, 2, 3, 4), (1, 1, 20, 29), (38, 6, 91, 0), (True, True, False, True),
                    num_iterations=1))
    ex.execute(Step(0, (1, 4), (1, 3), (39, 29), (True, True), num_iterations=1))


@pytest.mark.parametrize("num_sms", [1, 64])
def test_mixed_graph_buffers_compute_the_same_tokens_as_eager_iterations(num_sms):
    eager, graphs = engine("paged"), mixed_engine(max_tokens=256, num_sms=num_sms)
    for ex in (eager, graphs):
        run_schedule(ex)
    for rid, n in ((1, 41), (2, 7), (3, 111), (4, 33)):
        np.testing.assert_array_equal(graphs.tokens.get(rid, 0, n), eager.tokens.get(rid, 0, n))
    mixed = graphs.runner.mixed
    assert mixed.key(np.array([1, 1, 20, 29])) == (64, num_sms > 1)  # few decodes: split plan
    assert mixed.key(np.array([37, 5, 90])) == (144, False)  # no decode: the plain graph


def test_mixed_graphs_leave_too_many_tokens_or_chunks_to_eager_iterations():
    mixed = mixed_engine(max_tokens=64, max_rows=4).runner.mixed
    assert mixed.buckets == [16, 32, 48, 64]
    assert mixed.key(np.array([40, 25])) is None  # 65 tokens
    assert mixed.key(np.array([2] * 8)) == (16, False)
    assert mixed.key(np.array([1] * 5 + [3])) is None  # 5 decode rows > max_rows
    assert mixed.sizes((16, False)) == (16, 4, 9, 1 + 9)
    wide = mixed_engine(max_tokens=256).runner.mixed
    assert wide.key(np.array([2] * 64)) == (128, False)
    assert wide.key(np.array([2] * 65)) is None  # more chunks than any graph holds (64)


def test_the_time_model_prices_the_graphs_the_engine_replays():
    """For random schedules, the engine's graph choice (decode graph, mixed bucket or eager) is
    the one `sim/cost/engine_time.py` prices (`sim/cost/graph_plan.py` on both sides)."""
    from sim.cost.engine_time import EngineTimeModel, EngineTimeParams, step_iteration_features

    ex = mixed_engine(max_tokens=128, max_rows=8)
    model = EngineTimeModel(EngineTimeParams(max_graph_batch=8, max_graph_tokens=128), None)
    rng = np.random.default_rng(1)
    for _ in range(300):
        n = rng.choice([1, 1, 1, 2, 7, 30, 90], size=int(rng.integers(1, 12)))
        step = Step(0, tuple(range(len(n))), tuple(int(x) for x in n), (5,) * len(n),
                    (True,) * len(n))
        f = step_iteration_features(step, 1)
        key = ex.runner.mixed.key(n)
        decode_graph = ex.runner._graphable(n)
        want = 0 if decode_graph or key is None else key[0]
        assert model.graph_tokens(f)[0] == want
        assert model.eager(f)[0] == float(not decode_graph and key is None)
