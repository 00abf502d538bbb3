"""The gateway in front of an upstream OpenAI-compatible server (a real `agentgym serve --model tiny` process on
loopback): an unmodified `openai`-client program's episode records exactly the ids the upstream sampled, never text
tokenized again; an upstream that returns no ids, or samples from other prompt ids than it was sent, is the backend's
failure (the eval run stops as for any policy failure), never a guess and never the program's failure.

A loopback proxy between the gateway and the upstream keeps every request and the upstream's raw answer: the record
the gateway's turns are checked against, and the place a test makes the upstream misbehave."""

from __future__ import annotations

import contextlib
import json

import pytest

from agentgym.envs.tool.keychain import KeyChainEnv
from agentgym.gateway import Gateway, run_episode
from agentgym.models import tiny_model_path
from agentgym.rollout.openai_policy import OpenAIPolicy
from agentgym.rollout.policy import PolicyError, SamplingParams
from tests.helpers import gateway_programs as programs
from tests.helpers.serving import ServerProcess


@pytest.fixture(scope="module")
def upstream():
    with ServerProcess(tiny_model_path()) as server:
        yield server.base_url


@contextlib.asynccontextmanager
async def proxy(upstream_url: str, rewrite=None):
    """``(url, exchanges)``: a loopback proxy to ``upstream_url`` keeping each (request body, upstream's answer);
    ``rewrite`` changes the answer passed on (the upstream's own stays in ``exchanges``; None: a 503 instead)."""
    import aiohttp
    from aiohttp import web

    exchanges: list[tuple[dict, dict]] = []
    http = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.Response:
        body = await request.json()
        async with http.post(upstream_url + request.path.removeprefix("/v1"), json=body) as answer:
            data, status = await answer.json(), answer.status
        exchanges.append((body, json.loads(json.dumps(data))))
        if rewrite is not None and status == 200:
            data = rewrite(data)
            if data is None:
                return web.json_response({"error": {"message": "overloaded", "type": "server_error"}}, status=503)
        return web.json_response(data, status=status)

    app = web.Application()
    app.router.add_post("/v1/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", exchanges
    finally:
        await runner.cleanup()
        await http.close()


def _policy(url: str) -> OpenAIPolicy:
    return OpenAIPolicy(url, "tiny", tokenizer=str(tiny_model_path()), max_retries=0)


async def test_the_recorded_ids_are_the_ids_the_upstream_sampled(upstream):
    env = KeyChainEnv()
    async with proxy(upstream) as (url, exchanges):
        policy = _policy(url)
        try:
            async with Gateway(policy, "tiny", sampling=SamplingParams(max_tokens=12)) as gateway:
                trajectory = await run_episode(gateway, env, programs.chat_program, task_id="train-1", timeout=120)
        finally:
            env.close()
            await policy.aclose()
    assert trajectory.metadata["program_error"] is None
    assert len(trajectory.turns) == len(exchanges) == 2
    for turn, (sent, answer) in zip(trajectory.turns, exchanges, strict=True):
        choice = answer["choices"][0]
        assert sent["prompt"] == turn.prompt_ids == choice["prompt_token_ids"]  # the upstream saw the recorded prompt
        assert turn.completion_ids == choice["token_ids"]  # and sampled the recorded completion
        assert turn.logprobs == choice["logprobs"]["token_logprobs"]
        assert turn.policy_version == answer["policy_version"]
        assert turn.replica == url
    # Append-only: the second prompt continues the first call's prompt and the ids the upstream sampled for it.
    first, second = trajectory.turns
    assert second.prompt_ids[: len(first.input_ids)] == first.input_ids and len(trajectory.sequences()) == 1
    assert trajectory.metadata["gateway"]["not_appended"] == 0


async def test_an_upstream_without_token_ids_is_refused_as_a_backend_failure_never_retokenized(upstream, tmp_path):
    from agentgym.eval.harness import PolicyUnavailableError, evaluate, load_results
    from agentgym.eval.suites import load_suite

    def without_ids(answer: dict) -> dict:  # a hosted API: text and logprobs, no ids
        for choice in answer["choices"]:
            choice.pop("token_ids", None)
            choice.pop("prompt_token_ids", None)
            choice["logprobs"]["tokens"] = ["?"] * len(choice["logprobs"]["tokens"])
        answer.pop("prompt_token_ids", None)
        return answer

    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"env": "agentgym/tool.keychain-v0", "task_id": "train-1"}))
    async with proxy(upstream, without_ids) as (url, exchanges):
        policy = _policy(url)
        try:
            with pytest.raises(PolicyUnavailableError, match="did not return the sampled token ids"):
                await evaluate(
                    load_suite(str(suite)),
                    policy,
                    out_dir=tmp_path / "run",
                    program=programs.chat_program,
                    progress=False,
                )
        finally:
            await policy.aclose()
    assert len(exchanges) == 1  # the program's first call failed; nothing was guessed from the text
    assert load_results(tmp_path / "run") == []  # not a result: not counted as the program's failure


async def test_an_upstream_that_sampled_from_other_prompt_ids_fails_the_call(upstream):
    def shifted(answer: dict) -> dict:  # e.g. a server that added a BOS token to the ids it was sent
        for choice in answer["choices"]:
            choice["prompt_token_ids"] = [0, *choice["prompt_token_ids"]]
        return answer

    env = KeyChainEnv()
    async with proxy(upstream, shifted) as (url, _):
        policy = _policy(url)
        try:
            async with Gateway(policy, "tiny") as gateway:
                with pytest.raises(PolicyError, match="other prompt ids than it was sent"):
                    await run_episode(gateway, env, programs.chat_program, task_id="train-1", timeout=120)
                assert not gateway.sessions
        finally:
            env.close()
            await policy.aclose()


async def test_a_program_that_retries_past_a_failed_backend_call_is_a_sample(upstream):
    answers = iter([None])  # the upstream's first answer is lost (a 503), the rest pass

    async def retrying(context):  # the openai client's own retries, as a program runs by default
        from openai import AsyncOpenAI

        async with AsyncOpenAI(base_url=context.base_url, api_key=context.api_key, max_retries=1) as client:
            messages = [{"role": "user", "content": context.goal}]
            reply = await client.chat.completions.create(model=context.model, messages=messages, max_tokens=4)
            return reply.choices[0].message.content

    env = KeyChainEnv()
    async with proxy(upstream, lambda answer: next(answers, answer)) as (url, exchanges):
        policy = _policy(url)
        try:
            async with Gateway(policy, "tiny") as gateway:
                trajectory = await run_episode(gateway, env, retrying, task_id="train-1", timeout=120)
        finally:
            env.close()
            await policy.aclose()
    assert trajectory.metadata["program_error"] is None and trajectory.metadata["gateway"]["backend_errors"] == 1
    assert len(exchanges) == 2 and len(trajectory.turns) == 1
    assert trajectory.turns[0].completion_ids == exchanges[1][1]["choices"][0]["token_ids"]


def test_a_chat_only_policy_cannot_back_a_gateway():
    with pytest.raises(ValueError, match="token-mode policy.*refused rather than re-tokenized"):
        Gateway(OpenAIPolicy("http://127.0.0.1:9/v1", "tiny"))
