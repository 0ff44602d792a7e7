"""A paged KV cache: preallocated K and V blocks per layer, accounted by the simulator's own
`sim.memory.block_manager.BlockManager` (vLLM's block tables).

Each layer holds K and V tensors [num_blocks, block_size, kv_heads, head_dim]. A request grows
block by block; an iteration's growth is checked for the whole batch before anything is
allocated, so running out raises `KVCacheOOM` and leaves every table as it was.
"""

from __future__ import annotations

import numpy as np
import torch

from sim.memory.block_manager import BlockManager
from sim.util.errors import ConfigError


class KVCacheOOM(RuntimeError):
    """An iteration needs more KV blocks than are free."""

    def __init__(self, num_needed_blocks: int, num_free_blocks: int) -> None:
        self.num_needed_blocks = num_needed_blocks  # blocks the iteration needs
        self.num_free_blocks = num_free_blocks  # blocks free when it asked
        super().__init__(f"KV cache out of memory: {num_needed_blocks} blocks needed, "
                         f"{num_free_blocks} free")


def kv_bytes_per_block(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int,
                       dtype: torch.dtype) -> int:
    """Bytes of K and V of one block over all layers."""
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * block_size * num_kv_heads * head_dim * elem


class PagedKVCache:
    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device | str) -> None:
        if num_blocks < 1:
            raise ConfigError("kv_tokens", num_blocks * block_size,
                              f"leaves no KV block of {block_size} tokens")
        self.blocks = BlockManager(num_blocks, block_size)  # block tables and free list
        self.block_size = block_size  # tokens per block
        self.request_ids: set[int] = set()  # requests holding blocks
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        # zero-filled: masked padding keys must hold finite values (0 * NaN would poison sums)
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = [
            (torch.zeros(shape, dtype=dtype, device=device),
             torch.zeros(shape, dtype=dtype, device=device)) for _ in range(num_layers)]

    @property
    def capacity_tokens(self) -> int:
        return self.blocks.capacity_tokens

    def num_tokens(self, request_id: int) -> int:
        """Tokens whose KV the request holds."""
        return self.blocks.num_tokens(request_id)

    def has(self, request_id: int) -> bool:
        return self.blocks.has(request_id)

    def block_table(self, request_id: int) -> np.ndarray:
        return np.asarray(self.blocks.block_table(request_id), dtype=np.int64)

    def blocks_needed(self, request_ids: tuple[int, ...], num_new: np.ndarray) -> int:
        """Blocks the batch needs to grow each request by its new tokens."""
        return sum(self.blocks.blocks_to_append(r, int(n)) for r, n in zip(request_ids, num_new))

    def append_all(self, request_ids: tuple[int, ...], num_new: np.ndarray) -> list[np.ndarray]:
        """Grow every request by its new tokens (all or nothing); returns the block tables."""
        need = self.blocks_needed(request_ids, num_new)
        if need > self.blocks.num_free_blocks:
            raise KVCacheOOM(need, self.blocks.num_free_blocks)
        tables = []
        for rid, n in zip(request_ids, num_new):
            if not self.blocks.has(rid):
                self.blocks.allocate(rid, 0)
                self.request_ids.add(rid)
            self.blocks.append(rid, int(n))
            tables.append(self.block_table(rid))
        return tables

    def free(self, request_id: int) -> int:
        """Drop a request's KV; returns the blocks freed."""
        self.request_ids.discard(request_id)
        return self.blocks.free(request_id)

    def reset(self) -> None:
        """Drop every request's KV (the tensors keep their memory)."""
        for rid in list(self.request_ids):
            self.free(rid)

    def check(self) -> None:
        """Assert the block accounting invariant (allocated + free == total)."""
        self.blocks.check()
