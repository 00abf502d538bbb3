"""The AgentEnv contract on a pure-Python env: episode bookkeeping, errors, snapshots, forks and async twins."""

import asyncio
import gc

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.actions import ToolSpec
from agentgym.snapshot import SnapshotMismatchError, SnapshotReleasedError
from tests.helpers.counter import CounterEnv


def add(n):
    return f'<tool_call>{{"name": "add", "arguments": {{"n": {n}}}}}</tool_call>'


SUBMIT = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'


@pytest.fixture
def env():
    env = CounterEnv()
    yield env
    env.close()


def test_check_env_passes():
    check_env(CounterEnv())


def test_reset_and_step_carry_the_documented_info(env):
    obs, info = env.reset(options={"task_id": "reach-7"})
    assert obs == {"text": "Reach 7 by calling add(n). Counter: 0"}
    assert info["task_id"] == "reach-7" and info["turn"] == 0 and info["success"] is False
    assert [t["function"]["name"] for t in info["tools"]] == ["add", "submit"]
    obs, reward, terminated, truncated, info = env.step(add(3) + add(4) + SUBMIT)
    assert obs["text"] == "[add] Counter: 3\n\n[add] Counter: 7\n\n[submit] Submitted 7: success"
    assert (reward, terminated, truncated, info["success"], info["turn"]) == (1.0, True, False, True, 1)


class GrowingToolsEnv(CounterEnv):
    """A CounterEnv whose tools change mid-episode: ``double`` is offered once the total reaches 5, rebuilt anew each call."""

    def tools(self):
        base = super().tools()
        if self.total < 5:
            return base
        return [*base, ToolSpec("double", f"Double the counter ({self.total}).")]


def test_info_tools_follow_tools_that_change_mid_episode():
    env = GrowingToolsEnv()
    names = lambda info: [t["function"]["name"] for t in info["tools"]]  # noqa: E731
    _, info = env.reset(options={"task_id": "reach-12"})
    assert names(info) == ["add", "submit"]
    info["tools"].append({"type": "function", "function": {"name": "injected"}})  # a caller's list is its own
    info = env.step(add(2))[4]
    assert names(info) == ["add", "submit"]
    snapshot = env.snapshot()
    info = env.step(add(3))[4]
    assert names(info) == ["add", "submit", "double"] and info["tools"][2]["function"]["description"].endswith("(5).")
    info = env.step(add(1))[4]  # an equal name, another description: a changed tool
    assert info["tools"][2]["function"]["description"].endswith("(6).")
    env.restore(snapshot)  # back before the change: the next step offers the old tools again
    assert names(env.step(add(1))[4]) == ["add", "submit"]
    snapshot.release()
    env.close()


def test_seeded_reset_draws_the_same_task():
    first, second = CounterEnv(), CounterEnv()
    assert first.reset(seed=3)[1]["task_id"] == second.reset(seed=3)[1]["task_id"]


def test_unknown_task_is_a_caller_error(env):
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "nope"})


def test_step_before_reset_raises(env):
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(SUBMIT)


def test_bad_model_output_is_an_observation_not_an_exception(env):
    env.reset(options={"task_id": "reach-7"})
    obs, reward, terminated, truncated, info = env.step("I think the answer is 7")
    assert "no tool call found" in obs["text"] and "add(n: integer)" in obs["text"]
    assert info["error"] and not terminated and not truncated
    obs, *_, info = env.step(add('"three"'))
    assert "must be integer" in info["error"]
    obs, *_, info = env.step(add(3) + '<tool_call>{"name": "explode"}</tool_call>')
    assert "[add] Counter: 3" in obs["text"] and "unknown tool 'explode'" in obs["text"]


def test_env_failure_truncates_with_env_error(env, monkeypatch):
    env.reset(options={"task_id": "reach-7"})
    monkeypatch.setattr(env, "_call_tool", lambda call: 1 / 0)
    obs, _, terminated, truncated, info = env.step(add(1))
    assert truncated and not terminated
    assert info["env_error"].startswith("ZeroDivisionError") and "Environment error" in obs["text"]


def test_a_limit_the_agent_used_up_is_its_failure_not_an_env_error(env, monkeypatch):
    from agentgym.core import ResourceLimitExceeded

    def exhaust(call):
        raise ResourceLimitExceeded("the sandbox wrote more than its 2 GiB disk limit")

    env.reset(options={"task_id": "reach-7"})
    monkeypatch.setattr(env, "_call_tool", exhaust)
    obs, reward, terminated, truncated, info = env.step(add(1))
    # An env error would be dropped or retried by trainers and the harness: a way out of a 0.
    assert terminated and not truncated and reward == 0.0 and info["success"] is False
    assert "env_error" not in info and "disk limit" in info["limit_exceeded"] and "disk limit" in obs["text"]


def test_max_turns_truncates_and_stepping_after_the_end_is_harmless():
    env = CounterEnv(max_turns=2)
    env.reset(options={"task_id": "reach-30"})
    assert env.step(add(1))[3] is False
    assert env.step(add(1))[3] is True
    obs, reward, _, truncated, info = env.step(add(1))
    assert truncated and reward == 0.0 and info["error"] == "episode is over" and env.total == 2


def test_snapshot_restore_returns_to_the_captured_turn(env):
    env.reset(options={"task_id": "reach-12"})
    env.step(add(5))
    with env.snapshot() as snap:
        env.step(add(5))
        env.restore(snap)
        assert (env.total, env.turn) == (5, 1)
        env.step(add(7))
        env.step(SUBMIT)
        env.restore(snap)  # a snapshot stays usable after restoring from it
        assert env.step(add(7) + SUBMIT)[1] == 1.0


def test_fork_is_independent_and_equals_replay(env):
    env.reset(options={"task_id": "reach-12"})
    env.step(add(4))
    env.step(add(4))
    child = env.fork()
    try:
        child_step = child.step(add(4) + SUBMIT)
        env.step(add(1))
        replay = CounterEnv()
        replay.reset(options={"task_id": "reach-12"})
        replay.step(add(4))
        replay.step(add(4))
        assert child_step == replay.step(add(4) + SUBMIT)
        assert (env.total, child.total) == (9, 12)
    finally:
        child.close()


def test_snapshot_refcounting_releases_once_at_zero():
    log = []
    env = CounterEnv(release_log=log)
    env.reset(options={"task_id": "reach-7"})
    snap = env.snapshot()
    snap.retain()
    snap.release()
    assert log == [] and snap.refcount == 1
    branch = env.fork(snap)
    snap.release()
    snap.release()
    assert log == [0] and snap.released
    with pytest.raises(SnapshotReleasedError):
        env.restore(snap)
    with pytest.raises(SnapshotReleasedError):
        snap.retain()
    branch.close()
    env.snapshot()  # dropped without release: garbage collection frees it
    gc.collect()
    assert log == [0, 1]


def test_fork_without_snapshot_releases_its_temporary_snapshot():
    log = []
    env = CounterEnv(release_log=log)
    env.reset(options={"task_id": "reach-7"})
    env.fork().close()
    assert len(log) == 1


def test_snapshot_restores_only_into_the_same_kind_and_task(env):
    env.reset(options={"task_id": "reach-7"})
    snap = env.snapshot()
    other_task = CounterEnv()
    other_task.reset(options={"task_id": "reach-12"})
    with pytest.raises(SnapshotMismatchError, match="task"):
        other_task.restore(snap)

    class OtherCounter(CounterEnv):
        pass

    with pytest.raises(SnapshotMismatchError, match="cannot restore into"):
        OtherCounter().restore(snap)
    assert snap.metadata["kind"] == "tests.helpers.counter.CounterEnv" and snap.metadata["turn"] == 0
    snap.release()


def test_fork_keeps_constructor_configuration():
    env = CounterEnv(max_turns=3)
    env.reset(options={"task_id": "reach-7"})
    assert env.fork().max_turns == 3


async def test_async_twins():
    env = CounterEnv()
    await env.areset(options={"task_id": "reach-7"})
    await env.astep(add(7))
    children = await asyncio.gather(*(env.afork() for _ in range(4)))
    results = await asyncio.gather(*(child.astep(SUBMIT) for child in children))
    assert all(r[1] == 1.0 for r in results)
    await asyncio.gather(*(child.aclose() for child in children))
    await env.aclose()
    with pytest.raises(gymnasium.error.ClosedEnvironmentError):
        env.step(SUBMIT)


class _NoRenderArgs(CounterEnv):
    """An author's subclass whose ``__init__`` never heard of render_mode."""

    def __init__(self, target_bonus=0):
        super().__init__()
        self.target_bonus = target_bonus


def test_an_init_without_render_mode_still_takes_it_and_forks_keep_it():
    env = _NoRenderArgs(target_bonus=2, render_mode="ansi")
    assert (env.render_mode, env.target_bonus) == ("ansi", 2)
    env.reset(options={"task_id": "reach-7"})
    assert env.render() == env._episode.last_observation["text"]
    assert env.fork().render_mode == "ansi"
    assert _NoRenderArgs().render_mode is None
    with pytest.raises(ValueError, match="render_mode must be one of"):
        _NoRenderArgs(render_mode="human")


def test_metadata_declares_render_fps_even_when_a_subclass_sets_its_own():
    class OwnMetadata(CounterEnv):
        metadata = {"render_modes": ["ansi"]}

    assert CounterEnv.metadata["render_fps"] == OwnMetadata.metadata["render_fps"] == 1
