"""What every paged KV-cache manager shares: `num_blocks` blocks of `block_size` tokens, the
watermark kept free on admission, and the tokens each request's blocks hold.

`BlockState` (block ids, sim/memory/block_state.py) and `CountingBlockManager` (counts only,
sim/memory/block_counter.py) derive from it, so both check their geometry and size requests the
same way.
"""

from __future__ import annotations

from sim.util.errors import ConfigError, check_positive


class BlockPool:
    """The geometry of a block pool and each request's tokens in it."""

    private_keys_only = False  # True where every key is private to its request (PrivateBlocks)

    def __init__(self, num_blocks: int, block_size: int = 16, watermark: float = 0.0) -> None:
        check_positive("num_blocks", num_blocks)
        check_positive("block_size", block_size)
        if not 0.0 <= watermark < 1.0:
            raise ConfigError("watermark", watermark, "must be in [0, 1)")
        self.block_size = block_size  # tokens per block
        self.num_total_blocks = num_blocks  # blocks in the cache
        self.watermark_blocks = int(watermark * num_blocks)  # blocks kept free on admission
        self._tokens: dict[int, int] = {}  # request id -> tokens its blocks hold

    @property
    def capacity_tokens(self) -> int:
        return self.num_total_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    def num_tokens(self, request_id: int) -> int:
        return self._tokens.get(request_id, 0)
