"""A deployment: one model instance on a tensor-parallel group of GPUs, its weights and KV.

With pipeline parallelism (`pipeline_parallel` p > 1) the layers are split into p stages as
vLLM splits them (`stage_layers`), each stage on its own tensor-parallel group; the first stage
holds the embedding, the last the lm_head and final norm. Memory per GPU is the busiest stage's
(the most layers, with the embedding or the lm_head), so the KV capacity is the stage that
runs out first.

Bytes per weight and per KV element for each dtype, the activation memory vLLM's profiling run
reserves, and `DeploymentSpec` (weights per GPU, KV bytes per token, KV capacity in tokens).
Every cost model prices steps of one deployment; `sim.cost.cost_model` re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from sim.cost.moe_cost import check_expert_parallel
from sim.hardware.gpus import GPUSpec, check_weight_dtype_fits
from sim.models.catalog import ModelSpec
from sim.util.errors import ConfigError, check_fraction, check_positive

GIB = 2**30  # bytes per GiB
QUANT_GROUP_SIZE = 128  # weights sharing one fp16 scale in int8/int4 weight-only quantization
ACT_DTYPE_BYTES = 2  # bytes per activation element (fp16/bf16)
WEIGHT_DTYPE_BYTES: Mapping[str, float] = MappingProxyType({  # bytes per weight, scales included
    "fp16": 2.0, "bf16": 2.0, "fp8": 1.0,  # fp8: per-tensor scales, negligible
    "int8": 1.0 + 2.0 / QUANT_GROUP_SIZE, "int4": 0.5 + 2.0 / QUANT_GROUP_SIZE})
KV_DTYPE_BYTES: Mapping[str, int] = MappingProxyType({"fp16": 2, "bf16": 2, "fp8": 1, "int8": 1})
PROFILE_TOKENS = 8192  # tokens in vLLM's activation-profiling batch (max_num_batched_tokens)
PROFILE_SEQS = 256  # sequences whose fp32 logits vLLM's profile holds (max_num_seqs)
FIXED_RESERVE_BYTES = GIB  # bytes per GPU: CUDA context, cuBLAS workspace, CUDA graphs


def weight_dtype_bytes(dtype: str) -> float:
    """Bytes per weight for a weight dtype, per-group scales included."""
    if dtype not in WEIGHT_DTYPE_BYTES:
        raise ConfigError("weight_dtype", dtype, f"known: {', '.join(WEIGHT_DTYPE_BYTES)}")
    return WEIGHT_DTYPE_BYTES[dtype]


def kv_dtype_bytes(dtype: str) -> int:
    """Bytes per KV-cache element for a KV dtype."""
    if dtype not in KV_DTYPE_BYTES:
        raise ConfigError("kv_dtype", dtype, f"known: {', '.join(KV_DTYPE_BYTES)}")
    return KV_DTYPE_BYTES[dtype]


def stage_layers(num_layers: int, pipeline_parallel: int) -> tuple[int, ...]:
    """Layers per pipeline stage, as vLLM's `get_pp_indices` splits them: L // p each, the
    remainder one each on the stages before the last (the last also holds the lm_head)."""
    p = pipeline_parallel
    if p > num_layers:
        raise ConfigError("pipeline_parallel", p, f"more stages than the model's "
                          f"{num_layers} layers")
    layers = [num_layers // p] * p
    for i in range(2, num_layers % p + 2):
        layers[-i] += 1
    return tuple(layers)


def default_activation_reserve(model: ModelSpec, tensor_parallel: int) -> int:
    """Bytes per GPU vLLM's profiling run would keep for activations and logits."""
    per_token = (4 * model.hidden_size + 3 * model.intermediate_size // tensor_parallel)
    logits = PROFILE_SEQS * model.vocab_size * 4 // tensor_parallel
    return FIXED_RESERVE_BYTES + PROFILE_TOKENS * per_token * ACT_DTYPE_BYTES + logits


@dataclass(frozen=True, slots=True)
class DeploymentSpec:
    """One model instance: a model on a tensor-parallel group of identical GPUs.

    KV capacity is in tokens for the whole instance (the TP group): every GPU holds its share of
    the KV heads of every cached token, so the group caches as many tokens as one GPU has room for.
    """

    model: ModelSpec  # the served model's shape
    gpu: GPUSpec  # each GPU of the tensor-parallel group
    tensor_parallel: int = 1  # GPUs in the group
    weight_dtype: str = "fp16"  # fp16, bf16, fp8 (W8A8), int8 / int4 (weight-only); embeddings fp16
    kv_dtype: str = "fp16"  # fp16, bf16, fp8 or int8
    gpu_memory_utilization: float = 0.9  # fraction of each GPU's memory the instance may use
    activation_reserve_bytes: int | None = None  # bytes per GPU; None: default_activation_reserve
    expert_parallel: int = 1  # GPUs of the group the experts are spread over (sim/cost/moe_cost.py)
    expert_zipf: float = 0.0  # Zipf exponent of expert popularity (0: uniform routing)
    pipeline_parallel: int = 1  # pipeline stages, each on its own tensor-parallel group

    def __post_init__(self) -> None:
        tp, model = self.tensor_parallel, self.model
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise ConfigError("tensor_parallel", tp, "must be an int >= 1")
        if model.num_attention_heads % tp:
            raise ConfigError("tensor_parallel", tp, f"must divide {model.name}'s "
                              f"num_attention_heads={model.num_attention_heads}")
        if model.num_kv_heads % tp and tp % model.num_kv_heads:
            raise ConfigError("tensor_parallel", tp, f"must divide or be a multiple of "
                              f"{model.name}'s num_kv_heads={model.num_kv_heads}")
        check_expert_parallel(model, tp, self.expert_parallel, self.expert_zipf)
        pp = self.pipeline_parallel
        if not isinstance(pp, int) or isinstance(pp, bool) or pp < 1:
            raise ConfigError("pipeline_parallel", pp, "must be an int >= 1")
        stage_layers(model.num_layers, pp)  # no more stages than layers
        weight_dtype_bytes(self.weight_dtype)
        check_weight_dtype_fits(self.gpu, self.weight_dtype)
        kv_dtype_bytes(self.kv_dtype)
        check_fraction("gpu_memory_utilization", self.gpu_memory_utilization)
        if self.activation_reserve_bytes is None:
            object.__setattr__(self, "activation_reserve_bytes",
                               default_activation_reserve(model, tp))
        check_positive("activation_reserve_bytes", self.activation_reserve_bytes, allow_zero=True)
        self._check_fits()

    def _check_fits(self) -> None:
        if self.kv_bytes_per_gpu >= self.kv_bytes_per_token_per_gpu:
            return
        raise ConfigError("tensor_parallel", self.tensor_parallel, (
            f"{self.model.name} {self.weight_dtype} weights need "
            f"{self.weight_bytes_per_gpu / GIB:.1f} GiB per GPU at TP={self.tensor_parallel}, but "
            f"{self.gpu.name} x {self.gpu_memory_utilization} gives "
            f"{self.usable_bytes_per_gpu / GIB:.1f} GiB minus "
            f"{self.activation_reserve_bytes / GIB:.1f} GiB activation reserve, leaving no room "
            f"for KV; raise tensor_parallel or quantize the weights"))

    @property
    def name(self) -> str:
        """Human label, e.g. "llama-2-7b fp16 on A100-80GB x1"."""
        kv = "" if self.kv_dtype in ("fp16", "bf16") else f" kv-{self.kv_dtype}"
        tp = self.tensor_parallel
        ep = f" ep{self.expert_parallel}" if self.expert_parallel > 1 else ""
        pp = f" pp{self.pipeline_parallel}" if self.pipeline_parallel > 1 else ""
        return f"{self.model.name} {self.weight_dtype}{kv} on {self.gpu.name} x{tp}{ep}{pp}"

    @property
    def num_quantized_params(self) -> int:
        """Weights stored in `weight_dtype`: the layers' linear layers, every expert included
        (all GPUs together)."""
        return self.model.num_layer_params

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights over the whole group; embeddings, lm_head, norms in fp16."""
        quantized = self.num_quantized_params
        rest = self.model.num_params - quantized
        return quantized * weight_dtype_bytes(self.weight_dtype) + rest * ACT_DTYPE_BYTES

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Bytes of weights each GPU holds (everything sharded evenly over the group); with
        pipeline stages, a GPU of the busiest stage."""
        if self.pipeline_parallel == 1:
            return self.weight_bytes / self.tensor_parallel
        return max(self.stage_weight_bytes) / self.tensor_parallel

    @property
    def stage_weight_bytes(self) -> tuple[float, ...]:
        """Bytes of weights of each pipeline stage (its whole tensor-parallel group): its
        layers' share of the layer weights and norms, the embedding on the first stage, the
        lm_head (untied) on the last."""
        m, layers = self.model, stage_layers(self.model.num_layers, self.pipeline_parallel)
        embedding = m.num_embedding_params * ACT_DTYPE_BYTES
        per_layer = (self.weight_bytes - embedding * (1 if m.tie_word_embeddings else 2)) \
            / m.num_layers
        head = embedding if not m.tie_word_embeddings else 0.0  # a tied head reads stage 0's
        out = [n * per_layer for n in layers]
        out[0] += embedding
        out[-1] += head
        return tuple(out)

    @property
    def kv_heads_per_gpu(self) -> int:
        """KV heads each GPU caches; replicated when tensor_parallel > num_kv_heads."""
        return max(1, self.model.num_kv_heads // self.tensor_parallel)

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """Bytes of K and V one cached token takes on each GPU (MLA: the whole latent, on
        every GPU of the group)."""
        m = self.model
        if self.pipeline_parallel > 1:  # the busiest stage's layers
            layers = max(stage_layers(m.num_layers, self.pipeline_parallel))
            if m.mla is not None:
                return m.kv_bytes_per_token(kv_dtype_bytes(self.kv_dtype)) * layers / m.num_layers
            return 2 * layers * self.kv_heads_per_gpu * m.head_dim * kv_dtype_bytes(self.kv_dtype)
        if m.mla is not None:
            return m.kv_bytes_per_token(kv_dtype_bytes(self.kv_dtype))
        return 2 * m.num_layers * self.kv_heads_per_gpu * m.head_dim * kv_dtype_bytes(self.kv_dtype)

    @property
    def usable_bytes_per_gpu(self) -> float:
        """Bytes of each GPU's memory the instance may use."""
        return self.gpu.memory_bytes * self.gpu_memory_utilization

    @property
    def kv_bytes_per_gpu(self) -> float:
        """Bytes per GPU left for the KV cache after weights and the activation reserve."""
        reserve = self.activation_reserve_bytes or 0
        return self.usable_bytes_per_gpu - self.weight_bytes_per_gpu - reserve

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the whole instance (TP group; with stages, every stage) can cache."""
        return int(self.kv_bytes_per_gpu // self.kv_bytes_per_token_per_gpu)
