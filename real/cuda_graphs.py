"""The decode iteration captured in CUDA graphs, one per batch-size bucket (as vLLM does).

A decode iteration of a few requests is a few hundred small kernels; launched one by one from
Python the host, not the GPU, sets its pace. Captured once per bucket (1, 2, 4, 8, then every 8
up to `max_batch`) after the weights and the KV cache exist, a replay launches them all at
once. A graph reads static buffers: token ids, positions, cache slots, block tables and KV
lengths of up to `max_batch` rows; a batch of n rows runs the smallest bucket b >= n, its rows
n..b-1 padding (slot -1: nothing written; length 0: nothing read). The paged kernels take the
block table as data, so one graph serves any context lengths. The greedy next tokens land in a
static output buffer; the next iteration's token ids are copied from it on the device.

`DecodeGraphs.run` needs the paged backend (`real/attn_paged.py`); the same buffers also run
eagerly (`capture=False`), which is how the CPU tests check everything but the capture itself.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np
import torch

from real.attention import BatchLayout
from real.attn_paged import PagedMetadata

log = logging.getLogger(__name__)


def capture_sizes(max_batch: int) -> list[int]:
    """Buckets of batch sizes with a graph: 1, 2, 4, 8, 16, 24, ... up to max_batch."""
    sizes = [b for b in (1, 2, 4) if b <= max_batch]
    sizes += list(range(8, max_batch + 1, 8))
    if max_batch not in sizes:
        sizes.append(max_batch)
    return sorted(set(sizes))


def capture_graph(forward: Callable[[], None], device: torch.device, pool: Any) -> Any:
    """A CUDA graph of `forward()` in memory pool `pool`, after one eager run on a side stream
    (compiles kernels, fills the allocator's caches)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        forward()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        forward()
    return graph


class DecodeGraphs:
    """Static buffers and one captured decode graph per bucket."""

    def __init__(self, model: Any, kv: list[tuple[torch.Tensor, torch.Tensor]], backend: Any,
                 device: torch.device, max_batch: int, max_blocks: int) -> None:
        self.model = model  # LlamaForCausalLM
        self.kv = kv  # the paged cache's K, V per layer
        self.backend = backend  # PagedBackend
        self.device = device  # where buffers and graphs live
        self.buckets = capture_sizes(max_batch)  # batch sizes with a graph
        b = max_batch
        max_blocks = -(-max_blocks // 16) * 16  # row stride a multiple of 16 (attn_paged.py)
        zeros = {"device": device, "dtype": torch.long}
        self.input_ids = torch.zeros(b, **zeros)  # token of each row
        self.positions = torch.zeros(b, **zeros)  # position of each row's token
        self.slots = torch.full((b,), -1, **zeros)  # cache slot of each row's token
        self.index = torch.arange(b, **zeros)  # row -> token (identity)
        self.tables = torch.zeros(b, max_blocks, device=device, dtype=torch.int32)  # blocks
        self.lens = torch.zeros(b, device=device, dtype=torch.int32)  # keys incl. the new one
        self.next_tokens = torch.zeros(b, **zeros)  # greedy tokens written by the graph
        self.graphs: dict[int, Any] = {}  # bucket -> torch.cuda.CUDAGraph

    @property
    def captured(self) -> bool:
        """Whether the graphs exist (`capture` ran)."""
        return bool(self.graphs)

    def bucket(self, n: int) -> int | None:
        """The smallest bucket holding n rows, or None when n exceeds the largest."""
        for b in self.buckets:
            if b >= n:
                return b
        return None

    def metadata(self, b: int) -> PagedMetadata:
        """The paged metadata of a b-row decode batch, over the static buffers."""
        return PagedMetadata(self.slots[:b], self.index[:b], self.tables[:b], self.lens[:b],
                             self.backend.num_splits(b), decode_only=True)

    def _forward(self, b: int) -> None:
        meta = self.metadata(b)
        hidden, residual = self.model(self.input_ids[:b], self.positions[:b], self.kv, meta,
                                      self.backend)
        self.next_tokens[:b].copy_(self.model.logits(hidden, residual).argmax(dim=-1))

    @torch.inference_mode()
    def capture(self) -> None:
        """Warm up and capture every bucket, largest first (smaller ones reuse its memory)."""
        self.lens.zero_()
        self.slots.fill_(-1)
        pool = torch.cuda.graph_pool_handle()
        for b in sorted(self.buckets, reverse=True):
            self.graphs[b] = self._capture_one(b, pool)
        torch.cuda.synchronize(self.device)
        log.info("captured %d decode graphs (batch %s)", len(self.graphs), self.buckets)

    def _capture_one(self, b: int, pool: Any) -> Any:
        return capture_graph(lambda: self._forward(b), self.device, pool)

    def _load(self, b: int, layout: BatchLayout, input_ids: torch.Tensor | np.ndarray) -> None:
        """Write the batch's rows (and padding up to b) into the static buffers: one pinned
        host array (position, slot, length, token id, block table per row), one copy."""
        n, bs = len(layout.num_new), layout.block_size
        ctx = layout.num_context.astype(np.int64)
        width = int(-(-(int(ctx.max()) + 1) // bs)) if n else 1
        rows = np.zeros((b, 4 + width), dtype=np.int64)
        rows[:, 1] = -1
        rows[:n, 0] = ctx
        rows[:n, 2] = ctx + 1
        for i, (table, c) in enumerate(zip(layout.block_tables, ctx.tolist())):
            used = table[: c // bs + 1]
            rows[i, 1] = int(used[-1]) * bs + c % bs
            rows[i, 4: 4 + len(used)] = used
        host_ids = isinstance(input_ids, np.ndarray)
        if host_ids:
            rows[:n, 3] = input_ids
        host = torch.from_numpy(rows)
        if self.device.type == "cuda":
            host = host.pin_memory()
        dev = host.to(self.device, non_blocking=True)
        self.positions[:b].copy_(dev[:, 0])
        self.slots[:b].copy_(dev[:, 1])
        self.lens[:b].copy_(dev[:, 2])
        self.tables[:n, :width].copy_(dev[:n, 4:])
        self.input_ids[:n].copy_(dev[:n, 3] if host_ids else input_ids)

    @torch.inference_mode()
    def run(self, layout: BatchLayout, input_ids: torch.Tensor | np.ndarray,
            capture: bool = True) -> torch.Tensor:
        """Greedy next tokens [n] (on the device) of a decode batch of n <= max_batch rows:
        the bucket's graph replayed (or, with `capture=False`, the same buffers run eagerly)."""
        n = len(layout.num_new)
        b = self.bucket(n)
        if b is None:
            raise ValueError(f"{n} rows exceed the largest captured batch {self.buckets[-1]}")
        self._load(b, layout, input_ids)
        if capture:
            self.graphs[b].replay()
        else:
            self._forward(b)
        return self.next_tokens[:n].clone()
