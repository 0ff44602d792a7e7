"""Which attention kernel a parameter set describes, and the sets there are, by name.

Every GPU's stage parameters (`sim/cost/gpu_params.py`) carry attention terms fitted on one A100
profile and derived for the other GPUs by the same rules as the rest of the set:

  flashinfer       (the default) FlashInfer as Vidur profiles it: Llama-3-8B on A100, TP 1,
                   prefill chunks 64..16128 over KV prefixes 0..16240 and decode batches 1..200
                   (adi-anirudh/vidur_hbf_hbm_backend data/profiling/compute/a100/meta-llama/
                   Meta-Llama-3-8B/attention.csv, attention_backend FLASHINFER). The kernel
                   family of today's engines (FlashAttention-2 in vLLM on A100 and H100,
                   FlashInfer in SGLang): 0.68 of peak on its FLOPs, 140-176 TFLOP/s on whole
                   prompts of 4k-16k tokens.
  flash_attention  the set before 2026-11-27, fitted on the shared sample of Vidur's
                   FLASH_ATTENTION rows (Llama-2-7B on A100, 7 whole prompts of 112..3840
                   tokens, 40 decode batches): prefill at 0.16-0.19 of peak, 3x slower than the
                   FlashInfer rows on the same shapes, no KV-prefix rows.

A profile chooses: `experiments.fidelity.main` reports a profile whose attention.csv names its
backend (Vidur's `attention_backend` column) against that backend's set, and `--attention NAME`
names one. Torch-free, no state.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Mapping

from sim.cost.gpu_params import A100_80GB_PARAMS, A100_REF, derive_params
from sim.cost.stage_params import StageParams
from sim.hardware.gpus import GPUSpec
from sim.util.errors import ConfigError

ATTENTION_FIELDS = ("attn_prefill_eff", "attn_prefill_half_tokens", "attn_prefill_fixed_s",
                    "attn_prefill_key_s", "attn_prefill_split_rows", "attn_decode_eff_small",
                    "attn_decode_eff_large", "attn_decode_half_batch", "attn_decode_fixed_s",
                    "attn_decode_item_s", "attn_decode_floor_s",
                    "attn_decode_floor_half_tokens")  # the StageParams fields of one kernel
DEFAULT_KERNEL = "flashinfer"  # the kernel every built-in parameter set describes

# Fitted on the shared A100 Llama-2-7B attention_sample.csv (Vidur's FLASH_ATTENTION rows;
# `sim.fit.stage_fit.fit_attention` from FIT_START): the A100 set's attention before 2026-11-27
FLASH_ATTENTION_A100 = MappingProxyType({
    "attn_prefill_eff": 0.193,  # fit: 7 prefill rows (0.16 of peak at 3840 tokens)
    "attn_prefill_half_tokens": 770.0,  # fit: same prefill rows (chunks 112..3840)
    "attn_prefill_fixed_s": 1.41e-6,  # fit: same prefill rows
    "attn_prefill_key_s": 0.0, "attn_prefill_split_rows": 0.0,  # no KV-prefix rows: no span
    "attn_decode_eff_small": 0.623,  # fit: 40 decode rows (batch 1..128)
    "attn_decode_eff_large": 1.0,  # fit: same decode rows (at its bound)
    "attn_decode_half_batch": 39.2,  # fit: same decode rows
    "attn_decode_fixed_s": 8.51e-6,  # fit: same decode rows
    "attn_decode_item_s": 0.0, "attn_decode_floor_s": 0.0,  # not fitted: linear decode
    "attn_decode_floor_half_tokens": 0.0})

KERNELS: Mapping[str, Mapping[str, float]] = MappingProxyType({  # A100-fitted fields by name
    "flashinfer": MappingProxyType({f: getattr(A100_80GB_PARAMS, f) for f in ATTENTION_FIELDS}),
    "flash_attention": FLASH_ATTENTION_A100})
BACKENDS: Mapping[str, str] = MappingProxyType({  # Vidur's attention_backend -> kernel set
    "FLASHINFER": "flashinfer", "FLASH_ATTENTION": "flash_attention"})


def check_kernel(name: str, where: str = "attention") -> str:
    """`name` if it names a kernel set, else a ConfigError naming `where` and the sets."""
    if name not in KERNELS:
        raise ConfigError(where, name, f"one of {', '.join(KERNELS)}")
    return name


def kernel_of_backend(backend: str) -> str | None:
    """The kernel set of a profile's attention backend (FLASHINFER, ...), None if unknown."""
    return BACKENDS.get(backend.strip().rsplit(".", 1)[-1].upper()) if backend else None


def with_kernel(params: StageParams, kernel: str, gpu: GPUSpec) -> StageParams:
    """`params` (a set for `gpu`) with the attention terms of `kernel`, derived from the A100
    fit to `gpu` by `sim.cost.gpu_params.derive_params`'s rules."""
    fields = KERNELS[check_kernel(kernel)]
    derived = derive_params(gpu, replace(A100_80GB_PARAMS, **fields), A100_REF)
    return replace(params, **{f: getattr(derived, f) for f in ATTENTION_FIELDS})
