"""The gateway with the real `openai` client: token-exact recording, appended and rewritten histories, bad input,
session bounds and isolation, the sampling override. The backend is a scripted policy on the tiny model's real
tokenizer and chat template (it stands in for sampling only), or the tiny model itself."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI

from agentgym.gateway import Gateway, SessionLimits
from agentgym.rollout.policy import Completion, SamplingParams
from agentgym.task import call_text
from tests.helpers.scripted import ScriptedPolicy

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Read a key.",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        },
    }
]
LOOKUP = call_text("lookup", {"key": "amber"})


class SpyPolicy(ScriptedPolicy):
    """The scripted policy, keeping what each call got and gave: what the record must hold, id for id."""

    def __init__(self, replies, **kwargs):
        super().__init__(replies, **kwargs)
        self.calls: list[tuple[list[int], SamplingParams, Completion]] = []

    async def generate(self, prompt_ids, sampling):
        completion = await super().generate(prompt_ids, sampling)
        self.calls.append((list(prompt_ids), sampling, completion))
        return completion


def client(gateway: Gateway, key: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)


async def test_an_appended_conversation_is_one_sequence_of_exactly_the_sampled_ids():
    policy = SpyPolicy([LOOKUP, "It is 42."])
    async with Gateway(policy) as gateway:
        session = gateway.open_session("t")
        api = client(gateway, session.key)
        messages: list[dict] = [{"role": "user", "content": "What is under amber?"}]
        first = await api.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        assert (call.function.name, json.loads(call.function.arguments)) == ("lookup", {"key": "amber"})
        messages += [first.choices[0].message.model_dump(exclude_none=True)]
        messages += [{"role": "tool", "tool_call_id": call.id, "content": "amber: 42"}]
        stream = await api.chat.completions.create(model="policy", messages=messages, tools=TOOLS, stream=True)
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
        assert text == "It is 42."
        trajectory = gateway.close_session(session).trajectory()

    # Each turn holds exactly what the backend was given and sampled, logprobs and version included.
    assert len(trajectory.turns) == len(policy.calls) == 2
    for turn, (prompt_ids, _, completion) in zip(trajectory.turns, policy.calls):
        assert turn.prompt_ids == prompt_ids
        assert turn.completion_ids == completion.token_ids and turn.logprobs == completion.logprobs
        assert turn.policy_version == completion.policy_version
    # The second prompt continues the first prompt + its sampled ids (not the program's re-serialised copy).
    first_turn, second_turn = trajectory.turns
    assert second_turn.prompt_ids[: len(first_turn.input_ids)] == first_turn.input_ids
    (sequence,) = trajectory.sequences()
    masked = [i for i, bit in enumerate(sequence.mask) if bit]
    spans = [i for start, end in sequence.turn_spans for i in range(start, end)]
    assert masked == spans  # loss on the sampled tokens only: the tool result and template tokens are env tokens
    assert trajectory.metadata["gateway"]["not_appended"] == 0


async def test_token_fidelity_a_retokenizing_gateway_would_have_recorded_other_ids():
    """The tool call the program sends back renders (through the chat template) as other text than was sampled:
    the record keeps the sampled ids, and the mismatch a re-tokenizing gateway would have trained on is counted."""
    policy = SpyPolicy([LOOKUP, "It is 42."])
    fmt = policy.chat_format
    async with Gateway(policy) as gateway:
        session = gateway.open_session("t")
        api = client(gateway, session.key)
        messages: list[dict] = [{"role": "user", "content": "What is under amber?"}]
        reply = (await api.chat.completions.create(model="policy", messages=messages, tools=TOOLS)).choices[0]
        messages += [reply.message.model_dump(exclude_none=True)]
        messages += [{"role": "tool", "tool_call_id": reply.message.tool_calls[0].id, "content": "amber: 42"}]
        await api.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        trajectory = gateway.close_session(session).trajectory()
    retokenized = fmt.prompt_ids(
        [
            {
                "role": m["role"],
                "content": m.get("content") or "",
                **({"tool_calls": m["tool_calls"]} if "tool_calls" in m else {}),
            }
            for m in messages
        ],
        TOOLS,
    )
    recorded = trajectory.turns[1].prompt_ids
    assert retokenized != recorded
    assert trajectory.metadata["gateway"]["retokenized_mismatches"] == 1
    # Decoding the recorded sequence and encoding it again does not give the sampled ids back either: the text is
    # the same, the ids are not (why nothing is ever re-tokenized), or they agree; either way the sampled ids stand.
    (sequence,) = trajectory.sequences()
    assert fmt.tokenizer.decode(sequence.input_ids, skip_special_tokens=False).startswith(
        fmt.tokenizer.decode(trajectory.turns[0].prompt_ids, skip_special_tokens=False)
    )
    assert sequence.input_ids[len(trajectory.turns[0].prompt_ids) :][: len(policy.calls[0][2].token_ids)] == (
        policy.calls[0][2].token_ids
    )


async def test_a_rewritten_history_starts_a_new_sequence_of_the_same_episode_and_is_counted():
    policy = SpyPolicy(["First.", "Second.", "Third."])
    async with Gateway(policy) as gateway:
        session = gateway.open_session("t")
        api = client(gateway, session.key)
        messages: list[dict] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "one"}]
        await api.chat.completions.create(model="policy", messages=messages)
        messages += [{"role": "assistant", "content": "First."}, {"role": "user", "content": "two"}]
        await api.chat.completions.create(model="policy", messages=messages)
        # Compaction: the program drops the first exchange.
        compacted = [messages[0], {"role": "user", "content": "Summary: one, two. Now three."}]
        await api.chat.completions.create(model="policy", messages=compacted)
        session.add_step("graded", 1.0, True, True)
        trajectory = gateway.close_session(session).trajectory()
    assert trajectory.metadata["gateway"] | {"wall_s": 0} == {
        "calls": 3,
        "sequences": 2,
        "not_appended": 1,
        "retokenized_mismatches": 0,
        "refused_calls": 0,
        "backend_errors": 0,
        "wall_s": 0,
    }
    sequences = trajectory.sequences()
    assert [s.turn_indices for s in sequences] == [[0, 1], [2]]
    assert trajectory.reward == 1.0 and trajectory.turns[-1].terminated
    # The new sequence's prompt is the compacted conversation, all of it context.
    assert not any(trajectory.turns[2].prompt_mask)


async def test_the_responses_api_streams_and_records_function_calls():
    policy = SpyPolicy([LOOKUP, "It is 42."])
    tools = [{"type": "function", "name": "lookup", "parameters": TOOLS[0]["function"]["parameters"]}]
    async with Gateway(policy) as gateway:
        session = gateway.open_session("t")
        api = client(gateway, session.key)
        first = await api.responses.create(model="policy", input="What is under amber?", tools=tools)
        (call,) = [item for item in first.output if item.type == "function_call"]
        assert call.name == "lookup" and json.loads(call.arguments) == {"key": "amber"}
        history = [{"role": "user", "content": "What is under amber?"}, call.model_dump(exclude_none=True)]
        history.append({"type": "function_call_output", "call_id": call.call_id, "output": "amber: 42"})
        events = [e async for e in await api.responses.create(model="policy", input=history, tools=tools, stream=True)]
        assert events[-1].type == "response.completed" and events[-1].response.output_text == "It is 42."
        trajectory = gateway.close_session(session).trajectory()
    assert len(trajectory.sequences()) == 1  # the function_call item came back as the reply that was sampled


async def test_bad_input_gets_openai_errors_and_sessions_are_bounded_and_isolated():
    policy = SpyPolicy(lambda prompt: "ok")
    async with Gateway(policy, limits=SessionLimits(max_calls=4, max_concurrent=1)) as gateway:
        alice, bob = gateway.open_session("a"), gateway.open_session("b")
        hello = [{"role": "user", "content": "hello"}]
        with pytest.raises(openai.AuthenticationError) as refused:
            await client(gateway, "not-a-session").chat.completions.create(model="policy", messages=hello)
        assert refused.value.body["code"] == "invalid_api_key"
        async with aiohttp.ClientSession() as http:
            url = gateway.base_url + "/chat/completions"
            async with http.post(url, data=b"{not json", headers={"Authorization": f"Bearer {alice.key}"}) as answer:
                assert answer.status == 400 and (await answer.json())["error"]["type"] == "invalid_request_error"
            async with http.post(url, json={"model": "policy", "messages": hello}) as answer:  # no key at all
                assert answer.status == 401
            async with http.get(gateway.base_url.removesuffix("/v1") + "/health") as answer:
                assert answer.status == 200
        api = client(gateway, alice.key)
        with pytest.raises(openai.BadRequestError, match="messages"):
            await api.chat.completions.create(model="policy", messages=[])
        with pytest.raises(openai.BadRequestError, match="n must be 1"):
            await api.chat.completions.create(model="policy", messages=hello, n=2)
        with pytest.raises(openai.NotFoundError):
            await api.chat.completions.create(model="gpt-9", messages=hello)
        # Malformed calls count too (a flood of garbage is bounded as well): four made, none left.
        with pytest.raises(openai.PermissionDeniedError, match="4 model calls"):
            await api.chat.completions.create(model="policy", messages=hello)
        # Bob's session is untouched by Alice's, and a closed session's key is refused.
        await client(gateway, bob.key).chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "bob"}]
        )
        gateway.close_session(bob)
        with pytest.raises(openai.AuthenticationError):
            await client(gateway, bob.key).chat.completions.create(model="policy", messages=hello)
        assert not alice.turns  # every call of hers was refused or failed before sampling
        assert len(bob.turns) == 1 and "bob" in policy.chat_format.tokenizer.decode(bob.turns[0].prompt_ids)
        assert alice.refused_calls == 1


async def test_a_session_floods_no_further_than_its_concurrency_bound():
    release = asyncio.Event()

    class Slow(SpyPolicy):
        async def generate(self, prompt_ids, sampling):
            await release.wait()
            return await super().generate(prompt_ids, sampling)

    async with Gateway(Slow(["ok"]), limits=SessionLimits(max_calls=50, max_concurrent=2)) as gateway:
        session = gateway.open_session("t")
        api = client(gateway, session.key)
        hello = [{"role": "user", "content": "hello"}]
        calls = [asyncio.create_task(api.chat.completions.create(model="policy", messages=hello)) for _ in range(6)]
        await asyncio.sleep(0.5)
        release.set()
        results = await asyncio.gather(*calls, return_exceptions=True)
    assert sum(isinstance(r, openai.RateLimitError) for r in results) == 4
    assert len(session.turns) == 2


async def test_the_trainers_sampling_overrides_the_programs():
    policy = SpyPolicy(["ok"])
    trainer = SamplingParams(max_tokens=5, temperature=0.7, top_p=0.9, top_k=3)
    async with Gateway(policy, sampling=trainer) as gateway:
        session = gateway.open_session("t")
        await client(gateway, session.key).chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "hi"}], temperature=0.0, max_tokens=500
        )
    ((_, sampling, _),) = policy.calls
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_tokens) == (0.7, 0.9, 3, 5)
