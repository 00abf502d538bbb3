"""The tiny Qwen2-VL built offline: cached, small, a tokenizer with vision tokens, a template that renders image
parts, and a VisionChatFormat whose placeholder expansion is the image processor's own token count."""

import numpy as np
import pytest
from PIL import Image
from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

from agentgym.models import tiny_vlm_path
from agentgym.models.tiny_vlm import VISION_TOKENS
from agentgym.rollout.chat import TemplateError
from agentgym.rollout.vision import VisionChatFormat, image_bytes, message_images


@pytest.fixture(scope="module")
def fmt():
    path = tiny_vlm_path()
    return VisionChatFormat(AutoTokenizer.from_pretrained(path), AutoImageProcessor.from_pretrained(path))


def test_the_build_is_cached_small_and_a_qwen2_vl():
    path = tiny_vlm_path()
    assert tiny_vlm_path() == path and (path / "preprocessor_config.json").is_file()
    config = AutoConfig.from_pretrained(path)
    assert config.model_type == "qwen2_vl"
    assert config.vision_config.depth == 2 and config.text_config.num_hidden_layers == 2
    weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    assert weights < 2_000_000  # about 285k float32 parameters


def test_vision_tokens_are_single_special_tokens(fmt):
    tokenizer = fmt.tokenizer
    for token in VISION_TOKENS:
        assert tokenizer.encode(token, add_special_tokens=False) == [tokenizer.convert_tokens_to_ids(token)]
    assert fmt.image_token_id == tokenizer.convert_tokens_to_ids("<|image_pad|>")


@pytest.mark.parametrize("height,width", [(64, 64), (64, 96), (200, 160), (256, 256), (1080, 1920), (30, 30)])
def test_placeholders_expand_to_the_image_processors_token_count(fmt, height, width):
    pixels = np.random.RandomState(height).randint(0, 256, (height, width, 3), dtype=np.uint8)
    grid = fmt.image_processor(images=[Image.fromarray(pixels)], return_tensors="pt")["image_grid_thw"]
    expected = int(grid.prod()) // fmt.merge_size**2
    assert fmt.image_tokens(image_bytes(pixels)) == expected <= 16  # max_pixels keeps any screenshot small
    messages = [{"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image", "image": pixels}]}]
    ids = fmt.prompt_ids(messages)
    assert fmt.image_runs(ids) == [expected]
    vision_start = fmt.tokenizer.convert_tokens_to_ids("<|vision_start|>")
    start = ids.index(vision_start) + 1
    assert ids[start : start + expected] == [fmt.image_token_id] * expected
    assert fmt.mm_token_type_ids(ids).count(1) == expected


def test_string_content_renders_as_the_text_model_does(fmt):
    text = [{"role": "user", "content": "hello"}]
    parts = [{"role": "user", "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]}]
    assert (
        fmt.render_prompt(text)
        == fmt.render_prompt(parts)
        == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    )
    assert message_images(text) == []


def test_a_message_spelling_out_the_image_token_is_refused(fmt):
    with pytest.raises(TemplateError, match="1 <\\|image_pad\\|> placeholders for 0 images"):
        fmt.prompt_ids([{"role": "user", "content": "sneaky <|image_pad|>"}])
