"""Screenshots in the conversation: encoding an observation's image as a data URL, which images stay, and their size budget.

The agent loop (:mod:`agentgym.rollout.agent`) puts each observation's ``"image"`` (H×W×3 uint8)
into the message as an OpenAI content part::

    {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}

after a text part with the observation's text. :class:`ImageConfig` says how:

* **size**: the image is shrunk (area averaging) so that its longer side is at most ``max_side``
  pixels, aspect ratio kept, never enlarged; then encoded as PNG (lossless: Set-of-Marks labels stay
  sharp) or JPEG at ``quality``;
* **budget**: an encoding over ``max_bytes`` is redone at 3/4 of the side, again and again, down to
  ``min_side``; an image that still does not fit is left out and a text part says so
  (:func:`omitted_note`), so the model knows a screenshot was there;
* **which turns keep their images**: only the newest ``keep_last`` images stay in the
  conversation; older ones become a short text stub (:func:`removed_stub`), as context folding
  does for long text. Images are the costliest part of a prompt (hundreds of tokens each);
* **thumbnails** for the eval report: a JPEG of at most ``thumbnail_side`` pixels per image,
  kept by the image's content hash (``0``: none).

Every function here is pure (arrays and messages in, new values out), so the agent loop's
choices can be checked on hand-computed numbers.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agentgym.extras import requires
from agentgym.rollout.policy import PolicyError

__all__ = [
    "EncodedImage",
    "ImageConfig",
    "ImageRejectedError",
    "data_url_hash",
    "data_url_size",
    "downscale_size",
    "encode_image",
    "estimate_image_tokens",
    "has_images",
    "image_part",
    "image_urls",
    "omitted_note",
    "removed_stub",
    "resize_area",
    "stub_images",
    "text_only",
    "thumbnail",
]

SHRINK = 0.75  # each retry of an image over max_bytes scales its side by this
PIXELS_PER_TOKEN_SIDE = 28  # Qwen2-VL's 14-pixel patches merged 2×2: one token per 28×28 pixels


@dataclass(frozen=True)
class ImageConfig:
    """How observation images go to the policy (``AgentConfig.images``; ``None`` there sends text only).

    Attributes:
        keep_last: the newest images that stay in the conversation; older ones become a text
            stub (chat mode: at every turn; token mode: when the context is folded, since prompts
            must stay prefix-preserving). ``0`` sends none: only the stub, i.e. text only but
            for the note that a screenshot was there.
        max_side: the longer side, in pixels, an image is shrunk to (never enlarged).
        format: ``"png"`` (lossless) or ``"jpeg"`` (smaller, blurs small text).
        quality: JPEG quality, 1-95.
        max_bytes: the most encoded bytes one image may take (before base64, which adds a third);
            larger ones are shrunk further, down to ``min_side``, then left out with a note.
        min_side: the smallest longer side an image is shrunk to for ``max_bytes``.
        thumbnail_side: the longer side of the JPEG thumbnail recorded per image for the eval
            report (``Trajectory.metadata["image_thumbnails"]``); ``0`` records none.
    """

    keep_last: int = 1
    max_side: int = 768
    format: Literal["png", "jpeg"] = "png"
    quality: int = 85
    max_bytes: int = 2_000_000
    min_side: int = 128
    thumbnail_side: int = 256

    def __post_init__(self):
        if self.keep_last < 0:
            raise ValueError(f"keep_last must be 0 or more, got {self.keep_last}")
        if self.format not in ("png", "jpeg"):
            raise ValueError(f"format must be 'png' or 'jpeg', got {self.format!r}")
        if not 1 <= self.quality <= 95:
            raise ValueError(f"quality must be 1-95 (JPEG), got {self.quality}")
        if self.min_side < 1 or self.max_side < self.min_side:
            raise ValueError(f"need 1 <= min_side <= max_side, got min_side={self.min_side}, max_side={self.max_side}")
        if self.max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, got {self.max_bytes}")
        if self.thumbnail_side < 0:
            raise ValueError(f"thumbnail_side must be 0 or more, got {self.thumbnail_side}")

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class EncodedImage:
    """An image as sent: its data URL, the encoded bytes in it and their sha256 (its content hash), its size."""

    data_url: str
    data: bytes = field(repr=False)
    sha256: str
    width: int
    height: int
    format: str
    nbytes: int  # encoded bytes, before base64


class ImageRejectedError(PolicyError):
    """The endpoint refused a request because of its images.

    ``too_large``: it took images but not these (HTTP 413, or a 400 about their size): the agent
    shrinks them and asks again. Otherwise it takes no images at all (a text-only model).
    """

    def __init__(self, message: str, *, too_large: bool):
        super().__init__(message)
        self.too_large = too_large


def downscale_size(height: int, width: int, max_side: int) -> tuple[int, int]:
    """``(height, width)`` scaled so the longer side is at most ``max_side`` (rounded, at least 1; never enlarged)."""
    longer = max(height, width)
    if longer <= max_side:
        return height, width
    scale = max_side / longer
    return max(1, round(height * scale)), max(1, round(width * scale))


def resize_area(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``image`` (H×W×3 uint8) resized by area averaging (each output pixel is the mean of the input pixels it covers)."""
    if image.shape[:2] == (height, width):
        return image
    with requires("eval"):
        from PIL import Image

    resized = Image.fromarray(image).resize((width, height), Image.Resampling.BOX)
    return np.asarray(resized)


def _encode(image: np.ndarray, fmt: str, quality: int) -> bytes:
    with requires("eval"):
        from PIL import Image

    buffer = io.BytesIO()
    if fmt == "png":
        Image.fromarray(image).save(buffer, format="PNG", optimize=False, compress_level=6)
    else:
        Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def _as_rgb(image: Any) -> np.ndarray:
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3 or 0 in array.shape:
        raise ValueError(f"an observation image must be an H×W×3 uint8 array, got {array.dtype} {array.shape}")
    return np.ascontiguousarray(array)


def encode_image(image: Any, config: ImageConfig) -> EncodedImage | None:
    """``image`` (H×W×3 uint8) as a data URL within ``config``'s side and byte budget, or ``None`` when it cannot fit.

    The longer side starts at ``min(max_side, the image's)`` and shrinks by 3/4 (rounded down)
    while the encoding is over ``max_bytes`` and the side is above ``min_side``.
    """
    array = _as_rgb(image)
    height, width = downscale_size(array.shape[0], array.shape[1], config.max_side)
    mime = "image/png" if config.format == "png" else "image/jpeg"
    while True:
        data = _encode(resize_area(array, height, width), config.format, config.quality)
        if len(data) <= config.max_bytes:
            return EncodedImage(
                data_url=f"data:{mime};base64,{base64.b64encode(data).decode()}",
                data=data,
                sha256=hashlib.sha256(data).hexdigest(),
                width=width,
                height=height,
                format=config.format,
                nbytes=len(data),
            )
        longer = max(height, width)
        if longer <= config.min_side:
            return None
        height, width = downscale_size(height, width, max(config.min_side, math.floor(longer * SHRINK)))


def thumbnail(image: Any, side: int, quality: int = 70) -> str:
    """A base64 JPEG of ``image`` shrunk to at most ``side`` pixels on its longer side (for report viewers)."""
    array = _as_rgb(image)
    height, width = downscale_size(array.shape[0], array.shape[1], side)
    return base64.b64encode(_encode(resize_area(array, height, width), "jpeg", quality)).decode()


def estimate_image_tokens(width: int, height: int) -> int:
    """Prompt tokens an image of this size costs a Qwen2-VL-style model: one per 28×28 pixels, rounded up per side."""
    return math.ceil(width / PIXELS_PER_TOKEN_SIDE) * math.ceil(height / PIXELS_PER_TOKEN_SIDE)


# --- content parts ----------------------------------------------------------------------------

_DATA_URL = re.compile(r"data:image/[a-z]+;base64,(?P<data>.*)", re.S)


def image_part(image: EncodedImage) -> dict:
    """The OpenAI chat content part carrying ``image``."""
    return {"type": "image_url", "image_url": {"url": image.data_url}}


def removed_stub(turn: int) -> str:
    """The text that replaces a screenshot older than the newest ``keep_last``."""
    return f"[screenshot of turn {turn} removed to save context]"


def omitted_note(turn: int, reason: str) -> str:
    """The text sent instead of a screenshot that could not be sent (``reason`` says why)."""
    return f"[screenshot of turn {turn} left out: {reason}]"


def _parts(message: Mapping) -> list:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _is_image(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "image_url"


def has_images(messages: Sequence[Mapping]) -> bool:
    return any(_is_image(part) for message in messages for part in _parts(message))


def image_urls(messages: Sequence[Mapping]) -> list[str]:
    """The URLs of the image parts in ``messages``, in order."""
    return [part["image_url"]["url"] for message in messages for part in _parts(message) if _is_image(part)]


@functools.lru_cache(maxsize=64)
def data_url_size(url: str) -> tuple[int, int]:
    """``(width, height)`` of the image in a base64 data URL (read from its header; cached for the prompt's few images)."""
    with requires("eval"):
        from PIL import Image

    match = _DATA_URL.fullmatch(url)
    if match is None:
        raise ValueError("not a base64 image data URL")
    with Image.open(io.BytesIO(base64.b64decode(match["data"]))) as image:
        return image.size


def data_url_hash(url: str) -> str:
    """The sha256 (hex) of a base64 data URL's bytes: the same as :attr:`EncodedImage.sha256` for the image it carries."""
    match = _DATA_URL.fullmatch(url)
    if match is None:
        return hashlib.sha256(url.encode()).hexdigest()
    try:
        return hashlib.sha256(base64.b64decode(match["data"], validate=True)).hexdigest()
    except binascii.Error:
        return hashlib.sha256(url.encode()).hexdigest()


def stub_images(
    messages: Sequence[Mapping], keep_last: int, image_turns: Mapping[int, int], stub=removed_stub
) -> tuple[list[dict], int]:
    """``messages`` with every image part but the newest ``keep_last`` replaced by a text part ``stub(turn)``.

    ``image_turns`` maps the index of each message that holds images to the turn whose
    observation they show. Messages that change are copied; the others are shared with the input.
    Returns the messages and how many images were replaced.
    """
    positions = [
        (i, j) for i, message in enumerate(messages) for j, part in enumerate(_parts(message)) if _is_image(part)
    ]
    drop = positions[: max(0, len(positions) - keep_last)]
    result: list[dict] = [message if isinstance(message, dict) else dict(message) for message in messages]
    for i, j in drop:
        if result[i] is messages[i]:
            result[i] = {**messages[i], "content": list(messages[i]["content"])}
        result[i]["content"][j] = {"type": "text", "text": stub(image_turns.get(i, 0))}
    return result, len(drop)


def text_only(messages: Sequence[Mapping]) -> list[dict]:
    """``messages`` with image parts left out and part lists joined into plain text (for counting text tokens)."""
    result = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            message = {
                **message,
                "content": "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and not _is_image(p)),
            }
        result.append(dict(message))
    return result
