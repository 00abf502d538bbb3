"""Forking a self-driving program's episode at a model call: the env forked there and the program replayed to it from
the record (nothing sampled, no tool call executed again), then live; a program that diverges is a failed fork."""

from __future__ import annotations

import uuid

from agentgym.envs.tool.keychain import KeyChainEnv
from agentgym.gateway import Gateway
from agentgym.gateway.branching import fork_episode
from agentgym.gateway.programs import reset_and_run
from tests.helpers import gateway_programs as programs
from tests.helpers.scripted import ScriptedPolicy


class CountingPolicy(ScriptedPolicy):
    def __init__(self, replies):
        super().__init__(replies)
        self.samples = 0

    async def generate(self, prompt_ids, sampling):
        self.samples += 1
        return await super().generate(prompt_ids, sampling)


async def test_a_fork_replays_the_record_to_its_fork_point_then_runs_live():
    policy = CountingPolicy(programs.keychain_replies)
    env = KeyChainEnv()
    try:
        async with Gateway(policy) as gateway:
            original, session = await reset_and_run(
                gateway, env, programs.openai_program, task_id="train-3", branching=True
            )
            calls = len(original.turns)
            assert original.success and len(session.snapshots) == calls == policy.samples
            transcript = list(env.unwrapped.transcript)
            before = policy.samples
            fork = await fork_episode(gateway, env, session, 2, programs.openai_program)
            session.release_snapshots()
            assert env.unwrapped.transcript == transcript  # the original env was not touched by the fork
    finally:
        env.close()
    assert fork.success and fork.metadata["program_error"] is None
    assert fork.metadata["fork"] == {"at_call": 2, "replayed_calls": 2, "diverged": []}
    assert policy.samples - before == calls - 2  # the first two calls were answered from the record
    for replayed, recorded in zip(fork.turns[:2], original.turns[:2]):
        assert (replayed.prompt_ids, replayed.completion_ids, replayed.logprobs) == (
            recorded.prompt_ids,
            recorded.completion_ids,
            recorded.logprobs,
        )
    # Fork == replay: the fork continued from the original's state, so the whole episode is the original's.
    assert [(t.prompt_ids, t.completion_ids) for t in fork.turns] == [
        (t.prompt_ids, t.completion_ids) for t in original.turns
    ]


async def test_a_program_that_diverges_from_its_record_is_a_failed_fork():
    async def forgetful(context):  # sends another first message each run: it cannot be replayed
        return await programs.openai_agent(
            context.base_url, context.api_key, context.mcp_url, f"{context.goal} ({uuid.uuid4().hex})", context.model
        )

    env = KeyChainEnv()
    try:
        async with Gateway(CountingPolicy(programs.keychain_replies)) as gateway:
            _, session = await reset_and_run(gateway, env, forgetful, task_id="train-3", branching=True)
            fork = await fork_episode(gateway, env, session, 1, forgetful)
            session.release_snapshots()
    finally:
        env.close()
    assert "409" in fork.metadata["program_error"] and not fork.success and fork.reward == 0.0
    assert fork.metadata["fork"]["diverged"] == ["model call 0 brought other prompt ids than the record's"]
