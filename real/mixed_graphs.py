"""Iterations with prefill chunks captured in CUDA graphs, one per token-count bucket.

`real/cuda_graphs.py` replays decode-only iterations; any other iteration (prefill chunks, with or
without decode rows beside them) would launch a few hundred kernels from Python, one by one, and
run at the host CPU's pace, which moves with the machine. vLLM captures these too (its "full"
CUDA graphs for mixed batches); so does this engine: one graph per token bucket of
`sim/cost/graph_plan.py` (16, 32, ... up to `max_tokens`), whose static buffers hold the bucket's tokens
(padding: token 0, cache slot -1, nothing written), up to `max_decodes` decode rows (padding: length
0, nothing read, output to a scratch row past the tokens), up to `max_chunks` prefill chunks and
their tiles (padding: a chunk of 0 queries) and the rows that sample. The paged kernels read all
of it as data, so one graph serves every schedule of its size.

The split-KV plan of the decode rows stays the eager engine's (`choose_num_splits` of the decode
count): a bucket has a second graph, for batches of few decodes, captured with the widest split
grid and told the splits in use through a device scalar (`active_splits`).
The greedy tokens of the sampling rows land in a static buffer. `capture=False` runs the same
buffers eagerly: the CPU tests check everything but the capture itself.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from real.attention import BatchLayout
from real.attn_paged import TABLE_COLUMNS, PagedMetadata, block_table_rows
from real.cuda_graphs import capture_graph
from real.kernels import ops
from sim.cost.graph_plan import max_chunks, max_decodes, token_bucket, token_buckets

log = logging.getLogger(__name__)

Key = tuple[int, bool]  # (token bucket, few decodes: the split-KV variant)


class MixedGraphs:
    """Static buffers and the captured graphs of iterations with prefill chunks."""

    def __init__(self, model: Any, kv: list[tuple[torch.Tensor, torch.Tensor]], backend: Any,
                 device: torch.device, max_tokens: int, max_rows: int, max_blocks: int) -> None:
        self.model = model  # LlamaForCausalLM
        self.kv = kv  # the paged cache's K, V per layer
        self.backend = backend  # PagedBackend
        self.device = device  # where buffers and graphs live
        self.max_tokens = max_tokens  # tokens: the largest bucket
        self.max_rows = max_rows  # decode rows a bucket holds at most
        self.buckets = token_buckets(max_tokens)  # token counts with a graph
        self.few = self._few_decodes()  # decode rows that still split their keys
        self.wide_splits = backend.num_splits(1)  # the split grid of the few-decodes graphs
        width = -(-max_blocks // TABLE_COLUMNS) * TABLE_COLUMNS
        chunks, rows = max_chunks(max_tokens) + 1, max_decodes(max_tokens, max_rows)
        tiles = -(-max_tokens // backend.block_m) + chunks
        long, i32 = {"device": device, "dtype": torch.long}, {"device": device,
                                                               "dtype": torch.int32}
        self.input_ids = torch.zeros(max_tokens, **long)  # token ids
        self.positions = torch.zeros(max_tokens, **long)  # position of each token
        self.slots = torch.full((max_tokens,), -1, **long)  # cache slot of each token
        self.dec_index = torch.zeros(rows, **long)  # decode row -> its token
        self.dec_tables = torch.zeros(rows, width, **i32)  # decode rows' blocks
        self.dec_lens = torch.zeros(rows, **i32)  # keys incl. the new one
        self.active = torch.ones(1, **i32)  # splits in use (few-decodes graphs)
        self.pre_tables = torch.zeros(chunks, width, **i32)  # chunks' blocks
        self.pre_start = torch.zeros(chunks, **i32)  # first query of each chunk
        self.pre_len = torch.zeros(chunks, **i32)  # queries of each chunk
        self.pre_ctx = torch.zeros(chunks, **i32)  # cached keys before each chunk
        self.tile_row = torch.zeros(tiles, **i32)  # chunk of each prefill tile
        self.tile_off = torch.zeros(tiles, **i32)  # tile's first query in its chunk
        self.sample_rows = torch.zeros(min(max_tokens, rows + chunks), **long)  # rows sampled
        self.next_tokens = torch.zeros_like(self.sample_rows)  # greedy tokens
        self.graphs: dict[Key, Any] = {}  # key -> torch.cuda.CUDAGraph
        self._inputs = {"positions": self.positions, "slots": self.slots, "ids": self.input_ids,
                        "dec_index": self.dec_index, "dec_lens": self.dec_lens,
                        "pre_start": self.pre_start, "pre_len": self.pre_len,
                        "pre_ctx": self.pre_ctx, "tile_row": self.tile_row,
                        "tile_off": self.tile_off, "sample_rows": self.sample_rows,
                        "active": self.active}  # _load's host arrays -> the buffers they fill

    def _few_decodes(self) -> int:
        """The most decode rows whose split plan has more than one split (0: none)."""
        few, most = 0, max_decodes(self.max_tokens, self.max_rows)
        while few < most and self.backend.num_splits(few + 1) > 1:
            few += 1
        return few

    @property
    def captured(self) -> bool:
        return bool(self.graphs)

    def keys(self) -> list[Key]:
        """Every graph, largest bucket first (smaller ones reuse its memory)."""
        variants = (False, True) if self.few else (False,)
        return [(b, few) for b in reversed(self.buckets) for few in variants]

    def key(self, num_new: np.ndarray) -> Key | None:
        """The graph of an iteration with these chunk sizes, None when it runs eagerly."""
        bucket = token_bucket(int(num_new.sum()), self.max_tokens)
        if not bucket:
            return None
        decodes = int(np.count_nonzero(num_new == 1))
        if (len(num_new) - decodes > max_chunks(bucket)
                or decodes > max_decodes(bucket, self.max_rows)):
            return None
        return bucket, 0 < decodes <= self.few

    def sizes(self, key: Key) -> tuple[int, int, int, int]:
        """(tokens, decode rows, chunk rows incl. one padding row, tiles) of a graph."""
        bucket, few = key
        chunks = max_chunks(bucket) + 1
        decodes = self.few if few else max_decodes(bucket, self.max_rows)
        return bucket, decodes, chunks, -(-bucket // self.backend.block_m) + chunks

    def metadata(self, key: Key) -> PagedMetadata:
        """The paged metadata of the graph `key`, over the static buffers."""
        t, d, c, tiles = self.sizes(key)
        wide = key[1] and self.wide_splits > 1
        return PagedMetadata(
            self.slots[:t], self.dec_index[:d], self.dec_tables[:d], self.dec_lens[:d],
            self.wide_splits if wide else 1, prefill_tables=self.pre_tables[:c],
            prefill_start=self.pre_start[:c], prefill_len=self.pre_len[:c],
            prefill_context=self.pre_ctx[:c],
            prefill_tiles=ops.PrefillTiles(self.tile_row[:tiles], self.tile_off[:tiles],
                                           self.backend.block_m),
            active_splits=self.active if wide else None, scratch_row=True)

    def _forward(self, key: Key) -> None:
        t = key[0]
        hidden, residual = self.model(self.input_ids[:t], self.positions[:t], self.kv,
                                      self.metadata(key), self.backend)
        rows = self.sample_rows[: min(t, len(self.sample_rows))]
        logits = self.model.logits(hidden.index_select(0, rows), residual.index_select(0, rows))
        self.next_tokens[: len(rows)].copy_(logits.argmax(dim=-1))

    @torch.inference_mode()
    def capture(self) -> None:
        """Warm up and capture every graph, largest first, into one memory pool."""
        pool = torch.cuda.graph_pool_handle()
        for key in self.keys():
            self._empty(key)
            self.graphs[key] = capture_graph(lambda k=key: self._forward(k), self.device, pool)
        torch.cuda.synchronize(self.device)
        log.info("captured %d mixed graphs (tokens %s)", len(self.graphs), self.buckets)

    def _empty(self, key: Key) -> None:
        """Every row of the graph padding: nothing read, nothing written."""
        t, d, c, tiles = self.sizes(key)
        self.slots[:t].fill_(-1)
        self.dec_index[:d].fill_(t)
        self.dec_lens[:d].zero_()
        self.pre_len[:c].zero_()
        self.pre_ctx[:c].zero_()
        self.tile_row[:tiles].fill_(c - 1)
        self.tile_off[:tiles].zero_()
        self.active.fill_(1)

    def _load(self, key: Key, layout: BatchLayout, input_ids: torch.Tensor | np.ndarray,
              samples: np.ndarray) -> int:
        """Write the iteration into the graph's buffers, padding the rest: one pinned host
        array, one copy to the device, then a copy into each buffer. Returns rows sampled."""
        t, d, c, tiles = self.sizes(key)
        n, ctx = layout.num_new, layout.num_context
        total, starts = int(n.sum()), layout.starts
        dec, pre = np.flatnonzero(n == 1), np.flatnonzero(n > 1)
        vec = {name: np.full(size, fill, dtype=np.int64) for name, size, fill in (
            ("positions", t, 0), ("slots", t, -1), ("ids", t, 0), ("dec_index", d, t),
            ("dec_lens", d, 0), ("pre_start", c, 0), ("pre_len", c, 0), ("pre_ctx", c, 0),
            ("tile_row", tiles, c - 1), ("tile_off", tiles, 0),
            ("sample_rows", min(t, len(self.sample_rows)), 0), ("active", 1, 1))}
        vec["positions"][:total] = np.arange(total) - np.repeat(starts - ctx, n)
        if total:
            vec["slots"][:total] = np.concatenate([layout.slots(i, int(a), int(a + b))
                                                   for i, (b, a) in enumerate(zip(n, ctx))])
        if isinstance(input_ids, np.ndarray):
            vec["ids"][:total] = input_ids
        vec["dec_index"][: len(dec)] = starts[dec]
        vec["dec_lens"][: len(dec)] = layout.kv_lens[dec]
        for name, values in (("pre_start", starts[pre]), ("pre_len", n[pre]),
                             ("pre_ctx", ctx[pre])):
            vec[name][: len(pre)] = values
        rows, offsets = ops.prefill_tiles(n[pre], self.backend.block_m)
        vec["tile_row"][: len(rows)], vec["tile_off"][: len(rows)] = rows, offsets
        sampled = (starts + n - 1)[samples.astype(bool)]
        vec["sample_rows"][: len(sampled)] = sampled
        if key[1]:
            vec["active"][0] = self.backend.num_splits(len(dec))
        tables = [self._tables(layout, rows) for rows in (dec, pre)]
        self._copy(vec, tables, t, input_ids, total)
        return len(sampled)

    @staticmethod
    def _tables(layout: BatchLayout, rows: np.ndarray) -> np.ndarray:
        """int64 block tables of the rows' keys, as the eager path builds them."""
        bs = layout.block_size
        width = int(-(-layout.kv_lens[rows].max() // bs)) if len(rows) else 0
        return block_table_rows(layout, rows, width).astype(np.int64)

    def _copy(self, vec: dict[str, np.ndarray], tables: list[np.ndarray], t: int,
              input_ids: torch.Tensor | np.ndarray, total: int) -> None:
        parts = list(vec.values()) + [a.ravel() for a in tables]
        host = torch.from_numpy(np.concatenate(parts))
        if self.device.type == "cuda":
            host = host.pin_memory()
        dev = host.to(self.device, non_blocking=True)
        offset = 0
        for name, values in vec.items():
            if name != "ids" or isinstance(input_ids, np.ndarray):
                self._inputs[name][: len(values)].copy_(dev[offset: offset + len(values)])
            offset += len(values)
        if not isinstance(input_ids, np.ndarray):
            self.input_ids[:total].copy_(input_ids)
            self.input_ids[total:t].zero_()
        for table, dest in zip(tables, (self.dec_tables, self.pre_tables)):
            rows, width = table.shape
            if rows and width:
                dest[:rows, :width].copy_(dev[offset: offset + table.size].view(rows, width))
            offset += table.size

    @torch.inference_mode()
    def run(self, key: Key, layout: BatchLayout, input_ids: torch.Tensor | np.ndarray,
            samples: np.ndarray, capture: bool = True) -> torch.Tensor:
        """Greedy next tokens (on the device) of the sampling rows of an iteration whose
        graph is `key`: replayed (or, with `capture=False`, its buffers run eagerly)."""
        num_sampled = self._load(key, layout, input_ids, samples)
        if capture:
            self.graphs[key].replay()
        else:
            self._forward(key)
        return self.next_tokens[:num_sampled].clone()
