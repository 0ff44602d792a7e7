"""THE executor interface shared by the SimPy cost-model backend and the real torch backend.

A scheduler (policy) and an executor talk through two plain dataclasses, as in vLLM v1:
the policy hands over a `Step`, the executor returns a `StepResult`. No tensors cross it.

There is no prefill or decode phase: each step assigns every scheduled request a number of new
tokens so its computed tokens catch up with its known tokens. A padded static batch and a ragged
continuous batch are both Steps; padding is simply part of `num_new_tokens` and
`num_context_tokens`.

A Step may span several iterations (`num_iterations`): iteration 1 computes the listed new tokens;
every later iteration computes exactly one new token per listed request, whose context grows by
the previous iteration's new tokens. This lets a cost-model backend jump over runs of decode
iterations in which the batch does not change, and lets a static batch be one Step.

A speculative verify Step (`num_draft_tokens` = k > 0, one iteration): its first
`num_verify_seqs` rows each compute k + 1 new tokens on the target (the last sampled token and k
tokens a draft model proposed, in k draft decode iterations that precede the verify in the same
Step); any further rows are ordinary chunks (see docs/speculative.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, runtime_checkable

import numpy as np

from sim.util.errors import short_repr


@dataclass(frozen=True, slots=True)
class Chunk:
    """One request's share of a Step's first iteration (a row view of the Step's columns)."""

    request_id: int  # simulation-assigned request id
    num_new_tokens: int  # tokens computed in the first iteration, padding included
    num_context_tokens: int  # tokens already in the KV cache before the step, padding included
    samples: bool  # the chunk reaches the end of its known tokens, so a token is sampled


@dataclass(slots=True)
class Step:
    """One model invocation on one instance: a batch of per-request token chunks.

    Columns are stored as parallel tuples (one entry per scheduled request) so building and
    summing them stays cheap on the simulator's hot path. Read-only by convention, not frozen:
    a frozen dataclass's constructor costs about 7% of a long run (benchmarks/scale.py); use
    `dataclasses.replace` for a changed copy, as the policies do.
    """

    instance_id: int  # index of the model instance that runs the step
    request_ids: tuple[int, ...]  # scheduled requests, in batch order
    num_new_tokens: tuple[int, ...]  # per request: tokens computed in iteration 1 (padded)
    num_context_tokens: tuple[int, ...]  # per request: tokens in KV before the step (padded)
    samples: tuple[bool, ...]  # per request: whether iteration 1 ends in a sampled token
    num_iterations: int = 1  # iterations; from the 2nd on each request decodes one token
    stop_on_arrival: bool = True  # may end early at the first iteration boundary after an arrival
    freed_request_ids: tuple[int, ...] = ()  # requests whose KV the backend drops before the step
    num_draft_tokens: int = 0  # tokens the draft proposes per verifying request (k); 0: none
    num_verify_seqs: int = 0  # leading rows that verify k drafted tokens (k + 1 new tokens each)
    num_shared_kv_tokens: int = 0  # context tokens in KV blocks several rows share (prefix
    # caching): counted in each row's context, held once, so the KV footprint subtracts them
    num_swap_in_tokens: int = 0  # KV tokens copied host -> GPU before the step's forward
    # (swapped-in requests, host-tier prefix hits; sim/memory/kv_moves.py), whole blocks
    num_swap_out_tokens: int = 0  # KV tokens copied GPU -> host before the forward (swap-outs)
    num_remote_in_tokens: int = 0  # KV tokens loaded from the remote KV store before the forward
    lora_ids: tuple[int, ...] = ()  # per request: its LoRA adapter (-1: none); (): no LoRA
    num_lora_loads: int = 0  # LoRA adapters copied host -> GPU before the forward (sim/cluster/lora.py)

    def __post_init__(self) -> None:
        n = len(self.request_ids)
        if not (len(self.num_new_tokens) == len(self.num_context_tokens) == len(self.samples) == n):
            raise ValueError("Step columns must have one entry per scheduled request")
        if self.lora_ids and len(self.lora_ids) != n:
            raise ValueError("Step.lora_ids must be empty or have one entry per request")
        if self.num_iterations < 1:
            raise ValueError(f"Step.num_iterations={self.num_iterations}: must be >= 1")
        if self.num_iterations > 1 and not all(self.samples):
            raise ValueError("a multi-iteration Step needs every request to sample in iteration 1")
        if self.num_draft_tokens or self.num_verify_seqs:
            self._check_verify()

    def _check_verify(self) -> None:
        """A verify step: one iteration, k > 0, and k + 1 sampling tokens in each verify row."""
        k, nv = self.num_draft_tokens, self.num_verify_seqs
        if k < 1 or not 1 <= nv <= len(self.request_ids):
            raise ValueError(f"Step.num_draft_tokens={k}, num_verify_seqs={nv}: a verify step "
                             f"needs both >= 1 and at most one verify row per request")
        if self.num_iterations != 1:
            raise ValueError("a speculative verify Step has exactly one iteration")
        if any(n != k + 1 for n in self.num_new_tokens[:nv]) or not all(self.samples[:nv]):
            raise ValueError(f"each of the {nv} verify rows computes k + 1 = {k + 1} tokens "
                             f"and samples")

    @property
    def num_seqs(self) -> int:
        """Requests in the batch."""
        return len(self.request_ids)

    @property
    def num_first_tokens(self) -> int:
        """Tokens computed in the first iteration, padding included."""
        return sum(self.num_new_tokens)

    @property
    def num_computed_tokens(self) -> int:
        """Tokens computed over all iterations, padding included."""
        return sum(self.num_new_tokens) + (self.num_iterations - 1) * len(self.request_ids)

    def kv_tokens_after(self, num_iterations: int) -> int:
        """KV-cache tokens held by the batch after `num_iterations` iterations."""
        first = sum(self.num_context_tokens) + sum(self.num_new_tokens) - self.num_shared_kv_tokens
        return first + (num_iterations - 1) * len(self.request_ids)

    def chunks(self) -> Iterator[Chunk]:
        """Iterate the step's rows as `Chunk` records."""
        for row in zip(self.request_ids, self.num_new_tokens, self.num_context_tokens, self.samples):
            yield Chunk(*row)

    @classmethod
    def from_chunks(cls, instance_id: int, chunks: list[Chunk], **kwargs: object) -> "Step":
        """Build a Step from row records."""
        return cls(instance_id,
                   tuple(c.request_id for c in chunks),
                   tuple(c.num_new_tokens for c in chunks),
                   tuple(c.num_context_tokens for c in chunks),
                   tuple(c.samples for c in chunks), **kwargs)  # type: ignore[arg-type]


@dataclass(slots=True)
class StepResult:
    """What the executor measured or modelled for a Step (read-only by convention, as Step)."""

    duration_s: float  # seconds the instance was busy, lost time before an OOM included
    iteration_ends_s: np.ndarray  # seconds from step start to the end of each completed iteration
    oom: bool = False  # the step ran out of KV memory; iterations after the completed ones failed

    @property
    def num_iterations(self) -> int:
        """Iterations that completed (their tokens exist)."""
        return len(self.iteration_ends_s)


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """What a policy may know about a model instance before it schedules onto it."""

    instance_id: int  # index of the instance in the cluster
    kv_capacity_tokens: int  # KV-cache capacity in tokens (per instance, all TP shards together)
    name: str = ""  # human label, e.g. "A100-80GB x1 llama-2-7b fp16"
    has_draft: bool = False  # runs a draft model, so it can execute speculative verify Steps
    kv_bytes_per_token: float = 0.0  # bytes of KV one token holds in the served model (all
    # layers, all heads, the instance's KV dtype); 0: unknown (test executors)
    num_layers: int = 0  # transformer layers of the served model; 0: unknown
    gpu_name: str = ""  # the instance's GPU model, e.g. "A100-80GB"; "": unknown
    gpu_memory_bytes: int = 0  # bytes of device memory of each of its GPUs; 0: unknown
    # the links its KV tiers copy over (a sim.memory.kv_moves.TierLinks: seconds per copy), None when
    # unknown (test executors, the real engine)
    kv_links: Any = field(default=None, compare=False)
    # the instance's engine model a policy may query before serving (memory in bytes, batch
    # times; sim.cluster.hf_static.HFStaticExecutor), None for engines that offer none
    engine: Any = field(default=None, compare=False)
    model_name: str = ""  # the served model's name, e.g. "chatglm-6b"; "": unknown
    causal: bool = True  # the served model is causal (ModelSpec.causal): its prefix KV can be
    # reused across requests; False: a prefix-LM, whose prefix caching is refused
    medusa_heads: int = 0  # Medusa decoding heads on the target (sim/cluster/medusa.py); 0: none
    max_loras: int = 0  # LoRA adapter slots on the GPU (sim/cluster/lora.py); 0: LoRA off


def info_of(executor: Any, instance_id: int) -> InstanceInfo:
    """What a policy may know about an executor's instance: its own `instance_info` when it has
    one, else its capacity, name and whether it runs a draft (test executors)."""
    own = getattr(executor, "instance_info", None)
    if own is not None:
        return own(instance_id)
    return InstanceInfo(instance_id, executor.kv_capacity_tokens, getattr(executor, "name", ""),
                        getattr(executor, "has_draft", False))


@runtime_checkable
class Executor(Protocol):
    """A backend that runs Steps: the cost model (simulation) or a real torch engine."""

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache capacity in tokens for the model, GPU, dtype and memory fraction served."""
        ...

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        """Run `step`. Stop after the first iteration whose end is at or past `until_s` seconds
        from the step's start (always at least one iteration). A step whose KV footprint exceeds
        capacity returns `oom=True` with the iterations completed before the failure."""
        ...


def truncate_ends(ends: np.ndarray, until_s: float) -> np.ndarray:
    """Keep iterations up to and including the first one ending at or after `until_s`."""
    if until_s == math.inf or len(ends) <= 1 or ends[-1] <= until_s:
        return ends
    cut = int(np.searchsorted(ends, until_s, side="left"))
    return ends[: cut + 1]


def modelled_result(ends: np.ndarray, until_s: float, oom_at: int = 0) -> StepResult:
    """The StepResult of a modelled step with cumulative iteration `ends`: cut at `until_s`, or
    failing at 1-based iteration `oom_at` (0: never) unless the cut comes first."""
    if oom_at:
        before = ends[: oom_at - 1]
        if not (len(before) and before[-1] >= until_s):
            return StepResult(float(ends[oom_at - 1]), before, oom=True)
        ends = before  # the step stops before it would fail
    kept = truncate_ends(ends, until_s)
    return StepResult(float(kept[-1]), kept)


class StepTimeError(RuntimeError):
    """An executor returned a step duration the simulated clock cannot take (not finite, or
    negative): a NaN or infinite time would become a "finished" request with NaN latencies."""


def bad_step_time(executor: object, step: Step, result: StepResult) -> StepTimeError:
    """The StepTimeError naming the executor, its instance, the step and the duration; the
    engine raises it where step results enter the simulation (sim/engine/simulation.py), after a
    scheduling overhead's time is added (sim/cost/overhead.py)."""
    name = getattr(executor, "name", "") or ""
    who = f"{type(executor).__name__}{f' {name!r}' if name else ''}"
    return StepTimeError(
        f"instance {step.instance_id}'s executor {who}: duration_s={result.duration_s!r} "
        f"(scheduling overhead included) for a step of {step.num_seqs} request(s) (request_ids="
        f"{short_repr(step.request_ids, 80)}, {step.num_first_tokens} new and "
        f"{sum(step.num_context_tokens)} context tokens, {step.num_iterations} iteration(s)): "
        f"a step must take a finite number of seconds >= 0; its cost model's inputs (GPU, "
        f"model, MoE or link parameters) are out of range")
