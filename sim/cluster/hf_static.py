"""A static-batch engine in the style of HF transformers' `generate()` (the Magnus paper's engine).

`cluster.engine: {kind: hf_static}` selects it; the default engine (`{}`) is the paged one of the
cost models. What differs from a paged engine:
  memory     one contiguous KV tensor per batch, padded: every row holds the batch's longest
             sequence (`rows x (longest prompt + iterations so far)` tokens); the KV grows by
             `torch.cat` each iteration, so the layer being extended is briefly held twice; the
             prefill also holds the logits of every position (HF computes them all, and a
             permuted copy) and one layer's eager attention scores (fp16, then an fp32 copy).
             Everything the weights and `reserve_bytes` leave is free; a step fails (oom) at the
             first iteration whose peak exceeds it. No paged KV, no memory fraction.
  time       padded tokens are computed like real ones; the prefill computes logits at every
             position and the full (not causal-halved) score matrix; each decode iteration pays a
             fixed host cost (Python, ~40 small kernels a layer, sampling) and moves each cached
             token's K and V through HBM `kv_passes` times (attention read, torch.cat read and
             write, layout copies). int8 / int4 weights are dequantized to an fp16 copy in HBM
             before each matmul (ChatGLM's cpm_kernels path), so they are read slower than fp16.
  continuous a Step with decode rows (an iteration-level batcher's running batch, joiners among
             it) is run as an HF continuous batcher runs it: sim/cluster/hf_continuous.py.
The two time parameters (`step_overhead_s`, `kv_passes`) were set from the Magnus paper's Fig. 4
run (docs/magnus.md, "The static-batch engine"). The executor is handed to policies as
`InstanceInfo.engine`, so a policy can size batches in the engine's bytes and profile batch times
offline. sim/ imports nothing above it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

import numpy as np

from sim.cluster.hf_continuous import execute_mixed, mixed_shape
from sim.core.executor import InstanceInfo, Step, StepResult, modelled_result
from sim.cost.cost_model import ACT_DTYPE_BYTES, GIB, DeploymentSpec, weight_dtype_bytes
from sim.util.errors import ConfigError, check_fraction, check_positive
from sim.util.field_types import check_fields

ENGINE_KINDS = ("paged", "hf_static")  # cluster.engine.kind values; {} means paged
FP16_COPY_BYTES = 2 * ACT_DTYPE_BYTES  # a dequantized weight: written once, read once (fp16)


@dataclass(frozen=True, slots=True)
class HFStaticParams:
    """Memory and time parameters of the static-batch engine (`cluster.engine` fields)."""

    step_overhead_s: float = 0.030  # seconds per forward pass off the GPU's critical roofline
    kv_passes: float = 5.0  # HBM passes over each cached token's K and V per decode iteration
    compute_efficiency: float = 0.5  # fraction of the GPU's fp16 tensor peak matmuls reach
    memory_efficiency: float = 0.85  # fraction of HBM bandwidth streaming reaches
    logits_copies: float = 2.0  # all-position fp16 logits live at once in the prefill
    score_bytes_per_pair: float = 6.0  # live bytes per (query, key, head) of one layer's scores
    reserve_bytes: int = GIB  # CUDA context and allocator slack (bytes)

    def __post_init__(self) -> None:
        check_fields(HFStaticParams, "cluster.engine",
                     {f.name: getattr(self, f.name) for f in fields(self)})
        for name in ("step_overhead_s", "kv_passes", "logits_copies", "score_bytes_per_pair",
                     "reserve_bytes"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ConfigError(f"cluster.engine.{name}", value, "must be finite")
            check_positive(f"cluster.engine.{name}", value, allow_zero=True)
        check_fraction("cluster.engine.compute_efficiency", self.compute_efficiency)
        check_fraction("cluster.engine.memory_efficiency", self.memory_efficiency)


def engine_kind(engine: Mapping[str, Any]) -> str:
    """The engine `cluster.engine` names: paged (default, `{}`) or hf_static."""
    kind = engine.get("kind", "paged")
    if kind not in ENGINE_KINDS:
        raise ConfigError("cluster.engine.kind", kind, f"one of {', '.join(ENGINE_KINDS)}")
    if kind == "paged" and len(engine) > ("kind" in engine):
        extra = sorted(k for k in engine if k != "kind")
        raise ConfigError(f"cluster.engine.{extra[0]}", engine[extra[0]],
                          "options belong to kind: hf_static; the paged engine takes none")
    return kind


def hf_static_params(engine: Mapping[str, Any]) -> HFStaticParams:
    """The engine's parameters from `cluster.engine` (kind hf_static), unknown keys refused."""
    known = {f.name for f in fields(HFStaticParams)}
    for key, value in engine.items():
        if key != "kind" and key not in known:
            raise ConfigError(f"cluster.engine.{key}", value,
                              f"unknown; known: kind, {', '.join(sorted(known))}")
    return HFStaticParams(**{k: v for k, v in engine.items() if k != "kind"})


def check_hf_static_cluster(tensor_parallel: int, backend: str, draft_model: str | None,
                            calibrated: bool = False) -> None:
    """The static-batch engine models one GPU of the simulator: no TP, no draft, no real backend,
    no calibration file (its step times are its own)."""
    if tensor_parallel != 1:
        raise ConfigError("cluster.tensor_parallel", tensor_parallel,
                          "engine hf_static models one GPU per instance (1)")
    if backend != "sim":
        raise ConfigError("cluster.backend", backend, "engine hf_static is a cost model (sim)")
    if draft_model is not None:
        raise ConfigError("cluster.draft_model", draft_model, "engine hf_static has no draft")
    if calibrated:
        raise ConfigError("cluster.engine.kind", "hf_static", "times its own steps; drop "
                          "cluster.cost_model.calibration")


def hf_weight_read_bytes(weight_dtype: str) -> float:
    """HBM bytes one layer weight costs per forward: fp16 read once; a quantized weight is read,
    written as an fp16 copy and that copy read by the matmul."""
    own = weight_dtype_bytes(weight_dtype)
    return own if weight_dtype in ("fp16", "bf16") else own + FP16_COPY_BYTES


@dataclass(frozen=True, slots=True)
class HFStaticMemory:
    """Peak memory of a padded batch on the static-batch engine, what a policy needs to size
    batches in bytes (the executor's OOM check uses the same numbers)."""

    free_bytes: float  # bytes for KV and activations
    kv_bytes_per_token: float  # bytes per cached token, the torch.cat copy of a layer included
    logit_bytes_per_token: float  # prefill: bytes of every position's logits (all copies)
    score_bytes_per_pair: float  # prefill: bytes per (query, key) pair of one layer, all heads

    def __post_init__(self) -> None:
        for f in fields(self):
            check_positive(f"HFStaticMemory.{f.name}", getattr(self, f.name), allow_zero=True)

    def prefill_peak_bytes(self, rows: int, prompt: int, context: int = 0) -> float:
        """Peak bytes of a padded prefill: KV (+ the torch.cat copy), every position's logits,
        one layer's score matrix."""
        kv = rows * (context + prompt) * self.kv_bytes_per_token
        return kv + rows * prompt * (self.logit_bytes_per_token
                                     + self.score_bytes_per_pair * (context + prompt))

    def batch_peak_bytes(self, rows: int, prompt: int, iterations: int) -> float:
        """Peak bytes of a whole padded batch: its prefill, or its KV at the last iteration
        (`prompt + iterations - 1` tokens a row), whichever is larger."""
        last = rows * (prompt + max(iterations, 1) - 1) * self.kv_bytes_per_token
        return max(self.prefill_peak_bytes(rows, prompt), last)


def _engine_name(deployment_name: str, params: HFStaticParams) -> str:
    """The executor's name: the deployment, and the parameters that differ from the defaults,
    so one name always means one memory and time model."""
    default = HFStaticParams()
    extra = [f"{f.name}={getattr(params, f.name)}" for f in fields(params)
             if getattr(params, f.name) != getattr(default, f.name)]
    return f"{deployment_name} (hf_static{' ' + ', '.join(extra) if extra else ''})"


class HFStaticExecutor:
    """Runs padded Steps on the static-batch engine model of one GPU (see the module doc)."""

    def __init__(self, deployment: DeploymentSpec, params: HFStaticParams = HFStaticParams()):
        self.deployment = deployment  # model, GPU and weight dtype (TP 1)
        self.params = params  # the engine's memory and time parameters
        m, gpu = deployment.model, deployment.gpu
        self._kv_bpt = deployment.kv_bytes_per_token_per_gpu  # bytes per cached token
        dequant_buffer = 0 if deployment.weight_dtype in ("fp16", "bf16") else \
            m.hidden_size * m.intermediate_size * ACT_DTYPE_BYTES  # one fp16 weight copy
        self.free_bytes = (gpu.memory_bytes - deployment.weight_bytes - params.reserve_bytes
                           - dequant_buffer)  # bytes for KV and activations
        if self.free_bytes < self._kv_bpt:
            raise ConfigError("cluster.weight_dtype", deployment.weight_dtype,
                              f"{deployment.name}: the weights leave no memory for a batch")
        self._logit_bpt = m.vocab_size * ACT_DTYPE_BYTES * params.logits_copies  # prefill
        self._score_bpp = m.num_attention_heads * params.score_bytes_per_pair  # per pair
        self._grow = 1.0 + 1.0 / m.num_layers  # torch.cat holds one layer's KV twice
        self.memory = HFStaticMemory(self.free_bytes, self._kv_bpt * self._grow,
                                     self._logit_bpt, self._score_bpp)
        self._name = _engine_name(deployment.name, params)
        self._inv_c = 1.0 / (gpu.peak_tensor_flops * params.compute_efficiency)  # s/FLOP
        self._inv_m = 1.0 / (gpu.hbm_bandwidth * params.memory_efficiency)  # s/byte
        self._dense_fpt = 2.0 * (m.num_layer_params + m.vocab_size * m.hidden_size)  # FLOPs
        self._weight_bytes = (m.num_layer_params * hf_weight_read_bytes(deployment.weight_dtype)
                              + m.vocab_size * m.hidden_size * ACT_DTYPE_BYTES)  # per forward
        self._attn_fpp = 4.0 * m.num_layers * m.num_attention_heads * m.head_dim  # FLOPs/pair

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens of contiguous KV the free memory holds (activations not counted)."""
        return int(self.free_bytes // (self._kv_bpt * self._grow))

    @property
    def max_model_len(self) -> int:
        """The model's context in tokens."""
        return self.deployment.model.max_position_embeddings

    @property
    def exact_up_to(self) -> tuple[int, str] | None:
        """(tokens, why) when the model is priced exactly only up to a sequence length (a
        sliding window; sim/models/model_spec.py, sim/engine/limits.py), else None."""
        return self.deployment.model.exact_up_to

    @property
    def name(self) -> str:
        """Human label, e.g. "chatglm-6b fp16 on V100-32GB x1 (hf_static)", with the engine
        parameters that differ from the defaults."""
        return self._name

    def instance_info(self, instance_id: int) -> InstanceInfo:
        """What a policy may know about this instance, with this stateless executor as the
        engine a policy may measure before serving (the Magnus paper profiles its engine)."""
        return InstanceInfo(instance_id, self.kv_capacity_tokens, self.name, engine=self)

    def prefill_peak_bytes(self, rows: int, prompt: int, context: int = 0) -> float:
        """Peak bytes of a padded prefill (`HFStaticMemory.prefill_peak_bytes`)."""
        return self.memory.prefill_peak_bytes(rows, prompt, context)

    def first_oom_iteration(self, rows: int, prompt: int, context: int, iterations: int) -> int:
        """1-based iteration whose peak memory first exceeds the free memory, 0 if none."""
        if self.prefill_peak_bytes(rows, prompt, context) > self.free_bytes:
            return 1
        per_token = rows * self._kv_bpt * self._grow  # bytes per decode iteration
        last = int(self.free_bytes // per_token)  # the longest padded sequence that fits
        start = context + prompt  # tokens per row after the prefill
        return 0 if start + iterations - 1 <= last else last - start + 2

    def prefill_seconds(self, rows: int, prompt: int, context: int = 0) -> float:
        """Seconds of a padded prefill of `rows x prompt` tokens over `context` cached ones (its
        own forward pass: weights, every position's logits, the full score matrix)."""
        tokens = rows * prompt
        flops = self._dense_fpt * tokens + self._attn_fpp * tokens * (context + prompt)
        moved = (self._weight_bytes + self._score_bpp * tokens * (context + prompt)
                 * self.deployment.model.num_layers + self._kv_bpt * rows * (context + prompt))
        return max(flops * self._inv_c, moved * self._inv_m) + self.params.step_overhead_s

    def decode_times(self, rows: int, first_context: int, iterations: int) -> np.ndarray:
        """Seconds of `iterations` padded decode iterations, one token a row, each row's cache
        holding `first_context` tokens before the first (one more each iteration)."""
        p = self.params
        ctx = first_context + np.arange(iterations, dtype=np.float64)  # per row
        dense = max(self._dense_fpt * rows * self._inv_c, self._weight_bytes * self._inv_m)
        kv = p.kv_passes * self._kv_bpt * rows * (ctx + 1) * self._inv_m
        attn = self._attn_fpp * rows * (ctx + 1) * self._inv_c
        return dense + np.maximum(kv, attn) + p.step_overhead_s

    def kv_copy_seconds(self, rows: int, length: int) -> float:
        """Seconds to re-lay out a padded KV tensor of `rows x length` tokens (read + write)."""
        return 2.0 * self._kv_bpt * rows * length * self._inv_m

    def iteration_times(self, rows: int, prompt: int, context: int,
                        iterations: int) -> np.ndarray:
        """Seconds of each iteration of a padded batch: prefill of `rows x prompt` tokens over
        `context` cached ones, then one token per row per iteration."""
        out = np.empty(iterations)
        out[0] = self.prefill_seconds(rows, prompt, context)
        if iterations > 1:
            out[1:] = self.decode_times(rows, context + prompt, iterations - 1)
        return out

    def batch_seconds(self, rows: int, prompt: int, iterations: int) -> float:
        """Seconds a padded batch of `rows` x `prompt` tokens takes for `iterations` iterations
        (inf when it runs out of memory)."""
        if self.first_oom_iteration(rows, prompt, 0, iterations):
            return math.inf
        return float(self.iteration_times(rows, prompt, 0, iterations).sum())

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        """Model `step` padded to its longest row, or, when it has decode rows, as a continuous
        batcher runs it (sim/cluster/hf_continuous.py); stop after the first iteration ending at or
        after `until_s` seconds, or fail at the first iteration that does not fit."""
        if step.num_draft_tokens:
            raise ValueError("engine hf_static runs no speculative verify steps")
        shape = mixed_shape(step)
        if shape is not None:  # decode rows (and joiners): the paper's CCB on this engine
            return execute_mixed(self, shape, step.num_iterations, until_s)
        rows = step.num_seqs
        prompt, context = max(step.num_new_tokens), max(step.num_context_tokens)
        oom_at = self.first_oom_iteration(rows, prompt, context, step.num_iterations)
        times = self.iteration_times(rows, prompt, context, oom_at or step.num_iterations)
        return modelled_result(np.cumsum(times), until_s, oom_at)


def build_hf_static_executors(deployment: DeploymentSpec, engine: Mapping[str, Any],
                              num_instances: int) -> list[HFStaticExecutor]:
    """One shared (stateless) executor per instance."""
    executor = HFStaticExecutor(deployment, hf_static_params(engine))
    return [executor] * num_instances
