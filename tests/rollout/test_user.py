"""PolicyUser: a policy plays τ²'s user, prompted with τ²'s user-simulator guidelines and the task's scenario; its stop tokens end the conversation."""

from agentgym.envs.conversation.tau2 import Tau2Env
from agentgym.rollout.user import PolicyUser
from tests.helpers.scripted import ScriptedPolicy


def test_a_policy_plays_the_user_until_it_stops():
    # ScriptedPolicy stands in for sampling only: the prompt is rendered by the tiny model's real chat template.
    policy = ScriptedPolicy(["Hi, I want to exchange a keyboard.", "My zip is 19122.", "Thanks! ###STOP###"])
    env = Tau2Env("retail", user=PolicyUser(policy))
    observation, _ = env.reset(options={"task_id": "0"})
    assert observation["text"].endswith("user: Hi, I want to exchange a keyboard.")
    prompt = policy.chat_format.tokenizer.decode(policy.prompts[0])
    scenario = env.tau2_task().user_scenario.instructions
    assert "<scenario>" in prompt and scenario.reason_for_call in prompt and "Hi! How can I help you today?" in prompt
    observation, reward, terminated, _, _ = env.step("What is your zip code?")
    assert observation["text"] == "user: My zip is 19122." and not terminated
    env.steer_user(directive="Insist on speaking to a manager.")
    _, reward, terminated, _, info = env.step("Thank you.")
    assert terminated and reward == 0.0 and info["grade"]["termination"] == "user_stop"
    assert "Insist on speaking to a manager." in policy.chat_format.tokenizer.decode(policy.prompts[-1])
    env.close()


def test_a_policy_users_turns_carry_the_tokens_its_tokenizer_counted():
    policy = ScriptedPolicy(["Hi, I want to exchange a keyboard."])
    user = PolicyUser(policy)
    turn, _ = user.reply(user.start("You are a customer."), [{"role": "user", "content": "How can I help?"}])
    reply = policy.chat_format.encode("Hi, I want to exchange a keyboard.") + [policy.chat_format.eos_token_id]
    assert turn.text == "Hi, I want to exchange a keyboard." and turn.tokens == len(policy.prompts[0]) + len(reply)


def test_an_empty_user_turn_ends_the_episode_as_tau2s_user_error():
    env = Tau2Env("retail", user=PolicyUser(ScriptedPolicy(["Hello.", ""])))
    env.reset(options={"task_id": "0"})
    _, reward, terminated, _, info = env.step("How can I help?")
    assert terminated and reward == 0.0 and info["grade"]["termination"] == "user_error"
    env.close()


def test_a_policy_judges_nl_assertions():
    from agentgym.envs.conversation.tau2 import nl_assertion_checks
    from agentgym.rollout.user import PolicyJudge

    verdict = '{"results": [{"expectedOutcome": "The agent is polite.", "reasoning": "it is", "metExpectation": true}]}'
    policy = ScriptedPolicy([verdict])
    env = Tau2Env("retail")
    env.reset(options={"task_id": "0"})
    reward, checks = nl_assertion_checks(PolicyJudge(policy), ["The agent is polite."], env.messages)
    assert reward == 1.0 and checks == [{"assertion": "The agent is polite.", "met": True}]
    assert "expectedOutcomes:" in policy.chat_format.tokenizer.decode(policy.prompts[0])
    env.close()
