"""A paged KV-cache block manager (vLLM's), shared by simulated policies and the real engine.

KV memory is `num_blocks` blocks of `block_size` tokens. Each request owns a block table: the
blocks holding its tokens in order. Blocks carry reference counts so a later prefix cache can
share them. `allocated + free == total` holds after every call.
"""

from __future__ import annotations

from collections import deque

from sim.errors import ConfigError, check_positive


class OutOfBlocks(RuntimeError):
    """An allocation asked for more blocks than are free."""


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int = 16, watermark: float = 0.0) -> None:
        check_positive("num_blocks", num_blocks)
        check_positive("block_size", block_size)
        if not 0.0 <= watermark < 1.0:
            raise ConfigError("watermark", watermark, "must be in [0, 1)")
        self.block_size = block_size  # tokens per block
        self.num_total_blocks = num_blocks  # blocks in the cache
        self.watermark_blocks = int(watermark * num_blocks)  # blocks kept free on admission
        self._free: deque[int] = deque(range(num_blocks))  # free block ids, lowest first
        self._ref = [0] * num_blocks  # references per block
        self._tables: dict[int, list[int]] = {}  # request id -> block ids
        self._tokens: dict[int, int] = {}  # request id -> tokens its blocks hold

    # ---- counters ---------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_total_blocks - len(self._free)

    @property
    def capacity_tokens(self) -> int:
        return self.num_total_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    def has(self, request_id: int) -> bool:
        return request_id in self._tables

    def num_tokens(self, request_id: int) -> int:
        return self._tokens.get(request_id, 0)

    def block_table(self, request_id: int) -> list[int]:
        return list(self._tables.get(request_id, ()))

    # ---- allocation -------------------------------------------------------------------
    def can_allocate(self, num_tokens: int) -> bool:
        """Whether a new request of `num_tokens` fits, keeping the watermark free."""
        return self.blocks_for(num_tokens) <= len(self._free) - self.watermark_blocks

    def allocate(self, request_id: int, num_tokens: int) -> list[int]:
        """Give a new request blocks for `num_tokens` tokens; returns its block table."""
        if request_id in self._tables:
            raise ValueError(f"request {request_id} already holds blocks")
        self._tables[request_id] = []
        self._tokens[request_id] = 0
        self.append(request_id, num_tokens)
        return self.block_table(request_id)

    def blocks_to_append(self, request_id: int, num_new_tokens: int) -> int:
        """Extra blocks a request needs to grow by `num_new_tokens` tokens."""
        have = len(self._tables.get(request_id, ()))
        return max(0, self.blocks_for(self._tokens.get(request_id, 0) + num_new_tokens) - have)

    def can_append(self, request_id: int, num_new_tokens: int) -> bool:
        return self.blocks_to_append(request_id, num_new_tokens) <= len(self._free)

    def append(self, request_id: int, num_new_tokens: int) -> list[int]:
        """Grow a request by `num_new_tokens` tokens; returns the blocks newly given to it."""
        need = self.blocks_to_append(request_id, num_new_tokens)
        if need > len(self._free):
            raise OutOfBlocks(f"request {request_id} needs {need} blocks, "
                              f"{len(self._free)} free")
        new = [self._free.popleft() for _ in range(need)]
        for b in new:
            self._ref[b] = 1
        self._tables[request_id].extend(new)
        self._tokens[request_id] += num_new_tokens
        return new

    def free(self, request_id: int) -> int:
        """Release a request's blocks (finished or preempted); returns how many became free."""
        table = self._tables.pop(request_id, [])
        self._tokens.pop(request_id, None)
        freed = 0
        for b in reversed(table):
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._free.append(b)
                freed += 1
        return freed

    def check(self) -> None:
        """Assert the accounting invariant (for tests): allocated + free == total."""
        owned = {b for t in self._tables.values() for b in t}
        assert len(owned) + len(self._free) == self.num_total_blocks, "blocks leaked"
        assert not owned & set(self._free), "a block is both owned and free"
        for rid, table in self._tables.items():
            assert len(table) == self.blocks_for(self._tokens[rid]), f"table of {rid} off"
