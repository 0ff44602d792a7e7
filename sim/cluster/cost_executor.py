"""The simulation backend: an `Executor` whose step times come from the roofline cost model."""

from __future__ import annotations

import math
from operator import mul

import numpy as np

from sim.cluster.draft import DraftModel, shared_kv_capacity
from sim.cluster.lora import LoraCost
from sim.cluster.medusa import MedusaHeads
from sim.core.executor import InstanceInfo, Step, StepResult, modelled_result
from sim.cost.cost_model import RooflineCostModel, kv_dtype_bytes
from sim.memory.kv_moves import TierLinks, tier_links


class CostModelExecutor:
    """Runs Steps instantly, reporting the times `RooflineCostModel` predicts.

    KV usage is counted in tokens (no block rounding): a step fails with `oom=True` at the first
    iteration after which its batch's KV footprint exceeds `kv_capacity_tokens`; that iteration's
    time is charged as lost. With a `draft` model (speculative decoding, `sim/cluster/draft.py`) the
    capacity shrinks by the draft's weights and KV, and each step first pays the draft's work.
    A step that copies KV between memory tiers (swap, host / remote prefix tiers) pays the copies
    over `kv_links` in its first iteration (sim/memory/kv_moves.py). Medusa heads (sim/cluster/medusa.py) and
    LoRA adapter slots (sim/cluster/lora.py) take their weights out of the KV budget; a step pays the
    heads' time and its adapter loads in its first iteration, its adapter segments in each.
    """

    __slots__ = ("cost_model", "draft", "_capacity", "kv_links", "_ends", "medusa", "lora")

    def __init__(self, cost_model: RooflineCostModel, draft: DraftModel | None = None,
                 kv_links: TierLinks | None = None, medusa: MedusaHeads | None = None,
                 lora: LoraCost | None = None) -> None:
        self.cost_model = cost_model  # the roofline model of one deployment
        self.draft = draft  # the speculative-decoding draft on the same GPUs, if any
        # links of KV copies between memory tiers (default: PCIe 4.0 host, 100 GbE remote)
        self.kv_links = kv_links if kv_links is not None else tier_links(cost_model.deployment)
        self.medusa = medusa  # Medusa decoding heads on the target, if any
        self.lora = lora  # LoRA adapter slots and their costs, if LoRA is on
        target = cost_model.deployment
        self._capacity = (target.kv_capacity_tokens if draft is None else
                          shared_kv_capacity(target, draft.cost_model.deployment))  # tokens
        extra = ((medusa.weight_bytes_per_gpu if medusa is not None else 0.0)
                 + (lora.slot_bytes_per_gpu if lora is not None else 0.0))  # bytes per GPU
        if extra:  # heads / adapter slots come out of the KV budget
            self._capacity = int((target.kv_bytes_per_gpu - extra)
                                 // target.kv_bytes_per_token_per_gpu)
        # cumulative iteration ends computed lazily up to a cut, when the cost model offers it
        self._ends = getattr(cost_model, "iteration_ends_from_sums", None)

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache capacity in tokens of the instance (all TP shards together)."""
        return self._capacity

    @property
    def max_model_len(self) -> int:
        """The model's context in tokens (max_position_embeddings; sim/engine/limits.py)."""
        return self.cost_model.deployment.model.max_position_embeddings

    @property
    def exact_up_to(self) -> tuple[int, str] | None:
        """(tokens, why) when the cost model is exact only up to a sequence length (a sliding
        window it does not price; sim/models/model_spec.py, sim/engine/limits.py), else None."""
        return self.cost_model.deployment.model.exact_up_to

    @property
    def has_draft(self) -> bool:
        """Whether the instance runs a draft model (can execute speculative verify Steps)."""
        return self.draft is not None

    @property
    def name(self) -> str:
        """Human label, e.g. "llama-2-7b fp16 on A100-80GB x1"."""
        name = self.cost_model.deployment.name
        return name if self.draft is None else f"{name} + draft {self.draft.name}"

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes of KV one token holds in the served model (all layers and heads)."""
        dep = self.cost_model.deployment
        return float(dep.model.kv_bytes_per_token(kv_dtype_bytes(dep.kv_dtype)))

    @property
    def num_layers(self) -> int:
        """Transformer layers of the served model."""
        return self.cost_model.deployment.model.num_layers

    def instance_info(self, instance_id: int) -> InstanceInfo:
        """What a policy may know about this instance."""
        gpu, model = self.cost_model.deployment.gpu, self.cost_model.deployment.model
        return InstanceInfo(instance_id, self._capacity, self.name, self.has_draft,
                            self.kv_bytes_per_token, self.num_layers, gpu_name=gpu.name,
                            gpu_memory_bytes=gpu.memory_bytes, kv_links=self.kv_links,
                            model_name=model.name, causal=model.causal,
                            medusa_heads=self.medusa.num_heads if self.medusa else 0,
                            max_loras=self.lora.spec.max_loras if self.lora else 0)

    def _first_oom_iteration(self, first_kv: int, num_seqs: int, num_iterations: int) -> int:
        """1-based iteration whose KV footprint first exceeds capacity, or 0 if none does."""
        cap = self._capacity
        if first_kv + (num_iterations - 1) * num_seqs <= cap:
            return 0
        if first_kv > cap:
            return 1
        return (cap - first_kv) // num_seqs + 2

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        """Model `step`; stop after the first iteration ending at or after `until_s` seconds."""
        n, c = step.num_new_tokens, step.num_context_tokens
        sum_n, sum_c, num_seqs = sum(n), sum(c), len(n)
        oom_at = self._first_oom_iteration(sum_n + sum_c - step.num_shared_kv_tokens, num_seqs,
                                           step.num_iterations)
        iterations = oom_at or step.num_iterations
        if num_seqs and sum_n == num_seqs and max(n) == 1:  # one token a row: n c = c, n n = 1
            sum_nc, sum_nn = sum_c, num_seqs
        else:
            sum_nc, sum_nn = sum(map(mul, n, c)), sum(map(mul, n, n))
        k = step.num_draft_tokens  # a verify row takes logits at all of its k + 1 positions
        sums = (sum_n, sum_c, sum_nc, sum_nn, num_seqs,
                sum(step.samples) + k * step.num_verify_seqs, iterations)
        draft_s = 0.0 if self.draft is None else self.draft.draft_seconds(step)
        if self.medusa is not None:  # the heads run after the forward, on each sampling row
            draft_s += self.medusa.step_seconds(step)
        copies = step.num_swap_in_tokens or step.num_swap_out_tokens or step.num_remote_in_tokens
        if self.lora is not None and step.lora_ids:
            return self._with_lora(step, sums, draft_s, until_s, oom_at, copies)
        if self._ends is not None and not copies:  # ends computed only as far as `until_s` cuts
            ends = self._ends(*sums, until_s if not oom_at else math.inf, draft_s)
            if not oom_at:
                return StepResult(ends[-1], np.array(ends))
            return modelled_result(np.array(ends), until_s, oom_at)
        times = self.cost_model.iteration_times_from_sums(*sums)
        if draft_s:
            times[0] += draft_s
        if copies:
            times[0] += self.kv_links.seconds(step)
        ends = times if iterations == 1 else np.cumsum(times)
        return modelled_result(ends, until_s, oom_at)

    def _with_lora(self, step: Step, sums: tuple, extra_s: float, until_s: float, oom_at: int,
                   copies: int) -> StepResult:
        """A step with LoRA rows: the target's iterations plus `extra_s` (draft, heads), the
        adapter loads and the KV copies in the first, the adapter segments in each."""
        assert self.lora is not None
        times = self.cost_model.iteration_times_from_sums(*sums).astype(np.float64)
        first_s, later_s = self.lora.iteration_seconds(step)
        times[0] += extra_s + first_s + self.lora.load_seconds(step.num_lora_loads)
        times[1:] += later_s
        if copies:
            times[0] += self.kv_links.seconds(step)
        return modelled_result(np.cumsum(times), until_s, oom_at)
