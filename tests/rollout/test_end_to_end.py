"""Linear and tree rollouts on every env kind that has landed (code: HumanEval, RepoFix), with the tiny local model and through `agentgym serve`."""

from __future__ import annotations

import gymnasium
import pytest

import agentgym  # noqa: F401 (registers the envs)
from agentgym.rollout.agent import Agent, AgentConfig
from agentgym.rollout.openai_policy import OpenAIPolicy
from agentgym.rollout.policy import SamplingParams
from agentgym.rollout.trajectory import Trajectory

pytestmark = pytest.mark.docker

CODE_ENVS = {"agentgym/HumanEval-v0": "HumanEval/0", "agentgym/RepoFix-v0": None}
CONFIG = AgentConfig(max_turns=2, sampling=SamplingParams(max_tokens=24, temperature=1.0))


def check_token_exact(trajectory: Trajectory, chat_format) -> None:
    assert trajectory.turns and not trajectory.error, trajectory.error
    for before, after in zip(trajectory.turns, trajectory.turns[1:]):
        assert after.extends(before)
        assert after.prompt_mask == before.mask + [0] * (len(after.prompt_ids) - len(before.input_ids))
    for turn in trajectory.turns:
        assert len(turn.logprobs) == len(turn.completion_ids) > 0
        assert turn.action == chat_format.decode(turn.completion_ids)
    (sequence,) = trajectory.sequences()
    assert sum(sequence.mask) == trajectory.num_generated_tokens


@pytest.fixture(params=list(CODE_ENVS))
def code_env(request, docker_ready):
    env = gymnasium.make(request.param)
    task_id = CODE_ENVS[request.param] or env.task_ids()[0]
    yield env, task_id
    env.close()


async def test_linear_rollout_with_the_local_tiny_model(code_env, hf_policy):
    env, task_id = code_env
    trajectory = await Agent(hf_policy, CONFIG).run(env, task_id, seed=0)
    check_token_exact(trajectory, hf_policy.chat_format)
    assert len(trajectory.turns) == 2 and trajectory.truncated and not trajectory.success


async def test_linear_rollout_through_agentgym_serve_in_token_and_chat_mode(code_env, served_tiny_model, tiny_model):
    env, task_id = code_env
    async with OpenAIPolicy(served_tiny_model, "tiny", tokenizer=tiny_model) as policy:
        trajectory = await Agent(policy, CONFIG).run(env, task_id, seed=0)
        check_token_exact(trajectory, policy.chat_format)
        chat = await Agent(policy, AgentConfig(**{**CONFIG.__dict__, "mode": "chat"})).run(env, task_id, seed=0)
    assert chat.metadata["mode"] == "chat" and len(chat.turns) == 2
    assert all(turn.action is not None and turn.observation for turn in chat.turns)
