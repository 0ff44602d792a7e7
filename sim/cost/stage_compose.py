"""Iteration times composed from any StageTimes (sim/cost/stage_times.py), from a Step's sums.

    iteration = L * (dense_layer_s(T) + sum of attention over prefill chunks and decode rows)
              + k * L * allreduce_s(hidden * 2 bytes * T)      (TP > 1; k all-reduces per layer:
                2, 1 with parallel attention, `ModelSpec.allreduces_per_layer`)
              + step_fixed_s(num_seqs, num_sampled)
The batch's split into prefill chunks and decode rows comes from its sums (sim/core/step_shape.py).
Later iterations of a multi-iteration Step decode one token per row, the KV growing by one;
a StageTimes with `attn_decode_layer_s_many(batch_size, kv_array)` has them computed at once.
"""

from __future__ import annotations

import numpy as np

from sim.core.step_shape import BatchShape, shape_from_sums
from sim.cost.cost_model import ACT_DTYPE_BYTES
from sim.cost.stage_times import StageTimes
from sim.models.catalog import ModelSpec
from sim.util.errors import ConfigError


class ComposedCostModel:
    """`iteration_times_from_sums` (RooflineCostModel's signature) over per-stage times."""

    __slots__ = ("stages", "model", "tensor_parallel", "_hidden_bytes")

    def __init__(self, stages: StageTimes, model: ModelSpec, tensor_parallel: int) -> None:
        if tensor_parallel < 1:
            raise ConfigError("tensor_parallel", tensor_parallel, "must be >= 1")
        self.stages = stages  # per-stage seconds on one GPU of the group
        self.model = model  # layers and hidden size
        self.tensor_parallel = tensor_parallel  # GPUs in the group
        self._hidden_bytes = model.hidden_size * ACT_DTYPE_BYTES  # bytes per token all-reduced

    def layers_s(self, shape: BatchShape) -> float:
        """Seconds of all layers (dense, attention, all-reduces) of one iteration."""
        st, tokens = self.stages, shape.num_tokens
        if tokens <= 0:
            return 0.0
        attn = 0.0
        if shape.num_prefill:
            attn += shape.num_prefill * st.attn_prefill_layer_s(
                round(shape.chunk_tokens), round(shape.prefill_context))
        if shape.num_decode:
            attn += st.attn_decode_layer_s(shape.num_decode, round(shape.decode_kv))
        per_layer = st.dense_layer_s(round(tokens)) + attn
        if self.tensor_parallel > 1:
            ar = st.allreduce_s(self._hidden_bytes * tokens)
            per_layer += self.model.allreduces_per_layer * ar
        return self.model.num_layers * per_layer

    def _total(self, layers_s, num_seqs: int, num_sampled: int):
        """Layers' seconds plus the per-step cost, as the stages compose them (a StageTimes
        with `step_total_s` may run its host work beside the GPU's)."""
        compose = getattr(self.stages, "step_total_s", None)
        if compose is None:
            return layers_s + self.stages.step_fixed_s(num_seqs, num_sampled)
        return compose(layers_s, num_seqs, num_sampled)

    def iteration_time(self, shape: BatchShape, num_seqs: int, num_sampled: int) -> float:
        """Seconds of one iteration of `shape` (layers plus the fixed per-step cost)."""
        return float(self._total(self.layers_s(shape), num_seqs, num_sampled))

    def iteration_times_from_sums(self, num_tokens: int, sum_context: int, sum_new_x_context: int,
                                  sum_new_squared: int, num_seqs: int, num_sampled: int,
                                  num_iterations: int = 1) -> np.ndarray:
        """Seconds of each iteration of a Step given its sums (as RooflineCostModel)."""
        first = shape_from_sums(num_tokens, sum_context, sum_new_x_context, sum_new_squared,
                                num_seqs)
        out = np.empty(max(num_iterations, 1))
        out[0] = self.iteration_time(first, num_seqs, num_sampled)
        if num_iterations <= 1:
            return out[:1]
        b = num_seqs
        if not b:
            out[1:] = self.stages.step_fixed_s(0, 0)
            return out
        kv0 = (sum_context + num_tokens) / b  # cached tokens per row before iteration 2
        many = getattr(self.stages, "attn_decode_layer_s_many", None)
        if many is None:
            for j in range(1, num_iterations):
                out[j] = self.iteration_time(BatchShape(0, 0.0, 0.0, b, kv0 + j - 1), b, b)
            return out
        kv = np.round(kv0 + np.arange(num_iterations - 1))  # as layers_s rounds a scalar kv
        st = self.stages
        per_layer = st.dense_layer_s(b) + np.asarray(many(b, kv))
        if self.tensor_parallel > 1:
            per_layer += self.model.allreduces_per_layer * st.allreduce_s(self._hidden_bytes * b)
        if getattr(st, "step_total_s", None) is None:
            rest = self.iteration_time(BatchShape(0, 0.0, 0.0, 0, 0.0), b, b)  # fixed cost
            out[1:] = self.model.num_layers * per_layer + rest
        else:
            out[1:] = self._total(self.model.num_layers * per_layer, b, b)
        return out
