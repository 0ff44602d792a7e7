"""Per-step MoE quantities of one deployment, shared by both cost models (closed forms, cached).

For n tokens in a step and each MoE layer, on the busiest GPU of the group:

    rows(n)      token-expert rows it computes: n k at expert_parallel 1 (every GPU holds a
                 1 / TP slice of every expert), else the busiest EP rank's expected load
                 (sim/cost/moe_routing.py);
    distinct(n)  experts whose weights it reads: the expected distinct experts of n tokens
                 (on the busiest EP rank with EP); expert weight bytes read per step per MoE
                 layer = distinct(n) x one expert's bytes on this GPU;
    per-expert   rows(n) / distinct(n): the GEMM batch of each expert of the grouped GEMM (the
                 stage model runs it at that batch's efficiency);
    all-to-all   with EP, a dispatch and a combine per MoE layer, each moving
                 n k hidden x 2 bytes / ep x (ep - 1) / ep per GPU (its 1 / ep share of the
                 tokens, the (ep - 1) / ep of their copies whose expert sits on another GPU);
                 they replace the MoE layer's second all-reduce when EP spans the whole TP group.

Expert parallelism uses the instance's GPUs (`tensor_parallel` of them): `expert_parallel` must
divide it; each expert is then split over tensor_parallel / expert_parallel GPUs. EP over more
GPUs than the TP group needs data-parallel attention, which is not modelled (refused).
"""

from __future__ import annotations

import math

import numpy as np

from sim.cost.moe_routing import (busiest_rank_distinct, busiest_rank_rows, expected_max_normal,
                             inclusion_probabilities, popularity)
from sim.hardware.gpus import GPUSpec
from sim.models.catalog import ModelSpec
from sim.util.errors import ConfigError

# Zipf exponent of expert popularity, at most (dimensionless). Fits to measured MoE expert loads
# give exponents of about 0.5-2 (docs/moe.md uses 1.0); at 64 the most popular expert already
# gets 2**64 = 1.8e19 times the second's weight, so routing has collapsed onto the most popular
# experts and a larger exponent describes nothing new, while past ~1075 the weights underflow
# to 0 and the routing model returns NaN step times.
MAX_EXPERT_ZIPF = 64.0


def check_expert_parallel(model: ModelSpec, tensor_parallel: int, expert_parallel: int,
                          expert_zipf: float) -> None:
    """ConfigError naming `expert_parallel` / `expert_zipf` when the layout cannot run."""
    ep = expert_parallel
    if not isinstance(ep, int) or isinstance(ep, bool) or ep < 1:
        raise ConfigError("expert_parallel", ep, "must be an int >= 1")
    popularity(1, expert_zipf)  # a finite number >= 0
    if expert_zipf > MAX_EXPERT_ZIPF:
        raise ConfigError("expert_zipf", expert_zipf, (
            f"must be <= {MAX_EXPERT_ZIPF:g}: measured MoE expert loads fit Zipf exponents of "
            f"about 0.5-2; at {MAX_EXPERT_ZIPF:g} the top expert already outweighs the second "
            f"2**{MAX_EXPERT_ZIPF:g}-fold (routing has collapsed), and past ~1075 the "
            f"popularity weights underflow to 0 (NaN step times)"))
    if model.moe is None:
        if ep > 1 or expert_zipf:
            key, value = ("expert_parallel", ep) if ep > 1 else ("expert_zipf", expert_zipf)
            raise ConfigError(key, value, f"{model.name} is a dense model (no experts)")
        return
    if ep > tensor_parallel:
        raise ConfigError("expert_parallel", ep, (
            f"more than tensor_parallel={tensor_parallel}: expert parallelism runs on the "
            f"instance's GPUs; EP beyond the TP group needs data-parallel attention, which is "
            f"not modelled (set tensor_parallel: {ep})"))
    if tensor_parallel % ep or model.moe.num_experts % ep:
        raise ConfigError("expert_parallel", ep, (
            f"must divide tensor_parallel={tensor_parallel} and {model.name}'s "
            f"num_experts={model.moe.num_experts}"))
    if model.moe.expert_intermediate_size % (tensor_parallel // ep):
        raise ConfigError("tensor_parallel", tensor_parallel, (
            f"each expert is split over tensor_parallel / expert_parallel = "
            f"{tensor_parallel // ep} GPUs, which must divide its width "
            f"{model.moe.expert_intermediate_size}"))


class MoEPlan:
    """rows(n), distinct(n) and the all-to-all bytes of one deployment (module docstring)."""

    __slots__ = ("num_moe_layers", "expert_parallel", "expert_tp", "top_k", "uniform",
                 "num_experts", "_probs", "_max_normal", "_a2a_bpt", "_cache")

    def __init__(self, model: ModelSpec, tensor_parallel: int, expert_parallel: int = 1,
                 expert_zipf: float = 0.0, act_bytes: int = 2) -> None:
        moe = model.moe
        if moe is None:
            raise ConfigError("model", model.name, "has no mixture-of-experts layers")
        check_expert_parallel(model, tensor_parallel, expert_parallel, expert_zipf)
        ep = expert_parallel
        self.num_moe_layers = moe.num_moe_layers  # MoE layers
        self.expert_parallel = ep  # EP ranks
        self.expert_tp = tensor_parallel // ep  # GPUs each expert is split over
        self.top_k = moe.experts_per_token  # experts per token
        self.num_experts = moe.num_experts  # routed experts per layer
        self.uniform = not expert_zipf  # uniform routing: closed forms
        self._probs = inclusion_probabilities(popularity(moe.num_experts, expert_zipf),
                                              moe.experts_per_token)  # p_e per expert
        self._max_normal = expected_max_normal(ep)  # E[max of ep standard normals]
        self._a2a_bpt = (moe.experts_per_token * model.hidden_size * act_bytes * (ep - 1)
                         / (ep * ep))  # all-to-all bytes per GPU per token
        self._cache: dict[int, tuple[float, float]] = {}  # n -> (rows, distinct)

    def _compute(self, n: int) -> tuple[float, float]:
        ep = self.expert_parallel
        if n <= 0:
            return 0.0, 0.0
        if self.uniform and ep == 1:
            e, k = self.num_experts, self.top_k
            return float(n * k), e * (1.0 - (1.0 - k / e) ** n)
        rows = busiest_rank_rows(self._probs, ep, n, self._max_normal)
        return rows, busiest_rank_distinct(self._probs, ep, n)

    def rows_distinct(self, num_tokens: int) -> tuple[float, float]:
        """(rows, distinct experts) per MoE layer on the busiest GPU for num_tokens tokens."""
        n = int(num_tokens)
        hit = self._cache.get(n)
        if hit is None:
            hit = self._cache[n] = self._compute(n)
        return hit

    def a2a_bytes(self, num_tokens: float) -> float:
        """Bytes one GPU sends in one all-to-all (dispatch or combine) of one MoE layer."""
        return self._a2a_bpt * num_tokens

    @property
    def replaces_allreduce(self) -> bool:
        """EP over the whole TP group: dispatch + combine replace the MLP's all-reduce."""
        return self.expert_parallel > 1 and self.expert_tp == 1


def expected_distinct_curve(model: ModelSpec, tokens: np.ndarray,
                            expert_zipf: float = 0.0) -> np.ndarray:
    """Expected distinct experts per MoE layer for each batch size (reports and docs)."""
    plan = MoEPlan(model, 1, 1, expert_zipf)
    return np.array([plan.rows_distinct(int(n))[1] for n in tokens])


def tokens_per_expert(rows: float, distinct: float) -> float:
    """The grouped GEMM's per-expert batch: rows / distinct experts (1 at the least)."""
    return max(rows / distinct, 1.0) if distinct > 0 else 1.0


def alltoall_seconds(size_bytes: float, latency_s: float, bandwidth: float) -> float:
    """One all-to-all: latency + bytes sent per GPU / bandwidth (0 for nothing to send)."""
    if size_bytes <= 0 or math.isinf(bandwidth):
        return 0.0
    return latency_s + size_bytes / bandwidth


class RooflineMoE:
    """The routed experts' roofline work and the EP all-to-alls (sim/cost/cost_model.py's MoE terms):
    FLOPs 2 x expert weights per GPU x rows(n), bytes one expert's per GPU x distinct(n), per
    MoE layer; all-to-all at the GPU's interconnect latency and bandwidth x efficiency."""

    __slots__ = ("plan", "rest_params", "replaced_allreduces", "_fpr", "_bpe", "_lat", "_bw")

    def __init__(self, model: ModelSpec, gpu: GPUSpec, tensor_parallel: int,
                 expert_parallel: int, expert_zipf: float, weight_bytes: float,
                 interconnect_efficiency: float) -> None:
        moe = model.moe
        plan = self.plan = MoEPlan(model, tensor_parallel, expert_parallel, expert_zipf)
        assert moe is not None  # MoEPlan refuses a dense model
        expert = moe.expert_params(model.hidden_size) / plan.expert_tp  # weights per GPU
        routed = plan.num_moe_layers * moe.num_experts * moe.expert_params(model.hidden_size)
        self.rest_params = (model.num_layer_params - routed) / tensor_parallel  # per GPU
        self.replaced_allreduces = plan.num_moe_layers if plan.replaces_allreduce else 0
        self._fpr = 2.0 * expert * plan.num_moe_layers  # FLOPs per token-expert row
        self._bpe = expert * weight_bytes * plan.num_moe_layers  # bytes per distinct expert
        self._lat = gpu.interconnect_latency_s  # seconds per all-to-all
        self._bw = gpu.interconnect_bandwidth * interconnect_efficiency  # bytes/s

    def work(self, num_tokens: int) -> tuple[float, float]:
        """(FLOPs, weight bytes) of every MoE layer's routed experts on the busiest GPU."""
        rows, distinct = self.plan.rows_distinct(num_tokens)
        return self._fpr * rows, self._bpe * distinct

    def a2a_s(self, num_tokens: int) -> float:
        """Seconds of the dispatch and combine all-to-alls of every MoE layer (0 without EP)."""
        if self.plan.expert_parallel == 1 or num_tokens <= 0:
            return 0.0
        one = alltoall_seconds(self.plan.a2a_bytes(num_tokens), self._lat, self._bw)
        return 2.0 * self.plan.num_moe_layers * one
