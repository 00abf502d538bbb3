"""The OpenAI-compatible server, queried with the official `openai` client over loopback: chat, streaming, logprobs, tool calls, token ids, batching, errors, and `agentgym serve` as a subprocess."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai
import pytest

from agentgym.rollout.policy import PolicyError, SamplingParams
from tests.helpers.openai_api import ASK, CALL_REPLY, MODEL, TOOLS, RecordingPolicy


def client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0)


async def test_chat_completion_with_the_sync_client_reports_usage_and_passes_sampling_on(served):
    policy = RecordingPolicy(["Hello there."])
    base_url = await served(policy)
    sync = openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0)
    # The sync client blocks, so it runs in a thread while this loop serves.
    response = await asyncio.to_thread(
        sync.chat.completions.create,
        model=MODEL,
        messages=ASK,
        temperature=0.7,
        top_p=0.9,
        max_tokens=20,
        seed=11,
        stop=["\n\n"],
        extra_body={"top_k": 5},
    )
    models = await asyncio.to_thread(sync.models.list)
    sync.close()

    choice = response.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == "Hello there."
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None and choice.logprobs is None
    prompt_ids = policy.chat_format.prompt_ids(ASK)
    assert policy.prompts == [prompt_ids]
    sampled = policy.chat_format.encode("Hello there.") + [policy.chat_format.eos_token_id]
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (len(prompt_ids), len(sampled))
    assert response.usage.total_tokens == len(prompt_ids) + len(sampled)
    assert policy.samplings == [
        SamplingParams(max_tokens=20, temperature=0.7, top_p=0.9, top_k=5, stop=("\n\n",), seed=11)
    ]
    assert response.model == MODEL and response.id.startswith("chatcmpl-")
    assert [m.id for m in models.data] == [MODEL]


async def test_stream_reassembles_to_the_non_streamed_reply_with_usage(served, hf_policy):
    base_url = await served(hf_policy)
    api = client(base_url)
    request = dict(model=MODEL, messages=ASK, max_tokens=24, seed=5, temperature=1.0, logprobs=True)
    whole = await api.chat.completions.create(**request)
    chunks = [
        c
        async for c in await api.chat.completions.create(**request, stream=True, stream_options={"include_usage": True})
    ]
    await api.close()

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    streamed_logprobs = [
        e.logprob for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content
    ]
    assert streamed_logprobs == [e.logprob for e in whole.choices[0].logprobs.content]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        whole.choices[0].finish_reason
    ]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert not chunks[-1].choices and chunks[-1].usage == whole.usage


async def test_stream_of_multibyte_text_splits_only_at_character_boundaries(served):
    reply = "héllo 日本語 ✓ done"  # byte-level tokens end inside these characters
    base_url = await served(RecordingPolicy([reply]))
    api = client(base_url)
    chunks = [c async for c in await api.chat.completions.create(model=MODEL, messages=ASK, stream=True, max_tokens=64)]
    await api.close()
    pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert "".join(pieces) == reply and "\ufffd" not in "".join(pieces) and len(pieces) > 3


async def test_logprobs_have_one_entry_per_sampled_token_with_the_sampled_token_as_top_alternative(served):
    policy = RecordingPolicy(["two words"])
    api = client(await served(policy))
    response = await api.chat.completions.create(
        model=MODEL, messages=ASK, logprobs=True, top_logprobs=3, extra_body={"return_token_ids": True}
    )
    plain = await api.chat.completions.create(model=MODEL, messages=ASK, logprobs=True)
    await api.close()

    ids = policy.chat_format.encode("two words") + [policy.chat_format.eos_token_id]
    content = response.choices[0].logprobs.content
    assert response.choices[0].token_ids == ids and response.prompt_token_ids == policy.prompts[0]
    assert [e.logprob for e in content] == pytest.approx([-0.1 * (i + 1) for i in range(len(ids))])
    assert [e.token for e in content] == [policy.chat_format.tokenizer.decode([i]) for i in ids]
    assert all(
        len(e.top_logprobs) == 1 and e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob
        for e in content
    )
    assert len(content) == response.usage.completion_tokens
    assert all(e.top_logprobs == [] for e in plain.choices[0].logprobs.content)


async def test_hermes_tool_call_blocks_become_tool_calls(served):
    policy = RecordingPolicy([CALL_REPLY])
    api = client(await served(policy))
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "pwd"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "/work"},
    ]
    response = await api.chat.completions.create(model=MODEL, messages=history, tools=TOOLS)
    message = response.choices[0].message
    assert response.choices[0].finish_reason == "tool_calls" and message.content == "Let me look."
    [call] = message.tool_calls
    assert call.id.startswith("call_") and call.type == "function" and call.function.name == "bash"
    assert json.loads(call.function.arguments) == {"cmd": "ls -la"}
    # The earlier structured call and the tool result reached the template (rendered as Hermes text).
    expected_history = [*ASK, {"role": "assistant", "content": "", "tool_calls": history[2]["tool_calls"]}, history[3]]
    assert policy.prompts[0] == policy.chat_format.prompt_ids(expected_history, TOOLS)

    streamed = [c async for c in await api.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, stream=True)]
    calls = [t for c in streamed for t in c.choices[0].delta.tool_calls or []]
    assert [(t.function.name, json.loads(t.function.arguments)) for t in calls] == [("bash", {"cmd": "ls -la"})]
    assert streamed[-1].choices[0].finish_reason == "tool_calls"

    off = await api.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="none")
    assert off.choices[0].message.content == CALL_REPLY and off.choices[0].message.tool_calls is None
    assert off.choices[0].finish_reason == "stop"
    await api.close()


async def test_malformed_tool_call_json_stays_text(served):
    reply = '<tool_call>{"name": "bash", "arguments": {</tool_call>'
    api = client(await served(RecordingPolicy([reply])))
    response = await api.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS)
    await api.close()
    assert response.choices[0].message.content == reply and response.choices[0].message.tool_calls is None


async def test_completions_token_ids_in_give_the_backends_exact_token_ids_out(served, hf_policy):
    api = client(await served(hf_policy))
    prompt_ids = hf_policy.chat_format.prompt_ids(ASK)
    sampling = SamplingParams(max_tokens=12, temperature=1.0, seed=7)
    direct = await hf_policy.generate(prompt_ids, sampling)
    response = await api.completions.create(
        model=MODEL,
        prompt=prompt_ids,
        max_tokens=12,
        temperature=1.0,
        seed=7,
        logprobs=1,
        extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
    )
    stream = [
        c
        async for c in await api.completions.create(
            model=MODEL,
            prompt=prompt_ids,
            max_tokens=12,
            temperature=1.0,
            seed=7,
            stream=True,
            extra_body={"return_token_ids": True},
        )
    ]
    by_text = await api.completions.create(
        model=MODEL,
        prompt=hf_policy.chat_format.decode(prompt_ids),
        max_tokens=3,
        extra_body={"return_token_ids": True},
    )
    await api.close()

    choice = response.choices[0]
    assert choice.token_ids == direct.token_ids and response.prompt_token_ids == prompt_ids
    assert choice.logprobs.tokens == [f"token_id:{i}" for i in direct.token_ids]
    assert choice.logprobs.token_logprobs == pytest.approx(direct.logprobs, abs=1e-5)
    assert choice.text == direct.text and choice.finish_reason == direct.finish_reason
    assert response.usage.completion_tokens == len(direct.token_ids)
    assert "".join(c.choices[0].text for c in stream) == direct.text
    assert [i for c in stream for i in getattr(c.choices[0], "token_ids", None) or []] == direct.token_ids
    assert by_text.prompt_token_ids == hf_policy.chat_format.encode(hf_policy.chat_format.decode(prompt_ids))
    assert len(by_text.choices[0].token_ids) <= 3


async def test_top_logprobs_are_the_k_most_likely_tokens_as_openai_returns_them(served, hf_policy):
    api = client(await served(hf_policy))
    chat = await api.chat.completions.create(
        model=MODEL, messages=ASK, logprobs=True, top_logprobs=3, max_tokens=6, temperature=0
    )
    legacy = await api.completions.create(model=MODEL, prompt="Hello", logprobs=3, max_tokens=6, temperature=0)
    streamed = [
        c
        async for c in await api.chat.completions.create(
            model=MODEL, messages=ASK, logprobs=True, top_logprobs=2, max_tokens=6, temperature=0, stream=True
        )
    ]
    await api.close()

    content = chat.choices[0].logprobs.content
    assert content and all(len(e.top_logprobs) == 3 for e in content)
    for entry in content:
        values = [t.logprob for t in entry.top_logprobs]
        assert values == sorted(values, reverse=True) and len({t.token for t in entry.top_logprobs}) == 3
        # Greedy: the sampled token is the most likely one, with the same logprob.
        assert entry.top_logprobs[0].token == entry.token and entry.top_logprobs[0].logprob == pytest.approx(
            entry.logprob
        )
    legacy_logprobs = legacy.choices[0].logprobs
    assert all(
        len(top) == 3 and token in top for token, top in zip(legacy_logprobs.tokens, legacy_logprobs.top_logprobs)
    )
    assert all(
        len(e.top_logprobs) == 2
        for c in streamed
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    )


async def test_completions_take_a_list_of_prompts_as_openai_does(served, hf_policy):
    api = client(await served(hf_policy))
    ids = hf_policy.chat_format.encode("Hi there")
    response = await api.completions.create(
        model=MODEL, prompt=["Hello", "The cat"], n=2, max_tokens=4, seed=3, extra_body={"return_token_ids": True}
    )
    by_ids = await api.completions.create(
        model=MODEL, prompt=[ids, ids[:1]], max_tokens=2, extra_body={"return_token_ids": True}
    )
    alone = await api.completions.create(model=MODEL, prompt="The cat", n=2, max_tokens=4, seed=3)
    await api.close()

    encode = hf_policy.chat_format.encode
    assert [c.index for c in response.choices] == [0, 1, 2, 3]  # prompt p's samples are p * n + j
    assert [c.prompt_token_ids for c in response.choices] == [encode("Hello")] * 2 + [encode("The cat")] * 2
    assert [c.text for c in response.choices[2:]] == [c.text for c in alone.choices]  # the same seeds per prompt
    assert response.usage.prompt_tokens == len(encode("Hello")) + len(encode("The cat"))
    assert [c.prompt_token_ids for c in by_ids.choices] == [ids, ids[:1]]


async def test_n_samples_are_distinct_and_batched_together(served, hf_policy):
    api = client(await served(hf_policy))
    before = hf_policy.stats.batches
    response = await api.chat.completions.create(model=MODEL, messages=ASK, n=4, max_tokens=8, seed=1)
    await api.close()
    assert [c.index for c in response.choices] == [0, 1, 2, 3]
    assert len({c.message.content for c in response.choices}) > 1  # seeds 1..4, not one seed four times
    assert hf_policy.stats.batches - before < 4


async def test_concurrent_requests_are_batched_by_the_policy(served, hf_policy):
    api = client(await served(hf_policy))
    batches, requests = hf_policy.stats.batches, hf_policy.stats.requests
    replies = await asyncio.gather(
        *(
            api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"Task {i}"}], max_tokens=6)
            for i in range(8)
        )
    )
    await api.close()
    assert len(replies) == 8 and hf_policy.stats.requests - requests == 8
    assert hf_policy.stats.batches - batches < 8


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/v1/chat/completions", b"{not json", None),
        ("/v1/chat/completions", b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None),  # RecursionError
        (
            "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": ' + b"[" * 900 + b"]" * 900 + b"}]}",
            "messages[0].content",
        ),  # deep but within the decoder's reach
        ("/v1/chat/completions", {"model": MODEL}, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ("/v1/chat/completions", {"messages": [{"role": "user"}]}, "messages[0].content"),
        ("/v1/chat/completions", {"messages": ASK, "temperature": "hot"}, "temperature"),
        ("/v1/chat/completions", {"messages": ASK, "logprobs": True, "top_logprobs": 50}, "top_logprobs"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 200}]}, "messages"),
        ("/v1/chat/completions", {"messages": ASK, "max_tokens": 500}, "max_tokens"),
        ("/v1/chat/completions", {"messages": ASK, "presence_penalty": 0.5}, "presence_penalty"),
        ("/v1/completions", {"prompt": []}, "prompt"),
        ("/v1/completions", {"prompt": [1, 2, 999999]}, "prompt"),
        ("/v1/completions", {"prompt": ["a", ""]}, "prompt[1]"),
        ("/v1/completions", {"prompt": ["a"] * 65}, "prompt"),
    ],
)
async def test_bad_input_is_a_400_in_openais_error_shape(served, path, body, param):
    base_url = await served(RecordingPolicy(["ok"]), context_window=128)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with aiohttp.ClientSession() as session:
        async with session.post(
            base_url.removesuffix("/v1") + path, data=data, headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == 400 and response.content_type == "application/json"
            error = (await response.json())["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and error["message"]


async def test_openai_client_raises_bad_request_and_not_found(served):
    api = client(await served(RecordingPolicy(["ok"])))
    with pytest.raises(openai.BadRequestError, match="role"):
        await api.chat.completions.create(model=MODEL, messages=[{"role": "robot", "content": "hi"}])
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        await api.chat.completions.create(model="gpt-9", messages=ASK)
    await api.close()


class FailingPolicy(RecordingPolicy):
    def __init__(self, error: Exception):
        super().__init__(["unused"])
        self.error = error

    async def generate(self, prompt_ids, sampling):
        raise self.error


@pytest.mark.parametrize(
    "error, message",
    [(PolicyError("worker died"), "worker died"), (ZeroDivisionError("oops"), "ZeroDivisionError: oops")],
)
async def test_backend_failures_are_a_500_with_the_message_not_a_traceback_page(served, error, message):
    base_url = await served(FailingPolicy(error))
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base_url}/chat/completions", json={"messages": ASK}) as response:
            assert response.status == 500 and response.content_type == "application/json"
            body = await response.json()
        async with session.get(base_url.removesuffix("/v1") + "/nowhere") as missing:
            assert missing.status == 404 and "error" in await missing.json()
    assert message in body["error"]["message"] and body["error"]["type"] == "server_error"


def test_agentgym_serve_cli_answers_the_openai_client(served_tiny_model):
    api = openai.OpenAI(base_url=served_tiny_model, api_key="EMPTY", max_retries=0)
    try:
        chat = api.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, seed=0, logprobs=True)
        assert chat.usage.completion_tokens == len(chat.choices[0].logprobs.content) <= 8
        completion = api.completions.create(
            model=MODEL, prompt=[1, 2, 3], max_tokens=4, extra_body={"return_token_ids": True}
        )
        assert completion.prompt_token_ids == [1, 2, 3] and 1 <= len(completion.choices[0].token_ids) <= 4
        assert api.models.list().data[0].max_model_len == 4096
    finally:
        api.close()
