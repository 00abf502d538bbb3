"""Built-in suites are the registered envs' tasks, and the oracle replays each task's reference solution (native tool calls or text; steps that read the page)."""

import json

import gymnasium
import pytest

from agentgym.envs.tool import ToolEnv
from agentgym.eval.harness import evaluate
from agentgym.eval.oracles import EPISODE_TASK, EpisodeAgent, ReferencePolicy, oracle_for
from agentgym.eval.suites import BUILTIN_SUITES, builtin_suite_envs, load_suite
from agentgym.rollout.agent import AgentConfig
from agentgym.rollout.policy import SamplingParams
from agentgym.task import call_text


def test_builtin_suites_come_from_the_registered_envs():
    assert {"humaneval", "repofix", "bfcl", "bfcl-base", "bfcl-miss_func", "web-shop", "web-mail", "web-wiki"} <= set(
        BUILTIN_SUITES
    )
    assert {"miniwob", "gui"} <= set(BUILTIN_SUITES)
    envs = builtin_suite_envs()
    assert envs["bfcl"] == sorted(
        envs["bfcl-base"] + envs["bfcl-long_context"] + envs["bfcl-miss_func"] + envs["bfcl-miss_param"]
    )
    assert envs["web-shop"] == ["agentgym/web.shop-v0"] and all(
        e.startswith("agentgym/web.miniwob.") for e in envs["miniwob"]
    )


@pytest.mark.parametrize(
    "suite_name, env_id",
    [("bfcl-miss_param", "agentgym/tool.bfcl-multi-turn-miss_param-v0"), ("web-wiki", "agentgym/web.wiki-v0")],
)
def test_a_suites_tasks_and_categories_are_its_envs(suite_name, env_id):
    env = gymnasium.make(env_id)
    try:
        expected = [(env_id, task.id, task.category) for task in env.unwrapped.tasks()]
    finally:
        env.close()
    assert [(t.env_id, t.task_id, t.category) for t in load_suite(suite_name).tasks] == expected


@pytest.mark.parametrize("native_tools", [True, False])
async def test_the_oracle_solves_keychain_from_its_reference_solutions(tmp_path, native_tools):
    suite_file = tmp_path / "suite.jsonl"
    suite_file.write_text(
        "".join(json.dumps({"env": "tool.keychain-v0", "task_id": f"train-{i}"}) + "\n" for i in range(6))
    )
    summary = await evaluate(
        load_suite(str(suite_file)),
        oracle_for,
        out_dir=tmp_path / "run",
        agent_config=AgentConfig(native_tools=native_tools),
        progress=False,
    )
    assert summary["metrics"]["success_rate"] == 1.0 and summary["episodes"] == 6


async def test_a_step_that_reads_the_page_gets_the_latest_observation():
    def shout(word: str) -> str:
        """Say a word; the reply names the secret."""
        return "The secret is mango"

    env = ToolEnv(
        [shout],
        {
            "secret": {
                "prompt": "Find the secret and submit it.",
                "solution": [
                    call_text("shout", {"word": "hi"}),
                    lambda text: call_text("submit", {"answer": text.split()[-1]}),
                ],
            }
        },
        check=lambda task, state, transcript: (float(ok := transcript[-1]["arguments"].get("answer") == "mango"), ok),
    )
    try:
        trajectory = await EpisodeAgent(ReferencePolicy(env.tasks()), AgentConfig()).run(env, "secret")
    finally:
        env.close()
    assert trajectory.success and [turn.reward for turn in trajectory.turns] == [0.0, 1.0]


async def test_the_oracle_needs_the_episodes_task_and_a_solution():
    policy = ReferencePolicy([])
    with pytest.raises(RuntimeError, match="EPISODE_TASK"):
        await policy.chat([{"role": "user", "content": "hi"}], None, SamplingParams())
    token = EPISODE_TASK.set("unknown")
    try:
        with pytest.raises(KeyError, match="no reference solution"):
            await policy.chat([{"role": "user", "content": "hi"}], None, SamplingParams())
    finally:
        EPISODE_TASK.reset(token)
    with pytest.raises(ValueError, match="no oracle for agentgym/web.miniwob.click-test-v0"):
        oracle_for("agentgym/web.miniwob.click-test-v0", {})
