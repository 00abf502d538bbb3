"""Images in the conversation (agentgym.rollout.images): sizes, encodings, the byte budget and keep-last-k, on hand-computed numbers."""

import base64
import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from agentgym.rollout.images import (
    ImageConfig,
    data_url_hash,
    data_url_size,
    downscale_size,
    encode_image,
    estimate_image_tokens,
    has_images,
    image_part,
    image_urls,
    removed_stub,
    resize_area,
    stub_images,
    text_only,
    thumbnail,
)


def _payload(url: str) -> bytes:
    return base64.b64decode(url.split(",", 1)[1])


def _noise(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Incompressible pixels: a PNG of them takes at least height × width × 3 bytes."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize(
    "size, max_side, expected",
    [
        ((1080, 1920), 768, (432, 768)),  # 1080 × 768/1920 = 432 exactly
        ((768, 1024), 768, (576, 768)),  # 768 × 0.75
        ((1000, 3), 10, (10, 1)),  # 3 × 10/1000 = 0.03 rounds to 0: at least 1
        ((100, 50), 768, (100, 50)),  # never enlarged
        ((768, 768), 768, (768, 768)),
        ((333, 1000), 500, (166, 500)),  # 166.5 rounds to even
    ],
)
def test_downscale_keeps_the_aspect_ratio_within_max_side(size, max_side, expected):
    assert downscale_size(*size, max_side) == expected


def test_area_resize_averages_each_block():
    image = np.zeros((4, 4, 3), np.uint8)
    image[:2, :2] = [[[0] * 3, [10] * 3], [[20] * 3, [30] * 3]]  # mean 15
    image[:2, 2:] = 100
    image[2:, :2] = [[[200] * 3, [200] * 3], [[0] * 3, [0] * 3]]  # mean 100
    image[2:, 2:] = 255
    assert resize_area(image, 2, 2)[..., 0].tolist() == [[15, 100], [100, 255]]
    assert resize_area(image, 4, 4) is image


def test_png_data_url_round_trips_and_is_hashed_by_its_bytes():
    image = _noise(600, 1200)
    encoded = encode_image(image, ImageConfig(max_side=768))
    assert (encoded.width, encoded.height, encoded.format) == (768, 384, "png")
    assert encoded.data_url.startswith("data:image/png;base64,")
    data = _payload(encoded.data_url)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) == encoded.nbytes
    assert encoded.sha256 == hashlib.sha256(data).hexdigest() == data_url_hash(encoded.data_url)
    assert data_url_size(encoded.data_url) == (768, 384)
    decoded = np.asarray(Image.open(io.BytesIO(data)))
    assert np.array_equal(decoded, resize_area(image, 384, 768))  # PNG is lossless


def test_jpeg_is_smaller_and_lossy():
    image = _noise(200, 300)  # a photo-like page compresses better as JPEG; noise shows it surely
    image[50:150, 100:200] = [255, 0, 0]
    png = encode_image(image, ImageConfig(format="png"))
    jpeg = encode_image(image, ImageConfig(format="jpeg", quality=50))
    data = _payload(jpeg.data_url)
    assert jpeg.data_url.startswith("data:image/jpeg;base64,") and data[:2] == b"\xff\xd8"
    assert (jpeg.width, jpeg.height) == (300, 200)
    assert jpeg.nbytes < png.nbytes
    decoded = np.asarray(Image.open(io.BytesIO(data))).astype(int)
    assert np.abs(decoded[100, 150] - [255, 0, 0]).max() < 20  # close, not exact


def test_an_image_over_max_bytes_is_shrunk_by_three_quarters_until_it_fits():
    # 100 × 200 noise: ≥ 60 000 PNG bytes; at side 150 (75 × 150) at most 33 750 + a little overhead.
    image = _noise(100, 200)
    full = encode_image(image, ImageConfig())
    assert full.nbytes > 60_000
    encoded = encode_image(image, ImageConfig(max_bytes=50_000))
    assert (encoded.width, encoded.height) == (150, 75)  # floor(200 × 0.75) = 150, one step
    assert encoded.nbytes <= 50_000


def test_an_image_that_cannot_fit_even_at_min_side_is_none():
    # Sides tried: 200, 150, 112, then max(100, 84) = 100; a 100 × 50 noise PNG is ≥ 15 000 bytes > 1 000.
    assert encode_image(_noise(100, 200), ImageConfig(max_bytes=1_000, min_side=100)) is None


def test_bad_arrays_are_refused_with_the_shape():
    with pytest.raises(ValueError, match=r"H×W×3 uint8 array, got float64 \(2, 2, 3\)"):
        encode_image(np.zeros((2, 2, 3)), ImageConfig())
    with pytest.raises(ValueError, match=r"got uint8 \(4, 4\)"):
        encode_image(np.zeros((4, 4), np.uint8), ImageConfig())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"keep_last": -1}, "keep_last"),
        ({"format": "gif"}, "format"),
        ({"quality": 0}, "quality"),
        ({"max_side": 64, "min_side": 128}, "min_side"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"thumbnail_side": -1}, "thumbnail_side"),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ImageConfig(**kwargs)


def test_thumbnail_is_a_small_jpeg():
    data = base64.b64decode(thumbnail(_noise(300, 512), 256))
    with Image.open(io.BytesIO(data)) as image:
        assert (image.format, image.size) == ("JPEG", (256, 150))


@pytest.mark.parametrize("size, tokens", [((28, 28), 1), ((29, 28), 2), ((768, 432), 28 * 16), ((1, 1), 1)])
def test_image_token_estimate(size, tokens):
    assert estimate_image_tokens(*size) == tokens


def _conversation():
    urls = [encode_image(np.full((8, 8, 3), v, np.uint8), ImageConfig()).data_url for v in (0, 100, 200)]
    messages = [{"role": "system", "content": "sys"}]
    for turn, url in enumerate(urls):
        messages.append({"role": "user", "content": [{"type": "text", "text": f"obs {turn}"}, image_part_of(url)]})
        messages.append({"role": "assistant", "content": f"reply {turn}"})
    return messages[:-1], urls


def image_part_of(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def test_image_part_is_the_openai_content_part():
    encoded = encode_image(np.zeros((2, 2, 3), np.uint8), ImageConfig())
    assert image_part(encoded) == {"type": "image_url", "image_url": {"url": encoded.data_url}}


def test_keep_last_replaces_older_images_by_stubs_and_leaves_the_input_alone():
    messages, urls = _conversation()
    image_turns = {1: 0, 3: 1, 5: 2}
    kept, replaced = stub_images(messages, 1, image_turns)
    assert replaced == 2 and image_urls(kept) == [urls[2]]
    assert kept[1]["content"] == [
        {"type": "text", "text": "obs 0"},
        {"type": "text", "text": "[screenshot of turn 0 removed to save context]"},
    ]
    assert kept[3]["content"][1] == {"type": "text", "text": removed_stub(1)}
    assert kept[5] is messages[5] and kept[0] is messages[0]
    assert image_urls(messages) == urls  # the input is not changed
    none, replaced = stub_images(messages, 0, image_turns, stub=lambda turn: f"gone {turn}")
    assert replaced == 3 and not has_images(none) and none[5]["content"][1]["text"] == "gone 2"
    same, replaced = stub_images(messages, 5, image_turns)
    assert replaced == 0 and same == messages


def test_text_only_joins_text_parts():
    messages, _ = _conversation()
    assert text_only(messages)[1] == {"role": "user", "content": "obs 0"}
    assert text_only(messages)[0] == {"role": "system", "content": "sys"}
