"""Wrappers keep branching: gymnasium.make's standard stack, RecordEpisodeStatistics and BranchingWrapper subclasses snapshot, restore and fork with their own state, and a fork equals a replay."""

import asyncio

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import ClipReward, OrderEnforcing, PassiveEnvChecker, RecordEpisodeStatistics, TimeLimit

import agentgym
from agentgym import BranchingWrapper, SnapshotMismatchError, WrapperNotBranchingError
from agentgym.envs.tool.keychain import KeyChainEnv, demonstration, make_task
from agentgym.wrappers import RecordScreenshots, register_branching

KEYCHAIN = "agentgym/tool.keychain-v0"
TASK = "train-3"  # two hops: lookup, lookup, submit
SOLUTION = demonstration(make_task(TASK))
WRONG = 'lookup("nowhere")'  # a valid call that solves nothing: it only uses up a step


def make(**kwargs) -> gymnasium.Env:
    return gymnasium.make(KEYCHAIN, max_turns=20, **kwargs)


def play(env, actions):
    return [env.step(action) for action in actions]


def same_steps(a, b):
    """Equal observations, rewards, flags and infos (an episode's wall time aside)."""
    for step_a, step_b in zip(a, b, strict=True):
        info_a, info_b = dict(step_a[4]), dict(step_b[4])
        episode_a, episode_b = info_a.pop("episode", None), info_b.pop("episode", None)
        assert step_a[:4] == step_b[:4] and info_a == info_b
        assert (episode_a is None) == (episode_b is None)
        if episode_a is not None:
            assert (episode_a["r"], episode_a["l"]) == (episode_b["r"], episode_b["l"])


def test_make_returns_the_standard_stack_and_its_fork_is_the_same_stack():
    env = make(max_episode_steps=3)
    assert [type(w) for w in (env, env.env, env.env.env)] == [TimeLimit, OrderEnforcing, PassiveEnvChecker]
    env.reset(options={"task_id": TASK})
    env.step(WRONG)
    fork = env.fork()
    try:
        assert [type(w) for w in (fork, fork.env, fork.env.env)] == [TimeLimit, OrderEnforcing, PassiveEnvChecker]
        assert fork._max_episode_steps == 3 and fork._elapsed_steps == 1 and fork.env.has_reset
        assert fork.unwrapped is not env.unwrapped and fork.unwrapped.turn == 1
        assert fork.spec.id == KEYCHAIN and fork.spec.max_episode_steps == 3
    finally:
        fork.close(), env.close()


def test_a_fork_truncates_at_the_same_step_as_a_replay():
    env, replay = make(max_episode_steps=3), make(max_episode_steps=3)
    for e in (env, replay):
        e.reset(options={"task_id": TASK})
        e.step(WRONG)
    fork = env.fork()
    try:
        forked, replayed = play(fork, [WRONG, WRONG]), play(replay, [WRONG, WRONG])
        same_steps(forked, replayed)
        assert [s[3] for s in forked] == [False, True]  # the third step of the episode is the limit
        assert env.step(WRONG)[3] is False  # the source has its own count (2 of 3)
    finally:
        fork.close(), env.close(), replay.close()


def test_a_fork_under_episode_statistics_equals_a_replay_with_the_statistics_copied():
    env, replay = RecordEpisodeStatistics(make()), RecordEpisodeStatistics(make())
    for e in (env, replay):  # one finished episode, then one step into the next
        e.reset(options={"task_id": TASK})
        play(e, SOLUTION)
        e.reset(options={"task_id": TASK})
        e.step(SOLUTION[0])
    fork = env.fork()
    try:
        assert isinstance(fork, RecordEpisodeStatistics) and fork.episode_count == 1
        assert (fork.episode_returns, fork.episode_lengths) == (0.0, 1) and list(fork.return_queue) == [1.0]
        forked, replayed = play(fork, SOLUTION[1:]), play(replay, SOLUTION[1:])
        same_steps(forked, replayed)
        assert forked[-1][4]["episode"]["r"] == 1.0 and forked[-1][4]["episode"]["l"] == len(SOLUTION)
        assert fork.episode_count == replay.episode_count == 2 and env.episode_count == 1
        assert list(fork.length_queue) == list(replay.length_queue) == [len(SOLUTION)] * 2
    finally:
        fork.close(), env.close(), replay.close()


def test_restore_rewinds_the_wrappers_state_with_the_env():
    env = RecordEpisodeStatistics(make(max_episode_steps=3))
    env.reset(options={"task_id": TASK})
    env.step(WRONG)
    with env.snapshot() as snap:
        play(env, [WRONG, WRONG])  # truncated by the limit: the statistics close the episode
        assert env.episode_count == 1 and env.env._elapsed_steps == 3
        env.restore(snap)
        assert env.episode_count == 0 and env.episode_lengths == 1 and env.env._elapsed_steps == 1
        assert env.unwrapped.turn == 1
        assert [s[3] for s in play(env, [WRONG, WRONG])] == [False, True]
        fork = env.fork(snap)  # a fork from a snapshot takes the snapshot's state, not the current one
    try:
        assert fork.episode_lengths == 1 and fork.env._elapsed_steps == 1
    finally:
        fork.close(), env.close()


def test_the_snapshot_is_the_envs_own_reference_counted_handle():
    env = make(max_episode_steps=5)
    env.reset(options={"task_id": TASK})
    env.step(WRONG)
    snap = env.snapshot()
    assert snap.refcount == 1 and snap.turn == 1
    env.step(WRONG)
    env.unwrapped.restore(snap)  # taken through the wrappers, restorable by the env alone
    assert env.unwrapped.turn == 1 and env._elapsed_steps == 2  # the wrappers were not rewound by that
    inner = env.unwrapped.snapshot()
    env.step(WRONG)
    env.restore(inner)  # a snapshot taken below the wrappers leaves their state alone
    assert env._elapsed_steps == 3
    fork = env.fork(inner)  # and a fork from it copies their current state (fresh ones could not step)
    assert fork.unwrapped.turn == 1 and fork._elapsed_steps == 3 and fork.step(WRONG)[3] is False
    fork.close()
    snap.release(), inner.release()
    assert snap.released
    with pytest.raises(agentgym.SnapshotReleasedError):
        env.restore(snap)
    env.close()


def test_a_snapshot_restores_only_into_a_stack_of_the_same_shape():
    env = make(max_episode_steps=5)
    env.reset(options={"task_id": TASK})
    other = RecordEpisodeStatistics(env.unwrapped)  # the same env under another wrapper at the top
    with (
        env.snapshot() as snap,
        pytest.raises(
            SnapshotMismatchError, match="through a PassiveEnvChecker where this stack has a RecordEpisodeStatistics"
        ),
    ):
        other.restore(snap)
    env.close()


def test_a_wrapper_without_declared_state_is_named_in_the_error():
    env = ClipReward(make(), 0.0, 0.5)
    env.reset(options={"task_id": TASK})
    for method in (env.snapshot, env.fork):
        with pytest.raises(WrapperNotBranchingError, match=r"gymnasium\.wrappers\..*ClipReward does not declare"):
            method()
    register_branching(ClipReward)  # stateless: rebuilt from its recorded constructor arguments
    try:
        fork = env.fork()
        assert isinstance(fork, ClipReward) and play(fork, SOLUTION)[-1][1] == 0.5
        fork.close()
    finally:
        agentgym.wrappers._adapters.pop(ClipReward)
    env.close()


class StepCounter(BranchingWrapper):
    """Counts steps across episodes and adds ``bonus`` to the reward of every ``every``-th one."""

    branch_attributes = ("steps", "history")

    def __init__(self, env, bonus: float, *, every: int = 2):
        super().__init__(env)
        self.bonus, self.every = bonus, every
        self.steps, self.history = 0, []

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        self.history.append(action)
        extra = self.bonus if self.steps % self.every == 0 else 0.0
        return observation, reward + extra, terminated, truncated, info


def test_a_branching_wrapper_subclass_forks_with_its_arguments_and_state_and_restores():
    env = TimeLimit(StepCounter(make(), 0.25, every=3), 10)
    env.reset(options={"task_id": TASK})
    env.step(WRONG)
    fork = env.fork()
    try:
        inner = fork.env
        assert isinstance(inner, StepCounter) and (inner.bonus, inner.every, inner.steps) == (0.25, 3, 1)
        inner.history.append("only in the fork")  # a deep copy: the source's list is its own
        assert env.env.history == [WRONG]
        assert [s[1] for s in play(fork, [WRONG, WRONG])] == [0.0, 0.25]
        with env.snapshot() as snap:
            env.step(WRONG)
            env.restore(snap)
            assert env.env.steps == 1 and env.env.history == [WRONG]
    finally:
        fork.close(), env.close()


async def test_the_async_twins_reach_the_env_through_make():
    env = make(max_episode_steps=4)
    observation, info = await env.areset(options={"task_id": TASK})
    assert info["task_id"] == TASK
    await env.astep(SOLUTION[0])
    snap = await env.asnapshot()
    forks = await asyncio.gather(env.afork(), env.afork(snap))
    for fork in forks:
        steps = [await fork.astep(action) for action in SOLUTION[1:]]
        assert steps[-1][1:3] == (1.0, True) and fork._elapsed_steps == len(SOLUTION)
        await fork.aclose()
    await env.arestore(snap)
    snap.release()
    await env.aclose()


def test_check_env_passes_through_make():
    with pytest.warns(UserWarning, match="different from the unwrapped version"):  # its advice: check .unwrapped
        check_env(make(), skip_render_check=False)
    check_env(make().unwrapped, skip_render_check=False)


def test_memory_wrapper_over_the_standard_stack_forks_as_one_stack(tmp_path):
    from agentgym.memory.wrapper import MemoryWrapper

    env = TimeLimit(MemoryWrapper(make(), str(tmp_path / "memory.db")), 10)
    env.reset(options={"task_id": TASK})
    env.step(SOLUTION[0])
    fork = env.fork()
    try:
        memory = fork.env
        assert isinstance(memory, MemoryWrapper) and memory.bank is env.env.bank
        assert isinstance(memory.env, OrderEnforcing) and memory._context.branch and len(memory._context.steps) == 1
        assert play(fork, SOLUTION[1:])[-1][1] == 1.0
        assert memory.bank.store.count(kind="episode") == 0  # a branch writes only with write_forks=True
        play(env, SOLUTION[1:])
        assert memory.bank.store.count(kind="episode") == 1
    finally:
        fork.close(), env.close()


@pytest.mark.docker
def test_a_docker_env_forks_through_the_standard_stack_and_episode_statistics_like_a_replay(docker_ready):
    from tests.helpers.tool_calls import call

    first, then = call("bash", command="cd /tmp && echo one > a"), call("bash", command="pwd; cat a")
    env = RecordEpisodeStatistics(gymnasium.make("agentgym/code.humaneval-v0", max_episode_steps=3))
    replay = RecordEpisodeStatistics(gymnasium.make("agentgym/code.humaneval-v0", max_episode_steps=3))
    try:
        for e in (env, replay):
            e.reset(options={"task_id": "HumanEval/0"})
            e.step(first)
        fork = env.fork()
        try:
            env.step(call("bash", command="rm /tmp/a"))  # the source goes on without touching the fork
            forked, replayed = play(fork, [then, then]), play(replay, [then, then])
            same_steps(forked, replayed)
            assert forked[0][0]["text"].startswith("/tmp\none") and [s[3] for s in forked] == [False, True]
            assert forked[-1][4]["episode"]["l"] == 3 and fork.episode_count == 1
        finally:
            fork.close()
    finally:
        env.close(), replay.close()


# --- RecordScreenshots -------------------------------------------------------------------------


def png_pixels(text: str):
    """The RGB pixels of a base64 PNG (as the eval report would show it)."""
    import base64
    import io

    from PIL import Image

    data = base64.b64decode(text, validate=True)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


class PaintedKeyChain(KeyChainEnv):
    """KeyChain with an rgb_array render: a 2x3 frame whose every pixel is the turn number."""

    metadata = {"render_modes": ["ansi", "rgb_array"]}

    def render(self):
        if self.render_mode == "rgb_array":
            return np.full((2, 3, 3), self.turn, np.uint8)
        return super().render()


def test_record_screenshots_puts_each_steps_frame_into_info_and_forks_as_the_same_wrapper():
    env = RecordScreenshots(PaintedKeyChain(max_turns=20, render_mode="rgb_array"), key="frame")
    try:
        _, info = env.reset(options={"task_id": TASK})
        assert "frame" not in info  # resets record nothing, as the web env's flag did
        info = env.step(WRONG)[4]
        assert (png_pixels(info["frame"]) == 1).all() and png_pixels(info["frame"]).shape == (2, 3, 3)
        fork = env.fork()
        try:
            assert isinstance(fork, RecordScreenshots) and fork.key == "frame" and fork.unwrapped is not env.unwrapped
            assert (png_pixels(fork.step(WRONG)[4]["frame"]) == 2).all()
            with fork.snapshot() as snap:
                fork.step(WRONG)
                fork.restore(snap)
            assert (png_pixels(fork.step(WRONG)[4]["frame"]) == 3).all()
        finally:
            fork.close()
        assert (png_pixels(env.step(WRONG)[4]["frame"]) == 2).all()  # the source goes on by itself
    finally:
        env.close()


def test_record_screenshots_over_the_standard_stack_and_a_render_failure():
    gymnasium.register("agentgym/test.painted-keychain-v0", entry_point=PaintedKeyChain)
    try:
        env = RecordScreenshots(gymnasium.make("agentgym/test.painted-keychain-v0", render_mode="rgb_array"))
        env.reset(options={"task_id": TASK})
        assert (png_pixels(env.step(WRONG)[4]["screenshot"]) == 1).all()
        fork = env.fork()
        assert isinstance(fork, RecordScreenshots) and isinstance(fork.env, OrderEnforcing)
        fork.close()
        env.unwrapped.render = lambda: 1 / 0  # a failing render keeps the step and says why
        info = env.step(WRONG)[4]
        assert "screenshot" not in info and info["screenshot_error"].startswith("ZeroDivisionError")
        env.close()
    finally:
        gymnasium.registry.pop("agentgym/test.painted-keychain-v0")


def test_record_screenshots_needs_an_env_that_renders_rgb_array_images():
    with pytest.raises(ValueError, match="renders no rgb_array"):
        RecordScreenshots(make())
    env = PaintedKeyChain()
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        RecordScreenshots(env)
    env.close()


@pytest.mark.browser
def test_a_wrapped_web_env_records_screenshots_and_forks_with_the_wrapper():
    env = RecordScreenshots(gymnasium.make("agentgym/web.shop-v0", render_mode="rgb_array"))
    try:
        task_id = env.unwrapped.task_ids()[0]
        env.reset(options={"task_id": task_id})
        info = env.step("noop()")[4]
        width, height = env.unwrapped.screen_size
        assert png_pixels(info["screenshot"]).shape == (height, width, 3)
        assert (png_pixels(info["screenshot"]) == env.render()).all()  # the env's own frame
        fork = env.fork()
        try:
            assert isinstance(fork, RecordScreenshots) and fork.unwrapped is not env.unwrapped
            assert png_pixels(fork.step("noop()")[4]["screenshot"]).shape == (height, width, 3)
            assert (png_pixels(env.step("noop()")[4]["screenshot"]) == fork.render()).all()  # same page, same pixels
        finally:
            fork.close()
    finally:
        env.close()


@pytest.mark.browser
def test_the_eval_harness_wraps_only_the_envs_that_render_images():
    from agentgym.eval.harness import _env_factory, _renders_rgb_array

    assert _renders_rgb_array("agentgym/web.shop-v0") and _renders_rgb_array("agentgym/web.miniwob.click-test-v0")
    assert not _renders_rgb_array(KEYCHAIN)
    env = _env_factory(KEYCHAIN, {"max_turns": 3}, screenshots=True)()  # run as it is
    assert not isinstance(env, RecordScreenshots) and env.render_mode is None
    env.close()
