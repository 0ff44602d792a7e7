"""Mixture-of-experts MLPs and multi-head latent attention (MLA): shapes and parameter counts.

A `ModelSpec` (sim/models/catalog.py) with `moe` set has `num_moe_layers` layers whose MLP is a router
(hidden -> num_experts), `num_experts` routed SwiGLU experts of width `expert_intermediate_size`
of which each token uses `experts_per_token`, and optionally shared experts (always used) of
total width `shared_intermediate_size`; its other layers keep the dense MLP of
`ModelSpec.intermediate_size`. With `mla` set, attention is DeepSeek's latent attention:

    q      hidden -> q_lora_rank -> heads x (qk_nope + qk_rope)   (or hidden -> heads x ... when
                                                                    q_lora_rank is 0)
    kv     hidden -> kv_lora_rank + qk_rope (the cached latent), kv_lora_rank -> heads x
           (qk_nope + v_head_dim)
    o      heads x v_head_dim -> hidden

and a token's KV cache per layer is the latent: kv_lora_rank + qk_rope_head_dim elements, shared
by all heads (so not divided by tensor parallelism). Norm weights (RMSNorm of the q and kv
latents) are counted; biases are not (none of these families has any).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from sim.util.errors import ConfigError, check_positive


def _check_ints(obj: object, where: str, allow_zero: tuple[str, ...] = ()) -> None:
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{where}.{f.name}", value, "must be an int")
        check_positive(f"{where}.{f.name}", value, allow_zero=f.name in allow_zero)


@dataclass(frozen=True, slots=True)
class MoESpec:
    """The mixture-of-experts MLP of a model's MoE layers (all experts gated, SwiGLU)."""

    num_experts: int  # routed experts per MoE layer
    experts_per_token: int  # routed experts each token is sent to (top-k)
    expert_intermediate_size: int  # MLP width of one routed expert (elements)
    num_moe_layers: int  # layers whose MLP is MoE (the others are dense)
    shared_intermediate_size: int = 0  # total MLP width of the shared experts (elements; 0: none)
    shared_expert_gate: bool = False  # a sigmoid gate (hidden -> 1) on the shared expert (Qwen2)

    def __post_init__(self) -> None:
        if not isinstance(self.shared_expert_gate, bool):
            raise ConfigError("moe.shared_expert_gate", self.shared_expert_gate, "must be a bool")
        for name in ("num_experts", "experts_per_token", "expert_intermediate_size",
                     "num_moe_layers", "shared_intermediate_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"moe.{name}", value, "must be an int")
            check_positive(f"moe.{name}", value, allow_zero=name == "shared_intermediate_size")
        if self.experts_per_token > self.num_experts:
            raise ConfigError("moe.experts_per_token", self.experts_per_token,
                              f"more than num_experts={self.num_experts}")

    def expert_params(self, hidden: int) -> int:
        """Weights of one routed expert (gate, up and down matrices)."""
        return 3 * hidden * self.expert_intermediate_size

    def router_params(self, hidden: int) -> int:
        """Weights of the router (and of the shared expert's gate)."""
        return hidden * self.num_experts + (hidden if self.shared_expert_gate else 0)

    def shared_params(self, hidden: int) -> int:
        """Weights of the shared experts (always active)."""
        return 3 * hidden * self.shared_intermediate_size

    def layer_params(self, hidden: int) -> int:
        """Weights of one MoE MLP: router, every routed expert, shared experts."""
        return (self.router_params(hidden) + self.num_experts * self.expert_params(hidden)
                + self.shared_params(hidden))

    def active_layer_params(self, hidden: int) -> int:
        """Weights of one MoE MLP a single token uses: router, top-k experts, shared experts."""
        return (self.router_params(hidden) + self.experts_per_token * self.expert_params(hidden)
                + self.shared_params(hidden))


@dataclass(frozen=True, slots=True)
class MLASpec:
    """DeepSeek-V2/V3 multi-head latent attention (see the module docstring)."""

    q_lora_rank: int  # width of the compressed query (elements); 0: no query compression
    kv_lora_rank: int  # width of the compressed KV latent (elements)
    qk_nope_head_dim: int  # per-head query/key elements without rotary embedding
    qk_rope_head_dim: int  # per-head query/key elements with rotary embedding (key: shared)
    v_head_dim: int  # per-head value elements

    def __post_init__(self) -> None:
        _check_ints(self, "mla", allow_zero=("q_lora_rank",))

    @property
    def qk_head_dim(self) -> int:
        """Elements per head of a query and of a (materialized) key."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def kv_elements_per_token(self) -> int:
        """Cached elements per token per layer: the latent plus the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def attention_params(self, hidden: int, heads: int) -> int:
        """Weights of one layer's q, kv and o projections."""
        q_out = heads * self.qk_head_dim
        q = (hidden * self.q_lora_rank + self.q_lora_rank * q_out) if self.q_lora_rank \
            else hidden * q_out
        kv = (hidden * self.kv_elements_per_token
              + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim))
        return q + kv + heads * self.v_head_dim * hidden

    def norm_params(self) -> int:
        """Weights of one layer's latent RMSNorms (q latent, kv latent)."""
        return self.q_lora_rank + self.kv_lora_rank

    def flops_per_pair_per_head(self) -> int:
        """FLOPs of one (query, key) pair of one head, keys and values materialized per head
        (as prefill kernels run it): q.k over qk_head_dim, p.v over v_head_dim."""
        return 2 * self.qk_head_dim + 2 * self.v_head_dim
