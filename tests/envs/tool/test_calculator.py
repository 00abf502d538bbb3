"""Calculator, the second built-in CPU training env: its tasks, its scripted solutions and mistakes, and a grader a policy cannot talk past."""

import random

import gymnasium
import pytest

import agentgym  # noqa: F401  (registers agentgym/tool.calculator-v0)
from agentgym.envs.tool.calculator import CalculatorEnv, demonstration, make_task
from agentgym.envs.tool.generated import task_ids
from tests.helpers.episodes import play


def _task_with(ops: tuple[str, str], count: int = 50) -> str:
    return next(t for t in task_ids("train", count) if make_task(t)["ops"] == ops)


def test_tasks_are_reproducible_the_splits_never_meet_and_half_need_multiplying_first():
    assert make_task("train-7") == make_task("train-7")
    # The expression space is small (about 1,700): the splits are disjoint by construction, not by chance.
    train = {make_task(t)["prompt"] for t in task_ids("train", 3000)}
    heldout = {make_task(t)["prompt"] for t in task_ids("heldout", 3000)}
    assert not train & heldout and len(heldout) > 300  # of about 350 held-out expressions
    mixed = sum(make_task(t)["ops"] == ("+", "*") for t in task_ids("train", 1000))
    assert 430 <= mixed <= 570  # weight 3 of 6: 500 expected, ±70 is beyond 4 sigma
    with pytest.raises(ValueError, match="train-12"):
        make_task("test-1")


def test_answers_follow_operator_precedence():
    # hand-computed: 2 + 3 * 4 = 14 (not 20), 2 * 3 + 4 = 10, 2 + 3 + 4 = 9, 2 * 3 * 4 = 24
    from agentgym.envs.tool.calculator import _evaluate

    assert [_evaluate([2, 3, 4], ops) for ops in [("+", "*"), ("*", "+"), ("+", "+"), ("*", "*")]] == [14, 10, 9, 24]


@pytest.mark.parametrize("task_id", task_ids("train", 8) + task_ids("heldout", 8))
def test_the_demonstration_solves_the_task_in_three_turns(task_id):
    env = gymnasium.make("agentgym/tool.calculator-v0", split=task_id.split("-")[0], num_tasks=8)
    env.reset(options={"task_id": task_id})
    replies = demonstration(make_task(task_id))
    assert len(replies) == 3
    _, reward, terminated, info = play(env, replies)
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    env.close()


def test_the_mistaken_demonstrator_evaluates_left_to_right_at_its_rate_and_scores_zero():
    task_id = _task_with(("+", "*"))
    task = make_task(task_id)
    a, b, c = task["numbers"]
    assert demonstration(task) == ['mul("b", "c")', 'add("a", "d")', 'submit("e")']
    assert demonstration(task, 1.0, random.Random(0)) == ['add("a", "b")', 'mul("d", "c")', 'submit("e")']
    # where the order does not matter there is nothing to get wrong: the solution whatever the rate
    other = make_task(_task_with(("*", "+")))
    assert demonstration(other, 1.0, random.Random(0)) == demonstration(other)
    rng = random.Random(0)
    mistakes = sum(demonstration(task, 0.25, rng)[0].startswith("add") for _ in range(2000))
    assert 400 <= mistakes <= 600  # binomial(2000, 0.25): 500 expected, ±100 is beyond 4 sigma
    with pytest.raises(ValueError, match="rng"):
        demonstration(task, 0.5)

    env = CalculatorEnv()
    env.reset(options={"task_id": task_id})
    _, reward, terminated, info = play(env, demonstration(task, 1.0, random.Random(0)))
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    env.close()


@pytest.mark.parametrize(
    "answer",
    [
        "{wrong}",  # the left-to-right value
        "{right} or {wrong}",  # hedging
        "{right}0",
        "",
        "{right}.5",
    ],
)
def test_only_the_exact_value_scores(answer):
    task_id = _task_with(("+", "*"))
    a, b, c = make_task(task_id)["numbers"]
    env = CalculatorEnv()
    env.reset(options={"task_id": task_id})
    reply = f'submit("{answer.format(right=a + b * c, wrong=(a + b) * c)}")'
    _, reward, terminated, info = play(env, [reply])
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    env.close()


def test_the_last_submit_counts_and_bad_calls_are_error_observations():
    task_id = _task_with(("+", "*"))
    a, b, c = make_task(task_id)["numbers"]
    env = CalculatorEnv()
    env.reset(options={"task_id": task_id})
    observation, reward, terminated, _, _ = env.step('mul("b", "z")')
    assert not terminated and reward == 0.0 and "no value named 'z'; the values are a, b, c" in observation["text"]
    observation, _, terminated, _, _ = env.step("div(4, 2)")  # no such tool: not a call; the error lists the tools
    assert not terminated and "Error" in str(observation) and "mul(x: string, y: string)" in str(observation)
    observation, _, _, _, _ = env.step('mul("b", "c")')
    assert observation["text"] == f"d = {b * c}"  # stored under the next free letter
    observation, _, _, _, _ = env.step('add("a", "d")')
    assert observation["text"] == f"e = {a + b * c}"
    _, reward, terminated, info = play(env, [f'submit("{a + b * c}")'])
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    env.close()


@pytest.mark.parametrize(
    ("replies", "rewarded"),
    [
        (['mul("b", "c")', 'add("a", "d")', 'submit("e")'], True),  # the name of the right value
        (['mul("b", "c")', 'add("a", "d")', 'submit("d")'], False),  # a value, not the result
        (['add("a", "b")', 'mul("d", "c")', 'submit("e")'], False),  # the left-to-right value
        (['submit("e")'], False),  # a name that holds nothing yet is taken as a number: wrong
        (['submit("a")'], False),
    ],
)
def test_a_submitted_name_scores_only_when_its_value_is_the_answer(replies, rewarded):
    env = CalculatorEnv()
    env.reset(options={"task_id": _task_with(("+", "*"))})
    _, reward, terminated, info = play(env, replies)
    assert (reward, terminated, info["success"]) == (float(rewarded), True, rewarded)
    env.close()


def test_tasks_list_their_pattern_and_solution():
    env = CalculatorEnv(num_tasks=4)
    tasks = env.tasks()
    assert [t.id for t in tasks] == task_ids("train", 4)
    assert all(t.category in {"a + b * c", "a * b + c", "a + b + c", "a * b * c"} for t in tasks)
    assert all(list(t.reference_solution()) == demonstration(make_task(t.id)) for t in tasks)
    assert env.demonstration_replies("heldout-3") == demonstration(make_task("heldout-3"))
    env.close()
