"""The Steps a paged policy runs (policies/paged.py): how many iterations a decode-only batch
jumps, and the Step's fields (speculative verify rows, shared KV, LoRA, KV tier copies).

A decode-only step runs `k` iterations, `k` = the fewest remaining outputs in the batch and at
most as many iterations as the free blocks can grow every request by (policies/paged_decode.py);
with the prefix cache the jump is capped further (`prefix_jump_cap`,
policies/paged_prefix_jumps.py). `PagedSteps` holds this for `PagedPolicy`, which mixes it in
(it uses the policy's `spec`, `prefix`, `lora` and `decode_width`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from sim.core.executor import Step
from sim.core.request import Request

from policies.paged_decode import extra_blocks, jump_iterations
from policies.paged_instance import PagedInstance

if TYPE_CHECKING:
    from policies.lora import LoraScheduler
    from policies.prefix_caching import PrefixCaching
    from policies.speculative import Speculator


class PagedSteps:
    """Decode jumps and Step building (a mix-in of PagedPolicy)."""

    spec: Speculator | None  # the speculative decoder, when num_speculative_tokens > 0
    prefix: PrefixCaching | None  # prefix KV reuse, when enabled
    lora: LoraScheduler | None  # adapter slots, when LoRA is on
    decode_width: int  # tokens a decode computes (1 + draft tokens)
    prefix_jump_cap: Callable[[PagedInstance, list[Request], int], int]  # PrefixJumps' (no
    # stub here: it would come first)

    def decode_iterations(self, s: PagedInstance, batch: list[Request],
                          ids: list[int] | None = None,
                          held: list[int] | None = None) -> tuple[int, int]:
        """Iterations a decode-only batch (first slots given) can run without a change: up to
        its fewest remaining outputs, while the free blocks last for every request's growth.
        Returns (iterations, blocks the iterations after the first take). `ids`, `held`: the
        batch's request ids and the tokens each holds, when the caller has them."""
        most = min([r.target_output_tokens - r.num_output_tokens for r in batch])
        if most <= 1:
            return 1, 0
        bs = s.blocks.block_size
        if held is None:
            held = s.blocks.num_tokens_of([r.request_id for r in batch] if ids is None else ids)
        return jump_iterations([-t % bs for t in held], most, s.blocks.num_free_blocks, bs)

    def make_step(self, s: PagedInstance, instance_id: int, batch: list[Request],
                  chunks: list[int], num_iterations: int = 1, num_decodes: int = 0,
                  ids: list[int] | None = None) -> Step:
        """The Step computing `chunks[i]` new tokens of `batch[i]`; its first `num_decodes`
        rows are decodes (grown by `decode_width` slots), which verify drafts when speculating.
        `ids`: the batch's request ids, when the caller has them."""
        s.in_flight = batch
        n = len(batch)
        if num_decodes < n:
            samples = tuple([c == r.num_prompt_tokens + r.num_output_tokens - r.num_computed_tokens
                             for r, c in zip(batch, chunks)])
        else:
            samples = (True,) * n  # a decode samples its one token
        nv = num_decodes if self.spec is not None else 0
        k = self.spec.k if nv else 0
        if nv:  # the leading decodes verify k drafted tokens: k + 1 new tokens each
            chunks = [k + 1] * nv + chunks[nv:]
        ids_t = tuple([r.request_id for r in batch] if ids is None else ids)
        step = Step(instance_id, ids_t, tuple(chunks),
                    tuple([r.num_computed_tokens for r in batch]), samples,
                    num_iterations=num_iterations, num_draft_tokens=k, num_verify_seqs=nv,
                    num_shared_kv_tokens=s.blocks.shared_tokens(ids_t),
                    **(self.lora.annotate(s.lora, batch) if s.lora is not None else {}))
        return step if s.moves is None else s.moves.attach(step)  # KV tier copies, if any

    def decode_step(self, s: PagedInstance, instance_id: int, batch: list[Request],
                    ids: list[int] | None = None, held: list[int] | None = None) -> Step:
        """A multi-iteration step of single-token decodes (one verify iteration with a draft);
        `ids`, `held` as `grow_decode_batch` gives them."""
        n = len(batch)
        if self.spec is not None:
            return self.make_step(s, instance_id, batch, [1] * n, 1, n, ids)
        if ids is None:
            ids = [r.request_id for r in batch]
        k, s.num_pending_blocks = self.decode_iterations(s, batch, ids, held)
        if self.prefix is not None and k > 1:
            cap = min(k, self.prefix_jump_cap(s, batch, k))
            if cap < k:
                k, s.num_pending_blocks = cap, self.pending_blocks(s, batch, cap)
        return self.make_step(s, instance_id, batch, [1] * n, k, n, ids)

    @staticmethod
    def pending_blocks(s: PagedInstance, batch: list[Request], num_iterations: int) -> int:
        """Blocks `num_iterations` decode iterations of `batch` take after the first."""
        bs = s.blocks.block_size
        held = s.blocks.num_tokens_of([r.request_id for r in batch])
        return extra_blocks([-t % bs for t in held], num_iterations - 1, bs)
