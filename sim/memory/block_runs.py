"""Dead runs: a finished request's privately keyed blocks parked in the LRU as one entry.

A request keyed lazily (sim/memory/block_batch.py: private keys of a request never preempted)
registers its blocks when it releases them, and they wait in the LRU of evictable blocks until
allocation evicts them, tail first. When the request has FINISHED, no one can ever look those
keys up again: they are private to it, and it never comes back. Registering them block by block
(three dict entries each) and evicting them block by block (an `OrderedDict.popitem` and two
dict deletions each) then buys nothing but the same free count, eviction order and eviction
count. A dead run keeps exactly that: one LRU entry, under a negative sentinel (block ids are
>= 0), holding the blocks in the order the block-by-block path would have queued them; eviction
takes them from its front, a run partly evicted keeps its place at the head of the LRU.
`register_lazy_keys` (and so `check`) expands every run into the entries it stands for, at its
place, which changes nothing later: no lookup can reach a dead key.
"""

from __future__ import annotations

from collections import OrderedDict

from sim.memory.block_state import BlockKey, BlockState


class DeadRun:
    """The blocks of one finished request's lazily keyed run, in LRU order (tail first)."""

    __slots__ = ("blocks", "keys", "start")

    def __init__(self, blocks: list[int], keys: list[BlockKey]) -> None:
        self.blocks = blocks  # block ids, the first evicted first
        self.keys = keys  # their content keys, same order
        self.start = 0  # blocks[:start] already evicted


class DeadRuns(BlockState):
    """LRU entries that stand for a run of blocks (a mix-in of BlockManager)."""

    def _park_dead(self, blocks: list[int], keys: list[BlockKey]) -> None:
        """Queue `blocks` (LRU order, keyed by `keys`; both lists now the run's) as one
        evictable run."""
        self._num_runs += 1
        self._run_extra += len(blocks) - 1
        self._evictable[-self._num_runs_made - 1] = DeadRun(blocks, keys)  # type: ignore
        self._num_runs_made += 1

    def _evict(self, n: int) -> list[int]:
        """Evict the `n` least recently freed cached blocks (there are), runs included, dropping
        the keys of single entries; the blocks in eviction order."""
        lru, cached, key_of = self._evictable, self._cached, self._key_of
        out: list[int] = []
        while n:
            b = next(iter(lru))  # the head, left in place while a run has blocks to give
            if b >= 0:
                del cached[lru.pop(b)]
                del key_of[b]
                out.append(b)
                n -= 1
                continue
            run: DeadRun = lru[b]  # type: ignore[assignment]
            start = run.start
            left = len(run.blocks) - start
            if n < left:  # the rest keeps its place at the head
                out += run.blocks[start:start + n]
                run.start = start + n
                self._run_extra -= n
                return out
            out += run.blocks[start:]
            n -= left
            del lru[b]
            self._num_runs -= 1
            self._run_extra -= left - 1
        return out

    def _evict_one(self) -> int:
        """`_evict(1)[0]`, for a decode crossing into a new block."""
        lru = self._evictable
        b = next(iter(lru))
        if b >= 0:
            del self._cached[lru.pop(b)]
            del self._key_of[b]
            return b
        run: DeadRun = lru[b]  # type: ignore[assignment]
        block = run.blocks[run.start]
        run.start += 1
        if run.start < len(run.blocks):
            self._run_extra -= 1
        else:
            del lru[b]
            self._num_runs -= 1
        return block

    @property
    def num_run_blocks(self) -> int:
        """Blocks parked in dead runs (free, cached, evictable)."""
        return self._num_runs + self._run_extra

    def expand_runs(self) -> None:
        """Replace every run by the single entries it stands for, registered, at its place."""
        if not self._num_runs:
            return
        lru, expanded = self._evictable, OrderedDict()
        for b, value in lru.items():
            if b >= 0:
                expanded[b] = value
                continue
            run: DeadRun = value  # type: ignore[assignment]
            blocks, keys = run.blocks[run.start:], run.keys[run.start:]
            self._cached.update(zip(keys, blocks))
            self._key_of.update(zip(blocks, keys))
            expanded.update(zip(blocks, keys))
        self._evictable = expanded
        self._num_runs = self._run_extra = 0
