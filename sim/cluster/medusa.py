"""Medusa decoding heads on the target model (Cai et al., ICML 2024): their memory and time.

Each head is `layers` residual blocks (a hidden x hidden linear with SiLU and a skip) and its own
lm_head-sized projection (hidden x vocab), as in Medusa's `ResBlock` heads and vLLM's
`Medusa` model. The heads run on the last hidden state of every sequence that samples, after
the target's forward, so the next step's candidate tree is ready. They are fp16 weights split
over the tensor-parallel GPUs like the lm_head (vocabulary-parallel).

Memory: the heads' weights come out of the target's KV budget, as a draft's do.
Time, per Step, added to its first iteration (`seconds`): a roofline
    max(FLOPs / (peak * compute_eff), bytes / (HBM bandwidth * memory_eff))
with FLOPs = rows * heads * 2 * (layers * hidden^2 + hidden * vocab) / tp and bytes = the
heads' weights per GPU (each read once per step) plus rows * heads * vocab fp16 logits.
Rows are the verify rows plus the prefill rows that sample (a prompt's last token gives the
first tree); plain decode rows (no speculation) leave the heads idle.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.executor import Step
from sim.cost.deployment import ACT_DTYPE_BYTES, DeploymentSpec
from sim.util.errors import ConfigError

MAX_MEDUSA_HEADS = 16  # heads; Medusa trains 4-5, a sanity bound


def check_medusa_heads(num_heads: int, field: str = "cluster.medusa_heads") -> None:
    """Raise ConfigError unless `num_heads` is an int in [0, MAX_MEDUSA_HEADS]."""
    if (not isinstance(num_heads, int) or isinstance(num_heads, bool)
            or not 0 <= num_heads <= MAX_MEDUSA_HEADS):
        raise ConfigError(field, num_heads, f"must be an int in [0, {MAX_MEDUSA_HEADS}]")


@dataclass(frozen=True, slots=True)
class MedusaHeads:
    """The Medusa heads of one instance and what they cost."""

    num_heads: int  # decoding heads (head i proposes the token i + 1 positions ahead)
    num_layers: int  # residual blocks per head (Medusa's default: 1)
    hidden_size: int  # the target's hidden size
    vocab_size: int  # the target's vocabulary
    tensor_parallel: int  # GPUs the heads are split over
    flops_per_s: float  # effective tensor FLOP/s of one GPU (peak * compute efficiency)
    bytes_per_s: float  # effective HBM bytes/s of one GPU (peak * memory efficiency)

    def __post_init__(self) -> None:
        check_medusa_heads(self.num_heads)
        if self.num_heads < 1 or self.num_layers < 0:
            raise ConfigError("cluster.medusa_heads", self.num_heads,
                              f"needs >= 1 head and >= 0 layers (got {self.num_layers})")

    @property
    def params_per_head(self) -> int:
        """Weights of one head: residual blocks (weight + bias) and its vocabulary projection."""
        d = self.hidden_size
        return self.num_layers * (d * d + d) + d * self.vocab_size

    @property
    def weight_bytes_per_gpu(self) -> float:
        """fp16 bytes of all heads on one GPU."""
        return self.num_heads * self.params_per_head * ACT_DTYPE_BYTES / self.tensor_parallel

    def flops(self, num_rows: int) -> float:
        """FLOPs per GPU of running every head on `num_rows` hidden states."""
        return 2.0 * num_rows * self.num_heads * self.params_per_head / self.tensor_parallel

    def bytes(self, num_rows: int) -> float:
        """HBM bytes per GPU: the heads' weights once, and their fp16 logits per row."""
        logits = num_rows * self.num_heads * self.vocab_size * ACT_DTYPE_BYTES
        return self.weight_bytes_per_gpu + logits / self.tensor_parallel

    def seconds(self, num_rows: int) -> float:
        """Roofline time of the heads over `num_rows` rows (0 when none)."""
        if num_rows <= 0:
            return 0.0
        return max(self.flops(num_rows) / self.flops_per_s,
                   self.bytes(num_rows) / self.bytes_per_s)

    def step_seconds(self, step: Step) -> float:
        """The heads' time in `step`: its verify rows and its prefill rows that sample."""
        nv = step.num_verify_seqs
        n, c, s = step.num_new_tokens, step.num_context_tokens, step.samples
        rows = nv + sum(1 for i in range(nv, len(n)) if s[i] and (n[i] > 1 or c[i] == 0))
        return self.seconds(rows)


def build_medusa(deployment: DeploymentSpec, num_heads: int, num_layers: int,
                 compute_efficiency: float, memory_efficiency: float) -> MedusaHeads | None:
    """The heads of `cluster.medusa_heads` on the deployment's GPUs (None for 0 heads)."""
    check_medusa_heads(num_heads)
    if num_heads == 0:
        return None
    m, gpu = deployment.model, deployment.gpu
    heads = MedusaHeads(num_heads, num_layers, m.hidden_size, m.vocab_size,
                        deployment.tensor_parallel, gpu.peak_tensor_flops * compute_efficiency,
                        gpu.hbm_bandwidth * memory_efficiency)
    if heads.weight_bytes_per_gpu >= deployment.kv_bytes_per_gpu:
        raise ConfigError("cluster.medusa_heads", num_heads,
                          f"{heads.weight_bytes_per_gpu / 2**30:.2f} GiB of heads per GPU leave "
                          f"no KV room next to {deployment.name}")
    return heads
