"""The agent loop: the tokens stored are exactly the tokens the policy saw, turn by turn, folding included."""

import pytest

from agentgym.rollout.agent import Agent, AgentConfig, FoldPolicy
from agentgym.rollout.policy import Completion, Policy, SamplingParams
from tests.helpers.counter import CounterEnv
from tests.helpers.scripted import ScriptedPolicy
from tests.helpers.tool_calls import call

BAD = "no tool call here"


@pytest.fixture
def env():
    env = CounterEnv()
    yield env
    env.close()


async def test_linear_episode_records_token_exact_turns(env):
    policy = ScriptedPolicy([call("add", n=5), BAD, call("add", n=7), call("submit")])
    trajectory = await Agent(policy).run(env, "reach-12")
    assert trajectory.success and trajectory.reward == 1.0 and trajectory.terminated and not trajectory.error
    assert [t.prompt_ids for t in trajectory.turns] == policy.prompts
    assert trajectory.turns[1].info["error"] == "no tool call found in the reply"
    assert "Counter: 12" in trajectory.turns[2].observation
    for before, after in zip(trajectory.turns, trajectory.turns[1:]):
        assert after.extends(before) and not after.folded
        # Earlier completions are model tokens in the next prompt; everything else is env/template.
        assert after.prompt_mask == before.mask + [0] * (len(after.prompt_ids) - len(before.input_ids))
    (sequence,) = trajectory.sequences()
    assert sequence.input_ids == trajectory.turns[-1].input_ids
    assert sum(sequence.mask) == trajectory.num_generated_tokens


async def test_folding_keeps_token_accounting_exact(env):
    policy = ScriptedPolicy([call("add", n=1)] + [BAD] * 6 + [call("add", n=6), call("submit")])
    config = AgentConfig(
        context_window=900, sampling=SamplingParams(max_tokens=64), fold=FoldPolicy(keep_last=1, target=0.7)
    )
    trajectory = await Agent(policy, config).run(env, "reach-7")
    assert trajectory.success, trajectory.turns[-1].observation
    folded = [i for i, t in enumerate(trajectory.turns) if t.folded]
    assert folded, "the window is small enough that observations must be folded"
    assert [t.prompt_ids for t in trajectory.turns] == policy.prompts
    for i in folded:
        turn = trajectory.turns[i]
        assert not turn.extends(trajectory.turns[i - 1]) and sum(turn.prompt_mask) == 0
        assert "folded to save context" in policy.chat_format.tokenizer.decode(turn.prompt_ids)
        assert len(turn.prompt_ids) + 64 <= 900
    sequences = trajectory.sequences()
    assert len(sequences) == len(folded) + 1
    assert sum(sum(s.mask) for s in sequences) == trajectory.num_generated_tokens
    assert [i for s in sequences for i in s.turn_indices] == list(range(len(trajectory.turns)))


async def test_a_prompt_that_cannot_fit_ends_the_episode_with_an_error(env):
    policy = ScriptedPolicy([BAD])
    trajectory = await Agent(policy, AgentConfig(context_window=300, sampling=SamplingParams(max_tokens=64))).run(
        env, "reach-7"
    )
    assert trajectory.truncated and trajectory.error.startswith("context_overflow")


async def test_max_turns_and_length_cut_completions(env):
    policy = ScriptedPolicy([call("add", n=1) * 20], stop=False)
    config = AgentConfig(max_turns=3, sampling=SamplingParams(max_tokens=8))
    trajectory = await Agent(policy, config).run(env, "reach-30")
    assert len(trajectory.turns) == 3 and trajectory.truncated and not trajectory.terminated
    assert all(t.finish_reason == "length" and len(t.completion_ids) == 8 for t in trajectory.turns)
    # The end-of-turn token the model never sampled is an env token of the next prompt.
    second = trajectory.turns[1]
    assert second.prompt_ids[len(trajectory.turns[0].input_ids)] == policy.chat_format.eos_token_id
    assert second.prompt_mask[len(trajectory.turns[0].input_ids)] == 0


class NativeToolCalls(Policy):
    """A chat-mode endpoint's replies (stands in for a hosted API): native tool calls, no tokens."""

    name = "chat-endpoint"

    def __init__(self):
        self.seen = []

    async def chat(self, messages, tools, sampling):
        self.seen.append((list(messages), tools))
        n = len(self.seen)
        name, args = ("add", '{"n": 6}') if n <= 2 else ("submit", "{}")
        return Completion(
            text="",
            finish_reason="tool_calls",
            tool_calls=[{"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": args}}],
        )


async def test_chat_mode_with_native_tool_calls(env):
    policy = NativeToolCalls()
    trajectory = await Agent(policy).run(env, "reach-12")
    assert trajectory.success and trajectory.metadata["mode"] == "chat"
    assert all(t.prompt_ids == [] and t.completion_ids == [] for t in trajectory.turns)
    messages, tools = policy.seen[-1]
    assert [t["function"]["name"] for t in tools] == ["add", "submit"]
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_2", "content": "Counter: 12"}
    # The record keeps the calls even though the reply's text was empty.
    assert trajectory.turns[0].action == '<tool_call>\n{"name": "add", "arguments": {"n": 6}}\n</tool_call>'
    assert messages[-2]["tool_calls"][0]["id"] == "call_2"


async def test_chat_mode_without_native_tools_describes_them_in_the_system_prompt(env):
    policy = NativeToolCalls()
    await Agent(policy, AgentConfig(native_tools=False)).run(env, "reach-12")
    messages, tools = policy.seen[0]
    assert tools is None and "add(n: integer)" in messages[0]["content"]


async def test_forked_episodes_continue_independently(env):
    policy = ScriptedPolicy([call("add", n=3)])
    agent = Agent(policy)
    episode = await agent.start(env, "reach-7")
    await agent.step(episode)
    branch = await episode.fork()
    try:
        await agent.step(branch)
        assert branch.env.total == 6 and env.total == 3
        assert branch.turns[0] is episode.turns[0] and len(episode.turns) == 1
        assert branch.turns[1].extends(episode.turns[0])
    finally:
        await branch.aclose()
