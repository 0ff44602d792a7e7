"""`djl`: DJL Serving (LMI) rolling batch, configured with DJL's own option names.

LMI's `option.rolling_batch` picks the inference library that runs continuous batching; its
`option.max_rolling_batch_size` and `option.max_rolling_batch_prefill_tokens` size it. This policy
takes those names (without the `option.` prefix) and maps them onto the simulator's continuous
batching policies over a paged KV cache (see docs/rolling_batch.md):

| rolling_batch | runs as | max_rolling_batch_size | prefill tokens |
|---|---|---|---|
| `vllm`, `lmi-dist`, `auto` | `vllm` | `max_num_seqs` | `max_num_batched_tokens` |
| same, `enable_chunked_prefill` | `sarathi` | `max_num_seqs` | `token_budget` |
| `trtllm` | `sarathi` (in-flight batching) | `max_num_seqs` | `max_num_tokens` -> `token_budget` |
| `scheduler` | `orca` (no paged KV) | `max_batch_size` | (none) |

Unset values take LMI's defaults (`LmiConfigRecommender`): a rolling batch of 256 for vllm,
lmi-dist and trtllm, 32 for the scheduler; TRT-LLM's `max_num_tokens` 16384. An unset
`max_rolling_batch_prefill_tokens` lets vLLM size it, max(`max_model_len`, 2048) (512 with chunked
prefill); without `max_model_len` the simulator takes the smallest instance's KV capacity.
`enable_prefix_caching` (vllm / lmi-dist) passes through to the paged policies' prefix KV reuse.
Every check names the DJL field, before the policy behind it sees its parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from sim.core.executor import InstanceInfo, Step, StepResult
from sim.core.request import Request
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError, check_positive

from policies.base import Policy, PolicyConfig
from policies.registry import get_policy, make_config, register_policy
from policies.routing import check_router

ROLLING_BATCHES = ("vllm", "lmi-dist", "auto", "trtllm", "scheduler")
VLLM_LIKE = ("vllm", "lmi-dist", "auto")  # LMI's `auto` picks lmi-dist for text generation
LMI_BATCH_SIZE = {"scheduler": 32}  # LMI's default rolling batch when unset; others: 256
LMI_DEFAULT_BATCH_SIZE = 256  # requests, vllm / lmi-dist / trtllm
TRTLLM_MAX_NUM_TOKENS = 16384  # tokens, LMI's default option.max_num_tokens for trtllm
VLLM_MIN_BATCHED_TOKENS = 2048  # tokens, vLLM's floor of max_num_batched_tokens
VLLM_CHUNKED_BATCHED_TOKENS = 512  # tokens, vLLM's default budget with chunked prefill
SCHEDULER_MAX_TOKENS = 2048  # output tokens reserved per request by `scheduler` by default


@dataclass(frozen=True)
class DjlConfig(PolicyConfig):
    """DJL Serving / LMI rolling-batch options (the `option.` prefix dropped)."""

    rolling_batch: str = "vllm"  # vllm | lmi-dist | auto | trtllm | scheduler
    max_rolling_batch_size: int | None = None  # requests in the rolling batch; None: LMI's
    max_rolling_batch_prefill_tokens: int | None = None  # tokens per prefill step; None: vLLM's
    max_model_len: int | None = None  # tokens of prompt + output at most; None: KV capacity
    enable_chunked_prefill: bool = False  # vllm / lmi-dist: chunk prompts into mixed steps
    max_num_tokens: int | None = None  # trtllm: tokens per iteration; None: 16384 (LMI's)
    tokens_per_block: int | None = None  # tokens per KV block; None: 16 (vLLM), 64 (TRT-LLM)
    enable_prefix_caching: bool = False  # vllm / lmi-dist: reuse cached prompt-prefix KV blocks
    router: str = "least_loaded"  # how arrivals are spread over model copies (instances)

    def __post_init__(self) -> None:
        if self.rolling_batch not in ROLLING_BATCHES:
            raise ConfigError("rolling_batch", self.rolling_batch,
                              f"must be one of {ROLLING_BATCHES} (`disable` is static batching: "
                              f"use the vanilla or dynamic policy)")
        for name in ("max_rolling_batch_size", "max_rolling_batch_prefill_tokens",
                     "max_model_len", "max_num_tokens", "tokens_per_block"):
            value = getattr(self, name)
            if value is not None:
                check_positive(name, value)
        for name in ("enable_chunked_prefill", "enable_prefix_caching"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "must be true or false")
        check_router(self.router)
        self._check_backend_options()
        self._check_budgets()

    def _check_backend_options(self) -> None:
        """Options that belong to another backend are errors, not silently ignored."""
        rb = self.rolling_batch
        if self.max_num_tokens is not None and rb != "trtllm":
            raise ConfigError("max_num_tokens", self.max_num_tokens,
                              f"is TensorRT-LLM's option; rolling_batch={rb!r} reads "
                              f"max_rolling_batch_prefill_tokens")
        if rb == "trtllm" and self.max_rolling_batch_prefill_tokens is not None:
            raise ConfigError("max_rolling_batch_prefill_tokens",
                              self.max_rolling_batch_prefill_tokens,
                              "rolling_batch='trtllm' sizes its iterations with max_num_tokens")
        for name in ("enable_chunked_prefill", "enable_prefix_caching"):
            if getattr(self, name) and rb not in VLLM_LIKE:
                raise ConfigError(name, True, f"a vllm / lmi-dist option (rolling_batch={rb!r})")
        if rb == "scheduler" and self.max_rolling_batch_prefill_tokens is not None:
            raise ConfigError("max_rolling_batch_prefill_tokens",
                              self.max_rolling_batch_prefill_tokens,
                              "rolling_batch='scheduler' has no prefill token limit")

    def _check_budgets(self) -> None:
        """vLLM's and Sarathi's own rules, stated in DJL's names."""
        prefill = self.max_rolling_batch_prefill_tokens
        if self.rolling_batch in VLLM_LIKE and not self.enable_chunked_prefill and \
                prefill is not None and self.max_model_len is not None and \
                prefill < self.max_model_len:
            raise ConfigError("max_rolling_batch_prefill_tokens", prefill,
                              f"must be >= max_model_len={self.max_model_len} without chunked "
                              f"prefill (vLLM's rule: a whole prompt is one prefill)")
        if self.runs_as == "sarathi" and self.token_budget < self.batch_size:
            field = "max_num_tokens" if self.rolling_batch == "trtllm" else \
                "max_rolling_batch_prefill_tokens"
            raise ConfigError(field, self.token_budget,
                              f"must be >= max_rolling_batch_size={self.batch_size}: every "
                              f"running request decodes in each iteration")

    @property
    def batch_size(self) -> int:
        """The rolling batch size in effect (LMI's default when unset), requests."""
        if self.max_rolling_batch_size is not None:
            return self.max_rolling_batch_size
        return LMI_BATCH_SIZE.get(self.rolling_batch, LMI_DEFAULT_BATCH_SIZE)

    @property
    def token_budget(self) -> int:
        """Tokens per iteration of a mixed (chunked-prefill) step, defaults applied."""
        if self.rolling_batch == "trtllm":
            return self.max_num_tokens or TRTLLM_MAX_NUM_TOKENS
        return self.max_rolling_batch_prefill_tokens or VLLM_CHUNKED_BATCHED_TOKENS

    @property
    def runs_as(self) -> str:
        """The simulator policy the rolling batch maps onto."""
        if self.rolling_batch == "scheduler":
            return "orca"
        if self.rolling_batch == "trtllm" or self.enable_chunked_prefill:
            return "sarathi"
        return "vllm_v0"


def engine_params(cfg: DjlConfig, kv_capacity_tokens: int) -> tuple[str, dict[str, Any]]:
    """(policy name, its parameters) that a DJL configuration runs as on instances whose
    smallest KV capacity is `kv_capacity_tokens`."""
    batch = cfg.batch_size
    if cfg.runs_as == "orca":
        max_tokens = cfg.max_model_len or SCHEDULER_MAX_TOKENS
        return "orca", {"max_batch_size": batch, "max_tokens": max_tokens, "router": cfg.router}
    trtllm = cfg.rolling_batch == "trtllm"
    block = cfg.tokens_per_block or (64 if trtllm else 16)
    params: dict[str, Any] = {"max_num_seqs": batch, "block_size": block, "router": cfg.router}
    if cfg.enable_prefix_caching:
        params["enable_prefix_caching"] = True
    if cfg.runs_as == "sarathi":
        return "sarathi", {**params, "token_budget": cfg.token_budget}
    tokens = cfg.max_rolling_batch_prefill_tokens
    if tokens is None:
        tokens = max(cfg.max_model_len, VLLM_MIN_BATCHED_TOKENS) if cfg.max_model_len \
            else kv_capacity_tokens
    return "vllm_v0", {**params, "max_num_batched_tokens": tokens}


@register_policy("djl")
class DjlPolicy(Policy):
    """Runs the policy the DJL options map onto (`engine_params`) and forwards every call."""

    Config = DjlConfig
    config: DjlConfig

    def __init__(self, config: DjlConfig, instances: Sequence[InstanceInfo],
                 recorder: Recorder, rng: np.random.Generator) -> None:
        super().__init__(config, instances, recorder, rng)
        capacity = min(i.kv_capacity_tokens for i in self.instances)
        name, params = engine_params(config, capacity)
        block = params.get("block_size", 0)
        if block > capacity:
            raise ConfigError("tokens_per_block", block,
                              f"larger than the smallest instance's KV capacity of {capacity}")
        cls = get_policy(name)
        self.engine_name = name  # the simulator policy that runs the rolling batch
        self.engine: Policy = cls(make_config(cls, params, where=f"policies.djl->{name}"),
                                  self.instances, recorder, rng)

    @property
    def state(self) -> list:
        """The engine's per-instance queues (and KV cache, for paged engines)."""
        return self.engine.state  # type: ignore[attr-defined]

    def add_request(self, request: Request, now: float) -> bool:
        return self.engine.add_request(request, now)

    def next_step(self, instance_id: int, now: float) -> Step | None:
        return self.engine.next_step(instance_id, now)

    def update(self, step: Step, result: StepResult, now: float) -> list[Request]:
        return self.engine.update(step, result, now)

    def num_reserved_kv_tokens(self, instance_id: int) -> int:
        return self.engine.num_reserved_kv_tokens(instance_id)

    def next_wakeup_s(self, instance_id: int, now: float) -> float:
        return self.engine.next_wakeup_s(instance_id, now)

    def drain(self, now: float) -> None:
        self.engine.drain(now)
