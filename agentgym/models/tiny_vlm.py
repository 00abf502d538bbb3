"""Build a tiny Qwen2-VL vision-language model offline (the tiny model's BPE plus vision tokens, a small vision tower).

Tests of image-conditioned rollouts need a real VLM: a real image processor that turns a
screenshot into patches, a tokenizer with the vision special tokens and a chat template that
renders image content parts, and a model whose vision tower feeds the language model through
multimodal RoPE. :func:`build_tiny_vlm` makes one from configs alone (nothing is downloaded): the
byte-level BPE of :func:`~agentgym.models.tiny.build_tokenizer` with Qwen2-VL's
``<|vision_start|>``/``<|image_pad|>``/``<|vision_end|>``/``<|video_pad|>`` tokens, a
:class:`~transformers.Qwen2VLImageProcessorPil` capped at ``max_pixels`` (a 256×256 screenshot
becomes 8×8 patches, 16 image tokens), and a random-initialised
:class:`~transformers.Qwen2VLForConditionalGeneration` with a two-block vision tower.
:func:`tiny_vlm_path` caches one build per spec, as :func:`~agentgym.models.tiny.tiny_model_path` does.

The image processor is the PIL one: the torchvision-backed processor (and ``Qwen2VLProcessor``,
which insists on a video processor) need torchvision, which agentgym does not install.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentgym.extras import requires
from agentgym.models.tiny import SPECIAL_TOKENS, build_tokenizer, cached_build, save_tiny

__all__ = ["DEFAULT_VLM_SPEC", "VISION_TOKENS", "build_tiny_vlm", "tiny_vlm_path"]

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
PATCH_SIZE, MERGE_SIZE = 14, 2  # Qwen2-VL's: one image token per 28×28 pixels
DEFAULT_VLM_SPEC = {
    "vocab_size": 2048,
    "hidden_size": 64,
    "layers": 2,
    "heads": 4,
    "kv_heads": 2,
    "intermediate_size": 128,
    "max_positions": 4096,
    "vision_depth": 2,
    "vision_dim": 32,
    "vision_heads": 2,
    "min_pixels": 28 * 28,
    "max_pixels": 28 * 28 * 16,  # at most 16 image tokens (64 patches) per image
    "seed": 0,
}


def build_tiny_vlm(path: str | os.PathLike, **spec) -> Path:
    """Train the tokenizer, build the image processor and the model, ``save_pretrained`` all three into ``path``."""
    with requires("train"):
        import torch
        from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    spec = {**DEFAULT_VLM_SPEC, **spec}
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec["vocab_size"], SPECIAL_TOKENS + VISION_TOKENS)
    tokenizer.save_pretrained(path)
    Qwen2VLImageProcessorPil(
        min_pixels=spec["min_pixels"],
        max_pixels=spec["max_pixels"],
        patch_size=PATCH_SIZE,
        merge_size=MERGE_SIZE,
        temporal_patch_size=2,
    ).save_pretrained(path)

    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in VISION_TOKENS}
    head_dim = spec["hidden_size"] // spec["heads"]
    # M-RoPE splits each head's rotary half into temporal / height / width sections.
    half = head_dim // 2
    sections = [half - 2 * (half // 3), half // 3, half // 3]
    torch.manual_seed(spec["seed"])
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": spec["hidden_size"],
            "num_hidden_layers": spec["layers"],
            "num_attention_heads": spec["heads"],
            "num_key_value_heads": spec["kv_heads"],
            "intermediate_size": spec["intermediate_size"],
            "max_position_embeddings": spec["max_positions"],
            "rope_parameters": {"rope_type": "default", "mrope_section": sections, "rope_theta": 1e6},
            "bos_token_id": None,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": spec["vision_depth"],
            "embed_dim": spec["vision_dim"],
            "hidden_size": spec["hidden_size"],
            "num_heads": spec["vision_heads"],
            "mlp_ratio": 2,
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    return save_tiny(Qwen2VLForConditionalGeneration(config), tokenizer, path, spec)


def tiny_vlm_path(cache_dir: str | os.PathLike | None = None, **spec) -> Path:
    """A built tiny VLM for this spec, built once into the cache (``~/.cache/agentgym/models``)."""
    return cached_build("tiny-qwen2-vl", build_tiny_vlm, {**DEFAULT_VLM_SPEC, **spec}, cache_dir)
