"""Policy replicas without Ray: OpenAIPolicy balancing over and failing over between two `agentgym serve` processes, and weight updates over HTTP that change what is sampled and the version every response reports."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import pytest
import torch
from aiohttp import web
from aiohttp.test_utils import TestServer
from safetensors.torch import save
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentgym.rollout.agent import Agent, AgentConfig
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.openai_policy import OpenAIPolicy
from agentgym.rollout.policy import PolicyError, SamplingParams
from tests.helpers.counter import CounterEnv
from tests.helpers.openai_api import ASK, MODEL, REPLY, error
from tests.helpers.serving import ServerProcess

GREEDY = SamplingParams(max_tokens=12, temperature=0)


def perturbed(tiny_model, seed: int) -> dict[str, torch.Tensor]:
    """The tiny model's weights plus seeded noise: the same architecture, other greedy replies."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True)
    noise = torch.Generator().manual_seed(seed)
    return {name: t + 0.5 * torch.randn(t.shape, generator=noise) for name, t in model.state_dict().items()}


@pytest.fixture(scope="module")
def checkpoint(tiny_model, tmp_path_factory):
    """A checkpoint directory of perturbed weights (``save_pretrained``, with its tokenizer)."""
    path = tmp_path_factory.mktemp("perturbed")
    model = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True)
    model.load_state_dict(perturbed(tiny_model, seed=1))
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(path)
    return path


async def greedy(model_path) -> list[int]:
    """What a local HFPolicy over ``model_path`` samples greedily for ASK."""
    async with HFPolicy(model_path, device="cpu") as local:
        return (await local.generate(local.chat_format.prompt_ids(ASK), GREEDY)).token_ids


@pytest.fixture(scope="module")
def servers(tiny_model):
    """Two `agentgym serve --allow-weight-updates` processes of the tiny model, started together."""
    processes = [ServerProcess(tiny_model, options=["--allow-weight-updates"]) for _ in range(2)]
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(ServerProcess.__enter__, processes))
        yield processes
    finally:
        for process in processes:
            process.__exit__()


async def post_weights(base_url: str, **request) -> tuple[int, dict, str | None]:
    async with aiohttp.ClientSession() as session, session.post(f"{base_url}/weights", **request) as response:
        return response.status, await response.json(), response.headers.get("X-Policy-Version")


async def test_requests_are_balanced_over_both_replicas_and_turns_record_them(servers, tiny_model):
    urls = [s.base_url for s in servers]
    async with OpenAIPolicy(urls, MODEL, tokenizer=tiny_model) as policy:
        prompt = policy.chat_format.prompt_ids(ASK)
        one_by_one = [await policy.generate(prompt, GREEDY) for _ in range(4)]
        together = await asyncio.gather(*(policy.generate(prompt, GREEDY) for _ in range(8)))
        trajectory = await Agent(
            policy, AgentConfig(max_turns=4, sampling=SamplingParams(max_tokens=8, temperature=0))
        ).run(CounterEnv(), "reach-7")
    # Idle replicas tie: they take turns. Under load, the least loaded one gets the request.
    assert [c.replica for c in one_by_one] == [urls[0], urls[1], urls[0], urls[1]]
    assert {c.replica for c in together} == set(urls)
    assert sorted(c.replica for c in together).count(urls[0]) == 4
    # Both servers serve the same weights: the same greedy reply, and the version they report.
    assert len({tuple(c.token_ids) for c in [*one_by_one, *together]}) == 1
    assert {c.policy_version for c in [*one_by_one, *together]} == {0}
    assert [t.replica for t in trajectory.turns] == [urls[i % 2] for i in range(len(trajectory.turns))]
    assert all(t.policy_version == 0 for t in trajectory.turns) and trajectory.turns


async def test_weights_by_path_and_by_tensors_change_the_greedy_reply_and_the_version(servers, tiny_model, checkpoint):
    first, second = (s.base_url for s in servers)
    before, from_path = await greedy(tiny_model), await greedy(checkpoint)
    tensors = perturbed(tiny_model, seed=2)
    async with HFPolicy(tiny_model, device="cpu") as local:
        local.update_weights(tensors)
        from_tensors = (await local.generate(local.chat_format.prompt_ids(ASK), GREEDY)).token_ids
    assert len({tuple(before), tuple(from_path), tuple(from_tensors)}) == 3  # the test can tell them apart

    assert await post_weights(first, json={"path": str(checkpoint), "version": 5}) == (200, {"version": 5}, "5")
    raw = {"data": save(tensors), "headers": {"Content-Type": "application/octet-stream"}, "params": {"version": "7"}}
    assert await post_weights(second, **raw) == (200, {"version": 7}, "7")

    async with (
        OpenAIPolicy(first, MODEL, tokenizer=tiny_model) as a,
        OpenAIPolicy(second, MODEL, tokenizer=tiny_model) as b,
    ):
        prompt = a.chat_format.prompt_ids(ASK)
        served_a, served_b = await a.generate(prompt, GREEDY), await b.generate(prompt, GREEDY)
    assert (served_a.token_ids, served_a.policy_version) == (from_path, 5)
    assert (served_b.token_ids, served_b.policy_version) == (from_tensors, 7)


async def test_every_request_succeeds_on_the_live_replica_when_the_other_is_stopped(servers, tiny_model):
    # Last in this module: it stops one of the module's servers.
    live, stopped = servers
    urls = [live.base_url, stopped.base_url]
    async with OpenAIPolicy(urls, MODEL, tokenizer=tiny_model, replica_cooldown=60) as policy:
        prompt = policy.chat_format.prompt_ids(ASK)
        warm = await asyncio.gather(*(policy.generate(prompt, GREEDY) for _ in range(4)))
        stopped.__exit__()
        start = time.monotonic()
        after = await asyncio.gather(*(policy.generate(prompt, GREEDY) for _ in range(8)))
        elapsed = time.monotonic() - start
        later = [await policy.generate(prompt, GREEDY) for _ in range(3)]
    assert {c.replica for c in warm} == set(urls)
    assert [c.replica for c in [*after, *later]] == [live.base_url] * 11
    served_by_live = {tuple(c.token_ids) for c in warm if c.replica == live.base_url}
    assert {tuple(c.token_ids) for c in [*after, *later]} == served_by_live and len(served_by_live) == 1
    assert elapsed < 30  # a refused connection fails over at once, with no backoff


# --- failover and probing against fault-injecting endpoints -------------------------------------
# These handlers stand in for a replica that is down and comes back: timing a real server's
# outage to the millisecond is not possible.


@pytest.fixture
async def endpoints():
    """``await endpoints(handler, ...)``: one endpoint per handler, each ``handler(hit) -> Response``; returns their URLs."""
    servers = []

    async def start(*handlers):
        urls = []
        for handler in handlers:
            hits = 0

            async def answer(request: web.Request, handler=handler) -> web.Response:
                nonlocal hits
                hits += 1
                return handler(hits)

            app = web.Application()
            app.router.add_post("/v1/{tail:.*}", answer)
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            servers.append(server)
            urls.append(f"http://127.0.0.1:{server.port}/v1")
        return urls

    yield start
    for server in servers:
        await server.close()


async def test_a_failed_replica_is_skipped_then_probed_and_back_when_it_answers(endpoints):
    calls = []

    def flaky(hit):
        calls.append("flaky")
        return error(503, "restarting") if hit == 1 else web.json_response(REPLY)

    def steady(hit):
        calls.append("steady")
        return web.json_response(REPLY)

    flaky_url, steady_url = await endpoints(flaky, steady)
    async with OpenAIPolicy(
        [flaky_url, steady_url], MODEL, logprobs=False, replica_cooldown=0.5, backoff=5, version=4
    ) as policy:
        first = await policy.chat(ASK, None, SamplingParams())  # flaky's 503: on to steady, with no backoff
        cooling = [await policy.chat(ASK, None, SamplingParams()) for _ in range(2)]
        await asyncio.sleep(0.6)
        probe = await policy.chat(ASK, None, SamplingParams())
        back = [await policy.chat(ASK, None, SamplingParams()) for _ in range(2)]
    assert calls == ["flaky", "steady", "steady", "steady", "flaky", "steady", "flaky"]
    assert [c.replica for c in [first, *cooling, probe, *back]] == [steady_url] * 3 + [flaky_url, steady_url, flaky_url]
    # These endpoints report no version: the completion carries the policy's own.
    assert {c.policy_version for c in [first, *cooling, probe, *back]} == {4}


async def test_when_every_replica_fails_the_error_names_each_and_the_retries(endpoints):
    urls = await endpoints(lambda hit: error(502, "bad gateway"), lambda hit: error(500, "out of memory"))
    async with OpenAIPolicy(urls, MODEL, logprobs=False, max_retries=1, backoff=0.01) as policy:
        with pytest.raises(PolicyError) as caught:
            await policy.chat(ASK, None, SamplingParams())
    message = str(caught.value)
    assert (
        f"{urls[0]} answered HTTP 502: bad gateway" in message
        and f"{urls[1]} answered HTTP 500: out of memory" in message
    )
    assert message.endswith("(gave up after 4 attempts)")


def test_base_urls_must_be_distinct_and_at_least_one():
    for bad in ([], ["http://a/v1", "http://a/v1"]):
        with pytest.raises(ValueError, match="distinct URLs"):
            OpenAIPolicy(bad, MODEL)


# --- the weights endpoint, in process -----------------------------------------------------------


@pytest.fixture
async def own_policy(tiny_model):
    """An HFPolicy of the tiny model of this test's own: weight updates must not reach the session's."""
    policy = HFPolicy(tiny_model, device="cpu")
    yield policy
    await policy.aclose()


async def test_weight_updates_are_off_unless_the_server_allows_them(served, own_policy, checkpoint):
    status, body, _ = await post_weights(await served(own_policy), json={"path": str(checkpoint), "version": 1})
    assert status == 403 and body["error"]["type"] == "permission_error"
    assert "--allow-weight-updates" in body["error"]["message"] and own_policy.version == 0


async def test_every_response_reports_the_version_that_sampled_it(served, own_policy, tiny_model):
    own_policy.update_weights(own_policy.model, version=3)  # the same weights, a new version
    base_url = await served(own_policy)
    prompt = {"model": MODEL, "max_tokens": 4, "temperature": 0}
    async with aiohttp.ClientSession() as session:
        for path, body in (
            ("chat/completions", {**prompt, "messages": ASK, "n": 2}),
            ("completions", {**prompt, "prompt": "hello"}),
        ):
            async with session.post(f"{base_url}/{path}", json=body) as response:
                answer = await response.json()
                assert response.headers["X-Policy-Version"] == "3" and answer["policy_version"] == 3
                assert [choice["policy_version"] for choice in answer["choices"]] == [3] * body.get("n", 1)
            async with session.post(f"{base_url}/{path}", json={**body, "stream": True}) as response:
                assert response.headers["X-Policy-Version"] == "3"
                chunks = [line for line in (await response.text()).splitlines() if line.startswith("data: {")]
                assert chunks and all('"policy_version": 3' in chunk for chunk in chunks)
        for url in (f"{base_url}/models", base_url.removesuffix("/v1") + "/health"):
            async with session.get(url) as response:
                assert response.headers["X-Policy-Version"] == "3" and (await response.json())["policy_version"] == 3


async def test_bad_weights_are_refused_with_a_400_and_change_nothing(served, own_policy, tiny_model, tmp_path):
    base_url = await served(own_policy, allow_weight_updates=True)
    prompt = own_policy.chat_format.prompt_ids(ASK)
    before = (await own_policy.generate(prompt, GREEDY)).token_ids
    state = perturbed(tiny_model, seed=3)
    (tmp_path / "notes.txt").write_text("not weights")
    (tmp_path / "fake.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00garbage!")
    reshaped = {**state, "model.norm.weight": torch.ones(3)}
    missing = {name: tensor for name, tensor in state.items() if name != "model.norm.weight"}
    octet = {"Content-Type": "application/octet-stream"}
    cases = [
        ({"json": {"version": 1}}, "path must name"),
        ({"json": {"path": str(tmp_path / "absent")}}, "no such file or directory"),
        ({"json": {"path": str(tmp_path / "notes.txt")}}, "cannot read weights"),
        ({"json": {"path": str(tmp_path / "fake.safetensors")}}, "cannot read weights"),
        ({"json": {"path": str(tmp_path), "version": 1}}, "cannot read weights"),  # nothing loadable in it
        ({"json": {"path": str(tmp_path), "version": -1}}, "version must be an integer"),
        ({"data": b"[1, 2]", "headers": {"Content-Type": "application/json"}}, "must be a JSON object"),
        ({"data": b"", "headers": octet}, "the body is empty"),
        ({"data": b"garbage", "headers": octet}, "cannot read weights from the request body"),
        ({"data": save(reshaped), "headers": octet}, "other shapes, e.g. model.norm.weight (3,) for (64,)"),
        ({"data": save(missing), "headers": octet}, "missing ['model.norm.weight']"),
        ({"data": save(state), "headers": octet, "params": {"version": "v2"}}, "version must be a non-negative"),
    ]
    for request, message in cases:
        status, body, _ = await post_weights(base_url, **request)
        assert status == 400 and message in body["error"]["message"], (request, body)
        assert body["error"]["type"] == "invalid_request_error"
    assert own_policy.version == 0 and (await own_policy.generate(prompt, GREEDY)).token_ids == before


async def test_requests_being_decoded_finish_on_the_old_weights(served, own_policy, tiny_model, checkpoint):
    base_url = await served(own_policy, allow_weight_updates=True)
    long = SamplingParams(max_tokens=100, temperature=0)
    prompt = own_policy.chat_format.prompt_ids(ASK)
    async with HFPolicy(checkpoint, device="cpu") as reference:
        old, new = await own_policy.generate(prompt, long), await reference.generate(prompt, long)
    assert old.token_ids != new.token_ids
    async with OpenAIPolicy(base_url, MODEL, tokenizer=tiny_model) as policy:
        decoding = asyncio.create_task(policy.generate(prompt, long))
        requests = own_policy.stats.requests
        while own_policy.stats.requests == requests:  # counted when its batch starts
            await asyncio.sleep(0.005)
        update = asyncio.create_task(post_weights(base_url, json={"path": str(checkpoint), "version": 1}))
        await asyncio.sleep(0.05)
        assert not decoding.done() and not update.done()  # the update waits for the batch in hand
        in_flight, (status, body, _) = await decoding, await update
        after = await policy.generate(prompt, long)
    assert status == 200 and body == {"version": 1}
    assert (in_flight.token_ids, in_flight.policy_version) == (old.token_ids, 0)
    assert (after.token_ids, after.policy_version) == (new.token_ids, 1)
