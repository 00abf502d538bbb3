"""Tests of the bundled MiniLM embedder's two backends: the ONNX Runtime graph gives the torch model's vectors, is exported once and cached, and a bad export is refused."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from agentgym.memory import embeddings
from agentgym.memory.embeddings import MODEL_NAME, OnnxEmbedder, SentenceTransformerEmbedder, default_embedder

pytestmark = pytest.mark.slow  # loads the real model and exports it (~10 s on two cores)

TEXTS = [
    "fix the failing test",
    "Hello, world!",
    "",
    "a text far longer than the model's 256-token window " * 60,
    "ünïcödé — and emoji 🤖 survive tokenisation",
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    return tmp_path


def test_onnx_backend_gives_the_torch_vectors_and_is_exported_once(cache):
    onnx = default_embedder(num_threads=1)
    torch_backend = default_embedder(num_threads=1, backend="torch")
    assert isinstance(onnx, OnnxEmbedder) and isinstance(torch_backend, SentenceTransformerEmbedder)
    assert onnx.name == torch_backend.name == MODEL_NAME and onnx.dim == 384
    a, b = onnx.embed(TEXTS), torch_backend.embed(TEXTS)
    assert a.shape == (len(TEXTS), 384) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-5)
    assert (a * b).sum(axis=1).min() > 0.9999
    # order and batching do not change a text's vector (the batch pads to its longest text)
    assert np.allclose(onnx.embed(TEXTS[::-1])[::-1], a, atol=1e-5)
    assert np.allclose(np.vstack([onnx.embed([t]) for t in TEXTS]), a, atol=1e-5)
    assert onnx.embed([]).shape == (0, 384)
    [graph] = (cache / "embeddings").glob("*.onnx")
    mtime = graph.stat().st_mtime_ns
    again = default_embedder(num_threads=1)  # the cached graph, not a new export
    assert isinstance(again, OnnxEmbedder) and graph.stat().st_mtime_ns == mtime
    assert list((cache / "embeddings").iterdir()) == [graph]  # no temporary file left


def test_an_export_that_disagrees_with_torch_is_refused(cache, monkeypatch):
    real_export = embeddings.export_onnx

    def export_with_other_weights(model, path):
        import torch

        with torch.no_grad():  # a graph of different weights: what a broken exporter would give
            model[0].auto_model.embeddings.word_embeddings.weight.mul_(-1)
        try:
            real_export(model, path)
        finally:
            with torch.no_grad():
                model[0].auto_model.embeddings.word_embeddings.weight.mul_(-1)

    monkeypatch.setattr(embeddings, "export_onnx", export_with_other_weights)
    fallback = default_embedder(num_threads=1)
    assert isinstance(fallback, SentenceTransformerEmbedder)  # auto: the torch backend instead
    assert not list((cache / "embeddings").glob("*.onnx"))  # the bad graph is not kept
    with pytest.raises(RuntimeError, match="disagrees"):
        default_embedder(num_threads=1, backend="onnx")


def test_bad_backend_or_device_is_a_clear_error():
    with pytest.raises(ValueError, match="backend"):
        default_embedder(backend="tensorrt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="CPU only"):
        default_embedder(device="cuda", backend="onnx")


def test_torch_and_onnxruntime_work_in_a_process_that_loaded_the_ann_index_first(tmp_path):
    """usearch 2.26.2+ breaks C++ exception unwinding for the whole process (hence the version cap in
    pyproject.toml): torch.jit.script, which the ONNX export runs, hung, and onnxruntime >= 1.23 segfaulted
    on import, whenever a store had searched its index before making the default embedder."""
    probe = (
        "import usearch.index, torch\n"
        "@torch.jit.script\n"
        "def f(x: torch.Tensor, y: int) -> torch.Tensor:\n"
        "    return x[:, y : y + 3] + 1\n"
        "import onnxruntime\n"
        "print('ok')\n"
    )
    (tmp_path / "probe.py").write_text(probe)  # TorchScript reads the function's source file
    result = subprocess.run([sys.executable, tmp_path / "probe.py"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", f"exit {result.returncode}: {result.stderr[-500:]}"
