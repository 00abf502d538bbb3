"""Every desktop task: its checker rejects the untouched start, and its scripted reference solution succeeds."""

import pytest

from agentgym.envs.gui.env import SandboxFiles
from agentgym.envs.gui.tasks import TASKS

pytestmark = pytest.mark.docker


def test_the_catalogue():
    apps = {task.app.name for task in TASKS.values()}
    assert apps == {"xedit", "sheet", "files"} and len(TASKS) >= 30
    for app in apps:
        assert sum(task.app.name == app for task in TASKS.values()) >= 10
    assert all(task.solution[-1] == ("done()" if task.feasible else "fail()") for task in TASKS.values())


# Every desktop task is a whole-benchmark sweep (`make test-sweeps`); `make test` solves every fourth one (each app
# still at least twice: the catalogue interleaves them).
@pytest.mark.parametrize(
    "task_id",
    [
        task_id if index % 4 == 0 else pytest.param(task_id, marks=pytest.mark.sweep)
        for index, task_id in enumerate(TASKS)
    ],
)
def test_reference_solution(env, task_id):
    task = TASKS[task_id]
    observation, info = env.reset(options={"task_id": task_id})
    assert task.instruction in observation["text"]
    # The checker reads the saved state, so it must reject the start (infeasible tasks: it accepts
    # it, since the right answer there is to change nothing and give up).
    problem = task.check(SandboxFiles(env.desktop))
    assert (problem is None) == (not task.feasible), problem
    for step in task.solution:
        observation, reward, terminated, truncated, info = env.step(step)
        assert info["error"] is None, (step, observation["text"])
        assert not truncated
    assert terminated and info["success"] and reward == 1.0, observation["text"]
    assert info["grade"] == {"claim": "done" if task.feasible else "fail", "problem": None}


@pytest.mark.parametrize("task_id", ["files-rename-missing", "sheet-budget-total"])
def test_the_wrong_verdict_fails(env, task_id):
    env.reset(options={"task_id": task_id})
    wrong = "done()" if not TASKS[task_id].feasible else "fail()"
    observation, reward, terminated, _, info = env.step(wrong)
    assert terminated and not info["success"] and reward == 0.0
    assert observation["text"].startswith("Task not complete")
    assert info["grade"]["claim"] == wrong.removesuffix("()")
