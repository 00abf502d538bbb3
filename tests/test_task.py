"""agentgym.Task: reference solutions (given, built on demand, absent), the default env.tasks() of a third-party env, ToolEnv's tasks, and solutions played through an env."""

import gymnasium
import pytest

import agentgym
from agentgym import Task
from agentgym.envs.tool import ToolEnv
from agentgym.task import call_text, resolve_step, run_solution
from tests.helpers.counter import CounterEnv


def test_a_reference_solution_is_given_built_on_demand_or_absent():
    built = []

    def solution():
        built.append(1)
        return ("a", "b")

    lazy = Task("t", solution=solution)
    assert not built and lazy.has_reference_solution  # nothing is built until asked for
    assert lazy.reference_solution() == ["a", "b"] and built == [1]
    assert Task("t", solution=("x",)).reference_solution() == ["x"]
    plain = Task("t", "do it")
    assert plain.reference_solution() is None and not plain.has_reference_solution
    assert plain == Task("t", "do it", solution=("ignored in comparisons",)) and hash(plain) == hash(Task("t", "do it"))


def test_a_step_may_read_the_latest_observation():
    assert resolve_step("click(3)", "page") == "click(3)"
    assert resolve_step(lambda text: f"answer({len(text)})", "four") == "answer(4)"


def test_agentgym_exports_the_task_type():
    assert agentgym.Task is Task and "Task" in agentgym.__all__


def test_the_default_tasks_of_a_third_party_env_are_its_ids():
    env = CounterEnv()
    assert env.tasks() == [Task(task_id) for task_id in env.task_ids()]
    assert all(task.reference_solution() is None for task in env.tasks())
    env.close()


def test_tool_env_tasks_carry_prompt_category_and_solution():
    def deposit(amount: int, state: dict) -> str:
        """Put money in the account."""
        state["balance"] += amount
        return f"balance: {state['balance']}"

    env = ToolEnv(
        [deposit],
        {
            "save-50": {
                "prompt": "Deposit 50.",
                "goal": 50,
                "category": "bank",
                "solution": ["deposit(50)", "submit()"],
            },
            "plain": "Just answer.",
        },
        state_factory=lambda task: {"balance": 0},
        check=lambda task, state, transcript: (float(ok := state["balance"] == task["goal"]), ok),
    )
    save, plain = env.tasks()
    assert (save.id, save.goal, save.category) == ("save-50", "Deposit 50.", "bank")
    assert (plain.id, plain.goal, plain.category, plain.reference_solution()) == ("plain", "Just answer.", "", None)
    observation, reward, terminated, info = run_solution(env, save.id, save.reference_solution())
    assert terminated and reward == 1.0 and info["success"]
    env.close()


def test_call_text_is_a_call_every_env_parses():
    env = gymnasium.make("agentgym/tool.keychain-v0")
    task = env.unwrapped.tasks()[0]
    env.reset(options={"task_id": task.id})
    _, _, _, _, info = env.step(call_text("lookup", {"key": "amber"}))
    assert info["error"] is None
    env.close()


def test_run_solution_reports_a_step_that_fails():
    env = gymnasium.make("agentgym/tool.keychain-v0")
    with pytest.raises(AssertionError, match="step 0"):
        run_solution(env, "train-0", ["not a call"])
    env.close()
