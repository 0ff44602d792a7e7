"""`TorchExecutor`: the real engine behind the simulator's `Executor` interface.

It runs any `sim.core.executor.Step` on a Llama-family model: ragged prefill chunks and decodes in one
iteration (selective batching), padded static batches (padding is computed like any token),
multi-iteration Steps (stopping after the first iteration whose measured end reaches `until_s`)
and `freed_request_ids`. A request is known by its id: its prompt is synthetic token ids seeded by
the id (traces carry no text), decoding is greedy and ignores EOS, so every request generates
exactly the tokens the policy asks for. A chunk with no context for a request that still holds
KV (a preemption the policy recomputes) drops that KV first. An iteration that needs more KV
blocks than are free ends the Step with `oom=True`, as the cost model's executor does.

On CUDA the default is a serving engine's: the paged attention kernels (`real/attn_paged.py`),
the decode iteration captured in CUDA graphs per batch-size bucket (`real/cuda_graphs.py`) and
iterations with prefill chunks of up to `max_graph_tokens` tokens per token bucket
(`real/mixed_graphs.py`); `cuda_graphs=False` or another attention backend runs every iteration
eagerly.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from real.attention import AttentionBackend, default_block_size, resolve_backend_name
from real.attn_backends import make_backend
from real.cuda_graphs import DecodeGraphs
from real.kv_cache import KVCacheOOM, PagedKVCache
from real.memory import check_fits, dtype_name, num_kv_blocks, resolve_device, resolve_dtype
from real.mixed_graphs import MixedGraphs
from real.runner import ModelRunner
from real.spec import RealModelConfig, resolve_real_model
from real.timing import CpuStepTimer, CudaStepTimer, make_timer
from real.tokens import TokenStore
from real.weights import build_model
from sim.core.executor import InstanceInfo, Step, StepResult
from sim.cost.engine_shapes import ShapeCache, warmup_step

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepLog:
    """A Step as the engine ran it, with its measured iteration ends."""

    step: Step  # what was asked
    iteration_ends_s: np.ndarray  # seconds from the step start, completed iterations
    duration_s: float  # seconds the step took, time lost to an OOM included
    oom: bool  # the step ran out of KV blocks
    new_shapes: np.ndarray  # attention shapes run for the first time, per completed iteration
    synced: bool  # the host waited for each iteration's end (a finite until_s)


class TorchExecutor:
    def __init__(self, model: str | Path | RealModelConfig = "tiny", device: str = "auto",
                 dtype: str | torch.dtype | None = None, *, kv_tokens: int | None = None,
                 gpu_memory_utilization: float = 0.9, block_size: int | None = None,
                 weights: str | Path | None = None, seed: int = 0, attention: str = "auto",
                 warmup_iterations: int = 2, record_steps: bool = False,
                 num_threads: int | None = None, cpu_clock: str = "wall",
                 cuda_graphs: bool = True, max_graph_batch: int = 256,
                 max_graph_tokens: int = 2048) -> None:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.config = resolve_real_model(model)  # model shapes and constants
        self.device = resolve_device(device)  # where the model runs
        self.dtype = resolve_dtype(dtype, self.device)  # weights, activations and KV dtype
        backend = resolve_backend_name(attention, self.device, self.dtype)
        self.block_size = block_size or default_block_size(backend)  # tokens per KV block
        self.backend = self._make_backend(backend)  # attention kernel
        check_fits(self.config, self.block_size, self.dtype, self.device, kv_tokens,
                   gpu_memory_utilization)  # before allocating: a model too big is a ConfigError
        self.model = build_model(self.config, self.device, self.dtype, weights, seed)
        s = self.config.spec
        blocks = num_kv_blocks(self.config, self.block_size, self.dtype, self.device, kv_tokens,
                               gpu_memory_utilization)
        self.cache = PagedKVCache(s.num_layers, blocks, self.block_size, s.num_kv_heads,
                                  s.head_dim, self.dtype, self.device)
        # RoPE table: no request holds more tokens than the cache, nor than the model's context
        self.model.setup_rope(self.device, max(s.max_position_embeddings,
                                               self.cache.capacity_tokens) + 1)
        self.tokens = TokenStore(s.vocab_size, seed)  # token ids per request
        graphs = self._make_graphs(backend, cuda_graphs, max_graph_batch)
        mixed = self._make_mixed(graphs, max_graph_tokens, max_graph_batch)
        self.runner = ModelRunner(self.model, self.cache, self.tokens, self.backend, self.device,
                                  graphs, mixed)
        self.step_log: list[StepLog] | None = [] if record_steps else None  # what ran, if asked
        self.cpu_clock = cpu_clock  # CPU timing: wall | thread (CPU time of this thread)
        # attention shapes this engine has run (sdpa on CUDA plans a kernel per shape)
        self.shapes = ShapeCache(self.block_size if backend == "sdpa"
                                 and self.device.type == "cuda" else 0)
        log.info("%s: %d KV blocks of %d tokens", self.name, blocks, self.block_size)
        self.warm_up(warmup_iterations)
        if graphs is not None and self.device.type == "cuda":
            graphs.capture()  # after the warm-up: kernels compiled, allocator warm
        if mixed is not None and self.device.type == "cuda":
            mixed.capture()

    def _make_backend(self, name: str) -> AttentionBackend:
        s = self.config.spec
        sms = (torch.cuda.get_device_properties(self.device).multi_processor_count
               if self.device.type == "cuda" else 1)
        elem = torch.empty((), dtype=self.dtype).element_size()
        return make_backend(name, self.block_size, s.num_kv_heads, s.head_dim, elem, sms,
                            s.max_position_embeddings)

    def _make_graphs(self, backend: str, enabled: bool, max_batch: int) -> DecodeGraphs | None:
        """Decode graphs for the paged backend on CUDA (captured after the warm-up)."""
        if not (enabled and backend == "paged" and self.device.type == "cuda"):
            return None
        return DecodeGraphs(self.model, self.cache.kv, self.backend, self.device, max_batch,
                            -(-self.cache.capacity_tokens // self.block_size))

    def _make_mixed(self, graphs: DecodeGraphs | None, max_tokens: int,
                    max_rows: int) -> MixedGraphs | None:
        """Graphs of iterations with prefill chunks, beside the decode graphs (none at 0)."""
        if graphs is None or max_tokens <= 0:
            return None
        return MixedGraphs(self.model, self.cache.kv, self.backend, self.device, max_tokens,
                           max_rows, -(-self.cache.capacity_tokens // self.block_size))

    @property
    def max_graph_tokens(self) -> int:
        """The most tokens of an iteration with prefill chunks replayed from a CUDA graph (0:
        such iterations run eagerly)."""
        mixed = self.runner.mixed
        return int(mixed.max_tokens) if mixed is not None else 0

    @property
    def cuda_graphs(self) -> bool:
        """Whether decode iterations replay captured CUDA graphs."""
        return self.runner.graphs is not None

    @property
    def max_graph_batch(self) -> int:
        """The largest decode batch replayed from a CUDA graph (0 without graphs)."""
        graphs = self.runner.graphs
        return int(graphs.buckets[-1]) if graphs is not None else 0

    # ---- Executor interface ---------------------------------------------------------------
    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache capacity in tokens (blocks x block size)."""
        return self.cache.capacity_tokens

    @property
    def max_model_len(self) -> int:
        """The model's context in tokens (max_position_embeddings; sim/engine/limits.py)."""
        return self.config.spec.max_position_embeddings

    @property
    def name(self) -> str:
        return (f"{self.config.name} {dtype_name(self.dtype)} on {self.device} "
                f"[{self.attention_backend}]")

    @property
    def attention_backend(self) -> str:
        """The attention kernel that runs: flash_attn(...), torch_varlen(...) or sdpa."""
        return self.backend.name

    def instance_info(self, instance_id: int) -> InstanceInfo:
        """What a policy may know: capacity, name and, on CUDA, the GPU (vLLM's batch
        defaults follow it, policies/vllm_batch_defaults.py)."""
        gpu_name, gpu_memory = "", 0
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            gpu_name, gpu_memory = props.name, int(props.total_memory)
        return InstanceInfo(instance_id, self.kv_capacity_tokens, self.name,
                            gpu_name=gpu_name, gpu_memory_bytes=gpu_memory)

    @torch.inference_mode()
    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        """Run `step`, timing each iteration; stop after the first whose end is at or past
        `until_s` (always at least one); an iteration without free KV blocks ends it with OOM."""
        timer = make_timer(self.device, self.cpu_clock)
        timer.start()  # the step's host work (freeing, checks, inputs) counts in iteration 1
        for rid in step.freed_request_ids:
            self.cache.free(rid)
        self._sync_contexts(step)
        completed, oom = self._iterate(step, until_s, timer)
        ends = timer.ends()[:completed]
        duration = timer.now() if oom else (float(ends[-1]) if completed else 0.0)
        self.runner.commit()
        new_shapes = self.shapes.new_per_iteration(step, completed)
        self.shapes.record(step, completed)
        if self.step_log is not None:
            self.step_log.append(StepLog(step, ends, duration, oom, new_shapes,
                                         until_s != math.inf))
        return StepResult(duration, ends, oom=oom)

    def _iterate(self, step: Step, until_s: float,
                 timer: CpuStepTimer | CudaStepTimer) -> tuple[int, bool]:
        """Run the step's iterations; returns (iterations completed, ran out of KV)."""
        ids = step.request_ids
        new = np.asarray(step.num_new_tokens, dtype=np.int64)
        ctx = np.asarray(step.num_context_tokens, dtype=np.int64)
        samples = np.asarray(step.samples, dtype=bool)
        watch = until_s != math.inf
        tokens = None
        for j in range(step.num_iterations):
            try:
                tokens = self.runner.step(ids, new, ctx, samples, tokens) if ids else None
            except KVCacheOOM as err:
                log.info("step on instance %d: %s", step.instance_id, err)
                return j, True
            end = timer.mark(sync=watch)
            if watch and end >= until_s:  # type: ignore[operator]
                return j + 1, False
            if j == 0:
                ctx, new, samples = ctx + new, np.ones_like(new), np.ones_like(samples)
            else:
                ctx = ctx + 1
        return step.num_iterations, False

    def _sync_contexts(self, step: Step) -> None:
        """Check each request's cached tokens against the step; recompute dropped requests."""
        for rid, ctx in zip(step.request_ids, step.num_context_tokens):
            held = self.cache.num_tokens(rid)
            if ctx == 0 and held:
                self.cache.free(rid)  # preempted by recomputation: start over
            elif held != ctx:
                raise RuntimeError(f"request {rid}: the step says {ctx} context tokens, the KV "
                                   f"cache holds {held} (policy and engine out of step)")

    # ---- engine management ----------------------------------------------------------------
    def release(self, request_ids: list[int] | tuple[int, ...]) -> None:
        """Drop the KV of requests (their token ids are kept)."""
        for rid in request_ids:
            self.cache.free(rid)

    def reserve_placeholder(self, request_id: int, num_tokens: int) -> None:
        """Give a request `num_tokens` of KV without computing it (profiling long contexts)."""
        self.cache.append_all((request_id,), np.array([num_tokens], dtype=np.int64))

    def reset(self) -> None:
        """Forget every request: KV, token ids and the step log (the weights, and the kernel
        plans of the shapes run so far, stay)."""
        self.cache.reset()
        self.tokens.reset()
        self.runner.discard_pending()
        if self.step_log is not None:
            self.step_log.clear()

    def check(self) -> None:
        """Assert the KV block accounting invariant."""
        self.cache.check()

    def warm_up(self, iterations: int) -> None:
        """Run prefill + decode iterations of throwaway requests (kernels, allocator, cuBLAS)
        and, on CUDA, compile every variant of the paged decode kernel a batch can choose."""
        if iterations <= 0:
            return
        step = warmup_step(self.kv_capacity_tokens, iterations)
        self.execute(step)
        self.release(step.request_ids)
        compile_kernels = getattr(self.backend, "compile_kernels", None)
        if compile_kernels is not None and self.device.type == "cuda":
            s = self.config.spec
            q = torch.zeros(1, s.num_attention_heads, s.head_dim, device=self.device,
                            dtype=self.dtype)
            with torch.inference_mode():
                compile_kernels(q, *self.cache.kv[0])
        self.reset()
