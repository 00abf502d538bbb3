"""``agentgym serve`` on the tiny Qwen2-VL through the real openai client: image content parts in, text out, token ids
and logprobs a trainer can recompute; a text-only model given an image answers a clear 400."""

import base64

import numpy as np
import openai
import pytest
import torch
from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer

from agentgym.models import tiny_vlm_path
from agentgym.rollout.vision import VisionChatFormat, image_bytes
from tests.helpers.serving import ServerProcess

# A server process per module: loading torch and the model there takes 10-20 s on two busy cores.
pytestmark = pytest.mark.slow


def data_url(seed: int, height: int, width: int) -> str:
    pixels = np.random.RandomState(seed).randint(0, 256, (height, width, 3), dtype=np.uint8)
    return "data:image/png;base64," + base64.b64encode(image_bytes(pixels)).decode()


def look_at(*urls: str, text: str = "What is on the screen?") -> list[dict]:
    parts = [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return [{"role": "system", "content": "You operate a desktop."}, {"role": "user", "content": parts}]


@pytest.fixture(scope="module")
def vlm_client():
    with ServerProcess(tiny_vlm_path(), max_batch_size=8) as server:
        with openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0) as client:
            yield client


@pytest.fixture(scope="module")
def local_vlm():
    path = tiny_vlm_path()
    model = AutoModelForImageTextToText.from_pretrained(path).eval()
    return model, VisionChatFormat(AutoTokenizer.from_pretrained(path), AutoImageProcessor.from_pretrained(path))


def test_chat_with_images_returns_text_with_token_ids_and_logprobs_a_trainer_recomputes(vlm_client, local_vlm):
    model, fmt = local_vlm
    urls = [data_url(0, 64, 96), data_url(1, 200, 160)]
    messages = look_at(*urls)
    response = vlm_client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=8, seed=3, logprobs=True, extra_body={"return_token_ids": True}
    )
    choice = response.choices[0]
    assert isinstance(choice.message.content, str)
    prompt_ids = response.model_extra["prompt_token_ids"]
    completion_ids = choice.model_extra["token_ids"]
    assert prompt_ids == fmt.prompt_ids(messages)  # the server's ids: each image's run of image tokens included
    assert fmt.image_runs(prompt_ids) == [6, 12]
    assert response.usage.prompt_tokens == len(prompt_ids)

    ids = prompt_ids + completion_ids
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor([ids]),
            mm_token_type_ids=torch.tensor([fmt.mm_token_type_ids(ids)]),
            **fmt.image_inputs(urls),
        ).logits[0, len(prompt_ids) - 1 : -1]
    expected = logits.float().log_softmax(-1).gather(-1, torch.tensor(completion_ids)[:, None]).squeeze(-1)
    served = torch.tensor([entry.logprob for entry in choice.logprobs.content])
    torch.testing.assert_close(served, expected, atol=1e-4, rtol=0)


def test_completions_take_token_ids_with_their_images(vlm_client, local_vlm):
    """The token-in/token-out path: the chat's prompt ids + its images (the ``images`` extension) sample the same."""
    _, fmt = local_vlm
    url = data_url(2, 128, 128)
    chat = vlm_client.chat.completions.create(
        model="tiny", messages=look_at(url), max_tokens=6, temperature=0, extra_body={"return_token_ids": True}
    )
    completion = vlm_client.completions.create(
        model="tiny",
        prompt=chat.model_extra["prompt_token_ids"],
        max_tokens=6,
        temperature=0,
        extra_body={"images": [url], "return_token_ids": True},
    )
    assert completion.choices[0].model_extra["token_ids"] == chat.choices[0].model_extra["token_ids"]
    with pytest.raises(openai.BadRequestError, match="runs of"):  # the ids without their image
        vlm_client.completions.create(model="tiny", prompt=chat.model_extra["prompt_token_ids"], max_tokens=2)


def test_bad_images_are_answered_with_400(vlm_client):
    cases = {
        "nothing is fetched": look_at("https://example.com/screen.png"),
        "not a readable image": look_at("data:image/png;base64," + base64.b64encode(b"garbage").decode()),
        "not valid base64": look_at("data:image/png;base64,@@@"),
        "user and tool messages only": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": data_url(3, 64, 64)}}]},
        ],
        "only text and image_url content parts": [
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}
        ],
    }
    for message, messages in cases.items():
        with pytest.raises(openai.BadRequestError, match=message):
            vlm_client.chat.completions.create(model="tiny", messages=messages, max_tokens=2)


def test_a_text_only_model_answers_an_image_with_a_clear_400(served_tiny_model):
    with openai.OpenAI(base_url=served_tiny_model, api_key="none", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="tiny", messages=look_at(data_url(4, 64, 64)), max_tokens=2)
        assert refused.value.status_code == 400
        error = refused.value.body
        assert "model `tiny` takes no images (it is a text-only model)" in error["message"]
        assert error["param"] == "messages[1].content[1]"
        with pytest.raises(openai.BadRequestError, match="takes no images"):
            client.completions.create(
                model="tiny", prompt="hi", max_tokens=2, extra_body={"images": [data_url(4, 64, 64)]}
            )
        # Text content parts alone are still fine.
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}], max_tokens=2
        )
        assert reply.choices[0].message.content is not None
