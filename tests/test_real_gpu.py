"""The real engine on a CUDA GPU (skipped without one): kernels, CUDA graphs, timing, memory.

Run by scripts/gpu_check.sh (`pytest -m gpu`), which puts the counts in its report.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from real.attention import available_backends  # noqa: E402
from real.executor import TorchExecutor  # noqa: E402
from sim.core.executor import Step  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def mixed_logits(ex: TorchExecutor) -> torch.Tensor:
    """Logits of a batch mixing a prefill chunk after context, a fresh prefill and decodes."""
    rng = np.random.default_rng(0)
    ex.runner.logits((1, 2), (300, 40), (0, 0), rng.integers(0, 256, 340))
    ex.runner.logits((3,), (700,), (0,), rng.integers(0, 256, 700))
    ids = rng.integers(0, 256, 64 + 1 + 1 + 129)
    return ex.runner.logits((1, 2, 3, 4), (64, 1, 1, 129), (300, 40, 700, 0), ids).float()


def tiny(device: str, dtype: str, **kw) -> TorchExecutor:
    return TorchExecutor("tiny", device, dtype, kv_tokens=kw.pop("kv_tokens", 4096),
                         warmup_iterations=kw.pop("warmup_iterations", 0), **kw)


def test_weights_are_the_same_bits_on_cuda_and_cpu():
    cpu, gpu = tiny("cpu", "fp32"), tiny("cuda", "fp32", cuda_graphs=False)
    for (name, a), b in zip(cpu.model.named_parameters(), gpu.model.parameters()):
        assert torch.equal(a, b.cpu()), name


@pytest.mark.parametrize("attention", ["paged", "sdpa"])
def test_cuda_fp32_matches_cpu(attention):
    cpu = tiny("cpu", "fp32")
    gpu = tiny("cuda", "fp32", attention=attention, cuda_graphs=False)
    torch.testing.assert_close(mixed_logits(gpu).cpu(), mixed_logits(cpu), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("block_size", [16, 256])
@pytest.mark.parametrize("backend", [b for b in ("paged", "flash_attn", "torch_varlen")
                                     if torch.cuda.is_available()
                                     and b in available_backends(torch.device("cuda"),
                                                                 torch.bfloat16)])
def test_kernels_match_sdpa_in_bf16(backend, block_size):
    ref = tiny("cuda", "bf16", kv_tokens=8192, attention="sdpa", block_size=block_size)
    ex = tiny("cuda", "bf16", kv_tokens=8192, attention=backend, block_size=block_size,
              cuda_graphs=False)
    torch.testing.assert_close(mixed_logits(ex), mixed_logits(ref), atol=3e-2, rtol=3e-2)


def test_the_default_cuda_engine_is_paged_with_graphs():
    ex = tiny("cuda", "bf16", kv_tokens=8192)
    assert ex.attention_backend == "paged" and ex.cuda_graphs


def test_cuda_graph_decodes_equal_eager_decodes():
    """fp32, three requests (a bucket of 4: one padding row), two Steps of decodes with
    changing contexts: the graph replays produce the eager engine's tokens. After a step of
    n new tokens and k iterations a request's KV holds context + n + k - 1 tokens (the last
    sampled token is the next step's new token)."""
    runs = []
    for graphs in (True, False):
        ex = tiny("cuda", "fp32", kv_tokens=8192, cuda_graphs=graphs, warmup_iterations=2)
        ex.execute(Step(0, (1, 2, 3), (37, 5, 90), (0, 0, 0), (True,) * 3, num_iterations=24))
        ex.execute(Step(0, (1, 3), (1, 1), (60, 113), (True,) * 2, num_iterations=9))
        runs.append([ex.tokens.get(r, 0, n) for r, n in ((1, 70), (2, 29), (3, 123))])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_mixed_graph_iterations_equal_eager_iterations():
    """fp32: prompts alone, a chunk after context beside few decodes (the split-KV variant)
    and a fresh prompt, then many decodes beside a chunk; replayed from the mixed graphs the
    engine computes the eager engine's tokens."""
    runs = []
    for graphs in (True, False):
        ex = tiny("cuda", "fp32", kv_tokens=8192, cuda_graphs=graphs, warmup_iterations=2)
        if graphs:
            mixed = ex.runner.mixed
            assert mixed.captured and mixed.key(np.array([1, 20])) == (32, mixed.few > 0)
        ex.execute(Step(0, (1, 2, 3), (37, 5, 90), (0, 0, 0), (True,) * 3, num_iterations=2))
        ex.execute(Step(0, (1, 2, 3, 4), (1, 1, 20, 29), (38, 6, 91, 0),
                        (True, True, False, True)))
        ex.execute(Step(0, (5,), (300,), (0,), (True,)))
        ex.execute(Step(0, (1, 2, 3, 4, 5), (1, 1, 40, 1, 1), (39, 7, 111, 29, 300),
                        (True,) * 5, num_iterations=3))
        runs.append([ex.tokens.get(r, 0, n) for r, n in ((1, 42), (2, 10), (3, 153), (4, 32),
                                                          (5, 303))])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_cuda_timing_and_until():
    ex = tiny("cuda", "bf16", kv_tokens=8192, warmup_iterations=2)
    full = ex.execute(Step(0, (1, 2), (128, 64), (0, 0), (True, True), num_iterations=16))
    assert full.num_iterations == 16 and np.all(np.diff(full.iteration_ends_s) > 0)
    cut = ex.execute(Step(0, (1, 2), (1, 1), (143, 79), (True, True), num_iterations=16),
                     until_s=0.0)
    assert cut.num_iterations == 1 and cut.duration_s > 0
    ex.check()


def test_kv_cache_sized_from_memory_fraction():
    ex = TorchExecutor("tiny", "cuda", gpu_memory_utilization=0.3)
    total = torch.cuda.get_device_properties(ex.device).total_memory
    kv_bytes = sum(k.numel() * k.element_size() * 2 for k, _ in ex.cache.kv)
    assert ex.kv_capacity_tokens > 0 and kv_bytes <= 0.3 * total


@pytest.mark.slow
def test_llama2_7b_shapes_run_in_bf16():
    ex = TorchExecutor("llama-2-7b", "cuda", "bf16", gpu_memory_utilization=0.9)
    res = ex.execute(Step(0, (1, 2), (512, 300), (0, 0), (True, True), num_iterations=8))
    assert res.num_iterations == 8 and not res.oom
    assert ex.kv_capacity_tokens > 100_000  # a 7B model leaves most of a big GPU to KV


@pytest.mark.parametrize("block_size,splits", [(16, 1), (16, 8), (256, 4)])
def test_triton_kernels_match_their_references_at_llama3_shapes(block_size, splits):
    """bf16, 32 query / 8 KV heads of 128, q/k/v as views of one fused qkv output, decodes
    over different lengths (one a padding row) and prefill chunks after context."""
    from real.kernels import ops, reference

    gen = torch.Generator(device="cuda").manual_seed(0)
    dev, dt = torch.device("cuda"), torch.bfloat16

    def rand(*shape):
        return torch.randn(*shape, device=dev, dtype=dt, generator=gen)

    per_row = 3000 // block_size + 1  # blocks the longest row needs
    blocks = 4 * per_row + 8
    kc, vc = rand(blocks, block_size, 8, 128), rand(blocks, block_size, 8, 128)
    lens = torch.tensor([1, 700, 3000, 0], device=dev, dtype=torch.int32)
    tables = torch.randperm(blocks, device=dev, generator=gen)[: 4 * per_row]
    tables = tables.view(4, per_row).to(torch.int32)
    qkv = rand(4, (32 + 16) * 128)
    q = qkv[:, : 32 * 128].view(4, 32, 128)
    index = torch.arange(4, device=dev)
    got = ops.paged_decode_attention(q, kc, vc, tables, lens, index, 128 ** -0.5, splits)
    want = reference.paged_decode_attention(q, kc, vc, tables, lens, index, 128 ** -0.5)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    start = torch.tensor([0, 100], device=dev, dtype=torch.int32)
    qlen = torch.tensor([100, 77], device=dev, dtype=torch.int32)
    ctx = torch.tensor([0, 1500], device=dev, dtype=torch.int32)
    qp = rand(177, 32, 128)
    out_got, out_want = torch.zeros_like(qp), torch.zeros_like(qp)
    ops.paged_prefill_attention(qp, kc, vc, tables[:2], start, qlen, ctx, 0.1, out_got)
    reference.paged_prefill_attention(qp, kc, vc, tables[:2], start, qlen, ctx, 0.1, out_want)
    torch.testing.assert_close(out_got, out_want, atol=2e-2, rtol=2e-2)


def test_fused_small_ops_match_their_references_in_bf16():
    from real.kernels import ops, reference

    gen = torch.Generator(device="cuda").manual_seed(1)
    x, r = (torch.randn(37, 4096, device="cuda", generator=gen).bfloat16() for _ in range(2))
    w = torch.rand(4096, device="cuda", generator=gen).bfloat16()
    for got, want in zip(ops.fused_add_rms_norm(x, r, w, 1e-5),
                         reference.fused_add_rms_norm(x, r, w, 1e-5)):
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    gu = torch.randn(37, 2 * 11008, device="cuda", generator=gen).bfloat16()
    torch.testing.assert_close(ops.silu_and_mul(gu), reference.silu_and_mul(gu), atol=2e-2,
                               rtol=2e-2)
