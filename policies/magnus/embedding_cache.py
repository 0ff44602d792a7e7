"""An on-disk embedding cache keyed by (model name, text hash), so sweeps never re-embed.

One `.npz` file per model name in the cache directory holds the 64-bit BLAKE2b hashes of the
texts and their vectors. Saving merges with what is on disk (another run may have added
entries) and replaces the file atomically.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from sim.util.errors import check_positive

from policies.magnus.embedding import Embedder

CACHE_DIR_ENV = "SERVESIM_CACHE_DIR"  # overrides the default cache root


def default_cache_dir() -> Path:
    """`$SERVESIM_CACHE_DIR/embeddings`, else `~/.cache/servesim/embeddings`."""
    root = os.environ.get(CACHE_DIR_ENV)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "servesim"
    return base / "embeddings"


def text_key(text: str) -> int:
    """64-bit hash of a text (the cache key within one model's file)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


class EmbeddingCache:
    """Vectors of one model, in memory, backed by `<directory>/<model slug>.npz`."""

    def __init__(self, directory: str | Path, model_name: str) -> None:
        slug = re.sub(r"[^A-Za-z0-9_.@-]+", "_", model_name)
        self.path = Path(directory).expanduser() / f"{slug}.npz"  # the model's cache file
        self._vectors: dict[int, np.ndarray] = self._read()  # text key -> vector
        self._pending: set[int] = set()  # keys added since the last save

    def _read(self) -> dict[int, np.ndarray]:
        if not self.path.is_file():
            return {}
        try:  # arrays only: an object (pickled) array raises ValueError instead of loading
            with np.load(self.path, allow_pickle=False) as data:
                keys, vectors = data["keys"], data["vectors"]
        except (OSError, ValueError, KeyError, EOFError, TypeError):  # corrupt: rebuilt
            return {}
        if keys.ndim != 1 or vectors.ndim != 2 or len(keys) != len(vectors):
            return {}  # not this cache's layout: rebuilt
        return {int(k): v for k, v in zip(keys, vectors)}

    def __len__(self) -> int:
        return len(self._vectors)

    @property
    def num_pending(self) -> int:
        """Entries not yet saved."""
        return len(self._pending)

    def get(self, key: int) -> np.ndarray | None:
        return self._vectors.get(key)

    def put(self, key: int, vector: np.ndarray) -> None:
        self._vectors[key] = np.asarray(vector, dtype=np.float32)
        self._pending.add(key)

    def save(self) -> None:
        """Write every entry (merged with the file's current content) atomically."""
        if not self._pending:
            return
        merged = self._read()
        merged.update(self._vectors)
        self._vectors = merged
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.fromiter(merged.keys(), dtype=np.uint64, count=len(merged))
        vectors = np.stack(list(merged.values())).astype(np.float32)
        tmp = self.path.with_name(f"{self.path.stem}.{os.getpid()}.tmp.npz")
        np.savez(tmp, keys=keys, vectors=vectors)
        os.replace(tmp, self.path)
        self._pending.clear()


class CachedEmbedder:
    """An `Embedder` that asks `inner` only for texts missing from `cache`."""

    def __init__(self, inner: Embedder, cache: EmbeddingCache, flush_every: int = 64) -> None:
        check_positive("flush_every", flush_every)
        self.inner = inner  # the model that computes missing vectors
        self.cache = cache  # vectors of `inner`'s model
        self.flush_every = flush_every  # new vectors that trigger a save
        self.num_embedded = 0  # texts sent to `inner` so far

    @property
    def name(self) -> str:
        return self.inner.name

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        keys = [text_key(t) for t in texts]
        missing: dict[int, str] = {}
        for key, text in zip(keys, texts):
            if self.cache.get(key) is None:
                missing.setdefault(key, text)
        if missing:
            vectors = self.inner.embed(list(missing.values()))
            self.num_embedded += len(missing)
            for key, vector in zip(missing, vectors):
                self.cache.put(key, vector)
            if self.cache.num_pending >= self.flush_every or len(missing) > 1:
                self.cache.save()
        if not keys:
            return self.inner.embed([])
        return np.stack([self.cache.get(k) for k in keys])  # type: ignore[misc]

    def flush(self) -> None:
        """Save vectors not yet on disk."""
        self.cache.save()
