"""`vllm`: today's vLLM scheduler (the V1 engine's `vllm/v1/core/sched/scheduler.py`).

Followed from vLLM's main branch (vllm-project/vllm, `vllm/v1/core/sched/scheduler.py` at
00024d31, `vllm/config/scheduler.py` at 01230b40, `EngineArgs.get_batch_defaults` in
`vllm/engine/arg_utils.py`); `vllm_v0` is the V0 scheduler. Per instance and step:

- There is no prefill or decode phase: one token budget (`max_num_batched_tokens`) per step, and
  each scheduled request gets the tokens that let its computed tokens catch up with its known
  tokens (prompt + sampled outputs), capped by what is left of the budget (and by
  `long_prefill_token_threshold` when set). Chunked prefill is always on.
- RUNNING requests first, in admission order: decodes take one token (k + 1 with a draft), a
  partially prefilled request its next chunk. KV blocks are allocated on demand for exactly the
  tokens scheduled (`allocate_slots`; no watermark, no whole-prompt reservation). When blocks
  run out, the most recently admitted running request is preempted by recomputation
  (`self.running.pop()`, the only mode V1 has) until the request fits or preempted itself.
- Then WAITING requests, FCFS, while budget is left, fewer than `max_num_seqs` run and no
  request was preempted in this step: a new request starts from its cached prefix (prefix
  caching on by default, as in V1), its first chunk gets blocks, or admission stops.
- `scheduling_policy: priority` (V1's `--scheduling-policy priority`) orders the waiting queue
  by (priority, arrival) and preempts the worst of them instead (policies/priority.py).
- KV offloading (`host_prefix_cache_gib`, alias `kv_offloading_size`; `remote_prefix_cache_gib`
  with `kv_offloading_backend: lmcache`): V1's KV connectors, policies/vllm_offload.py. A waiting
  request's hit goes on from the GPU into the host / remote tiers, whose blocks it loads (the
  native connector asynchronously, while it waits; lmcache in its first step); a preempted
  request reloads its offloaded blocks instead of recomputing them.

Rows of a Step are decodes first (their order does not change the cost). A decode-only step
without preemption jumps over as many iterations as cannot change the batch (`policies/paged.py`);
with the prefix cache it also ends where a blocked waiting request's admission could change or
blocks would be cached in another order than one iteration at a time, so jumps stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


from sim.core.executor import InstanceInfo, Step
from sim.core.request import Request
from sim.memory.block_private import PrivateBlocks
from sim.util.errors import ConfigError, check_positive

from policies.kv_tier_config import check_v1_offload, resolve_offloading_size
from policies.paged import PagedConfig, PagedInstance, PagedPolicy
from policies.paged_classes import PagedClasses, check_classes_config
from policies.registry import register_policy
from policies.vllm_batch_defaults import GPU_NOTE, BatchLimits, batch_limits
from policies.vllm_offload import OffloadHooks


@dataclass(frozen=True)
class VllmV1Config(PagedConfig):
    # None: follow the instance's GPU as `vllm serve` does (EngineArgs.get_batch_defaults:
    # 8192 / 1024 on >= 70 GiB GPUs other than A100, 2048 / 256 on A100 and smaller;
    # policies/vllm_batch_defaults.py)
    max_num_batched_tokens: int | None = field(  # tokens per step (the token budget)
        default=None, metadata={"default_note": GPU_NOTE})
    max_num_seqs: int | None = field(  # running requests per instance
        default=None, metadata={"default_note": GPU_NOTE})
    long_prefill_token_threshold: int = 0  # tokens per prefill chunk at most; 0: no cap (vLLM)
    watermark: float = 0.0  # V1's KVCacheManager keeps no blocks free when admitting
    enable_prefix_caching: bool = True  # V1 default (CacheConfig.enable_prefix_caching)
    scheduling_policy: str = "fcfs"  # fcfs | priority: waiting order, preemption victim
    priority_aging_s: float | None = None  # seconds per priority level gained waiting; None: none
    # KV offloading (policies/vllm_offload.py): the connector of the host / remote tiers
    kv_offloading_backend: str = "native"  # native (OffloadingConnector) | lmcache
    kv_offloading_size: float = 0.0  # GiB per instance: vLLM's name for host_prefix_cache_gib

    def __post_init__(self) -> None:
        resolve_offloading_size(self)
        super().__post_init__()
        check_classes_config(self)
        if self.max_num_batched_tokens is not None:
            check_positive("max_num_batched_tokens", self.max_num_batched_tokens)
        if (self.max_num_batched_tokens is not None and self.max_num_seqs is not None
                and self.max_num_batched_tokens < self.max_num_seqs):
            raise ConfigError("max_num_batched_tokens", self.max_num_batched_tokens,
                              f"must be >= max_num_seqs={self.max_num_seqs} (as vLLM checks)")
        if self.long_prefill_token_threshold < 0:
            raise ConfigError("long_prefill_token_threshold", self.long_prefill_token_threshold,
                              "must be >= 0 (0: no cap)")
        check_v1_offload(self)


@dataclass
class Plan:
    """One step being scheduled on an instance."""

    budget: int  # tokens left in the step's budget
    decodes: list[Request]  # running requests computing one token (k + 1 verifying)
    prefills: list[Request]  # requests computing a prefill chunk
    chunks: list[int]  # new tokens of each prefill, tokens
    preempted: bool = False  # a running request was preempted in this step
    ids: list[int] | None = None  # the decodes' request ids, when all were grown at once
    held: list[int] | None = None  # tokens each decode holds then (None: not gathered)

    def schedule(self, r: Request, num_tokens: int, decode: bool) -> None:
        """Give `r` `num_tokens` of the step's budget, as a decode or as a prefill chunk."""
        if decode:
            self.decodes.append(r)
        else:
            self.prefills.append(r)
            self.chunks.append(num_tokens)
        self.budget -= num_tokens


@register_policy("vllm")
class VllmV1Policy(OffloadHooks, PagedClasses, PagedPolicy):
    Config = VllmV1Config
    config: VllmV1Config

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.prefix is not None:  # V1 hashes every request's blocks (not only those the
            # trace gives content ids): a preempted request finds its own blocks again, and
            # with an offload tier every block is stored
            self.prefix.own_keys = True
        # while every key is private, the prefix cache without block ids (sim/memory/
        # block_private.py); block tables from the first request with content ids on
        self.private_blocks = (self.prefix is not None and self.offload is None
                               and self.spec is None)
        if self.private_blocks:
            for s in self.state:
                b = s.blocks
                s.blocks = PrivateBlocks(b.num_total_blocks, b.block_size, self.config.watermark)
        # tokens per step on each instance (its GPU's default unless set)
        self.token_budgets = [self.limits(info).max_num_batched_tokens for info in self.instances]

    def add_request(self, request: Request, now: float) -> bool:
        if request.block_ids and self.private_blocks:
            self.use_block_tables()
        return super().add_request(request, now)

    def use_block_tables(self) -> None:
        """Give every instance the BlockManager its private-key counts stand for: a request
        with content ids may share blocks with others, which needs block identity."""
        self.private_blocks = False
        for s in self.state:
            s.blocks = s.blocks.to_block_manager(
                {r.request_id: r.num_computed_tokens for r in s.running})

    def limits(self, info: InstanceInfo) -> BatchLimits:
        """The token budget and sequence cap on the instance `info` describes."""
        c = self.config
        return batch_limits(c.max_num_batched_tokens, c.max_num_seqs, info)

    def seq_limit(self, info: InstanceInfo) -> int:
        return self.limits(info).max_num_seqs

    def instance_settings(self, instance_id: int) -> dict[str, Any]:
        return {"max_num_batched_tokens": self.token_budgets[instance_id],
                "max_num_seqs": self.state[instance_id].max_num_seqs}

    def chunk(self, num_new_tokens: int, budget: int) -> int:
        """Tokens scheduled for a request that needs `num_new_tokens`, `budget` being left."""
        threshold = self.config.long_prefill_token_threshold
        if 0 < threshold < num_new_tokens:
            num_new_tokens = threshold
        return min(num_new_tokens, budget)

    def schedule_running(self, s: PagedInstance, plan: Plan, now: float) -> None:
        """Give running requests, in admission order, their tokens and the blocks for them,
        preempting the most recently admitted while blocks are short."""
        if self.decodes_fit(s, plan):
            return
        i = 0
        while i < len(s.running) and plan.budget > 0:
            r = s.running[i]
            i += 1
            if self.is_loading(r):
                continue  # its blocks are still on their way from the host
            decode = r.num_new_tokens == 1 and r.num_computed_tokens > 0
            n = self.decode_width if decode else self.chunk(r.num_new_tokens, plan.budget)
            if n > plan.budget:
                break  # a verify of k + 1 tokens does not fit what is left
            before = len(s.running)
            fits = self.grow(s, r, n, now)
            plan.preempted |= len(s.running) < before
            if not fits:
                break  # r preempted itself: it was the last running request
            plan.schedule(r, n, decode)

    def decodes_fit(self, s: PagedInstance, plan: Plan) -> bool:
        """When every running request decodes and the budget and free blocks cover them all,
        schedule them at once (what the loop in `schedule_running` gives: no preemption)."""
        w, running = self.decode_width, s.running
        if self.offload is not None and any([self.is_loading(r) for r in running]):
            return False
        if not running or len(running) * w > plan.budget:
            return False
        ids: list[int] = []
        grown: list[int] = []  # tokens each decode holds once grown by w slots
        for r in running:
            c = r.num_computed_tokens
            if not c or r.num_prompt_tokens + r.num_output_tokens - c != 1:
                return False  # not a decode (num_new_tokens != 1): the general loop
            ids.append(r.request_id)
            grown.append(c + w)
        held = s.blocks.grow_to_held(ids, grown)
        if held is None:
            return False
        plan.decodes.extend(running)
        plan.ids, plan.held = ids, held
        plan.budget -= len(running) * w
        return True

    def admit_chunk(self, s: PagedInstance, instance_id: int, plan: Plan, now: float) -> bool:
        """Admit the head waiting request with blocks for its cached prefix and first chunk;
        False when the blocks are not free."""
        r, bs, offload = s.waiting[0], s.blocks.block_size, self.offload
        keys = [] if self.prefix is None else self.prefix.lookup_keys(r)
        hits = s.blocks.find_cached_prefix(keys) if keys else []
        external = [] if offload is None else offload.lookup(instance_id, keys, len(hits))
        cached = min((len(hits) + len(external)) * bs, r.num_tokens - 1)
        waits = offload is not None and offload.waits(external)  # an asynchronous load
        n = 0 if waits else self.chunk(r.num_tokens - cached, plan.budget)
        if s.blocks.num_blocks_to_allocate(cached + n, hits) > s.blocks.num_free_blocks:
            return False
        s.waiting.popleft()
        s.blocks.allocate(r.request_id, cached + n, keys=keys[: (cached + n) // bs])
        r.num_computed_tokens = cached
        r.num_cached_tokens += cached
        r.mark_scheduled(now, instance_id)
        s.running.append(r)
        if offload is not None:
            offload.admitted(instance_id, s, r, keys, len(hits), external, now)
            if waits:
                return True  # it computes once its blocks land
        plan.prefills.append(r)
        plan.chunks.append(n)
        plan.budget -= n
        return True

    def schedule_waiting(self, s: PagedInstance, instance_id: int, plan: Plan,
                         now: float) -> None:
        """Admit waiting requests FCFS while the budget, `max_num_seqs` and blocks allow."""
        if plan.preempted:
            return  # V1 admits nothing in a step that preempted
        while plan.budget > 0 and s.waiting and len(s.running) < s.max_num_seqs:
            if not self.admit_chunk(s, instance_id, plan, now):
                break

    def next_step(self, instance_id: int, now: float) -> Step | None:
        s = self.state[instance_id]
        if self.offload is not None:
            self.offload.poll(instance_id, s, self.prefix, now)
        plan = Plan(self.token_budgets[instance_id], [], [], [])
        self.schedule_running(s, plan, now)
        if s.waiting:
            self.schedule_waiting(s, instance_id, plan, now)
        if not plan.decodes and not plan.prefills:
            return None
        if not plan.prefills and not plan.preempted and not (
                self.offload is not None and self.offload.num_loading(instance_id)):
            return self.jump(s, instance_id, plan.decodes, plan.budget, plan.ids, plan.held)
        batch = plan.decodes + plan.prefills
        chunks = [1] * len(plan.decodes) + plan.chunks
        return self.make_step(s, instance_id, batch, chunks, num_decodes=len(plan.decodes))

    def jump(self, s: PagedInstance, instance_id: int, decodes: list[Request], budget: int,
             ids: list[int] | None = None, held: list[int] | None = None) -> Step:
        """A decode-only step over the iterations that cannot change the batch; with the
        prefix cache, also no further than where a waiting request's admission could change
        or a block would be cached in another order than one iteration at a time. `ids`,
        `held`: the decodes' ids and held tokens, when `decodes_fit` gathered them."""
        step = self.decode_step(s, instance_id, decodes, ids, held)
        if step.num_iterations == 1 or (not s.waiting and self.offload is None):
            return step  # every cap below is at least one iteration; none without a waiter
        # (decode_step's prefix_jump_cap already ended it where the cache order changes: that
        # cap, taken again at step.num_iterations, is not lower)
        caps = (self.iterations_to_admission_change(s, decodes, budget, step.num_iterations),
                None if self.offload is None else self.offload.jump_cap(decodes))
        cap = min((c for c in caps if c is not None), default=step.num_iterations)
        if cap >= step.num_iterations:
            return step
        s.num_pending_blocks = self.pending_blocks(s, decodes, cap)
        n = len(decodes)
        return self.make_step(s, instance_id, decodes, [1] * n, cap, n)

    def iterations_to_admission_change(self, s: PagedInstance, decodes: list[Request],
                                       budget: int, num_iterations: int) -> int | None:
        """Decode iterations after which the head waiting request, blocked on KV blocks now,
        may fit: a decode completes (and caches) the block it misses first, or, when a cached
        hit of it is evictable and its chunk may be cut by the budget, a decode takes a new
        block (evicting that hit cuts its chunk's blocks). None: it cannot change in a jump."""
        if (self.prefix is None or not s.waiting or budget <= 0
                or len(s.running) >= s.max_num_seqs):
            return None
        head, bs = s.waiting[0], s.blocks.block_size
        keys = self.prefix.lookup_keys(head)
        hits = s.blocks.find_cached_prefix(keys)
        caps = []
        if len(hits) < len(keys):
            want = keys[len(hits)]
            for r in decodes:
                own, c = self.prefix.keys(r), r.num_computed_tokens
                for j in range(c // bs, min(len(own), (c + num_iterations) // bs)):
                    if own[j] == want:
                        caps.append((j + 1) * bs - c)
                        break
        revived = s.blocks.num_blocks_to_allocate(len(hits) * bs, hits)  # evictable hits
        if revived and self.chunk(head.num_tokens, budget) < head.num_tokens:
            caps.append(1 + min(-s.blocks.num_tokens(r.request_id) % bs for r in decodes))
        return min(caps, default=None)
