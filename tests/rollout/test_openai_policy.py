"""OpenAIPolicy against `agentgym serve`'s app (chat and token mode) and against fault-injecting handlers (retries, timeouts, a closed port)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agentgym.models import tiny_model_path
from agentgym.rollout.openai_policy import OpenAIPolicy
from agentgym.rollout.policy import PolicyError, SamplingParams
from tests.helpers.openai_api import ASK, CALL_REPLY, MODEL, REPLY, TOOLS, RecordingPolicy, error
from tests.helpers.serving import free_port


async def test_chat_mode_returns_native_tool_calls_with_token_ids_and_logprobs(served):
    backend = RecordingPolicy([CALL_REPLY])
    async with OpenAIPolicy(await served(backend), MODEL) as policy:
        completion = await policy.chat(ASK, TOOLS, SamplingParams(max_tokens=64, temperature=0.5, top_k=4, seed=3))
    assert completion.text == "Let me look." and completion.finish_reason == "tool_calls"
    [call] = completion.tool_calls
    assert call["id"].startswith("call_") and call["type"] == "function" and call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"cmd": "ls -la"}
    assert completion.token_ids == backend.chat_format.encode(CALL_REPLY) + [backend.chat_format.eos_token_id]
    assert completion.logprobs == pytest.approx([-0.1 * (i + 1) for i in range(len(completion.token_ids))])
    assert completion.entropy is None and completion.policy_version == 0
    assert backend.prompts == [backend.chat_format.prompt_ids(ASK, TOOLS)]
    assert backend.samplings == [SamplingParams(max_tokens=64, temperature=0.5, top_k=4, seed=3)]


async def test_chat_mode_without_native_tools_leaves_them_to_the_prompt(served):
    backend = RecordingPolicy([CALL_REPLY])
    async with OpenAIPolicy(await served(backend), MODEL, native_tools=False, logprobs=False) as policy:
        completion = await policy.chat(ASK, TOOLS, SamplingParams(max_tokens=64))
    assert completion.text == CALL_REPLY and completion.tool_calls is None
    assert completion.token_ids == [] and completion.logprobs == []
    assert backend.prompts == [backend.chat_format.prompt_ids(ASK)]
    # Without ids, the server's own count is what there is to know about the tokens (eval's tokens_in/out).
    assert completion.usage["prompt_tokens"] == len(backend.prompts[0]) and completion.usage["completion_tokens"] > 0


async def test_token_mode_returns_the_exact_ids_the_served_model_sampled(served, hf_policy):
    base_url = await served(hf_policy)
    prompt_ids = hf_policy.chat_format.prompt_ids(ASK)
    sampling = SamplingParams(max_tokens=10, temperature=1.0, top_k=50, seed=21)
    async with OpenAIPolicy(base_url, MODEL, tokenizer=tiny_model_path(), version=3) as policy:
        assert policy.supports_tokens
        remote = await policy.generate(prompt_ids, sampling)
    local = await hf_policy.generate(prompt_ids, sampling)
    assert remote.token_ids == local.token_ids and remote.text == local.text
    assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-5)
    assert remote.finish_reason == local.finish_reason and remote.replica == base_url
    # The server reports the version that sampled it; the client's own (3) is for servers that do not.
    assert remote.policy_version == local.policy_version == hf_policy.version


async def test_token_mode_without_a_tokenizer_is_refused(served):
    async with OpenAIPolicy(await served(RecordingPolicy(["x"])), MODEL) as policy:
        with pytest.raises(NotImplementedError, match="tokenizer"):
            await policy.generate([1, 2], SamplingParams())


# --- fault injection --------------------------------------------------------------------------
# The handlers below stand in for a misbehaving hosted API (overloaded, hanging, refusing fields):
# behaviour that cannot be produced on demand by a real endpoint.


@pytest.fixture
async def fake_api():
    """``await fake_api(handler)`` serves ``handler`` for every POST and returns (base URL, list of request bodies)."""
    servers = []

    async def start(handler):
        bodies = []

        async def record(request: web.Request) -> web.StreamResponse:
            bodies.append(await request.json())
            return await handler(request, len(bodies))

        app = web.Application()
        app.router.add_post("/v1/{tail:.*}", record)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}/v1", bodies

    yield start
    for server in servers:
        await server.close()


@pytest.mark.parametrize("status", [503, 429])
async def test_overload_is_retried_with_backoff_until_it_succeeds(fake_api, status):
    async def flaky(request, hit):
        return error(status, "busy") if hit <= 2 else web.json_response(REPLY)

    base_url, hits = await fake_api(flaky)
    async with OpenAIPolicy(base_url, MODEL, backoff=0.01, logprobs=False) as policy:
        completion = await policy.chat(ASK, None, SamplingParams())
    assert completion.text == "fine" and len(hits) == 3


async def test_retries_exhausted_name_the_url_and_the_status(fake_api):
    async def down(request, hit):
        return error(502, "bad gateway")

    base_url, hits = await fake_api(down)
    async with OpenAIPolicy(base_url, MODEL, backoff=0.01, max_retries=2, logprobs=False) as policy:
        with pytest.raises(PolicyError, match=r"HTTP 502: bad gateway \(gave up after 3 attempts\)") as caught:
            await policy.chat(ASK, None, SamplingParams())
    assert base_url in str(caught.value) and len(hits) == 3


async def test_a_400_is_not_retried(fake_api):
    async def refuse(request, hit):
        return error(400, "max_tokens is too large")

    base_url, hits = await fake_api(refuse)
    async with OpenAIPolicy(base_url, MODEL, tokenizer=tiny_model_path(), backoff=0.01) as policy:
        with pytest.raises(PolicyError, match="HTTP 400: max_tokens is too large"):
            await policy.generate([1, 2, 3], SamplingParams())
    assert len(hits) == 1


async def test_a_hanging_endpoint_times_out(fake_api):
    async def hang(request, hit):
        await asyncio.sleep(30)

    base_url, hits = await fake_api(hang)
    async with OpenAIPolicy(base_url, MODEL, timeout=0.5, max_retries=1, backoff=0.01) as policy:
        start = time.monotonic()
        with pytest.raises(PolicyError, match=r"did not answer within 0.5 s \(gave up after 2 attempts\)"):
            await policy.chat(ASK, None, SamplingParams())
    assert 1.0 <= time.monotonic() - start < 3.0 and len(hits) == 2


async def test_a_closed_port_fails_fast_as_unreachable():
    base_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens here any more
    async with OpenAIPolicy(base_url, MODEL, max_retries=2, backoff=0.05) as policy:
        start = time.monotonic()
        with pytest.raises(PolicyError, match="unreachable") as caught:
            await policy.chat(ASK, None, SamplingParams())
    assert base_url in str(caught.value) and time.monotonic() - start < 2.0


async def test_an_endpoint_refusing_vllm_fields_is_asked_again_without_them_once(fake_api):
    async def strict(request, hit):
        body = await request.json()
        return (
            error(400, "Unrecognized request argument supplied: return_token_ids")
            if "return_token_ids" in body
            else web.json_response(REPLY)
        )

    base_url, bodies = await fake_api(strict)
    async with OpenAIPolicy(base_url, MODEL) as policy:
        first = await policy.chat(ASK, None, SamplingParams())
        second = await policy.chat(ASK, None, SamplingParams())
    assert first.text == second.text == "fine"
    assert ["return_token_ids" in b for b in bodies] == [True, False, False]
    assert all(b["logprobs"] is True for b in bodies)


async def test_token_mode_refuses_an_endpoint_that_returns_no_token_ids(fake_api):
    async def plain(request, hit):
        return web.json_response(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 0,
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "text": "hi",
                        "finish_reason": "stop",
                        "logprobs": {
                            "tokens": ["hi"],
                            "token_logprobs": [-0.3],
                            "top_logprobs": None,
                            "text_offset": [0],
                        },
                    }
                ],
            }
        )

    base_url, bodies = await fake_api(plain)
    async with OpenAIPolicy(base_url, MODEL, tokenizer=tiny_model_path()) as policy:
        with pytest.raises(PolicyError, match="did not return the sampled token ids"):
            await policy.generate([1, 2, 3], SamplingParams(top_k=0))
    assert bodies[0]["prompt"] == [1, 2, 3] and bodies[0]["logprobs"] == 1 and "top_k" not in bodies[0]
    assert bodies[0]["return_token_ids"] is True and bodies[0]["return_tokens_as_token_ids"] is True


async def test_in_flight_requests_are_bounded_by_max_concurrency(fake_api):
    in_flight, peak = 0, 0

    async def slow(request, hit):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.05)
        in_flight -= 1
        return web.json_response(REPLY)

    base_url, hits = await fake_api(slow)
    async with OpenAIPolicy(base_url, MODEL, max_concurrency=2, logprobs=False) as policy:
        await asyncio.gather(*(policy.chat(ASK, None, SamplingParams()) for _ in range(6)))
    assert len(hits) == 6 and peak == 2
