"""One forward pass over a batch of per-request chunks: inputs, KV slots, attention metadata,
the model, and greedy sampling.

Host-side work (token ids, positions, block tables) is done in numpy before the layer loop and
copied to the device asynchronously. An iteration in which every request decodes one token
replays a captured CUDA graph when the engine has them (`real/cuda_graphs.py`), as does an
iteration with prefill chunks of up to the largest token bucket (`real/mixed_graphs.py`); any
other runs eagerly. Sampled tokens stay on the device: the next decode iteration feeds them back directly,
and `commit` copies them to the host once per Step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from real.attention import AttentionBackend, BatchLayout, to_device
from real.cuda_graphs import DecodeGraphs
from real.kv_cache import PagedKVCache
from real.mixed_graphs import Key, MixedGraphs
from real.model import LlamaForCausalLM
from real.tokens import TokenStore


class ModelRunner:
    def __init__(self, model: LlamaForCausalLM, cache: PagedKVCache, tokens: TokenStore,
                 backend: AttentionBackend, device: torch.device,
                 graphs: DecodeGraphs | None = None, mixed: MixedGraphs | None = None) -> None:
        self.model = model  # the decoder and lm_head
        self.cache = cache  # paged KV blocks and their tables
        self.tokens = tokens  # known token ids per request
        self.backend = backend  # attention kernel (real.attention)
        self.device = device  # where tensors live
        self.graphs = graphs  # captured decode graphs (CUDA, paged backend), if any
        self.mixed = mixed  # captured graphs of iterations with prefill chunks, if any
        self.graph_replay = True  # False: run the graphs' buffers eagerly (CPU tests)
        # sampled tokens not yet on the host: (request ids, positions, device tensor)
        self._pending: list[tuple[tuple[int, ...], np.ndarray, torch.Tensor]] = []

    def _layout(self, request_ids: Sequence[int], num_new: np.ndarray,
                num_context: np.ndarray) -> BatchLayout:
        """Grow the KV of the batch (may raise KVCacheOOM) and describe it."""
        tables = self.cache.append_all(tuple(request_ids), num_new)
        return BatchLayout(num_new, num_context, tables, self.cache.block_size)

    def _forward(self, layout: BatchLayout, request_ids: Sequence[int],
                 input_ids: torch.Tensor | np.ndarray | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden, residual) of every new token, run eagerly."""
        num_new, num_context = layout.num_new, layout.num_context
        if input_ids is None:
            input_ids = self.tokens.get_batch(request_ids, num_context, num_context + num_new)
        if isinstance(input_ids, np.ndarray):
            input_ids = to_device(input_ids, self.device)
        total = int(num_new.sum())
        positions = np.arange(total) - np.repeat(layout.starts - num_context, num_new)
        meta = self.backend.build(layout, self.device)
        return self.model(input_ids, to_device(positions, self.device), self.cache.kv, meta,
                          self.backend)

    def _graphable(self, num_new: np.ndarray) -> bool:
        """A pure-decode batch that fits a captured bucket (before the capture, e.g. during the
        warm-up, every iteration runs eagerly)."""
        return (self.graphs is not None and (self.graphs.captured or not self.graph_replay)
                and bool(np.all(num_new == 1)) and self.graphs.bucket(len(num_new)) is not None)

    def _mixed_key(self, num_new: np.ndarray) -> Key | None:
        """The mixed graph of an iteration that no decode graph serves, None: eager."""
        if self.mixed is None or not (self.mixed.captured or not self.graph_replay):
            return None
        return self.mixed.key(num_new)

    def step(self, request_ids: Sequence[int], num_new: np.ndarray, num_context: np.ndarray,
             samples: np.ndarray, prev_tokens: torch.Tensor | None = None) -> torch.Tensor | None:
        """One iteration; returns the greedy tokens of the sampling rows (on the device).
        `prev_tokens` feeds back the previous iteration's samples (every chunk one token)."""
        layout = self._layout(request_ids, num_new, num_context)
        if self._graphable(num_new) and samples.all():
            ids = prev_tokens if prev_tokens is not None else self.tokens.get_batch(
                request_ids, num_context, num_context + num_new)
            next_tokens = self.graphs.run(layout, ids, self.graph_replay)  # type: ignore[union-attr]
        elif (key := self._mixed_key(num_new)) is not None:
            ids = prev_tokens if prev_tokens is not None else self.tokens.get_batch(
                request_ids, num_context, num_context + num_new)
            next_tokens = self.mixed.run(key, layout, ids, samples,  # type: ignore[union-attr]
                                         self.graph_replay)
            if not samples.any():
                return None
        else:
            hidden, residual = self._forward(layout, request_ids, prev_tokens)
            if not samples.any():
                return None
            rows = np.cumsum(num_new) - 1
            if not (len(rows) == len(hidden) and samples.all()):
                index = to_device(rows[samples], self.device)
                hidden, residual = hidden.index_select(0, index), residual.index_select(0, index)
            next_tokens = self.model.logits(hidden, residual).argmax(dim=-1)
        sampled = tuple(r for r, s in zip(request_ids, samples.tolist()) if s)
        self._pending.append((sampled, (num_context + num_new)[samples], next_tokens))
        return next_tokens

    def logits(self, request_ids: Sequence[int], num_new: Sequence[int],
               num_context: Sequence[int], input_ids: np.ndarray | None = None) -> torch.Tensor:
        """Logits [tokens, vocab] of every new token (tests and checks; nothing is sampled)."""
        layout = self._layout(request_ids, np.asarray(num_new, dtype=np.int64),
                              np.asarray(num_context, dtype=np.int64))
        hidden, residual = self._forward(layout, request_ids, input_ids)
        return self.model.logits(hidden, residual)

    def commit(self) -> None:
        """Copy pending samples to the host (one device sync) and record them per request."""
        if not self._pending:
            return
        host = torch.cat([t for _, _, t in self._pending]).cpu().numpy()
        runs: dict[int, tuple[int, list[int]]] = {}  # request -> (first position, tokens)
        offset = 0
        for rids, positions, _ in self._pending:
            for rid, pos, tok in zip(rids, positions.tolist(), host[offset: offset + len(rids)]):
                start, toks = runs.get(rid, (pos, []))
                if pos != start + len(toks):
                    self.tokens.set_sampled(rid, start, np.array(toks))
                    start, toks = pos, []
                toks.append(int(tok))
                runs[rid] = (start, toks)
            offset += len(rids)
        for rid, (start, toks) in runs.items():
            self.tokens.set_sampled(rid, start, np.array(toks, dtype=np.int64))
        self._pending.clear()

    def discard_pending(self) -> None:
        self._pending.clear()
