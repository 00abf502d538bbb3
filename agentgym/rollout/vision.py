"""Token-exact chat formatting for Qwen2-VL-style vision-language models: image placeholders expanded, images as bytes.

A VLM's prompt holds, for each image, a run of ``<|image_pad|>`` tokens whose length the image
processor decides from the image's size (one token per merged patch); the vision tower's output
replaces them. :class:`VisionChatFormat` is a :class:`~agentgym.rollout.chat.ChatFormat` whose
:meth:`~VisionChatFormat.render_prompt` already expands each image part's placeholder to that
run, so everything built on rendered text (prompt ids, :meth:`ChatFormat.continuation_ids`,
context folding) counts and keeps the image tokens exactly, as the processor would insert them.

Images travel as their encoded bytes (PNG/JPEG, as sent in a ``data:`` URL), never as tensors:
``pixel_values`` are a deterministic function of those bytes and the image processor
(:meth:`VisionChatFormat.image_inputs`), so a trajectory that keeps the prompt ids and the bytes
of its images (by content hash, :func:`image_hash`) is enough for a trainer to recompute the
policy's logprobs. Those are every input TRL's GRPO trainer feeds a Qwen2-VL model:
``input_ids``, ``pixel_values``, ``image_grid_thw`` and ``mm_token_type_ids``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import io
import re
from collections.abc import Sequence
from typing import Any

from agentgym.extras import requires
from agentgym.rollout.chat import ChatFormat, Message, TemplateError

__all__ = ["VisionChatFormat", "image_bytes", "image_hash", "message_images", "open_image"]

IMAGE_PART_TYPES = ("image_url", "image")
_DATA_URL = re.compile(r"data:image/[\w.+-]+;base64,(?P<data>.*)", re.S)


def image_hash(data: bytes) -> str:
    """The content hash of an encoded image: sha256 hex of its bytes (the key of a stored image)."""
    return hashlib.sha256(data).hexdigest()


def image_bytes(image: Any) -> bytes:
    """An image as encoded bytes: a base64 ``data:image/...`` URL decoded, bytes as given, a PIL image or an H×W×3
    uint8 array encoded as PNG (lossless, so its pixels come back exactly). Anything else is a ValueError;
    http(s) URLs are refused (nothing is fetched)."""
    if isinstance(image, str):
        match = _DATA_URL.fullmatch(image)
        if match is None:
            shown = image[:40] + ("..." if len(image) > 40 else "")
            raise ValueError(f"an image URL must be a base64 data:image/... URL (nothing is fetched), got {shown!r}")
        try:
            return base64.b64decode(match["data"], validate=True)
        except binascii.Error as exc:
            raise ValueError(f"the image data URL is not valid base64: {exc}") from None
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    with requires("train"):
        import numpy as np
        from PIL import Image

    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or 0 in image.shape:
            raise ValueError(f"an image array must be H×W×3 uint8, got {image.dtype} {image.shape}")
        image = Image.fromarray(image)
    if isinstance(image, Image.Image):
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="PNG")
        return buffer.getvalue()
    raise ValueError(
        f"an image must be a data URL, bytes, a PIL image or an H×W×3 uint8 array, not {type(image).__name__}"
    )


@functools.lru_cache(maxsize=256)
def _image_size(data: bytes) -> tuple[int, int]:
    """(height, width) read from the image's header, cached: prompts are re-rendered every turn with the same images."""
    with requires("train"):
        from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"not a readable image ({len(data)} bytes): {exc}") from None
    return height, width


def open_image(data: bytes):
    """The RGB PIL image of encoded bytes (what the image processor is given)."""
    with requires("train"):
        from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"not a readable image ({len(data)} bytes): {exc}") from None


def message_images(messages: Sequence[Message]) -> list[Any]:
    """The images of ``messages``' content parts, in order: each ``image_url`` part's URL, each ``image`` part's image."""
    found = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in IMAGE_PART_TYPES:
                continue
            if part["type"] == "image_url":
                url = part.get("image_url")
                found.append(url.get("url") if isinstance(url, dict) else url)
            else:
                found.append(part.get("image"))
    return found


class VisionChatFormat(ChatFormat):
    """A tokenizer with vision tokens, its chat template and the model's image processor (Qwen2-VL family).

    Args:
        tokenizer: a tokenizer whose vocabulary has ``<|image_pad|>`` and whose template renders
            image content parts as ``<|vision_start|><|image_pad|><|vision_end|>`` (agentgym's
            ChatML template and Qwen2-VL's own do).
        image_processor: the model's image processor (it has ``merge_size`` and
            ``get_number_of_image_patches``, as Qwen2-VL's and Qwen2.5-VL's do).
        check: verify the template is prefix-preserving (see :class:`ChatFormat`).
    """

    takes_images = True
    image_token = "<|image_pad|>"
    video_token = "<|video_pad|>"

    def __init__(self, tokenizer, image_processor, *, check: bool = True):
        super().__init__(tokenizer, check=check)
        self.image_processor = image_processor
        self.image_token_id = _vocabulary_id(tokenizer, self.image_token)
        self.video_token_id = _vocabulary_id(tokenizer, self.video_token)
        self.merge_size = int(image_processor.merge_size)

    def image_tokens(self, data: bytes) -> int:
        """How many ``<|image_pad|>`` tokens the image (encoded bytes) takes in a prompt."""
        height, width = _image_size(data)
        return self.image_processor.get_number_of_image_patches(height, width, {}) // self.merge_size**2

    def render_prompt(self, messages: Sequence[Message], tools: list[dict] | None = None) -> str:
        """The rendered conversation + generation prompt, each image's placeholder expanded to its image tokens."""
        text = super().render_prompt(messages, tools)
        images = message_images(messages)
        pieces = text.split(self.image_token)
        if len(pieces) != len(images) + 1:
            raise TemplateError(
                f"the rendered conversation holds {len(pieces) - 1} {self.image_token} placeholders for "
                f"{len(images)} images (text in a message spells out the image token, or the chat template "
                "does not render image parts)"
            )
        counts = [self.image_tokens(image_bytes(image)) for image in images]
        return pieces[0] + "".join(self.image_token * n + piece for n, piece in zip(counts, pieces[1:]))

    def prompt_inputs(
        self, messages: Sequence[Message], tools: list[dict] | None = None
    ) -> tuple[list[int], list[bytes]]:
        """:meth:`prompt_ids` and the prompt's images as encoded bytes, in the order of their runs of image tokens."""
        return self.prompt_ids(messages, tools), [image_bytes(image) for image in message_images(messages)]

    def continuation_inputs(
        self,
        messages: Sequence[Message],
        completion_ids: Sequence[int],
        new_messages: Sequence[Message],
        tools: list[dict] | None = None,
        *,
        rendered: str | None = None,
    ) -> tuple[list[int], str, list[bytes]]:
        """:meth:`~ChatFormat.continuation_ids` (ids, rendering) plus the images of ``new_messages`` as encoded bytes."""
        ids, after = self.continuation_ids(messages, completion_ids, new_messages, tools, rendered=rendered)
        return ids, after, [image_bytes(image) for image in message_images(new_messages)]

    def check_images(self, ids: Sequence[int], images: Sequence[bytes]) -> None:
        """A ValueError unless ``ids``' runs of image tokens are, in order, as long as ``images`` (encoded) take."""
        expected = [self.image_tokens(data) for data in images]
        runs = self.image_runs(ids)
        # A run is one image's placeholder: two images side by side would merge into one run.
        if runs != expected:
            raise ValueError(
                f"the prompt's image tokens do not match its images: runs of {runs} {self.image_token} tokens "
                f"for {len(images)} images taking {expected} (render the prompt with the model's chat format)"
            )
        if self.video_token_id in ids:
            raise ValueError(f"video tokens ({self.video_token}) are not supported")

    def image_runs(self, ids: Sequence[int]) -> list[int]:
        """The lengths of the runs of image tokens in ``ids``, in order (one run per image)."""
        runs: list[int] = []
        previous = None
        for token in ids:
            if token == self.image_token_id:
                if previous == self.image_token_id:
                    runs[-1] += 1
                else:
                    runs.append(1)
            previous = token
        return runs

    def image_inputs(self, images: Sequence[Any]) -> dict:
        """``{"pixel_values", "image_grid_thw"}`` tensors for ``images`` (data URLs, bytes, PIL images or arrays)."""
        opened = [open_image(image_bytes(image)) for image in images]
        batch = self.image_processor(images=opened, return_tensors="pt")
        return {"pixel_values": batch["pixel_values"], "image_grid_thw": batch["image_grid_thw"]}

    def mm_token_type_ids(self, ids: Sequence[int]) -> list[int]:
        """Per position: 1 for an image token, 2 for a video token, 0 for text (what M-RoPE needs alongside the ids)."""
        return [1 if i == self.image_token_id else 2 if i == self.video_token_id else 0 for i in ids]


def _vocabulary_id(tokenizer, token: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or token_id == tokenizer.unk_token_id:
        raise TemplateError(f"the tokenizer has no {token} token: it is not a Qwen2-VL-style vision tokenizer")
    return token_id
