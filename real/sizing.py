"""Does the model fit the device? Checked before anything is allocated (torch-free).

The real engine needs its weights, an activation reserve and at least one KV block (or the
explicit `kv_tokens` budget) in the memory it may use: on CUDA `gpu_memory_utilization` of the
GPU less what other processes hold, on CPU the host's physical memory. A model that cannot fit
is a ConfigError with the sizes (weights, KV per block and per max-length sequence, device
memory) when the config is checked or the executor is built, never an out-of-memory crash
halfway through loading.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sim.models.catalog import ModelSpec
from sim.util.errors import ConfigError

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}  # bytes per element of each engine dtype
GIB = float(2**30)  # bytes per GiB, for messages


def host_memory_bytes() -> int | None:
    """Physical memory of this machine in bytes (what a CPU engine can use), None if unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _gib(num_bytes: float) -> str:
    """`num_bytes` in GiB (MiB below 1 GiB), and exactly."""
    unit, scale = ("GiB", GIB) if num_bytes >= GIB else ("MiB", 2.0**20)
    return f"{num_bytes / scale:.2f} {unit} ({int(num_bytes):,} bytes)"


@dataclass(frozen=True)
class MemoryPlan:
    """What the real engine will allocate on its device, in bytes."""

    model: ModelSpec  # the model's shapes
    dtype: str  # engine dtype: fp32 | fp16 | bf16
    block_size: int  # tokens per KV block
    kv_tokens: int | None  # explicit KV budget in tokens; None: what the memory leaves
    reserve_bytes: int  # bytes kept for activations (vLLM's profiling batch on CUDA)

    @property
    def weights_bytes(self) -> int:
        """Bytes of all weights in the engine's dtype."""
        return self.model.num_params * DTYPE_BYTES[self.dtype]

    @property
    def kv_block_bytes(self) -> int:
        """Bytes of K and V of one block over all layers."""
        return int(self.model.kv_bytes_per_token(DTYPE_BYTES[self.dtype])) * self.block_size

    @property
    def kv_sequence_bytes(self) -> int:
        """Bytes of K and V of one max_position_embeddings-token sequence (whole blocks)."""
        blocks = -(-self.model.max_position_embeddings // self.block_size)
        return blocks * self.kv_block_bytes

    @property
    def kv_bytes(self) -> int:
        """KV bytes the engine needs at least: the explicit budget, else one block."""
        if self.kv_tokens is None:
            return self.kv_block_bytes
        return max(1, self.kv_tokens // self.block_size) * self.kv_block_bytes

    def sizes(self, device: str, usable_bytes: float) -> str:
        """The sizes, for an error message."""
        kv = (f"one block of {self.block_size} tokens" if self.kv_tokens is None
              else f"kv_tokens={self.kv_tokens}")
        return (f"weights {_gib(self.weights_bytes)} ({self.model.num_params:,} params in "
                f"{self.dtype}) + activation reserve {_gib(self.reserve_bytes)} + KV for {kv} "
                f"{_gib(self.kv_bytes)} > {_gib(max(usable_bytes, 0))} usable on {device}; "
                f"KV per block {_gib(self.kv_block_bytes)}, per max-length sequence "
                f"({self.model.max_position_embeddings} tokens) {_gib(self.kv_sequence_bytes)}")

    def check(self, device: str, usable_bytes: float | None, field: str = "cluster.model") -> None:
        """ConfigError with the sizes unless weights + reserve + KV fit in `usable_bytes`."""
        if usable_bytes is None:
            return  # memory unknown: nothing to check against
        fixed = self.weights_bytes + self.reserve_bytes
        if fixed + self.kv_block_bytes > usable_bytes:
            raise ConfigError(field, self.model.name, "does not fit the device: "
                              + self.sizes(device, usable_bytes))
        if fixed + self.kv_bytes > usable_bytes:
            raise ConfigError("cluster.real.kv_tokens", self.kv_tokens,
                              "the KV budget does not fit the device: "
                              + self.sizes(device, usable_bytes))
