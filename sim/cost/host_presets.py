"""How an engine runs a step on the host, one word each (`cluster.cost_model.host`).

No operator profile measures an engine's host work: scheduling, input preparation, output
processing, kernel launches. It depends on how the engine runs a step, so the stage model takes
it from a named preset, applied on top of the GPU's parameters (field overrides in
`cluster.cost_model` apply on top of the preset):

  vllm    today's vLLM (the V1 engine, the default): decode steps replay CUDA graphs (no
          per-kernel launches; an all-reduce's launch is captured with them), scheduling is
          asynchronous (the engine schedules and prepares step N+1 while the GPU runs step N,
          so host work shows only when it outlasts the GPU step: `cpu_overlapped`), and small
          all-reduces on NVLink use vLLM's custom all-reduce kernel (one kernel, about 9 us)
          instead of NCCL's ring (26-44 us measured). Host work per step: 0.4 ms, Vidur's
          measured fixed part of an engine's schedule + prepare + process (A100, Sarathi);
          10 us per sequence, an estimate (V1 updates a persistent batch incrementally; the
          92 us per sequence Vidur measured is an engine processing outputs in Python).
          Decode attention pays no split-KV floor (`attn_decode_floor_s` 0): the 26-27 us
          Vidur's eager per-op timing shows (fitted 28.8 us on A100) is flat at TP 1 and TP 4
          across 4x the work, host time around two launches that a replayed graph does not
          have (with it, Llama-3-8B's batch-1 decode on H100 is 7.16 ms against the published
          6.48).
  legacy  the stage model's host terms before 2026-11-27: 2.5 ms + 5 us per sequence of host
          work in series with every step, NCCL all-reduces with a 20 us launch each. On the A100s
          it reproduces results computed before the change; GPUs whose parameters were refitted
          or re-derived the same day (H100, H200, L40S, A10G, V100) differ by that too.
  eager   an engine run with --enforce-eager, or vLLM before CUDA graphs: legacy, plus the GPU
          waits for Python to launch each layer (0.45 ms per layer: the splitwise-sim vLLM
          measurements, flat decode from TP 4 to TP 8, read 0.55 ms on A100 hosts and 0.37 ms
          on H100 hosts).
  params  the host terms of the parameter set as it is (a `params` file, the GPU's own set).

Checked against published batch-1 decode (docs/fidelity.md: Llama-3.1-8B on H100 with vLLM 0.21
at 6.48 ms per token; Llama-3-8B on H100 at about 7.05 ms; Llama-3.1-8B on A100-40GB at about
13.3 ms): `vllm` is within 10% of each, `legacy` 21-51% too slow.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from sim.cost.stage_params import AllReduceParams, StageParams
from sim.hardware.gpus import NVLINK_LATENCY_S, GPUSpec
from sim.util.errors import ConfigError

HOST_PRESETS = ("vllm", "legacy", "eager", "params")  # cluster.cost_model.host values
DEFAULT_HOST = "vllm"  # today's vLLM (the module docstring says why)

LEGACY = {"cpu_overlapped": False, "cpu_step_s": 2.5e-3, "cpu_per_seq_s": 5e-6,
          "allreduce_launch_s": 20e-6, "cpu_launch_per_layer_s": 0.0}  # fields: the old values
VLLM = {"cpu_overlapped": True, "cpu_step_s": 0.4e-3, "cpu_per_seq_s": 1e-5,
        "allreduce_launch_s": 0.0, "cpu_launch_per_layer_s": 0.0,
        "attn_decode_floor_s": 0.0}  # fields: today's vLLM (the decode split-KV floor: below)
EAGER_LAUNCH_PER_LAYER_S = 0.45e-3  # seconds: splitwise-sim's flat TP-8 decodes (0.37-0.55)

# vLLM's custom all-reduce on H100 NVLink (the one-shot / two-shot kernels), fitted on the
# latencies sglang's PR #2904 measured for it (TP 2 / 4 / 8, 512 to 1M bf16 elements:
# 8.8 / 8.5 / 9.3 us at 4096 elements, 26.6 / 40.2 / 45.0 us at 1M), t = latency + bytes *
# 2 (w - 1) / w / bus bandwidth
CUSTOM_ALLREDUCE = AllReduceParams(num_workers=(2, 4, 8), latency_s=(8.8e-6, 8.7e-6, 10.1e-6),
                                   bus_bandwidth=(120e9, 88e9, 91e9))


NO_CUSTOM_ALLREDUCE = ("V100",)  # GPUs before compute capability 8.0 (vLLM's kernel needs it)


def has_custom_allreduce(gpu: GPUSpec | None) -> bool:
    """GPUs on which vLLM all-reduces small messages with its own kernel: NVLink-connected
    (its collectives have NVLink latency) and Ampere or newer."""
    return (gpu is not None and gpu.interconnect_latency_s <= NVLINK_LATENCY_S
            and not gpu.name.upper().startswith(NO_CUSTOM_ALLREDUCE))


def with_custom_allreduce(allreduce: AllReduceParams) -> AllReduceParams:
    """The NCCL curves, with the custom all-reduce as the low-latency protocol (the step takes
    the faster of the two per message, as vLLM uses the custom kernel for small messages)."""
    custom = [CUSTOM_ALLREDUCE.curve(w) for w in allreduce.num_workers]
    return replace(allreduce, ll_latency_s=tuple(c[0] for c in custom),
                   ll_bus_bandwidth=tuple(c[1] for c in custom))


def host_preset(options: Mapping[str, Any]) -> str:
    """The preset `options` names (`host`), or the default."""
    host = options.get("host", DEFAULT_HOST)
    if host not in HOST_PRESETS:
        raise ConfigError("cluster.cost_model.host", host, f"one of {', '.join(HOST_PRESETS)}")
    return host


def _with(params: StageParams, **values: Any) -> StageParams:
    """`params` with `values`, the same object when none differs (sets stay shared)."""
    changed = {k: v for k, v in values.items() if getattr(params, k) != v}
    return replace(params, **changed) if changed else params


def apply_host(params: StageParams, host: str, gpu: GPUSpec | None) -> StageParams:
    """`params` with the host terms of preset `host` (the module docstring)."""
    if host == "params":
        return params
    if host == "vllm":
        out = _with(params, **VLLM)
        if has_custom_allreduce(gpu):
            out = _with(out, allreduce=with_custom_allreduce(params.allreduce))
        return out
    out = _with(params, **LEGACY)
    if host == "eager":
        out = _with(out, cpu_launch_per_layer_s=EAGER_LAUNCH_PER_LAYER_S)
    return out
