"""Build a tiny Qwen2 chat model offline (a byte-level BPE trained on local text + a small random-init config).

Tests and CPU demos need a real causal LM with a real tokenizer and chat template but no hub
access. :func:`build_tiny_model` trains a byte-level BPE on text that ships with Python and with
agentgym (so every byte sequence still encodes), adds the ChatML special tokens, and saves a
small random-initialised :class:`~transformers.Qwen2ForCausalLM` with ``save_pretrained``. The
weights are random: the model produces varied, mostly malformed actions, which is exactly what
the rollout machinery must survive. :func:`tiny_model_path` caches one build per spec.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from agentgym.extras import requires

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Plain added tokens (not special): they must survive decode(skip_special_tokens=True).
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
DEFAULT_SPEC = {
    "vocab_size": 2048,
    "hidden_size": 64,
    "layers": 2,
    "heads": 4,
    "kv_heads": 2,
    "intermediate_size": 128,
    "max_positions": 4096,
    "seed": 0,
}


def chat_template() -> str:
    """The prefix-preserving ChatML-with-tools template agentgym ships (see rollout/templates)."""
    return resources.files("agentgym.rollout").joinpath("templates/chatml_tools.jinja").read_text()


def _corpus(limit_bytes: int = 3_000_000):
    """Python's own standard library sources plus agentgym's: code, prose in docstrings, JSON-ish text."""
    roots = [Path(sysconfig.get_paths()["stdlib"]), Path(__file__).resolve().parents[1]]
    total = 0
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "site-packages" in path.parts or "test" in path.parts:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            total += len(text)
            yield text
            if total >= limit_bytes:
                return


def build_tokenizer(vocab_size: int, special_tokens: list[str] = SPECIAL_TOKENS):
    """A byte-level BPE of ``vocab_size`` ids trained on local text, with ``special_tokens``, the tool markup and the chat template."""
    with requires("train"):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(MARKUP_TOKENS),
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    tokenizer.add_tokens(MARKUP_TOKENS)
    tokenizer.chat_template = chat_template()
    return tokenizer


def build_tiny_model(path: str | os.PathLike, **spec) -> Path:
    """Train the tokenizer, build the model and ``save_pretrained`` both into ``path``; returns the path."""
    with requires("train"):
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

    spec = {**DEFAULT_SPEC, **spec}
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec["vocab_size"])
    tokenizer.save_pretrained(path)

    torch.manual_seed(spec["seed"])
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec["hidden_size"],
        num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"],
        num_key_value_heads=spec["kv_heads"],
        intermediate_size=spec["intermediate_size"],
        max_position_embeddings=spec["max_positions"],
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return save_tiny(Qwen2ForCausalLM(config), tokenizer, path, spec)


def save_tiny(model: Any, tokenizer: Any, path: Path, spec: dict) -> Path:
    """Save a built tiny model into ``path`` (beside its tokenizer), generating up to the tokenizer's end token, with
    the spec it was built from (which marks the build finished for :func:`cached_build`); returns the path."""
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    (path / "agentgym_tiny.json").write_text(json.dumps(spec, sort_keys=True))
    return path


def tiny_model_path(cache_dir: str | os.PathLike | None = None, **spec) -> Path:
    """A built tiny model for this spec, built once into the cache (``~/.cache/agentgym/models``)."""
    return cached_build("tiny-qwen2", build_tiny_model, {**DEFAULT_SPEC, **spec}, cache_dir)


def cached_build(prefix: str, build: Callable[..., Path], spec: dict, cache_dir: str | os.PathLike | None) -> Path:
    """``build(path, **spec)`` once per spec (and chat template) into the cache; concurrent builders keep the first."""
    key = hashlib.sha256((json.dumps(spec, sort_keys=True) + chat_template()).encode()).hexdigest()[:12]
    root = Path(cache_dir or os.environ.get("AGENTGYM_CACHE", Path.home() / ".cache" / "agentgym")) / "models"
    path = root / f"{prefix}-{key}"
    if not (path / "agentgym_tiny.json").exists():
        staging = root / f".{prefix}-{key}-{os.getpid()}"
        build(staging, **spec)
        try:
            staging.rename(path)
        except OSError:  # another process finished first: keep theirs
            import shutil

            shutil.rmtree(staging, ignore_errors=True)
    return path
