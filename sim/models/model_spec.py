"""A decoder-only transformer's shape (no weights): enough to count parameters, FLOPs and KV.

`ModelSpec` is what every cost model prices. Its layers all attend over the whole sequence
(MHA, GQA or DeepSeek's MLA, `sim/models/moe.py`), except that a model may name a sliding window some
of its layers attend over (Gemma-2: 4,096 tokens on every other layer of an 8,192-token context).
The cost models do not price a window: they charge every layer attention and KV over the whole
sequence, which is exact only while a sequence fits the window. `exact_up_to` says up to which
length that holds, and a run with a longer `max_model_len` is refused (`sim/engine/limits.py`), never
priced as a different model.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.models.moe import MLASpec, MoESpec
from sim.util.errors import ConfigError, check_positive


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer's shape."""

    name: str  # canonical name, e.g. "llama-2-7b"
    num_layers: int  # transformer blocks
    hidden_size: int  # model width (elements)
    num_attention_heads: int  # query heads
    num_kv_heads: int  # key/value heads (== query heads for MHA, fewer for GQA/MQA)
    head_dim: int  # elements per attention head
    intermediate_size: int  # MLP width per matrix (elements)
    vocab_size: int  # tokens in the vocabulary
    gated_mlp: bool = True  # True: SwiGLU, 3 MLP matrices; False: plain GeLU MLP, 2 matrices
    tie_word_embeddings: bool = False  # the lm_head shares the input embedding matrix
    max_position_embeddings: int = 4096  # tokens, longest supported sequence
    moe: MoESpec | None = None  # mixture-of-experts MLP of the MoE layers (None: dense model)
    mla: MLASpec | None = None  # multi-head latent attention (None: MHA / GQA)
    sliding_window: int | None = None  # tokens a sliding-window layer attends over (None: no
    # layer has a window; every layer attends over the whole sequence)
    num_sliding_layers: int = 0  # layers that attend over `sliding_window` tokens only
    causal: bool = True  # True: every token attends to earlier tokens only, so a prompt
    # prefix's KV is the same in any request and can be reused; False: a prefix-LM (GLM-1:
    # bidirectional attention over the whole prompt), whose prefix KV depends on the rest of
    # the prompt and is never reused across requests (prefix caching is refused)
    parallel_attn: bool = False  # True: attention and MLP read the same input and their
    # outputs are summed (Falcon: `parallel_attn` / `new_decoder_architecture`), so a
    # tensor-parallel layer all-reduces once, as vLLM's Falcon does; False: two per layer

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("name", self.name, "model name must be non-empty")
        for flag in ("causal", "parallel_attn"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(flag, getattr(self, flag), "must be true or false")
        if self.parallel_attn and (self.moe is not None or self.mla is not None):
            raise ConfigError("parallel_attn", True, "not priced with MoE or MLA layers (their "
                              "cost terms charge two all-reduces per layer)")
        for field in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
                      "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(field, value, "must be an int")
            check_positive(field, value)
        if self.num_attention_heads % self.num_kv_heads:
            raise ConfigError("num_kv_heads", self.num_kv_heads,
                              f"must divide num_attention_heads={self.num_attention_heads}")
        if self.moe is not None and self.moe.num_moe_layers > self.num_layers:
            raise ConfigError("moe.num_moe_layers", self.moe.num_moe_layers,
                              f"more than num_layers={self.num_layers}")
        self._check_sliding_window()

    def _check_sliding_window(self) -> None:
        window, layers = self.sliding_window, self.num_sliding_layers
        if not isinstance(layers, int) or isinstance(layers, bool) \
                or not 0 <= layers <= self.num_layers:
            raise ConfigError("num_sliding_layers", layers,
                              f"must be an int from 0 to num_layers={self.num_layers}")
        if window is None:
            if layers:
                raise ConfigError("num_sliding_layers", layers, "set without a sliding_window")
            return
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ConfigError("sliding_window", window, "must be an int >= 1 (tokens) or None")
        if not layers:
            raise ConfigError("num_sliding_layers", layers,
                              f"must be >= 1 with sliding_window={window}")

    @property
    def allreduces_per_layer(self) -> int:
        """Tensor-parallel all-reduces of the hidden states per layer: one after the summed
        attention + MLP of a parallel-attention layer, else one after each."""
        return 1 if self.parallel_attn else 2

    @property
    def num_attention_params_per_layer(self) -> int:
        """Weights of the q, k, v and o projections of one layer."""
        if self.mla is not None:
            return self.mla.attention_params(self.hidden_size, self.num_attention_heads)
        q_and_o = 2 * self.hidden_size * self.num_attention_heads * self.head_dim
        k_and_v = 2 * self.hidden_size * self.num_kv_heads * self.head_dim
        return q_and_o + k_and_v

    @property
    def num_mlp_params_per_layer(self) -> int:
        """Weights of the MLP matrices of one layer."""
        return (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size

    @property
    def num_dense_params_per_layer(self) -> int:
        """Weights of one dense layer's linear (matmul) layers: attention projections plus MLP."""
        return self.num_attention_params_per_layer + self.num_mlp_params_per_layer

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        return 0 if self.moe is None else self.moe.num_moe_layers

    @property
    def num_layer_params(self) -> int:
        """Weights of all layers' linear layers (every expert of every MoE layer)."""
        if self.moe is None:
            return self.num_layers * self.num_dense_params_per_layer
        moe_layers = self.moe.num_moe_layers
        return (self.num_layers * self.num_attention_params_per_layer
                + (self.num_layers - moe_layers) * self.num_mlp_params_per_layer
                + moe_layers * self.moe.layer_params(self.hidden_size))

    @property
    def num_active_layer_params(self) -> int:
        """Weights of all layers' linear layers one token uses (top-k experts per MoE layer)."""
        if self.moe is None:
            return self.num_layer_params
        return (self.num_layer_params - self.moe.num_moe_layers
                * (self.moe.layer_params(self.hidden_size)
                   - self.moe.active_layer_params(self.hidden_size)))

    @property
    def num_embedding_params(self) -> int:
        """Weights of the input embedding (and of the lm_head, which has the same shape)."""
        return self.vocab_size * self.hidden_size

    @property
    def num_norm_params(self) -> int:
        """Weights of the two norms per layer and the final norm (biases are ignored), plus
        MLA's latent norms."""
        norms = (2 * self.num_layers + 1) * self.hidden_size
        return norms + (self.num_layers * self.mla.norm_params() if self.mla else 0)

    @property
    def num_params(self) -> int:
        """All weights: layers (every expert), norms, embedding and lm_head (once if tied)."""
        embeddings = self.num_embedding_params * (1 if self.tie_word_embeddings else 2)
        return self.num_layer_params + self.num_norm_params + embeddings

    @property
    def num_active_params(self) -> int:
        """Weights one token uses: `num_params` with only the top-k routed experts of each MoE
        layer (embedding and lm_head both counted, as Mixtral's and DeepSeek's figures do)."""
        return self.num_params - (self.num_layer_params - self.num_active_layer_params)

    def kv_elements_per_token_per_layer(self) -> int:
        """Cached elements per token per layer: K and V of every KV head, or MLA's latent."""
        if self.mla is not None:
            return self.mla.kv_elements_per_token
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """Bytes of K and V cache one token holds across all layers and KV heads (MLA: its
        compressed latent)."""
        if self.mla is not None:
            return self.num_layers * self.mla.kv_elements_per_token * kv_dtype_bytes
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * kv_dtype_bytes

    @property
    def exact_up_to(self) -> tuple[int, str] | None:
        """(tokens, why) when the cost models price this model exactly only up to a sequence
        length: a sliding window shorter than the context, which they do not price (each layer
        is charged attention and KV over the whole sequence). None: exact over the context."""
        window = self.sliding_window
        if window is None or window >= self.max_position_embeddings:
            return None
        return window, (
            f"{self.name} attends over a {window}-token sliding window on "
            f"{self.num_sliding_layers} of its {self.num_layers} layers; the cost models do not "
            f"price the window (they charge every layer attention and KV over the whole "
            f"sequence), which is exact only up to {window} tokens")
