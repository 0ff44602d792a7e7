"""Options of the real backend, as a cluster config gives them (`cluster.real`); torch-free.

    cluster:
      model: llama-2-7b          # or tiny, or a HF config.json / model folder
      backend: real
      gpu_memory_utilization: 0.9
      real: {device: cuda, dtype: bf16, weights: /models/Llama-2-7b-hf, block_size: 16}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from sim.models.catalog import ModelSpec
from sim.util.errors import ConfigError, check_positive
from sim.util.schema import build

DTYPES = ("auto", "fp32", "fp16", "bf16")
ATTENTION_BACKENDS = ("auto", "paged", "sdpa", "torch_varlen", "flash_attn")


@dataclass(frozen=True)
class RealOptions:
    """How a TorchExecutor is built: device, precision, KV budget, weights, attention kernel."""

    device: str = "auto"  # auto (cuda when available) | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (bf16 on CUDA, fp32 on CPU) | fp32 | fp16 | bf16
    kv_tokens: int | None = None  # tokens of KV cache; None: from gpu_memory_utilization (GPU)
    block_size: int | None = None  # tokens per KV block; None: 256 with the varlen kernels,
    # else 16
    weights: str | None = None  # HF safetensors checkpoint folder; None: seeded random weights
    seed: int = 0  # seeds random weights and synthetic prompt token ids
    attention: str = "auto"  # auto (paged on CUDA, sdpa on CPU) | paged | sdpa | torch_varlen
    # | flash_attn
    warmup_iterations: int = 2  # warm-up forward passes before timing
    num_threads: int | None = None  # torch CPU threads; None: torch's default
    cpu_clock: str = "wall"  # CPU timing: wall | thread (this thread's CPU time, shared machines)
    cuda_graphs: bool = True  # replay decode iterations from CUDA graphs (CUDA, paged attention)
    max_graph_batch: int = 256  # requests: the largest decode batch captured in a graph
    max_graph_tokens: int = 2048  # tokens: the largest iteration with prefill chunks captured
    # in a graph (0: such iterations run eagerly)

    def __post_init__(self) -> None:
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ConfigError("real.device", self.device, "auto, cpu, cuda or cuda:N")
        if self.dtype not in DTYPES:
            raise ConfigError("real.dtype", self.dtype, f"one of {', '.join(DTYPES)}")
        if self.kv_tokens is not None:
            check_positive("real.kv_tokens", self.kv_tokens)
        if self.block_size is not None:
            check_positive("real.block_size", self.block_size)
        if self.attention not in ATTENTION_BACKENDS:
            raise ConfigError("real.attention", self.attention,
                              f"one of {', '.join(ATTENTION_BACKENDS)}")
        check_positive("real.warmup_iterations", self.warmup_iterations, allow_zero=True)
        if self.num_threads is not None:
            check_positive("real.num_threads", self.num_threads)
        if self.cpu_clock not in ("wall", "thread"):
            raise ConfigError("real.cpu_clock", self.cpu_clock, "wall or thread")
        if not isinstance(self.cuda_graphs, bool):
            raise ConfigError("real.cuda_graphs", self.cuda_graphs, "true or false")
        if isinstance(self.max_graph_batch, bool) or not isinstance(self.max_graph_batch, int) \
                or not 1 <= self.max_graph_batch <= 1024:
            raise ConfigError("real.max_graph_batch", self.max_graph_batch,
                              "an integer in [1, 1024]")
        if isinstance(self.max_graph_tokens, bool) or not isinstance(self.max_graph_tokens, int) \
                or not 0 <= self.max_graph_tokens <= 16384:
            raise ConfigError("real.max_graph_tokens", self.max_graph_tokens,
                              "an integer in [0, 16384]")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> "RealOptions":
        """Options from a config mapping: unknown keys, types and bounds checked, named
        (`sim.util.schema.build`)."""
        return build(cls, "real", dict(raw or {}))


def check_real_cluster(spec: Any) -> RealOptions:
    """Check a ClusterSpec for the real backend without building it (no torch import)."""
    from real.spec import resolve_real_model

    if spec.tensor_parallel != 1:
        raise ConfigError("cluster.tensor_parallel", spec.tensor_parallel,
                          "the real backend runs one GPU per instance")
    if spec.num_instances != 1:
        raise ConfigError("cluster.num_instances", spec.num_instances,
                          "the real backend serves one instance")
    config = resolve_real_model(spec.model)
    opts = RealOptions.from_mapping(spec.real)
    if opts.device == "cpu":  # the device is known now: refuse a model that cannot fit it
        check_fits_cpu(config.spec, opts)
    return opts


def check_fits_cpu(model: ModelSpec, opts: RealOptions) -> None:
    """ConfigError with the sizes unless the model (and its KV budget) fits in host memory."""
    from real.sizing import MemoryPlan, host_memory_bytes

    dtype = "fp32" if opts.dtype == "auto" else opts.dtype
    plan = MemoryPlan(model, dtype, opts.block_size or 16, opts.kv_tokens, reserve_bytes=0)
    plan.check("cpu (host memory)", host_memory_bytes())


def build_real_executors(spec: Any) -> list:
    """The TorchExecutor of a ClusterSpec with `backend: real` (imports torch)."""
    from real.executor import TorchExecutor

    opts = check_real_cluster(spec)
    return [TorchExecutor(spec.model, opts.device, opts.dtype, kv_tokens=opts.kv_tokens,
                          gpu_memory_utilization=spec.gpu_memory_utilization,
                          block_size=opts.block_size, weights=opts.weights, seed=opts.seed,
                          attention=opts.attention, warmup_iterations=opts.warmup_iterations,
                          num_threads=opts.num_threads, cpu_clock=opts.cpu_clock,
                          cuda_graphs=opts.cuda_graphs, max_graph_batch=opts.max_graph_batch,
                          max_graph_tokens=opts.max_graph_tokens)]
