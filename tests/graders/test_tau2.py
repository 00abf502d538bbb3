"""Reward hacking against the τ²-bench envs: every attempt scores what τ²'s own evaluator gives it, and none reaches 1 without the task's work."""

import json

import pytest

from agentgym.envs.conversation.tau2 import Tau2Env, tau2_reference_replies
from agentgym.task import call_text
from tests.helpers.tau2 import play, tau2_evaluate_simulation

EVALUATE = tau2_evaluate_simulation()


@pytest.fixture(scope="module")
def retail():
    env = Tau2Env("retail")
    yield env
    env.close()


def graded(env, task_id, replies):
    reward, terminated, info = play(env, task_id, replies)
    assert terminated
    assert reward == EVALUATE(env), info.get("grade")  # what τ² itself gives the same conversation
    return reward, info


def test_telling_every_possible_value_without_the_work_scores_zero(retail):
    """The communicate check is a substring test: saying every number passes it, the database check does not."""
    task = retail.tau2_task("2")
    every = " ".join(str(n) for n in range(10000)) + " " + " ".join(task.evaluation_criteria.communicate_info)
    reward, info = graded(retail, "2", [every, "Bye."])
    assert reward == 0.0 and info["grade"]["breakdown"] == {"DB": 0.0, "COMMUNICATE": 1.0}


def test_writing_the_database_and_reverting_it_scores_zero_when_the_task_needs_a_write(retail):
    """Changing a pending order's address and changing it back leaves the database as it was: not the task's change."""
    task = retail.tau2_task("17")  # the reference ends by modifying a pending order's address
    write = next(a for a in task.evaluation_criteria.actions if a.name == "modify_pending_order_address")
    order = json.loads(play_reads(retail, "17", write.arguments["order_id"]))
    original = {key: order["address"][key] for key in ("address1", "address2", "city", "state", "country", "zip")}
    there = call_text(write.name, write.arguments)
    back = call_text(write.name, {"order_id": write.arguments["order_id"], **original})
    replies = [r for r in tau2_reference_replies(task) if r != there]
    reward, info = graded(retail, "17", replies[:-1] + [there, back, replies[-1]])
    assert reward == 0.0 and info["grade"]["db_match"] is False


def play_reads(env, task_id, order_id):
    env.reset(options={"task_id": task_id})
    observation, *_ = env.step(call_text("get_order_details", {"order_id": order_id}))
    return observation["text"]


def test_a_write_the_policy_forbids_scores_zero(retail):
    """Cancelling an order the user never asked about (another user's, without authentication) breaks the database check."""
    task = retail.tau2_task("2")
    stranger = call_text("cancel_pending_order", {"order_id": "#W5918442", "reason": "no longer needed"})
    reference = tau2_reference_replies(task)
    retail.reset(options={"task_id": "2"})
    assert not retail.step(stranger)[4]["error"]  # a pending order of another user: the write goes through
    reward, info = graded(retail, "2", [stranger, *reference])
    assert reward == 0.0 and info["grade"]["db_match"] is False


def test_unknown_tool_and_malformed_arguments_are_errors_that_change_nothing(retail):
    retail.reset(options={"task_id": "2"})
    before = retail.environment.get_db_hash()
    messages = len(retail.messages)
    for reply in (
        call_text("not_a_tool", {}),
        '<tool_call>{"name": "cancel_pending_order", "arguments": </tool_call>',
        call_text("cancel_pending_order", {"order_id": 5}),  # missing reason, wrong type
    ):
        observation, reward, terminated, truncated, info = retail.step(reply)
        assert info["error"] and reward == 0.0 and not terminated and not truncated, observation
    assert retail.environment.get_db_hash() == before
    assert len(retail.messages) == messages  # τ²'s record of the conversation holds no call that could not run


def test_the_agent_cannot_call_the_users_device_tools():
    """Telecom's dual control: the phone's tools are the user's; for the agent they are unknown tools."""
    env = Tau2Env("telecom")
    env.reset(options={"task_id": env.task_ids()[0]})
    before = env.environment.get_user_db_hash()
    _, _, _, _, info = env.step(call_text("toggle_airplane_mode", {}))
    assert info["error"] and "toggle_airplane_mode" in info["error"]
    assert env.environment.get_user_db_hash() == before
    env.close()


def test_ending_at_once_scores_zero(retail):
    reward, info = graded(retail, "2", ["###STOP###"])
    assert reward == 0.0 and info["grade"]["termination"] == "agent_stop"


def test_too_many_tool_errors_end_the_conversation_with_zero():
    env = Tau2Env("retail", max_errors=3)
    env.reset(options={"task_id": "2"})
    for _ in range(3):
        _, reward, terminated, _, info = env.step(call_text("get_order_details", {"order_id": "#nope"}))
    assert terminated and reward == 0.0 and info["grade"]["termination"] == "too_many_errors"
    env.close()


def test_running_out_of_turns_scores_zero():
    env = Tau2Env("retail", max_turns=2)
    task = env.tau2_task("2")
    env.reset(options={"task_id": "2"})
    for reply in tau2_reference_replies(task)[:2]:
        _, reward, terminated, truncated, _ = env.step(reply)
    assert truncated and not terminated and reward == 0.0
    env.close()
