"""A speculative-decoding draft model on the target's GPUs: its memory and its step time.

Memory: the draft runs on the same GPUs as the target, sharded the same way (vLLM's default
draft tensor parallelism). Its weights come out of what the target leaves for KV, and every
cached token holds KV in both models, so the instance caches
    (target KV bytes - draft weight bytes) / (target + draft KV bytes per token)
tokens. The target's activation reserve (vLLM profiles the larger model) covers the draft's.

Time, per Step, charged before the target's iteration (`draft_seconds`), from the draft's own
cost model of the cluster's kind (stage by default) on the target's GPUs:
  iteration 1  the draft prefills every prefill chunk of the step (rows past the verify rows
               that compute more than one token, sample nothing, or start a prompt: the draft
               needs the prompt's KV too) together with the first draft token of each verify
               row (context c, as the target's);
  iterations 2..k  one draft token per verify row, its context growing by one each time.
A plain decode row (one token, sampled, with context) costs the draft nothing: a policy that
speculates verifies every decode, and one that does not leaves the draft idle.
"""

from __future__ import annotations

from typing import Any, Mapping

from sim.core.executor import Step
from sim.cost.cost_model import DeploymentSpec
from sim.models.catalog import resolve_model
from sim.util.errors import ConfigError


def draft_deployment(target: DeploymentSpec, draft_model: str) -> DeploymentSpec:
    """The draft model on the target's GPUs, parallelism and dtypes (no activation reserve)."""
    try:
        model = resolve_model(draft_model)
        return DeploymentSpec(model=model, gpu=target.gpu,
                              tensor_parallel=target.tensor_parallel,
                              weight_dtype=target.weight_dtype, kv_dtype=target.kv_dtype,
                              gpu_memory_utilization=target.gpu_memory_utilization,
                              activation_reserve_bytes=0)
    except ConfigError as err:
        raise ConfigError("cluster.draft_model", draft_model,
                          f"as a draft of {target.name}: {err}") from None


def shared_kv_capacity(target: DeploymentSpec, draft: DeploymentSpec) -> int:
    """Tokens the instance caches when each token holds KV in both models (per GPU bytes)."""
    free = target.kv_bytes_per_gpu - draft.weight_bytes_per_gpu
    per_token = target.kv_bytes_per_token_per_gpu + draft.kv_bytes_per_token_per_gpu
    tokens = int(free // per_token) if free > 0 else 0
    if tokens < 1:
        raise ConfigError("cluster.draft_model", draft.model.name,
                          f"its {draft.weight_bytes_per_gpu / 2**30:.2f} GiB of weights per GPU "
                          f"leave no KV room next to {target.name}")
    return tokens


def is_prefill_row(num_new: int, num_context: int, samples: bool) -> bool:
    """Whether a non-verify row is a prompt chunk the draft must prefill as well."""
    return num_new > 1 or not samples or num_context == 0


DRAFT_HOST_FREE = {"cpu_step_s": 0.0, "cpu_per_seq_s": 0.0}  # stage fields a draft iteration
# does not pay: the engine's per-step host work is the target iteration's


class DraftModel:
    """The draft's cost model and the time it adds to each Step."""

    __slots__ = ("cost_model",)

    def __init__(self, cost_model: Any) -> None:
        self.cost_model = cost_model  # the draft on the target's GPUs (roofline or stage model)

    @property
    def name(self) -> str:
        return self.cost_model.deployment.model.name

    def draft_seconds(self, step: Step) -> float:
        """Seconds the draft runs before the target's first iteration of `step`."""
        k, nv = step.num_draft_tokens, step.num_verify_seqs
        n, c, s = step.num_new_tokens, step.num_context_tokens, step.samples
        rows = [(n[i], c[i]) for i in range(nv, len(n)) if is_prefill_row(n[i], c[i], s[i])]
        rows += [(1, ctx) for ctx in c[:nv]]  # first draft token of each verify row
        if not rows:
            return 0.0
        model = self.cost_model
        first = float(model.iteration_times_from_sums(
            sum(a for a, _ in rows), sum(b for _, b in rows), sum(a * b for a, b in rows),
            sum(a * a for a, _ in rows), len(rows), nv, 1)[0])
        if k < 2:
            return first
        ctx = sum(c[:nv]) + nv  # iteration 2: one token per verify row at context c + 1
        later = model.iteration_times_from_sums(nv, ctx, ctx, nv, nv, nv, k - 1)
        return first + float(later.sum())


def build_draft(target: DeploymentSpec, draft_model: str | None,
                options: Mapping[str, Any]) -> DraftModel | None:
    """The draft of a cluster (`cluster.draft_model`), or None without one: the target's
    `cluster.cost_model` kind and options (kind profile: its stage fallback, since the draft
    has no profile of its own). Under the stage model the draft's iterations pay no engine host
    work (`cpu_step_s`, `cpu_per_seq_s`: scheduling, input preparation and output processing
    happen once per engine step, in the target's iteration); they keep their own sampler and
    launch floor. The roofline's `step_overhead_s` (launch and sampling) stays per iteration."""
    if draft_model is None:
        return None
    from sim.cluster.cost_model_choice import build_cost_model, cost_model_kind

    kind = cost_model_kind(options)
    if kind != "roofline":
        options = {**{k: v for k, v in options.items() if k != "profiles"}, "kind": "stage",
                   **DRAFT_HOST_FREE}
    return DraftModel(build_cost_model(draft_deployment(target, draft_model), options))
