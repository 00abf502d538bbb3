"""Policy replicas on a two-node Ray cluster: one `agentgym serve` actor per node, a weight push through the object store, greedy replies equal to a local HFPolicy with the same weights, a dead replica reported at the next push, and the gateway in front of the replicas recording what each sampled."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest
import ray
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentgym.distributed.replicas import PolicyReplicas, ReplicaError
from agentgym.models import tiny_model_path
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.policy import SamplingParams

GREEDY = SamplingParams(max_tokens=12, temperature=0)
PROMPTS = [[{"role": "user", "content": text}] for text in ("List the files.", "Add 3 and 4.", "Say hi.", "Stop.")]


@pytest.fixture(scope="module")
def replicas(ray_cluster):
    with PolicyReplicas(tiny_model_path(), replicas=2, served_model_name="tiny") as replicas:
        yield replicas
        actors = [r.actor for r in replicas._replicas]
    for actor in actors:  # close() stopped every replica
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.__ray_ready__.remote(), timeout=30)


def noisy_state(seed: int) -> dict[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path(), local_files_only=True)
    noise = torch.Generator().manual_seed(seed)
    return {name: t + 0.5 * torch.randn(t.shape, generator=noise) for name, t in model.state_dict().items()}


async def local_replies(state: dict[str, torch.Tensor] | None) -> list[list[int]]:
    """Greedy replies to PROMPTS of a local HFPolicy of the tiny model with ``state`` loaded (None: as built)."""
    async with HFPolicy(tiny_model_path(), device="cpu") as local:
        if state is not None:
            local.update_weights(state)
        return [(await local.generate(local.chat_format.prompt_ids(p), GREEDY)).token_ids for p in PROMPTS]


async def replies(policy) -> list:
    # One at a time: a batch of one on both sides, so the comparison is exact (and turns alternate replicas).
    return [await policy.generate(policy.chat_format.prompt_ids(p), GREEDY) for p in PROMPTS]


def kill(replicas: PolicyReplicas, url: str) -> None:
    """Kill the replica serving ``url`` (its actor, as a crash would) and wait until its port refuses connections."""
    actor = next(r.actor for r in replicas._replicas if r.url == url)  # no public handle: users never need one
    ray.kill(actor)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=1).close()
        except OSError:
            return
        time.sleep(0.1)
    raise AssertionError(f"{url} still answers after its actor was killed")


async def test_pushed_weights_reach_both_nodes_and_every_later_completion_reports_them(replicas, ray_cluster):
    assert len(set(replicas.node_ids)) == 2 and len(replicas.urls) == 2  # one replica per node
    state = noisy_state(seed=1)
    before, expected = await local_replies(None), await local_replies(state)
    assert before != expected
    async with replicas.policy() as policy:
        first = await replies(policy)
        policy.update_weights(state, version=3)
        after = await replies(policy)
        together = await asyncio.gather(
            *(policy.generate(policy.chat_format.prompt_ids(PROMPTS[0]), GREEDY) for _ in range(6))
        )
    assert [c.token_ids for c in first] == before and {c.policy_version for c in first} == {0}
    assert [c.token_ids for c in after] == expected and {c.policy_version for c in after} == {3}
    assert {c.replica for c in [*first, *after]} == set(replicas.urls)
    assert {c.policy_version for c in together} == {3} and {c.replica for c in together} == set(replicas.urls)
    assert policy.version == replicas.version == 3


async def test_weights_that_do_not_fit_raise_and_change_nothing(replicas):
    version = replicas.version
    with pytest.raises(ValueError, match="other shapes"):
        replicas.push_weights({**noisy_state(seed=2), "model.norm.weight": torch.ones(5)}, version + 1)
    assert replicas.version == version and len(replicas.urls) == 2
    async with replicas.policy() as policy:
        assert {c.policy_version for c in await replies(policy)} == {version}


async def test_an_in_memory_model_is_served_and_a_dead_replica_is_reported_at_the_next_push(ray_cluster, caplog):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path(), local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    with PolicyReplicas(model, tokenizer=tokenizer, replicas=2, version=7) as pair:
        dead, alive = pair.urls
        kill(pair, dead)
        state = noisy_state(seed=4)
        async with pair.policy() as policy:
            served = await replies(policy)  # the dead one's requests fail over
            policy.update_weights(state)  # version 8
            after = await replies(policy)
        assert pair.urls == [alive] and policy.version == 8
        assert f"lost during the push of version 8: {dead}" in caplog.text
        assert [c.token_ids for c in served] == await local_replies(None) and {c.replica for c in served} == {alive}
        assert [c.token_ids for c in after] == await local_replies(state)
        assert {(c.replica, c.policy_version) for c in after} == {(alive, 8)}
        kill(pair, alive)
        with pytest.raises(ReplicaError, match="no policy replica is left"):
            pair.push_weights(state, 9)


async def test_the_gateway_in_front_of_the_replicas_records_what_each_replica_sampled(replicas):
    """An unmodified openai-client program through the gateway over the cluster's replicas: its calls go to both, and
    each turn holds exactly what the replica that served it samples (greedy) for the turn's prompt ids."""
    import aiohttp

    from agentgym.envs.tool.keychain import KeyChainEnv
    from agentgym.gateway import Gateway, run_episode
    from tests.helpers import gateway_programs as programs

    env = KeyChainEnv()
    async with replicas.policy(max_retries=0) as policy:
        try:
            async with Gateway(policy, "tiny", sampling=GREEDY) as gateway:
                trajectory = await run_episode(gateway, env, programs.chat_program, task_id="train-1", timeout=120)
        finally:
            env.close()
    assert trajectory.metadata["program_error"] is None and len(trajectory.sequences()) == 1
    assert sorted(t.replica for t in trajectory.turns) == sorted(replicas.urls)  # idle replicas take turns
    async with aiohttp.ClientSession() as http:
        for turn in trajectory.turns:
            assert turn.policy_version == replicas.version
            request = {"model": "tiny", "prompt": turn.prompt_ids, "max_tokens": 12, "temperature": 0, "logprobs": 1}
            async with http.post(f"{turn.replica}/completions", json={**request, "return_token_ids": True}) as answer:
                choice = (await answer.json())["choices"][0]
            assert turn.completion_ids == choice["token_ids"]
            assert turn.logprobs == pytest.approx(choice["logprobs"]["token_logprobs"], abs=1e-5)
