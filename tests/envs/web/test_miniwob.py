"""MiniWoB++ on real Chromium: every task resets with seeds, scripted solutions succeed, wrong actions fail, forks equal replays, bad input is an error."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from agentgym.envs.web.miniwob import MiniWoBEnv, miniwob_tasks
from agentgym.envs.web.observation import element_id, elements
from tests.helpers.miniwob import SOLUTIONS, goal_of, quoted, submit

TASKS = miniwob_tasks()


# ---------------------------------------------------------------- every task
#: Tasks whose seed-0 instance is started a second time (a third of all, to keep the file fast:
#: every reset loads the page into a fresh browser context, ~0.3-1 s).
REPEATED = set(TASKS[::3])


def _reset_with_seeds(task: str) -> tuple[str, list[str], list[int], str | None]:
    env = MiniWoBEnv(task)
    goals, id_counts = [], []
    try:
        for seed in (0, 1, 0) if task in REPEATED else (0, 1):
            obs, info = env.reset(seed=seed)
            goals.append(goal_of(obs["text"]))
            id_counts.append(len(elements(obs["text"])))
            assert info["task_id"] == task
        return task, goals, id_counts, None
    except Exception as exc:  # reported per task below
        return task, goals, id_counts, f"{type(exc).__name__}: {exc}"
    finally:
        env.close()


# Every task is a sweep (`make test-sweeps`); `make test` resets every 8th.
@pytest.mark.parametrize(
    "stride", [pytest.param(1, marks=pytest.mark.sweep, id="every-task"), pytest.param(8, id="every-8th")]
)
def test_tasks_reset_with_seeds(stride):
    assert len(TASKS) > 100
    tasks = TASKS[::stride]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(_reset_with_seeds, tasks))
    errors = [f"{task}: {error}" for task, _, _, error in results if error]
    assert not errors, errors
    for task, goals, id_counts, _ in results:
        assert all(goals), (task, goals)
        assert min(id_counts) > 0, (task, id_counts)
        if len(goals) == 3:
            assert goals[0] == goals[2], f"{task}: seed 0 gave {goals[0]!r} then {goals[2]!r}"
    differ = [task for task, goals, _, _ in results if goals[0] != goals[1]]
    assert len(differ) > 0.6 * len(tasks), f"only {len(differ)} tasks change with the seed"


# ---------------------------------------------------------------- scripted success and failure


@pytest.mark.parametrize("task", sorted(SOLUTIONS))
def test_scripted_solution_succeeds(task):
    env = MiniWoBEnv(task)
    try:
        obs, _ = env.reset(seed=5)
        actions = SOLUTIONS[task](obs["text"])
        for number, action in enumerate(actions, 1):
            obs, reward, terminated, truncated, info = env.step(action)
            assert info["error"] is None, (action, info["error"], obs["text"])
            assert terminated == (number == len(actions)), (action, obs["text"])
        assert reward == 1.0 and info["success"] is True and not truncated
        assert info["grade"]["raw_reward"] == 1.0 and 0.0 <= info["grade"]["env_reward"] <= 1.0
    finally:
        env.close()


def test_wrong_actions_get_the_tasks_failure_reward():
    env = MiniWoBEnv("click-button")
    try:
        for seed in range(20):  # an instance with a button that is not the one asked for
            obs, _ = env.reset(seed=seed)
            wrong = [
                e
                for e in elements(obs["text"])
                if e["role"] == "button" and e["name"] != quoted(goal_of(obs["text"]))[0]
            ]
            if wrong:
                break
        obs, reward, terminated, truncated, info = env.step(f"click({wrong[0]['id']})")
        assert (reward, terminated, info["success"], info["grade"]["raw_reward"]) == (-1.0, True, False, -1.0)
    finally:
        env.close()
    env = MiniWoBEnv("enter-text")
    try:
        obs, _ = env.reset(seed=0)
        env.step(f'fill({element_id(obs["text"], "textbox")}, "certainly not the word")')
        obs, reward, terminated, truncated, info = env.step(submit(obs["text"]))
        assert (reward, terminated, info["success"]) == (-1.0, True, False)
        # After the end, steps are refused, not performed.
        obs, reward, terminated, truncated, info = env.step("noop()")
        assert info["error"] == "episode is over" and reward == 0.0
    finally:
        env.close()


# ---------------------------------------------------------------- forks
def _fill_twice(t):
    box = element_id(t, "textbox")
    return [f"click({box})", 'keyboard_type("ab")'], 'keyboard_type("cd")'


def _two_boxes(role):
    def steps(t):
        ids = [e["id"] for e in elements(t) if e["role"] == role]
        return [f"click({ids[0]})"], f"click({ids[1]})"

    return steps


def _options(t):
    line = next(e for e in elements(t) if e["role"] == "combobox")
    return json.loads(line["rest"].split("options=", 1)[1])


FORK_STEPS = {
    "click-checkboxes": _two_boxes("checkbox"),
    "click-checkboxes-soft": _two_boxes("checkbox"),
    "click-checkboxes-transfer": _two_boxes("checkbox"),
    "click-option": _two_boxes("radio"),
    "enter-text": _fill_twice,
    "enter-text-2": _fill_twice,
    "text-transform": _fill_twice,
    "login-user": lambda t: (
        [f'fill({element_id(t, "textbox", nth=0)}, "someone")'],
        f'fill({element_id(t, "textbox", nth=1)}, "secret")',
    ),
    "enter-password": lambda t: (
        [f"click({element_id(t, 'textbox', nth=0)})", 'keyboard_type("pw")'],
        f"click({element_id(t, 'textbox', nth=1)})",
    ),
    "choose-list": lambda t: (
        [f'select_option({element_id(t, "combobox")}, "{_options(t)[1]}")'],
        f'select_option({element_id(t, "combobox")}, "{_options(t)[2]}")',
    ),
}


# Each task forks in a few seconds on two cores: `make test` forks every third one, `make test-sweeps` all ten.
@pytest.mark.parametrize("every", [pytest.param(1, marks=pytest.mark.sweep, id="all"), pytest.param(3, id="sampled")])
def test_fork_equals_replay_on_ten_tasks(monkeypatch, every):
    """The ten tasks fork by state (same instance, fields and core.js's state put back); a replayed fork of the same
    snapshot and the original must show the same text and the same pixels after the next action."""
    assert len(FORK_STEPS) == 10 and set(FORK_STEPS) == MiniWoBEnv.state_fork_tasks
    failures = []
    for task, steps in list(FORK_STEPS.items())[::every]:
        env = MiniWoBEnv(task, screenshot=True)
        children = []
        try:
            obs, _ = env.reset(seed=7)
            prefix, following = steps(obs["text"])
            for action in prefix:
                obs, reward, terminated, _, info = env.step(action)
                assert info["error"] is None and not terminated, (task, action, info["error"])
            with env.snapshot() as snap:
                children.append(env.fork(snap))
                monkeypatch.setattr(MiniWoBEnv, "state_fork_tasks", frozenset())
                children.append(env.fork(snap))
                monkeypatch.undo()
            assert [child.fork_mode for child in children] == ["restore", "replay"], task
            assert all(child.instance_seed == env.instance_seed for child in children)
            original = env.step(following)
            assert original[4]["error"] is None, (task, original[4]["error"])
            for child in children:
                forked = child.step(following)
                if original[0]["text"] != forked[0]["text"]:
                    failures.append(
                        f"{task} ({child.fork_mode}): text differs\n{original[0]['text']}\n---\n{forked[0]['text']}"
                    )
                elif original[0]["image"].tobytes() != forked[0]["image"].tobytes():
                    differing = int((original[0]["image"] != forked[0]["image"]).any(-1).sum())
                    failures.append(f"{task} ({child.fork_mode}): screenshot differs in {differing} pixels")
                assert original[1:4] == forked[1:4], (task, child.fork_mode)
        finally:
            for child in children:
                child.close()
            env.close()
    assert not failures, "\n\n".join(failures)


def test_forks_of_other_tasks_and_of_finished_episodes_replay():
    env = MiniWoBEnv(["click-button", "click-checkboxes"], screenshot=True)
    try:
        obs, _ = env.reset(seed=3, options={"task_id": "click-button"})  # state in script variables
        child = env.fork()
        try:
            assert child.fork_mode == "replay"
            assert child.step("noop()")[0]["text"] == env.step("noop()")[0]["text"]
        finally:
            child.close()
        obs, _ = env.reset(seed=3, options={"task_id": "click-checkboxes"})
        obs, reward, terminated, *_ = env.step(f"click({element_id(obs['text'], 'button', 'Submit')})")
        assert terminated  # core.js ended the episode (and started the next): the instance is no longer the start's
        child = env.fork()
        try:
            assert child.fork_mode == "replay" and child.turn == env.turn
        finally:
            child.close()
    finally:
        env.close()


# ---------------------------------------------------------------- bad input and time limits
def test_bad_input_is_an_error_never_a_crash():
    env = MiniWoBEnv("click-button")
    try:
        env.reset(seed=0)
        for action, message in [
            ("click(999)", "no element [999]"),
            ("mouse_click(900, 50)", "outside the 780x437"),
            ("mouse_click(-1, 5)", "outside"),
            ("keyboard_type()", ""),
            ("hello there", ""),
            ('goto("http://example.com/")', "outside the sites"),
        ]:
            obs, reward, terminated, truncated, info = env.step(action)
            assert info["error"] and message in info["error"], (action, info["error"])
            assert "env_error" not in info and not terminated and not truncated and reward == 0.0
            assert obs["text"]
    finally:
        env.close()


def test_leaving_the_task_page_is_not_judged():
    env = MiniWoBEnv("click-button")
    try:
        obs, _ = env.reset(seed=0)
        # Another task page on the same server: solving it must not end this episode.
        obs, reward, terminated, _, info = env.step('goto("/miniwob/click-test.html")')
        assert info["error"] is None and not terminated
        obs, reward, terminated, _, info = env.step("go_back()")
        assert info["error"] is None and not terminated and reward == 0.0
    finally:
        env.close()


def test_time_limit_is_off_by_default_and_configurable():
    env = MiniWoBEnv("click-button")
    try:
        env.reset(seed=0)
        assert env._run(env._task_page.evaluate("() => typeof core.EP_TIMER")) == "string"  # no timer pending
    finally:
        env.close()
    env = MiniWoBEnv("click-button", episode_time_limit=0.3)
    try:
        env.reset(seed=0)
        time.sleep(0.8)
        obs, reward, terminated, truncated, info = env.step("noop()")
        assert (reward, terminated, info["success"], info["grade"]["reason"]) == (-1.0, True, False, "timed out")
    finally:
        env.close()
    with pytest.raises(ValueError):
        MiniWoBEnv("click-button", episode_time_limit=-1)
    with pytest.raises(ValueError):
        MiniWoBEnv("no-such-task")


def test_instance_seed_option_and_seeded_resets():
    env = MiniWoBEnv("click-checkboxes")
    try:
        first, _ = env.reset(seed=3)
        seed = env.instance_seed
        again, _ = env.reset(options={"instance_seed": seed})
        assert env.instance_seed == seed and again["text"] == first["text"]
        assert np.iinfo(np.int32).max >= seed >= 0
    finally:
        env.close()
