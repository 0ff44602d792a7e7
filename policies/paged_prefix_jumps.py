"""Exact decode jumps with the prefix cache: where a paged policy's jump must end.

With prefix caching on, a multi-iteration decode step (policies/paged.py) is exact only up to
where the head waiting request could be admitted (it fits now, after a preemption left its
prefix cached in others' blocks; or a decode completes the block it misses first) and where
one-iteration steps would cache completed blocks in another order. `PrefixJumps` holds those
caps for `PagedPolicy`, which mixes it in (it uses the policy's `prefix`, `config`, `can_admit`).
"""

from __future__ import annotations

from sim.core.request import Request

from policies.paged_instance import PagedInstance


class PrefixJumps:
    """Iteration caps of decode jumps under the prefix cache (a mix-in of PagedPolicy)."""

    def prefix_jump_cap(self, s: PagedInstance, decodes: list[Request],
                        num_iterations: int) -> int:
        """Iterations a decode jump of `decodes` (first slots given) may run with the prefix
        cache on and stay exact: no further than where the head waiting request's admission
        could change, or blocks would be cached in another order than one iteration at a time."""
        if not s.waiting and s.blocks.private_keys_only:
            return num_iterations  # no head to admit; private keys keep the order (below)
        caps = (self.iterations_to_head_admission(s, decodes, num_iterations),
                self.iterations_to_cache_order_change(s, decodes, num_iterations))
        return min((c for c in caps if c is not None), default=num_iterations)

    def iterations_to_head_admission(self, s: PagedInstance, decodes: list[Request],
                                     num_iterations: int) -> int | None:
        """Decode iterations after which the head waiting request may be admitted (whole-
        prompt admission, `can_admit`): 1 when it fits now (a preemption in this step freed
        blocks while the victim's prefix stays cached in others' blocks), else where a decode
        completes, and caches, the first block it misses (more hits, fewer blocks to take).
        Free blocks only shrink in a jump and evicting a hit never lowers the blocks the head
        takes, so nothing else lets it in. None: it cannot be admitted in this jump."""
        if not s.waiting or len(s.running) >= s.max_num_seqs:
            return None
        if self.can_admit(s):
            return 1
        head, bs = s.waiting[0], s.blocks.block_size
        keys = self.prefix.lookup_keys(head)
        hits = s.blocks.find_cached_prefix(keys)
        if len(hits) == len(keys):
            return None
        want, first = keys[len(hits)], None
        for r in decodes:
            own, c = self.prefix.keys(r), r.num_computed_tokens
            for j in range(c // bs, min(len(own), (c + num_iterations) // bs)):
                if own[j] == want:
                    i = (j + 1) * bs - c
                    first = i if first is None else min(first, i)
                    break
        return first

    def iterations_to_cache_order_change(self, s: PagedInstance, decodes: list[Request],
                                         num_iterations: int) -> int | None:
        """Where one-iteration steps would cache the jump's completed blocks differently from
        one update at its end (which grows every block first, then caches in batch order):
        before a key completed earlier by another decode, or at a key held by an evictable
        block (a later growth may evict it). None: nowhere. With private keys only, neither
        happens: a key is one request's, and its blocks stay held by it through the jump
        (none evictable)."""
        if self.prefix is None:
            return None
        if s.blocks.private_keys_only:
            return num_iterations
        if not self.prefix.own_keys and not any(  # no decode has keys
                [self.prefix.has_keys(r) for r in decodes]):
            return num_iterations
        bs, blocks = s.blocks.block_size, s.blocks
        when: dict = {}  # content key -> iterations completing it
        for r in decodes:
            if not r.block_ids and not r.num_preemptions:
                continue  # no content ids: its keys, if any, are private (the case below)
            own, c = self.prefix.keys(r), r.num_computed_tokens
            lo, hi = c // bs, min(len(own), (c + num_iterations) // bs)
            if lo < hi and own[lo] < 0 and not r.num_preemptions:
                continue  # private keys (prefix_caching.private_keys) of a request never
                # preempted: no other request completes them and no block caches them yet
            for j in range(lo, hi):
                when.setdefault(own[j], []).append((j + 1) * bs - c)
        if not when:
            return num_iterations
        caps = [num_iterations]
        for key, its in when.items():
            first = min(its)
            caps += [i - 1 for i in its if i > first]
            held = blocks.find_cached_prefix([key])
            if held and blocks.num_blocks_to_allocate(bs, held):  # cached, evictable
                caps.append(first)
        return min(caps)
