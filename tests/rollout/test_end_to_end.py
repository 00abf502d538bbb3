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

CODE_ENVS = {"agentgym/code.humaneval-v0": "HumanEval/0", "agentgym/code.repofix-v0": None}
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
    task_id = CODE_ENVS[request.param] or env.unwrapped.task_ids()[0]
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


async def test_tree_rollouts_through_the_runner_and_agentgym_serve(code_env, served_tiny_model, tiny_model, tmp_path):
    from agentgym.rollout.runner import EpisodeRequest, Runner, RunnerConfig
    from agentgym.rollout.store import TrajectoryStore
    from agentgym.rollout.tree import TreeConfig, TreeRollout
    from agentgym.rollout.tree_values import node_values

    env, task_id = code_env
    store = TrajectoryStore(tmp_path / "rollouts.jsonl")
    tree_config = TreeConfig(strategy="uniform", roots=1, max_leaves=3, branch_every=1, branches=2)
    async with OpenAIPolicy(served_tiny_model, "tiny", tokenizer=tiny_model) as policy:
        agent = Agent(policy, CONFIG)
        runner = Runner(
            agent,
            lambda: gymnasium.make(env.spec.id),
            RunnerConfig(concurrency=2, progress=False, store=store),
            job=lambda agent, env, request: TreeRollout(agent, tree_config).run(env, request.task_id, request.seed),
        )
        result = await runner.run([EpisodeRequest(task_id, seed=0), EpisodeRequest(task_id, seed=1)])
    assert not result.failures and not result.pending and len(result.records) == 2
    for tree in result.records:
        assert 2 <= len(tree.leaves) <= 3 and tree.num_env_steps < sum(len(tree.path(leaf.id)) for leaf in tree.leaves)
        assert len(node_values(tree)) == len(tree.nodes)
        for path in tree.paths():
            check_token_exact(path, policy.chat_format)
    assert {r.id: r for r in store.read()} == {r.id: r for r in result.records}
