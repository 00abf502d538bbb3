"""BFCL multi-turn's grader against reward hacks: the ground truth scores 1, hacks score 0, and a force-quit scores as BFCL's own eval runner scores it."""

import ast
import copy
import uuid
from pathlib import Path

import pytest
from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT
from bfcl_eval.eval_checker import multi_turn_eval
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

from agentgym.envs.tool.bfcl import BFCLMultiTurnEnv, from_bfcl_call

TASK_ID = "multi_turn_base_0"  # four user turns over a file system and a Twitter API


def bfcl_runner():
    """BFCL's ``_evaluate_single_multi_turn_entry``, compiled from its eval runner's own source
    (importing that module needs every model provider's SDK)."""
    path = Path(multi_turn_eval.__file__).parents[1] / "eval_runner.py"
    tree = ast.parse(path.read_text())
    function = next(
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "_evaluate_single_multi_turn_entry"
    )
    namespace = {
        "BaseHandler": object,
        "multi_turn_checker": multi_turn_checker,
        "is_empty_execute_response": multi_turn_utils.is_empty_execute_response,
    }
    exec(compile(ast.Module([function], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["_evaluate_single_multi_turn_entry"]


RUNNER = bfcl_runner()


class DecodedCalls:
    """The handler part the runner uses, for replies already in BFCL's decoded form (call strings)."""

    def decode_execute(self, result, has_tool_call_tag=False):
        return result


def bfcl_score(task, trajectory):
    """BFCL's eval runner on a trajectory (per user turn, per reply, call strings), its instance cache cleaned up."""
    model_name = f"graders_{uuid.uuid4().hex}"
    try:
        return RUNNER(
            DecodedCalls(),
            task["id"],
            trajectory,
            task["ground_truth"],
            copy.deepcopy(task),
            model_name,
            task["id"].rsplit("_", 1)[0],
        )
    finally:
        for name in [n for n in list(vars(multi_turn_utils)) if n.startswith(model_name)]:
            delattr(multi_turn_utils, name)


@pytest.fixture(scope="module")
def env():
    env = BFCLMultiTurnEnv("base")
    yield env
    env.close()


def play(env, task, replies):
    """Step through `replies` (call strings per reply, or text) until the episode ends; the last step."""
    env.reset(options={"task_id": task["id"]})
    for reply in replies:
        action = reply if isinstance(reply, str) else [from_bfcl_call(c, task["involved_classes"]) for c in reply]
        step = env.step(action)
        if step[2] or step[3]:
            return step
    raise AssertionError("the episode did not end")


def replies_of(trajectory):
    """A trajectory as the replies that play it: each turn's replies, then a text reply that ends the turn."""
    return [reply for turn in trajectory for reply in [*turn, "Done."]]


def reference(task):
    return [[[call] for call in turn] for turn in task["ground_truth"]]


def test_the_reference_solution_scores_one(env):
    task = env.task_data[TASK_ID]
    _, reward, terminated, _, info = play(env, task, replies_of(reference(task)))
    assert terminated and reward == 1.0 and info["grade"] == {"valid": True}
    assert bfcl_score(task, reference(task)) == {"valid": True}


def hacks(task):
    turns = reference(task)
    return {
        # Text replies only: every user turn answered with a claim that it is done.
        "claims done": [[] for _ in turns],
        # An API of the task called in place of each right one.
        "wrong API": [[["ls()"] for _ in turn] for turn in turns],
        # Every call of the conversation made in its first turn.
        "all at once": [[call for turn in turns for call in turn]] + [[] for _ in turns[1:]],
        # The right calls, then one more that changes the state the ground truth ends in.
        "right calls, then one more": turns[:-1] + [turns[-1] + [["rm(file_name='final_report.pdf')"]]],
    }


@pytest.mark.parametrize("hack", ["claims done", "wrong API", "all at once", "right calls, then one more"])
def test_a_hack_scores_zero(env, hack):
    task = env.task_data[TASK_ID]
    trajectory = hacks(task)[hack]
    _, reward, terminated, _, info = play(env, task, replies_of(trajectory))
    assert terminated and reward == 0.0 and not info["grade"]["valid"]
    assert not bfcl_score(task, trajectory)["valid"]


def test_an_answer_in_prose_is_not_a_call(env):
    task = env.task_data[TASK_ID]
    prose = "I went into the document folder, made a temp folder and moved the final report into it."
    _, reward, terminated, _, _ = play(env, task, [prose] * len(task["question"]))
    assert terminated and reward == 0.0 and env.state.calls == [[] for _ in task["question"]]


def force_quit_in_last_turn(task, last_turn):
    """The reference up to the last user turn, whose replies are `last_turn` and then pwd() until BFCL's step limit."""
    padding = [["pwd()"]] * (MAXIMUM_STEP_LIMIT + 1 - len(last_turn))
    return reference(task)[:-1] + [last_turn + padding]


@pytest.mark.parametrize("last_turn_right", [True, False])
def test_a_force_quit_in_the_last_turn_is_scored_like_bfcls_runner_does(env, last_turn_right):
    """BFCL force-quits after 21 replies with calls in a user turn; in the last turn that leaves no
    turn unplayed, so its runner scores the entry: 1 when the last turn's calls were right."""
    task = env.task_data[TASK_ID]
    trajectory = force_quit_in_last_turn(task, reference(task)[-1] if last_turn_right else [])
    replies = replies_of(trajectory[:-1]) + trajectory[-1]
    obs, reward, terminated, _, info = play(env, task, replies)
    assert terminated and "forced to quit after 20 steps" in obs["text"]
    assert [len(turn) for turn in env.state.calls] == [len(turn) for turn in trajectory]
    official = bfcl_score(task, env.state.calls)
    assert info["grade"]["valid"] == official["valid"] == (reward == 1.0) == last_turn_right


def test_a_force_quit_before_the_last_turn_fails_as_bfcls_runner_fails_it(env):
    task = env.task_data[TASK_ID]
    trajectory = [[["pwd()"]] * (MAXIMUM_STEP_LIMIT + 1)]
    obs, reward, terminated, _, info = play(env, task, trajectory[0])
    assert terminated and reward == 0.0
    official = bfcl_score(task, env.state.calls)
    assert len(env.state.calls) == 1 and not official["valid"]
    assert info["grade"]["error_type"] == official["error"]["error_type"] == "multi_turn:force_terminated"
    assert [info["grade"]["error_message"]] == official["error"]["error_message"]
