"""A cost model that interpolates measured per-operator tables (sim/measured/profile_tables.py).

Per stage, on one GPU of a TP group:
  dense       log-log interpolation of the layer's summed ops in num_tokens (this TP's rows);
  prefill     scattered grid over (chunk, context), log-log in the chunk; a chunk after context
              the table does not cover is read at the chunk c' with as many (query, key) pairs
              at no context: c'^2 / 2 = chunk * (context + chunk / 2);
  decode      bilinear over (batch, kv) on the scattered measured rows;
  all-reduce  log-log interpolation in bytes (this TP's worker count) + a CPU launch cost;
  fixed       the fallback's (the tables measure no lm_head, sampling or engine overhead; the
              embedding lookup, at most 0.2 ms at 4k tokens, is left out).
Outside a table (or for a TP it lacks) the stage is the fallback StageTimes' (the fitted stage
model, or sim.cost.roofline_stages.RooflineStages). With anchor=True the fallback is scaled by
measured / fallback at the nearest measured point, so times stay continuous at the table's edge.
Measured 1-D curves use their lower non-decreasing envelope (sim/measured/table_interp.py).
"""

from __future__ import annotations

import math

import numpy as np

from sim.cost.cost_model import DeploymentSpec
from sim.cost.stage_compose import ComposedCostModel
from sim.cost.stage_times import StageTimes
from sim.measured.profile_tables import ProfileTables
from sim.measured.table_interp import LogLogCurve, ScatterGrid
from sim.util.errors import ConfigError

ALLREDUCE_LAUNCH_S = 20e-6  # seconds of CPU launch per all-reduce: Vidur's
# nccl_cpu_launch_overhead_ms = 0.02 (its tables time the GPU side only)


def _curve(x: np.ndarray, y: np.ndarray, monotone: bool) -> LogLogCurve | None:
    keep = x > 0
    return LogLogCurve(x[keep], y[keep], monotone) if keep.any() else None


class ProfileStageTimes:
    """StageTimes from measured tables of one TP degree, a fallback outside them."""

    def __init__(self, tables: ProfileTables, tensor_parallel: int, fallback: StageTimes,
                 anchor: bool = True, monotone: bool = True,
                 allreduce_launch_s: float = ALLREDUCE_LAUNCH_S) -> None:
        if tensor_parallel < 1:
            raise ConfigError("tensor_parallel", tensor_parallel, "must be >= 1")
        if allreduce_launch_s < 0:
            raise ConfigError("allreduce_launch_s", allreduce_launch_s, "must be >= 0")
        self.tables = tables  # the measured profile
        self.tensor_parallel = tensor_parallel  # GPUs in the group
        self.fallback = fallback  # stage times outside the tables
        self.anchor = anchor  # scale the fallback to the nearest measured point
        self.allreduce_launch_s = allreduce_launch_s  # seconds added to each all-reduce
        tp = tensor_parallel
        dense = tables.dense[tables.dense["tp"] == tp]
        self._dense = _curve(dense["num_tokens"].to_numpy(float), dense["seconds"].to_numpy(),
                             monotone)
        net = tables.network
        net = net[(net["collective"] == "all_reduce") & (net["num_workers"] == tp)]
        self._allreduce = _curve(net["size_bytes"].to_numpy(float), net["seconds"].to_numpy(),
                                 monotone)
        attn = tables.attention[tables.attention["tp"] == tp]
        pre, dec = attn[attn["is_prefill"].astype(bool)], attn[~attn["is_prefill"].astype(bool)]
        self._prefill = ScatterGrid(pre["chunk_tokens"], pre["kv_tokens"],
                                    pre["seconds"] / pre["batch_size"], log_a=True) \
            if len(pre) else None
        self._decode = ScatterGrid(dec["batch_size"], dec["kv_tokens"], dec["seconds"]) \
            if len(dec) else None

    def _scaled(self, fallback_here: float, fallback_there: float, measured_there: float
                ) -> float:
        if not self.anchor or fallback_there <= 0:
            return fallback_here
        return fallback_here * measured_there / fallback_there

    def dense_layer_s(self, num_tokens: int) -> float:
        """One layer outside attention at num_tokens tokens."""
        fb = self.fallback.dense_layer_s
        if self._dense is None or num_tokens <= 0:
            return fb(num_tokens)
        got = self._dense(num_tokens)
        if got is not None:
            return got
        x, y = self._dense.nearest(num_tokens)
        return self._scaled(fb(num_tokens), fb(round(x)), y)

    def attn_prefill_layer_s(self, chunk_tokens: int, context_tokens: int) -> float:
        """One layer's attention for one chunk after context_tokens cached tokens."""
        fb = self.fallback.attn_prefill_layer_s
        grid = self._prefill
        if grid is None or chunk_tokens <= 0:
            return fb(chunk_tokens, context_tokens)
        got = grid(chunk_tokens, context_tokens)
        if got is None and context_tokens > 0:
            got = grid(math.sqrt(chunk_tokens * (chunk_tokens + 2.0 * context_tokens)), 0)
        if got is not None:
            return got
        a, b, t = grid.nearest(chunk_tokens, context_tokens)
        return self._scaled(fb(chunk_tokens, context_tokens), fb(round(a), round(b)), t)

    def attn_decode_layer_s(self, batch_size: int, kv_tokens: int) -> float:
        """One layer's attention decoding batch_size rows over kv_tokens cached each."""
        fb = self.fallback.attn_decode_layer_s
        grid = self._decode
        if grid is None or batch_size <= 0:
            return fb(batch_size, kv_tokens)
        got = grid(batch_size, kv_tokens)
        if got is not None:
            return got
        a, b, t = grid.nearest(batch_size, kv_tokens)
        return self._scaled(fb(batch_size, kv_tokens), fb(round(a), round(b)), t)

    def attn_decode_layer_s_many(self, batch_size: int, kv_tokens: np.ndarray) -> np.ndarray:
        """attn_decode_layer_s at each of kv_tokens (one batch size), vectorized in the table."""
        kv = np.asarray(kv_tokens, dtype=np.float64)
        fb, grid = self.fallback.attn_decode_layer_s, self._decode
        if grid is None or batch_size <= 0:
            return np.array([fb(batch_size, int(k)) for k in kv])
        out = grid.many(batch_size, kv)
        outside = np.flatnonzero(np.isnan(out))
        if len(outside):
            pa, pb, pt = grid.nearest_many(batch_size, kv[outside])
            for i, a, b, t in zip(outside, pa, pb, pt):
                out[i] = self._scaled(fb(batch_size, int(kv[i])), fb(round(a), round(b)), t)
        return out

    def allreduce_s(self, size_bytes: float) -> float:
        """One all-reduce over the group, launch included (0 at TP 1)."""
        if self.tensor_parallel == 1:
            return 0.0
        fb = self.fallback.allreduce_s
        if self._allreduce is None:
            return fb(size_bytes)
        got = self._allreduce(size_bytes)
        if got is None:
            x, y = self._allreduce.nearest(size_bytes)
            return self._scaled(fb(size_bytes), fb(x), y + self.allreduce_launch_s)
        return got + self.allreduce_launch_s

    def step_fixed_s(self, num_seqs: int, num_sampled: int) -> float:
        """The fallback's per-iteration cost (no table measures it)."""
        return self.fallback.step_fixed_s(num_seqs, num_sampled)

    def step_total_s(self, layers_s, num_seqs: int, num_sampled: int):
        """The fallback's composition of an iteration (its host work in series or beside)."""
        compose = getattr(self.fallback, "step_total_s", None)
        if compose is None:
            return layers_s + self.step_fixed_s(num_seqs, num_sampled)
        return compose(layers_s, num_seqs, num_sampled)


class ProfileCostModel(ComposedCostModel):
    """Iteration times of a deployment from its measured tables (`iteration_times_from_sums`
    as RooflineCostModel's). The fallback defaults to the deployment's roofline stages."""

    __slots__ = ("deployment",)

    def __init__(self, tables: ProfileTables, deployment: DeploymentSpec,
                 fallback: StageTimes | None = None, anchor: bool = True) -> None:
        if fallback is None:
            from sim.cost.cost_model import RooflineCostModel
            from sim.cost.roofline_stages import RooflineStages
            fallback = RooflineStages(RooflineCostModel(deployment))
        params = getattr(fallback, "params", None)  # a stage fallback's launch (0 in graphs)
        launch = params.allreduce_launch_s if params is not None else ALLREDUCE_LAUNCH_S
        stages = ProfileStageTimes(tables, deployment.tensor_parallel, fallback, anchor, launch)
        super().__init__(stages, deployment.model, deployment.tensor_parallel)
        self.deployment = deployment  # the instance modelled
