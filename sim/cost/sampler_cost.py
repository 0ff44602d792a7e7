"""What the sampler costs per step, by how it is built (`cluster.cost_model.sampler`).

After the lm_head every sampled row holds one logit per vocabulary entry (fp32: the engines
upcast before sampling) and the sampler passes over them. Its GPU time per step is

    kernels x kernel_s  +  logit_passes x vocab_size x 4 bytes x sampled rows / (HBM bytes/s x add_eff)

(the launches, and the bytes each pass reads or writes at an elementwise kernel's bandwidth, the
residual add's efficiency of the GPU's stage parameters). The logits are gathered to one GPU
under tensor parallelism, so the whole vocabulary is sampled there. Three samplers:

  flat   (the default) the stage parameters' own `sampler_fixed_s + sampler_per_seq_s x rows`:
         the order-of-magnitude estimate every figure before issue 31 used (0.2 ms + 2 us per
         row on every GPU, whatever the vocabulary); kept as the default so no earlier result
         moves.
  fused  one engine's fused top-k / top-p kernels (RTP-LLM's and FasterTransformer's
         `invokeTopKSampling`, FlashInfer's sampling kernels in vLLM): a kernel that applies
         temperature and penalties in place (read + write: 2 passes), then a two-stage top-k
         whose first stage reads the logits once (1 pass) and whose second picks and samples
         among the few survivors: 3 kernels, 3 passes, launched from C++ (`FUSED_KERNEL_S`).
  hf     HF transformers' `generate(do_sample=True, top_k, top_p)` in torch, op by op
         (`HF_OPS`): the fp32 copy of the last position's logits, temperature, TopK warper
         (topk, compare, masked_fill), TopP warper (sort with int64 indices, softmax, cumsum,
         compare, scatter back, masked_fill), softmax, multinomial: 23 kernels and 52.5 passes,
         each op dispatched from Python (`EAGER_OP_S`).

Torch-free, no state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Mapping

from sim.cost.stage_params import StageParams
from sim.util.errors import ConfigError, check_positive

SAMPLERS = ("flat", "fused", "hf")  # cluster.cost_model.sampler values
DEFAULT_SAMPLER = "flat"  # the estimate of every figure before issue 31 (module docstring)
LOGIT_BYTES = 4  # bytes per logit the sampler reads or writes (fp32)
FUSED_KERNEL_S = 5e-6  # seconds per kernel an engine launches from C++ (a CUDA launch: ~5 us)
EAGER_OP_S = 10e-6  # seconds per torch op dispatched from Python in eager mode (~10 us; the
# CPU cost that CUDA graphs and torch.compile remove)


@dataclass(frozen=True, slots=True)
class SamplerKernels:
    """How one sampler touches the logits each step."""

    kernels: float  # kernel launches per step (whatever the number of rows)
    logit_passes: float  # HBM passes over each sampled row's fp32 logits (V x 4 bytes each)
    kernel_s: float  # seconds per launch (GPU launch, or a torch op's Python dispatch)

    def __post_init__(self) -> None:
        for name in ("kernels", "logit_passes", "kernel_s"):
            check_positive(f"sampler.{name}", getattr(self, name), allow_zero=True)

    @property
    def fixed_s(self) -> float:
        """Seconds per step that do not grow with the rows: the launches."""
        return self.kernels * self.kernel_s


# HF transformers' sampling ops per step: (op, kernels, passes over V x 4 bytes per row). A pass
# is one read or one write of the fp32 logits; a bool mask counts 1/4, int64 indices 2.
HF_OPS: tuple[tuple[str, float, float], ...] = (
    ("logits[:, -1, :].float() copy", 1, 2.0),
    ("temperature: scores / t", 1, 2.0),
    ("TopK: torch.topk (radix select)", 2, 2.0),
    ("TopK: scores < kth value", 1, 1.25),
    ("TopK: masked_fill", 1, 2.25),
    # cub segmented radix sort of (fp32 key, int64 index): 4 digit passes, each reading and
    # writing 12 bytes per entry (24 passes of 4 bytes), in 8 kernels (histogram, scans, scatter)
    ("TopP: torch.sort", 8, 24.0),
    ("TopP: softmax", 1, 3.0),
    ("TopP: cumsum", 1, 2.0),
    ("TopP: cumulative <= 1 - top_p", 1, 1.25),
    ("TopP: scatter mask back by index", 1, 2.5),
    ("TopP: masked_fill", 1, 2.25),
    ("softmax", 1, 3.0),
    # torch.multinomial(probs, 1): q = exponential_() (write), probs / q (2 reads, 1 write),
    # argmax (read)
    ("multinomial", 3, 5.0),
)

SAMPLER_KERNELS: Mapping[str, SamplerKernels] = MappingProxyType({
    "fused": SamplerKernels(kernels=3, logit_passes=3.0, kernel_s=FUSED_KERNEL_S),
    "hf": SamplerKernels(kernels=sum(op[1] for op in HF_OPS),
                         logit_passes=sum(op[2] for op in HF_OPS), kernel_s=EAGER_OP_S)})


def check_sampler(value: Any, where: str = "cluster.cost_model.sampler") -> str:
    """The sampler name, checked (ConfigError naming `where` otherwise)."""
    if not isinstance(value, str) or value not in SAMPLERS:
        raise ConfigError(where, value, f"one of {', '.join(SAMPLERS)}")
    return value


def with_sampler(params: StageParams, options: Mapping[str, Any]) -> StageParams:
    """`params` with the sampler `options["sampler"]` names: flat (or none) leaves them as they
    are; fused / hf set `sampler_fixed_s` to their launches, `sampler_per_seq_s` to 0 and
    `sampler_logit_passes` to their passes (the stage model prices the bytes per row)."""
    name = check_sampler(options.get("sampler", DEFAULT_SAMPLER))
    if name == "flat":
        return params
    k = SAMPLER_KERNELS[name]
    return replace(params, sampler_fixed_s=k.fixed_s, sampler_per_seq_s=0.0,
                   sampler_logit_passes=k.logit_passes)


def sampler_seconds(params: StageParams, vocab_size: int, hbm_bandwidth: float,
                    num_sampled: int) -> float:
    """Seconds the sampler of `params` takes for `num_sampled` rows over `vocab_size` logits on
    a GPU of `hbm_bandwidth` bytes/s (0 with no row sampled)."""
    if num_sampled <= 0:
        return 0.0
    per_row = (params.sampler_per_seq_s + params.sampler_logit_passes * vocab_size
               * LOGIT_BYTES / (hbm_bandwidth * params.add_eff))
    return params.sampler_fixed_s + per_row * num_sampled
