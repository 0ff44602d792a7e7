"""Continuous batching over a paged KV cache: what `vllm` and `sarathi` share.

Each instance keeps a paged KV cache (`sim/memory/block_counter.py`: block counts, or vLLM's block
tables when prefix caching needs block identity), a waiting queue and a running list
in admission order. Arrivals are routed to one instance (`policies/routing.py`). Admission gives a
request blocks for all its known tokens (vLLM v0 allocates the whole prompt, even when it is
prefilled in chunks); a decode grows its request by one slot per iteration, on demand. When a
decode finds no free block, the most recently admitted running request is preempted by
recomputation: its blocks are freed, `Request.preempt()` counts its computed tokens as
recomputed, and it goes back to the head of the waiting queue (vLLM's `RECOMPUTE` mode; with
`preemption_mode: swap` its blocks are copied to host memory instead, policies/swap.py; KV tiers
are set up by policies/kv_tiers.py).

Blocks never exceed the instance's KV capacity, so a step never runs out of memory. A request
whose prompt + 1 tokens need more blocks than the cache has is rejected on arrival; one that
outgrows the whole cache while decoding fails (vLLM stops it at `max_model_len`). The watermark
keeps blocks free when admitting, except into an empty instance (nothing to protect there).

A decode-only step runs `k` iterations, `k` = the fewest remaining outputs in the batch and at
most as many iterations as the free blocks can grow every request by, so the batch cannot change
inside the step except by an arrival (which the engine cuts the step at). With the prefix cache
the jump also ends where the head waiting request could be admitted (it fits now, after a
preemption left its prefix cached in others' blocks; or a decode completes the block it misses
first) or where one-iteration steps would cache completed blocks in another order
(`prefix_jump_cap`), so jumps stay exact. Steps are built in `policies/paged_steps.py`.

With `num_speculative_tokens` = k > 0 (and a cluster draft model), every decode is a one-iteration
speculative verify of k + 1 tokens instead (`policies/speculative.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sim.core.emit import emit_batch
from sim.core.executor import InstanceInfo, Step, StepResult
from sim.core.request import Request
from sim.memory.block_counter import make_block_manager
from sim.util.errors import ConfigError, check_positive

from policies.base import Policy, PolicyConfig
from policies.kv_tier_config import check_kv_tier_params
from policies.kv_tiers import build_kv_tiers
from policies.lora import build_lora_scheduler, check_lora_params
from policies.paged_decode import DecodeBatch
from policies.paged_instance import PagedInstance
from policies.paged_prefix_jumps import PrefixJumps
from policies.paged_steps import PagedSteps
from policies.prefix_caching import PrefixCaching, check_causal_model
from policies.routing import InstanceLoad, build_router, check_router
from policies.speculative import build_speculator, check_method, check_speculative
from policies.swap import swap_out


@dataclass(frozen=True)
class PagedConfig(PolicyConfig):
    """Parameters every paged-KV policy has."""

    block_size: int = 16  # tokens per KV block
    watermark: float = 0.01  # fraction of blocks kept free when admitting a request
    max_num_seqs: int = 256  # running requests per instance (at most)
    router: str = "least_requests"  # how arrivals are spread over instances
    num_speculative_tokens: int = 0  # k: draft tokens per decode (policies/speculative.py)
    acceptance_rate: float = 0.7  # per-token probability the target accepts a draft token
    acceptance_concentration: float = 0.0  # Beta concentration of per-request rates; 0: fixed
    speculative_method: str = "draft"  # draft: cluster.draft_model proposes k tokens | medusa:
    # k Medusa heads (cluster.medusa_heads) propose a tree (policies/speculative.py)
    medusa_tree_size: int = 64  # tokens a Medusa verify row computes: root + candidates
    lora_adapters: int = 0  # LoRA adapters requests use (policies/lora.py); 0: LoRA off
    lora_zipf: float = 0.0  # Zipf exponent of adapter popularity when drawn (0: uniform)
    enable_prefix_caching: bool = False  # reuse cached prefix KV blocks (prefix_caching.py)
    # KV memory tiers (policies/kv_tier_config.py), off by default:
    preemption_mode: str = "recompute"  # recompute | swap (preempted KV to host memory)
    swap_space: float = 4.0  # GiB of host memory per instance for swapped-out KV
    host_prefix_cache_gib: float = 0.0  # GiB of host memory per instance for prefix blocks
    # evicted from the GPU (0: off)
    remote_prefix_cache_gib: float = 0.0  # GiB of a remote KV store per instance (0: off)

    def __post_init__(self) -> None:
        check_positive("block_size", self.block_size)
        if not 0.0 <= self.watermark < 1.0:
            raise ConfigError("watermark", self.watermark, "must be in [0, 1)")
        if self.max_num_seqs is not None:  # None: follows the GPU (`vllm`)
            check_positive("max_num_seqs", self.max_num_seqs)
        check_router(self.router)
        if not isinstance(self.enable_prefix_caching, bool):
            raise ConfigError("enable_prefix_caching", self.enable_prefix_caching,
                              "must be true or false")
        check_speculative(self.num_speculative_tokens, self.acceptance_rate,
                          self.acceptance_concentration)
        check_method(self.speculative_method, self.num_speculative_tokens, self.medusa_tree_size)
        check_lora_params(self.lora_adapters, self.lora_zipf, self.preemption_mode)
        check_kv_tier_params(self)


class PagedPolicy(PagedSteps, PrefixJumps, Policy):
    """Routing, admission, on-demand block growth, preemption and step results (the steps
    themselves: policies/paged_steps.py)."""

    config: PagedConfig

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        bs, wm = self.config.block_size, self.config.watermark
        for info in self.instances:
            if info.kv_capacity_tokens < bs:
                raise ConfigError("block_size", bs, f"larger than instance {info.instance_id}'s "
                                  f"KV capacity of {info.kv_capacity_tokens} tokens")
        for info in self.instances:  # prefix-LM models: no prefix KV reuse
            check_causal_model(self.config, info.model_name, info.causal)
        caching = self.config.enable_prefix_caching
        self.state = [PagedInstance(make_block_manager(info.kv_capacity_tokens // bs, bs, wm,
                                                       caching), max_num_seqs=self.seq_limit(info))
                      for info in self.instances]
        self.build_tiers()  # KV memory tiers, when on
        self.prefix = PrefixCaching(bs) if caching else None  # prefix KV reuse, when enabled
        self.router = build_router(self.config.router, len(self.instances))
        c = self.config
        self.spec = build_speculator(c.num_speculative_tokens, c.acceptance_rate,
                                     c.acceptance_concentration, self.rng, self.instances,
                                     c.speculative_method, c.medusa_tree_size)
        self.decode_width = 1 + (self.spec.k if self.spec else 0)  # tokens a decode computes
        self.lora = build_lora_scheduler(c.lora_adapters, c.lora_zipf, self.rng, self.recorder,
                                         self.instances, self)
        for i, s in enumerate(self.state):
            s.lora = self.lora.slots[i] if self.lora else None

    def seq_limit(self, info: InstanceInfo) -> int:
        """Running requests at most on the instance `info` describes."""
        return self.config.max_num_seqs

    def build_tiers(self) -> None:
        """Give the instances the KV tiers the config turns on (vLLM v0's: swap space, tiered
        prefix cache; policies/kv_tiers.py). `vllm` builds V1's connectors instead."""
        build_kv_tiers(self.config, self.instances, self.state, self.recorder)

    # ---- arrivals -----------------------------------------------------------------------
    def never_fits(self, s: PagedInstance, num_tokens: int) -> bool:
        """Whether `num_tokens` tokens need more blocks than the instance's whole cache."""
        return s.blocks.blocks_for(num_tokens) > s.blocks.num_total_blocks

    def add_request(self, request: Request, now: float) -> bool:
        need = request.num_prompt_tokens + 1
        if self.lora is not None:
            self.lora.assign(request)
        fits = [i for i, s in enumerate(self.state) if not self.never_fits(s, need)]
        if not fits:
            request.reject(now, f"prompt + 1 = {need} tokens need more KV blocks than any "
                                f"instance has")
            return False
        if len(self.state) == 1:  # one instance: every router picks it
            self.state[0].waiting.append(request)
            return True
        loads = [InstanceLoad(i, self.state[i].waiting, self.state[i].running,
                              self.num_reserved_kv_tokens(i), self.instances[i].kv_capacity_tokens,
                              self.cached_tokens_on(i)) for i in fits]
        self.state[self.router.route(request, loads)].waiting.append(request)
        return True

    def cached_tokens_on(self, i: int) -> Callable[[Request], int] | None:
        """Tokens of a request's prompt instance `i` holds in its prefix cache (for routers),
        or None without prefix caching."""
        if self.prefix is None:
            return None
        prefix, blocks = self.prefix, self.state[i].blocks
        return lambda r: len(prefix.lookup(blocks, r)) * blocks.block_size

    # ---- admission, growth, preemption ----------------------------------------------------
    def can_admit(self, s: PagedInstance) -> bool:
        """Whether the head waiting request may get blocks for its known tokens now."""
        if len(s.running) >= s.max_num_seqs:
            return False
        if s.lora is not None and not self.lora.pick(s.lora, s.waiting, s.running):  # type: ignore
            return False  # no waiting request's adapter can get a slot now
        r = s.waiting[0]
        hits = () if self.prefix is None else self.prefix.lookup(s.blocks, r)
        if not s.running:  # an empty instance keeps no watermark
            return s.blocks.num_blocks_to_allocate(r.num_tokens, hits) <= s.blocks.num_free_blocks
        return s.blocks.can_allocate(r.num_tokens, hits)

    def admit(self, s: PagedInstance, instance_id: int, now: float) -> Request:
        """Move the head waiting request to the running list with blocks for its tokens."""
        r = s.waiting.popleft()
        if self.prefix is None:
            s.blocks.allocate(r.request_id, r.num_tokens)
        else:  # a cached prefix is shared and counts as computed
            self.prefix.admit(s.blocks, r)
        if s.lora is not None:
            self.lora.acquire(s.lora, r, s.running)  # type: ignore[union-attr]
        r.mark_scheduled(now, instance_id)
        s.running.append(r)
        return r

    def preempt(self, s: PagedInstance, victim: Request, now: float) -> None:
        """Recompute `victim` later: free its blocks, put it at the head of the queue (with
        `preemption_mode: swap`, copy its KV to host memory instead while there is room)."""
        if s.swap is not None and swap_out(s, victim, now, self.recorder):
            return
        s.running.remove(victim)
        s.blocks.free(victim.request_id, num_computed_tokens=victim.num_computed_tokens)
        self.recorder.event(now, "preempt", victim.request_id,
                            f"instance {victim.instance_id}: recompute "
                            f"{victim.num_computed_tokens} tokens")
        victim.preempt()
        s.waiting.appendleft(victim)

    def grow(self, s: PagedInstance, r: Request, num_new_tokens: int, now: float) -> bool:
        """Give running `r` slots for its next `num_new_tokens` tokens, preempting the most
        recently admitted requests while blocks are short; False when `r` itself was."""
        held = s.blocks.num_tokens(r.request_id)
        extra = max(0, r.num_computed_tokens + num_new_tokens - held)
        while s.blocks.blocks_to_append(r.request_id, extra) > s.blocks.num_free_blocks:
            victim = s.running[-1]
            self.preempt(s, victim, now)
            if victim is r:
                return False
        s.blocks.append(r.request_id, extra)
        return True

    def grow_decodes(self, s: PagedInstance, now: float) -> list[Request]:
        """One slot for every running request whose prefill is done, in admission order;
        returns those that run (the rest were preempted)."""
        return self.grow_decode_batch(s, now).requests

    def grow_decode_batch(self, s: PagedInstance, now: float) -> DecodeBatch:
        """`grow_decodes`, with the batch's ids and held tokens when block counts grew them all
        at once (what `decode_step` needs next)."""
        grow_to = getattr(s.blocks, "grow_to_held", None)  # block counts: all at once if they fit
        if grow_to is not None:
            w = self.decode_width
            ready = [r for r in s.running if r.num_computed_tokens
                     and r.num_prompt_tokens + r.num_output_tokens - r.num_computed_tokens == 1]
            ids = [r.request_id for r in ready]
            held = grow_to(ids, [r.num_computed_tokens + w for r in ready])
            if held is not None:
                return DecodeBatch(ready, ids, held)  # nobody preempted: what the loop gives
        decodes: list[Request] = []
        i = 0
        while i < len(s.running):  # victims leave from the end, so index i stays valid
            r = s.running[i]
            i += 1
            if r.num_new_tokens != 1 or not r.num_computed_tokens:
                continue  # a prefill: its blocks were allocated on admission
            if not self.grow(s, r, self.decode_width, now):
                break  # r preempted itself: it was the last running request
            decodes.append(r)
        return DecodeBatch(decodes)

    # ---- step results ---------------------------------------------------------------------
    def update(self, step: Step, result: StepResult, now: float) -> list[Request]:
        if result.oom:
            raise RuntimeError(f"{self.name} step ran out of KV memory on instance "
                               f"{step.instance_id}: its block accounting should prevent it")
        s = self.state[step.instance_id]
        batch, s.in_flight = s.in_flight, []
        m, nv = len(result.iteration_ends_s), step.num_verify_seqs
        done = self.spec.apply(s.blocks, batch[:nv], now, self.recorder) if nv else []
        rows = batch[nv:] if nv else batch
        if all(step.samples):
            sampling = rows
        else:
            sampling = []
            for r, n, samples in zip(rows, step.num_new_tokens[nv:], step.samples[nv:]):
                if samples:
                    sampling.append(r)
                else:
                    r.compute(n)
        if sampling:
            done += emit_batch(sampling, now - result.duration_s, result.iteration_ends_s,
                               self.recorder.gaps)
        if m > 1:
            s.blocks.append_all(step.request_ids, m - 1)  # the batch's ids, in order
        s.num_pending_blocks = 0
        if self.prefix is not None and not s.blocks.private_keys_only:  # (PrivateBlocks count
            self.prefix.register(s.blocks, batch)  # a request's keyed blocks when it releases)
        most = s.blocks.num_total_blocks * s.blocks.block_size - self.decode_width + 1  # tokens
        for r in batch:  # never_fits(r.num_tokens + decode_width - 1), inlined
            if r.num_prompt_tokens + r.num_output_tokens > most and not r.is_finished:
                r.num_padding_tokens += r.num_computed_tokens  # its KV was wasted work
                r.fail(now, "outgrew the whole KV cache")
                done.append(r)
        for r in done:
            s.blocks.free(r.request_id, finished=True, num_computed_tokens=r.num_computed_tokens)
            s.running.remove(r)
            if self.prefix is not None:
                self.prefix.forget(r)
        return done

    def num_reserved_kv_tokens(self, instance_id: int) -> int:
        s = self.state[instance_id]
        return (s.blocks.num_used_blocks + s.num_pending_blocks) * s.blocks.block_size
