"""The real engine on a CUDA GPU (skipped without one): kernels, timing, memory sizing."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from real.attention import available_backends  # noqa: E402
from real.executor import TorchExecutor  # noqa: E402
from sim.executor import Step  # noqa: E402

pytestmark = pytest.mark.gpu


def mixed_logits(ex: TorchExecutor) -> torch.Tensor:
    """Logits of a batch mixing a prefill chunk after context, a fresh prefill and decodes."""
    rng = np.random.default_rng(0)
    ex.runner.logits((1, 2), (300, 40), (0, 0), rng.integers(0, 256, 340))
    ex.runner.logits((3,), (700,), (0,), rng.integers(0, 256, 700))
    ids = rng.integers(0, 256, 64 + 1 + 1 + 129)
    return ex.runner.logits((1, 2, 3, 4), (64, 1, 1, 129), (300, 40, 700, 0), ids).float()


def test_cuda_fp32_matches_cpu():
    cpu = TorchExecutor("tiny", "cpu", "fp32", kv_tokens=4096, warmup_iterations=0)
    gpu = TorchExecutor("tiny", "cuda", "fp32", kv_tokens=4096, warmup_iterations=0)
    torch.testing.assert_close(mixed_logits(gpu).cpu(), mixed_logits(cpu), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("block_size", [16, 256])
@pytest.mark.parametrize("backend", [b for b in ("flash_attn", "torch_varlen")
                                     if b in available_backends(torch.device("cuda"),
                                                                torch.bfloat16)])
def test_varlen_kernels_match_sdpa(backend, block_size):
    ref = TorchExecutor("tiny", "cuda", "bf16", kv_tokens=8192, attention="sdpa",
                        block_size=block_size, warmup_iterations=0)
    ex = TorchExecutor("tiny", "cuda", "bf16", kv_tokens=8192, attention=backend,
                       block_size=block_size, warmup_iterations=0)
    paged = "paged" if block_size % 256 == 0 else "gathered"
    assert ex.attention_backend == f"{backend}({paged})"
    torch.testing.assert_close(mixed_logits(ex), mixed_logits(ref), atol=3e-2, rtol=3e-2)


def test_cuda_timing_and_until():
    ex = TorchExecutor("tiny", "cuda", kv_tokens=8192)
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
