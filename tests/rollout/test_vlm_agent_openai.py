"""Screenshots reach an OpenAI-compatible vision endpoint: the real openai client, the exact content parts, keep-last-k, budgets, refusals.

The endpoint is :class:`tests.helpers.vlm_endpoint.RecordingVLM`, a small aiohttp server that records every
request and answers with scripted completions: it stands in for a hosted VLM (no model can be
downloaded here), and it is what lets the test see the exact bytes the real ``openai`` client sent.
It also refuses the way real endpoints do: HTTP 413 for images over a size (a hosted API's payload
limit) and HTTP 400 with vLLM's words for a text-only model given images.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json

import numpy as np
import pytest
from PIL import Image

from agentgym.rollout.agent import Agent, AgentConfig
from agentgym.rollout.images import ImageConfig, ImageRejectedError, resize_area
from agentgym.rollout.openai_policy import OpenAIPolicy
from agentgym.rollout.policy import SamplingParams
from tests.helpers.counter import ScreenCounterEnv, frame
from tests.helpers.vlm_endpoint import TEXT_ONLY_MODEL, RecordingVLM, images_in

ADD_5_ADD_2_SUBMIT = [[("add", {"n": 5})], [("add", {"n": 2})], [("submit", {})]]


@pytest.fixture
async def vlm():
    servers = []

    async def start(replies=ADD_5_ADD_2_SUBMIT, refuse=None) -> tuple[RecordingVLM, OpenAIPolicy]:
        endpoint = RecordingVLM(replies, refuse)
        server = await endpoint.start()
        servers.append(server)
        policy = OpenAIPolicy(endpoint.base_url, "vlm", logprobs=False, max_retries=0)
        servers.append(policy)
        return endpoint, policy

    yield start
    for server in reversed(servers):
        await server.aclose() if isinstance(server, OpenAIPolicy) else await server.close()


@pytest.fixture
def env():
    env = ScreenCounterEnv()
    yield env
    env.close()


def decoded(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_screenshots_go_in_as_content_parts_and_only_the_last_stays(vlm, env):
    endpoint, policy = await vlm()
    trajectory = await Agent(policy, AgentConfig(images=ImageConfig())).run(env, "reach-7")
    assert trajectory.success and len(endpoint.requests) == 3

    first = endpoint.requests[0]["messages"]
    assert [m["role"] for m in first] == ["system", "user"]
    text, image = first[1]["content"]
    assert text == {"type": "text", "text": "Reach 7 by calling add(n). Counter: 0"}
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith("data:image/png;base64,")
    (png,) = images_in(first[1])
    assert np.array_equal(decoded(png), resize_area(frame(0), 307, 768))  # downscaled to max_side, lossless

    # Turn 2: the tool message is text; the screenshot follows in a user message; turn 0's became a stub.
    second = endpoint.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "user"]
    assert second[1]["content"] == [
        {"type": "text", "text": "Reach 7 by calling add(n). Counter: 0"},
        {"type": "text", "text": "[screenshot of turn 0 removed to save context]"},
    ]
    assert second[3] == {"role": "tool", "tool_call_id": "call_0", "content": "Counter: 5"}
    assert second[4]["content"][0] == {"type": "text", "text": "Screenshot after turn 1:"}
    (png,) = images_in(second[4])
    assert np.array_equal(decoded(png), resize_area(frame(5), 307, 768))
    third = endpoint.requests[2]["messages"]
    assert sum(len(images_in(m)) for m in third) == 1
    assert np.array_equal(decoded(images_in(third[-1])[0]), resize_area(frame(7), 307, 768))

    # Each turn records the hash of the image it was shown, and the trajectory a thumbnail of each.
    shown = [images_in(request["messages"][-1])[0] for request in endpoint.requests]
    assert [turn.image_hashes for turn in trajectory.turns] == [[sha(png)] for png in shown]
    assert trajectory.images == {sha(png): png for png in shown}  # the bytes sent, once each, for a store
    thumbnails = trajectory.metadata["image_thumbnails"]
    assert set(thumbnails) == {sha(png) for png in shown}
    with Image.open(io.BytesIO(base64.b64decode(thumbnails[sha(shown[0])]))) as small:
        assert (small.format, small.size) == ("JPEG", (256, 102))  # 400 × 256/1000 = 102.4
    again = type(trajectory).from_dict(json.loads(json.dumps(trajectory.to_dict())))
    assert [t.image_hashes for t in again.turns] == [t.image_hashes for t in trajectory.turns]


async def test_keep_last_two_jpeg_without_native_tools(vlm, env):
    endpoint, policy = await vlm()
    config = AgentConfig(images=ImageConfig(keep_last=2, format="jpeg", quality=60, max_side=500), native_tools=False)
    trajectory = await Agent(policy, config).run(env, "reach-7")  # tools in the prompt, calls as text
    assert trajectory.success and len(endpoint.requests) == 3
    last = endpoint.requests[-1]["messages"]
    assert "tools" not in endpoint.requests[-1]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    kinds = [[part["type"] for part in m["content"]] for m in last if m["role"] == "user"]
    assert kinds == [["text", "text"], ["text", "image_url"], ["text", "image_url"]]
    assert last[3]["content"][0] == {"type": "text", "text": "Counter: 5"}
    for message in last[3::2]:
        (jpeg,) = images_in(message)
        assert jpeg[:2] == b"\xff\xd8" and decoded(jpeg).shape == (200, 500, 3)  # 400 × 500/1000


async def test_text_only_config_sends_plain_strings(vlm, env):
    endpoint, policy = await vlm()
    trajectory = await Agent(policy, AgentConfig()).run(env, "reach-7")
    assert trajectory.success
    for request in endpoint.requests:
        assert all(isinstance(m.get("content"), (str, type(None))) for m in request["messages"])
    assert all(t.image_hashes == [] for t in trajectory.turns) and "image_thumbnails" not in trajectory.metadata
    assert "image_hashes" not in trajectory.to_dict()["turns"][0]


def _largest_image(body: dict) -> int:
    sizes = [len(data) for m in body["messages"] for data in images_in(m)]
    return max(sizes, default=0)


async def test_an_endpoint_that_refuses_large_images_gets_them_at_half_the_side(vlm, env):
    # A hosted API's payload limit: 413 for any image over 200 kB. 768 × 307 noise is ~700 kB; 384 × 154 ~180 kB.
    endpoint, policy = await vlm(
        refuse=lambda body: (413, "Request Entity Too Large") if _largest_image(body) > 200_000 else None
    )
    trajectory = await Agent(policy, AgentConfig(images=ImageConfig())).run(env, "reach-7")
    assert trajectory.success
    widths = [[decoded(d).shape[1] for m in r["messages"] for d in images_in(m)] for r in endpoint.requests]
    assert widths == [[768], [384], [384], [384]]  # refused once, then every turn at the lowered side
    assert all(len(t.image_hashes) == 1 for t in trajectory.turns)


async def test_images_the_endpoint_refuses_at_every_size_are_left_out_with_a_note(vlm, env):
    endpoint, policy = await vlm(refuse=lambda body: (413, "payload too large") if _largest_image(body) else None)
    trajectory = await Agent(policy, AgentConfig(images=ImageConfig())).run(env, "reach-7")
    assert trajectory.success
    widths = [[decoded(d).shape[1] for m in r["messages"] for d in images_in(m)] for r in endpoint.requests[:4]]
    assert widths == [[768], [384], [192], []]  # 96 is under min_side 128: dropped
    note = endpoint.requests[3]["messages"][1]["content"][1]["text"]
    assert note.startswith("[screenshot of turn 0 left out: the endpoint refused it as too large (")
    assert "HTTP 413" in note
    assert all(t.image_hashes == [] for t in trajectory.turns)


async def test_an_image_over_max_bytes_even_at_min_side_is_a_note(vlm, env):
    endpoint, policy = await vlm()
    await Agent(policy, AgentConfig(images=ImageConfig(max_bytes=50_000, min_side=400))).run(env, "reach-7")
    assert endpoint.requests[0]["messages"][1]["content"][1] == {
        "type": "text",
        "text": "[screenshot of turn 0 left out: over the 50000-byte limit even at 400 pixels]",
    }


async def test_an_image_that_does_not_fit_the_context_is_dropped_with_a_note(vlm, env):
    # 768 × 307 is estimated at 28 × 11 = 308 tokens; 400 - 64 = 336 leave room for the text but not for both.
    endpoint, policy = await vlm()
    config = AgentConfig(images=ImageConfig(), context_window=400, sampling=SamplingParams(max_tokens=64))
    trajectory = await Agent(policy, config).run(env, "reach-7")
    assert trajectory.success and not trajectory.error
    first = endpoint.requests[0]["messages"][1]["content"]
    assert first[1] == {
        "type": "text",
        "text": "[screenshot of turn 0 left out: the prompt did not fit the model's context]",
    }
    assert trajectory.turns[0].folded and trajectory.turns[0].image_hashes == []


async def test_a_text_only_endpoint_given_images_is_a_clear_error(vlm, env):
    endpoint, policy = await vlm(refuse=lambda body: (400, TEXT_ONLY_MODEL) if _largest_image(body) else None)
    with pytest.raises(ImageRejectedError, match="text-only model") as raised:
        await Agent(policy, AgentConfig(images=ImageConfig())).run(env, "reach-7")
    assert not raised.value.too_large
    assert TEXT_ONLY_MODEL in str(raised.value) and "without --images" in str(raised.value)
    assert len(endpoint.requests) == 1  # nothing retried: it cannot work with images
    # The same endpoint with text only works.
    assert (await Agent(policy, AgentConfig()).run(env, "reach-7")).success


async def test_a_context_overflow_with_images_stays_a_context_error(vlm, env):
    message = "This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens"
    endpoint, policy = await vlm(refuse=lambda body: (400, message))
    with pytest.raises(Exception) as raised:
        await Agent(policy, AgentConfig(images=ImageConfig())).run(env, "reach-7")
    assert not isinstance(raised.value, ImageRejectedError) and "maximum context length" in str(raised.value)
