"""Preemption by swapping (`preemption_mode: swap`): vLLM v0's other preemption mode.

When a paged policy (`vllm_v0`, `sarathi`) preempts a running request and its instance's swap
space (`swap_space` GiB of host memory, policies/swap_space.py) has room for the request's KV
blocks, the blocks are copied to host memory instead of dropped: the request keeps its computed
tokens (nothing is recomputed) and joins the instance's swapped queue. The copy (its blocks x
`block_size` tokens, whole blocks as vLLM's `swap_blocks` copies them) is paid, blocking, by the
step that preempts (sim/memory/kv_moves.py). When the swap space is full the request is recomputed
instead (vLLM v0 raises "Aborted due to the lack of CPU swap space" there; a simulation that
stops helps no one) and the run counts `num_swap_recomputes`.

Swapped requests come back oldest first, as v0's scheduler takes its swapped queue: in a step
that preempted nobody, while fewer than `max_num_seqs` run, the step's token budget allows their
next tokens and the GPU has blocks for what they held plus their next slot above the watermark
(none kept in an empty instance, as admission does). The swap-in copy is paid by that step, and
the request computes in it (a decode, or its next prefill chunk). With `vllm_v0` no new prompt
is admitted while any request is swapped out (v0's `_schedule_default`); `sarathi` admits new
prompts after the swap-ins (v0's `_schedule_chunked_prefill`).

Exact jumps: a decode-only step runs one iteration when it preempted with requests swapped out
(the next iteration may swap one in), or, in `vllm_v0`, when it swapped the last one in with
prompts waiting (the next iteration may admit one). Otherwise free blocks only shrink inside the
jump, so a swapped request that does not fit at its start does not fit before its end.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sim.core.executor import Step
from sim.core.request import Request, RequestStatus
from sim.records.recorder import Recorder

from policies.paged_instance import PagedInstance

PagedPolicyLike = Any  # a policies.paged.PagedPolicy (which imports this module: not imported)

SWAP_OUT_BYTES, SWAP_IN_BYTES = "kv_swap_out_bytes", "kv_swap_in_bytes"  # run counters, bytes
NUM_SWAP_OUTS, NUM_SWAP_RECOMPUTES = "num_swap_outs", "num_swap_recomputes"  # run counters


def num_queued(s: PagedInstance) -> int:
    """Requests of the instance waiting to run: queued and swapped out."""
    return len(s.waiting) + (len(s.swap.swapped) if s.swap is not None else 0)


def swap_out(s: PagedInstance, victim: Request, now: float, recorder: Recorder) -> bool:
    """Preempt running `victim` by copying its KV blocks to the swap space; False, with nothing
    changed, when the swap space cannot hold them (the caller recomputes it instead)."""
    space, rid, blocks = s.swap, victim.request_id, s.blocks
    num_blocks = blocks.num_blocks(rid)
    if num_blocks > space.num_free_blocks:
        recorder.counters[NUM_SWAP_RECOMPUTES] = recorder.counters.get(NUM_SWAP_RECOMPUTES, 0) + 1
        recorder.event(now, "swap_full", rid, f"instance {victim.instance_id}: swap space "
                       f"holds {space.num_free_blocks} free of {space.num_total_blocks} blocks, "
                       f"{num_blocks} needed: recompute instead")
        return False
    tokens = num_blocks * blocks.block_size
    space.held_tokens[rid] = blocks.num_tokens(rid)
    s.running.remove(victim)
    blocks.free(rid)
    space.num_used_blocks += num_blocks
    space.swapped.append(victim)
    s.moves.swap_out_tokens += tokens
    s.moves.count(SWAP_OUT_BYTES, tokens)
    recorder.counters[NUM_SWAP_OUTS] = recorder.counters.get(NUM_SWAP_OUTS, 0) + 1
    victim.num_swapped_out_tokens += tokens
    victim.num_preemptions += 1
    victim.status = RequestStatus.WAITING
    recorder.event(now, "preempt", rid, f"instance {victim.instance_id}: swap out {tokens} "
                   f"tokens ({tokens * s.moves.kv_bytes_per_token:.0f} B) to host memory")
    return True


def swap_in(policy: PagedPolicyLike, s: PagedInstance, instance_id: int, now: float,
            budget: int | None) -> tuple[list[Request], list[tuple[Request, int]], int | None]:
    """Swap requests back in, oldest first, while sequences, the token `budget` (None: no
    budget) and GPU blocks allow. Returns the decodes (their next slots given, as
    `policy.grow_decodes` gives them), the (request, chunk) of prefills, and the budget left."""
    space, blocks, width = s.swap, s.blocks, policy.decode_width
    decodes: list[Request] = []
    prefills: list[tuple[Request, int]] = []
    while space.swapped and len(s.running) < s.max_num_seqs:
        r = space.swapped[0]
        decode = r.num_new_tokens == 1 and r.num_computed_tokens > 0  # as grow_decodes tells
        n = width if decode else r.num_new_tokens
        if budget is not None:
            n = n if decode else min(n, budget)
            if n > budget or n <= 0:
                break
        held = space.held_tokens[r.request_id]
        need = blocks.blocks_for(max(held, r.num_computed_tokens + width) if decode else held)
        if need > blocks.num_total_blocks:
            raise RuntimeError(f"request {r.request_id} swapped out holding {held} tokens can "
                               f"never come back: {need} blocks > {blocks.num_total_blocks}")
        keep = blocks.watermark_blocks if s.running else 0  # an empty instance keeps none
        if need > blocks.num_free_blocks - keep:
            break
        restore(s, r, held, instance_id, now, policy.recorder)
        if policy.prefix is not None:  # its computed blocks are cached again, as before
            policy.prefix.register(blocks, [r])
        if decode:
            if not policy.grow(s, r, width, now):
                raise RuntimeError(f"request {r.request_id}: swapped in without its next slot")
            decodes.append(r)
        else:
            prefills.append((r, n))
        if budget is not None:
            budget -= n
    return decodes, prefills, budget


def restore(s: PagedInstance, r: Request, held: int, instance_id: int, now: float,
            recorder: Recorder) -> None:
    """Copy swapped-out `r`'s KV back into GPU blocks for its `held` tokens; it runs again."""
    space, blocks = s.swap, s.blocks
    space.swapped.popleft()
    del space.held_tokens[r.request_id]
    blocks.allocate(r.request_id, held)
    num_blocks = blocks.blocks_for(held)
    space.num_used_blocks -= num_blocks
    tokens = num_blocks * blocks.block_size
    s.moves.swap_in_tokens += tokens
    s.moves.count(SWAP_IN_BYTES, tokens)
    r.num_swapped_in_tokens += tokens
    r.mark_scheduled(now, instance_id)
    s.running.append(r)
    recorder.event(now, "swap_in", r.request_id, f"instance {instance_id}: swap in {tokens} "
                   f"tokens ({tokens * s.moves.kv_bytes_per_token:.0f} B) from host memory")


def one_iteration(s: PagedInstance, step: Step) -> Step:
    """`step` cut to its first iteration: a later one could swap in or admit."""
    if step.num_iterations == 1:
        return step
    s.num_pending_blocks = 0
    return dataclasses.replace(step, num_iterations=1)


def v0_swap_step(policy: PagedPolicyLike, s: PagedInstance, instance_id: int,
                 now: float) -> Step | None:
    """`vllm_v0`'s next step with swapping (v0's `_schedule_default`): prompts are admitted only
    while nothing is swapped out; else running requests decode (preempting when short), and
    when nobody was preempted the swapped ones come back and decode in the same step."""
    had_swapped = bool(s.swap.swapped)
    if not had_swapped:
        prefill = policy.prefill_step(s, instance_id, now)
        if prefill is not None:
            return prefill
    queued = num_queued(s)
    decodes = policy.grow_decodes(s, now)
    preempted = num_queued(s) > queued
    if not preempted or not decodes:  # no decode left: what the next iteration would do
        decodes += swap_in(policy, s, instance_id, now, None)[0]
    if not decodes:  # nothing runs nor is swapped out
        return policy.prefill_step(s, instance_id, now)
    step = policy.decode_step(s, instance_id, decodes)
    if (preempted and s.swap.swapped) or (had_swapped and not s.swap.swapped and s.waiting):
        return one_iteration(s, step)
    return step
