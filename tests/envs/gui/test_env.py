"""DesktopEnv: observations, bad model output, and branching (fork vs. replay screenshot equality)."""

import time

import docker.errors
import gymnasium
import numpy as np
import pytest

import agentgym
from agentgym.envs.gui import DesktopEnv
from agentgym.envs.gui.tasks import TASKS
from agentgym.sandbox import engine
from agentgym.snapshot import SnapshotReleasedError

pytestmark = pytest.mark.docker


def test_registered():
    assert "agentgym/gui.desktop-v0" in agentgym.registered_env_ids()
    assert gymnasium.spec("agentgym/gui.desktop-v0").entry_point == "agentgym.envs.gui.env:DesktopEnv"


def test_constructor_checks():
    with pytest.raises(ValueError, match="800x600"):
        DesktopEnv(screen_size=(640, 480))
    with pytest.raises(ValueError, match="fork_mode"):
        DesktopEnv(fork_mode="magic")
    with pytest.raises(ValueError, match="unknown task id"):
        DesktopEnv(tasks=["nope"])
    with pytest.raises(ValueError, match="no task matches"):
        DesktopEnv(tasks="nope-*")


def test_observation(env):
    observation, info = env.reset(options={"task_id": "sheet-fix-price"})
    assert observation["image"].shape == (768, 1024, 3) and observation["image"].dtype == np.uint8
    assert env.observation_space.contains(observation)
    text = observation["text"]
    assert text.startswith("Task: Pears cost 2.75")
    assert "'Sheet - prices.csv' at (2, 2) size 800x600  [focused]" in text
    assert "entry 'b3' = '2.57'" in text and "button 'Save'" in text and "pointer at (512, 384)" in text
    assert {tool["function"]["name"] for tool in info["tools"]} >= {"click", "type", "key", "done", "fail"}

    observation, _, _, _, info = env.step("click(271, 161)")
    assert info["error"] is None and "pointer at (271, 161)" in observation["text"]
    assert "entry 'b3' = '2.57' focused @(201,145,140x32)" in observation["text"]


BAD_REPLIES = [
    ("click(5000, 10)", "outside the 1024x768 screen"),
    ('key("NoSuchKey")', "No such key name"),
    ("click(1, 2, 3)", "takes 2 argument(s)"),
    ("let me think about it", "no tool call found"),
    ('{"name": "drag", "arguments": {"x1": 1}}', "missing required argument"),
]


def test_bad_model_output_is_an_error_not_a_crash(env):
    env.reset(options={"task_id": "files-delete-todo"})
    for reply, problem in BAD_REPLIES:
        observation, reward, terminated, truncated, info = env.step(reply)
        assert problem in info["error"] and problem in observation["text"], reply
        assert not terminated and not truncated and reward == 0.0 and "env_error" not in info
        assert observation["image"].shape == (768, 1024, 3) and observation["image"].any()
    # The episode goes on.
    _, _, _, _, info = env.step("click(100, 156)")
    assert info["error"] is None


def test_drag_selects_and_typing_replaces(env):
    """A drag across a cell's text selects it (Tk's entry binding), so typing replaces it: the task gets solved."""
    env.reset(options={"task_id": "sheet-fix-price"})
    _, info = _continue(env, ["drag(203, 161, 330, 161)", 'type("2.75")', 'key("ctrl+s")', "done()"])
    assert info["success"]


def _continue(env, steps):
    """Run steps; return the (image, text) observations and the final info."""
    seen, info = [], {}
    for step in steps:
        observation, _, _, _, info = env.step(step)
        assert info["error"] is None, observation["text"]
        seen.append((observation["image"], observation["text"]))
    return seen, info


@pytest.mark.parametrize(
    "task_id, prefix, mode",
    [
        ("sheet-line-totals", 4, "relaunch"),  # an entry focused with its cursor mid-cell, unsaved edits
        ("files-docs-folder", 7, "relaunch"),  # a new folder selected, a half-typed name in the field
        ("xedit-fix-typo", 2, "replay"),  # an unsaved buffer that only xedit's memory holds
    ],
)
def test_fork_equals_replay(desktop_image, task_id, prefix, mode):
    """A fork's screenshots and texts after each next action equal those of an env that replayed the prefix."""
    solution = TASKS[task_id].solution
    original, replayed, fork = DesktopEnv(image=desktop_image), DesktopEnv(image=desktop_image), None
    try:
        original.reset(options={"task_id": task_id})
        replayed.reset(options={"task_id": task_id})
        _continue(original, solution[:prefix])
        _continue(replayed, solution[:prefix])
        with original.snapshot() as snapshot:
            assert snapshot.metadata["fork"] == mode and snapshot.metadata["actions"] == prefix
            fork = original.fork(snapshot)
        assert fork.turn == prefix and fork.task_id == task_id
        forked, fork_info = _continue(fork, solution[prefix:])
        replay, replay_info = _continue(replayed, solution[prefix:])
        for (fork_image, fork_text), (replay_image, replay_text) in zip(forked, replay):
            assert fork_text == replay_text
            assert np.array_equal(fork_image, replay_image), (
                f"{(fork_image != replay_image).any(-1).sum()} pixels differ"
            )
        assert fork_info["success"] and replay_info["success"]
        # The original goes on independently of its fork.
        _, original_info = _continue(original, solution[prefix:])
        assert original_info["success"]
    finally:
        for env in (original, replayed, fork):
            if env is not None:
                env.close()


def test_restore_rewinds_and_snapshots_free_their_image(env):
    env.reset(options={"task_id": "files-delete-todo"})
    before, _ = _continue(env, ["click(100, 156)"])
    snapshot = env.snapshot()
    image = snapshot.metadata["image"]
    _continue(env, ["click(681, 226)"])
    assert "todo.txt" not in env.desktop.sandbox.exec("ls files").stdout
    env.restore(snapshot)
    assert env.turn == 1 and "todo.txt" in env.desktop.sandbox.exec("ls files").stdout
    after, info = _continue(env, ["click(100, 156)"])
    assert np.array_equal(after[0][0], before[0][0])
    _, info = _continue(env, ["click(681, 226)", "done()"])
    assert info["success"]
    snapshot.release()
    with pytest.raises(SnapshotReleasedError):
        env.restore(snapshot)
    env.reset(options={"task_id": "files-delete-todo"})  # the container started from the image goes away
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # its removal, and then the image's, run in the background
        try:
            engine.api().inspect_image(image)
        except docker.errors.ImageNotFound:
            return
        time.sleep(0.5)
    pytest.fail(f"the released snapshot image {image} is still there")


def test_forced_replay_mode(desktop_image):
    env = DesktopEnv(image=desktop_image, fork_mode="replay")
    try:
        env.reset(options={"task_id": "sheet-add-row"})
        _continue(env, TASKS["sheet-add-row"].solution[:2])
        with env.snapshot() as snapshot:
            assert snapshot.metadata == {**snapshot.metadata, "fork": "replay", "actions": 2}
            assert "image" not in snapshot.metadata
            fork = env.fork(snapshot)
        try:
            _, info = _continue(fork, TASKS["sheet-add-row"].solution[2:])
            assert info["success"]
        finally:
            fork.close()
    finally:
        env.close()
