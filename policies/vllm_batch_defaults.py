"""`vllm serve`'s batch defaults per GPU (vLLM's `EngineArgs.get_batch_defaults`).

Followed from vLLM's `vllm/engine/arg_utils.py` (main branch): for the OpenAI API server
(`vllm serve`, usage context OPENAI_API_SERVER) a GPU with at least 70 GiB of device memory that
is not an A100 (H100, H200, B200, MI300X) gets 8192 tokens per step and 1024 running sequences;
an A100 and every smaller GPU (L40S, A10G, L4, V100) gets 2048 tokens and 256 sequences. A value
the user sets is kept; only the unset one follows the GPU, and then, as vLLM does,
`max_num_seqs` is clamped to the token budget (a step schedules at least one token per
sequence). vLLM also caps the token budget at `max_num_seqs * max_model_len`, which binds only
for contexts under 8 tokens and is not modelled.

An instance whose GPU is unknown (a test executor, the real backend on CPU) gets the large-GPU
defaults, the ones `vllm serve` uses on the H100 this tool is calibrated on.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.executor import InstanceInfo
from sim.util.errors import ConfigError

GIB = 2**30  # bytes
LARGE_GPU_MIN_BYTES = 70 * GIB  # bytes of device memory from which a non-A100 gets the large defaults
LARGE_DEFAULTS = (8192, 1024)  # (tokens per step, running sequences): H100 class
SMALL_DEFAULTS = (2048, 256)  # (tokens per step, running sequences): A100 and smaller


@dataclass(frozen=True)
class BatchLimits:
    """One instance's scheduler limits after the GPU's defaults are applied."""

    max_num_batched_tokens: int  # tokens per step (the token budget)
    max_num_seqs: int  # running requests at most


def gpu_defaults(gpu_name: str, gpu_memory_bytes: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) `vllm serve` picks on this GPU; an unknown GPU
    (empty name) gets the large-GPU ones."""
    if not gpu_name:
        return LARGE_DEFAULTS
    large = gpu_memory_bytes >= LARGE_GPU_MIN_BYTES and "a100" not in gpu_name.lower()
    return LARGE_DEFAULTS if large else SMALL_DEFAULTS


def batch_limits(max_num_batched_tokens: int | None, max_num_seqs: int | None,
                 info: InstanceInfo) -> BatchLimits:
    """The limits an instance runs with: the values set, the GPU's defaults for the unset."""
    tokens, seqs = gpu_defaults(info.gpu_name, info.gpu_memory_bytes)
    if max_num_batched_tokens is not None:
        tokens = max_num_batched_tokens
    if max_num_seqs is not None:
        seqs = max_num_seqs
    elif seqs > tokens:
        seqs = tokens  # vLLM: max_num_seqs = min(max_num_seqs, max_num_batched_tokens)
    if tokens < seqs:
        raise ConfigError("max_num_batched_tokens", tokens,
                          f"must be >= max_num_seqs={seqs} (as vLLM checks) on instance "
                          f"{info.instance_id} ({info.gpu_name or 'unknown GPU'}); set both")
    return BatchLimits(tokens, seqs)


GPU_NOTE = (f"None: follows the GPU as `vllm serve`: {LARGE_DEFAULTS[0]} tokens / "
            f"{LARGE_DEFAULTS[1]} seqs on >= 70 GiB GPUs other than A100, {SMALL_DEFAULTS[0]} / "
            f"{SMALL_DEFAULTS[1]} on A100 and smaller")  # listed by `servesim list`
