"""Env workers on a real two-node Ray cluster: RemoteEnv's contract, Runner and TreeRollout on an EnvPool, fork placement across nodes, and faults.

The policies are the eval's reference policy (each task's reference solution), so every
episode's outcome is known: a lost or duplicated episode, or one that ran on a broken env, shows.
"""

from __future__ import annotations

import asyncio
import os
import time

import gymnasium as gym
import pytest

pytest.importorskip("ray", reason="the distributed extra is not installed")

import ray  # noqa: E402

from agentgym.core import AgentEnv  # noqa: E402
from agentgym.distributed.env_pool import EnvPool  # noqa: E402
from agentgym.distributed.remote_env import EnvWorkerLost, RemoteEnv  # noqa: E402
from agentgym.eval.oracles import EpisodeAgent, ReferencePolicy  # noqa: E402
from agentgym.registration import make_env_factory  # noqa: E402
from agentgym.rollout.agent import AgentConfig  # noqa: E402
from agentgym.rollout.runner import Runner, RunnerConfig  # noqa: E402
from agentgym.rollout.tree import TreeConfig, TreeRollout  # noqa: E402
from agentgym.snapshot import SnapshotMismatchError  # noqa: E402
from agentgym.task import call_text  # noqa: E402

KEYCHAIN = "agentgym/tool.keychain-v0"
HUMANEVAL = "agentgym/code.humaneval-v0"


class SlowReference(ReferencePolicy):
    """The reference policy, thinking ``delay`` seconds per turn: a fault injected meanwhile lands mid-episode."""

    def __init__(self, tasks, delay: float):
        super().__init__(tasks)
        self.delay = delay

    async def chat(self, messages, tools, sampling):
        await asyncio.sleep(self.delay)
        return await super().chat(messages, tools, sampling)


@pytest.fixture(scope="module")
def keychain_pool(ray_cluster):
    with EnvPool(KEYCHAIN, workers=2, envs_per_worker=4) as pool:
        yield pool


@pytest.fixture(scope="module")
def keychain_tasks():
    env = make_env_factory(KEYCHAIN)()
    try:
        return list(env.unwrapped.tasks()[:8])
    finally:
        env.close()


def _agent(tasks, delay: float = 0.0) -> EpisodeAgent:
    policy = SlowReference(tasks, delay) if delay else ReferencePolicy(tasks)
    return EpisodeAgent(policy, AgentConfig(max_turns=6))


def _placements(pool: EnvPool, monkeypatch) -> list:
    """Every worker slot the pool places an env on from now (a spy on its books; placement itself runs as is)."""
    placed, original = [], pool._placed

    def spy(slot, handle):
        placed.append(slot)
        original(slot, handle)

    monkeypatch.setattr(pool, "_placed", spy)
    return placed


def test_remote_envs_speak_the_contract_on_both_nodes(keychain_pool, keychain_tasks):
    envs = [keychain_pool() for _ in range(2)]
    try:
        assert {env.slot.node_id for env in envs} == {s.node_id for s in keychain_pool.slots}
        assert len({s.node_id for s in keychain_pool.slots}) == 2  # one worker per node
        task = keychain_tasks[0]
        for env in envs:
            assert isinstance(env, AgentEnv) and env.unwrapped is env and env.spec.id == KEYCHAIN
            observation, info = env.reset(options={"task_id": task.id})
            assert env.observation_space.contains(observation)
            assert {"task_id", "turn", "success", "error", "tools"} <= set(info) and env.task_id == task.id
            _, _, _, _, info = env.step("no tool call here")
            assert info["error"] and env.turn == 1  # bad model output is normal input
            with pytest.raises(ValueError, match="unknown task_id"):  # the env's own error, across the actor call
                env.reset(options={"task_id": "no-such-task"})
        env = envs[0]
        env.reset(options={"task_id": task.id})
        results = [env.step(action) for action in task.solution]
        assert results[-1][1] == 1.0 and results[-1][2] and results[-1][4]["success"]
        assert [t.id for t in env.tasks()] == list(env.task_ids()) and env.tools()
    finally:
        for env in envs:
            env.close()
    with pytest.raises(gym.error.ClosedEnvironmentError):
        envs[0].step("x")
    assert all(s.load == 0 for s in keychain_pool.slots)


def test_bad_pool_arguments_and_a_full_pool_are_clear_errors(ray_cluster):
    with pytest.raises(gym.error.NameNotFound):
        EnvPool("agentgym/no-such-env-v0")  # before any actor starts
    with pytest.raises(ValueError, match="envs_per_worker"):
        EnvPool(KEYCHAIN, envs_per_worker=0)
    with EnvPool(KEYCHAIN, workers=1, envs_per_worker=1, placement_timeout=0.5) as pool:
        env = pool()
        with pytest.raises(TimeoutError, match="1 of 1 workers live, each full at 1 envs"):
            pool()
        env.close()
        pool().close()  # the place is free again
    with pytest.raises(RuntimeError, match="closed"):
        pool()


async def test_async_twins_snapshot_and_restore(keychain_pool, keychain_tasks):
    task = next(t for t in keychain_tasks if len(t.solution) == 3)
    env = await asyncio.to_thread(keychain_pool)
    try:
        await env.areset(options={"task_id": task.id})
        await env.astep(task.solution[0])
        snap = await env.asnapshot()
        after_first = await env.astep(task.solution[1])
        await env.astep('lookup("amber")')
        await env.arestore(snap)
        assert env.turn == 1 and (await env.astep(task.solution[1])) == after_first
        other = next(t for t in keychain_tasks if t.id != task.id)
        await env.areset(options={"task_id": other.id})
        with pytest.raises(SnapshotMismatchError):  # the worker's env checks the task
            await env.arestore(snap)
        snap.release()
    finally:
        await env.aclose()


async def test_runner_and_tree_rollout_on_a_pool(keychain_pool, keychain_tasks, monkeypatch):
    result = await Runner(_agent(keychain_tasks), keychain_pool, RunnerConfig(concurrency=4, progress=False)).run(
        [t.id for t in keychain_tasks]
    )
    assert sorted(r.task_id for r in result.records) == sorted(t.id for t in keychain_tasks)
    assert not result.failures and all(r.success for r in result.records)

    placed = _placements(keychain_pool, monkeypatch)
    tree = TreeRollout(_agent(keychain_tasks), TreeConfig(roots=2, max_leaves=4, branch_every=1, branches=2))
    runner = Runner(  # one tree at a time: each placement after the first is a fork of that tree's env
        _agent(keychain_tasks),
        keychain_pool,
        RunnerConfig(concurrency=1, progress=False),
        job=lambda agent, env, request: tree.run(env, request.task_id, request.seed),
    )
    multi_hop = [t.id for t in keychain_tasks if len(t.solution) == 3][:2]
    trees = (await runner.run(multi_hop)).records
    assert len(trees) == 2 and all(len(t.leaves) > 1 for t in trees)
    assert all(leaf.success for t in trees for leaf in t.paths())
    # The root env came from the factory (and served both trees); every fork stayed on its worker.
    assert len(placed) > 2 and {slot.actor_id for slot in placed} == {placed[0].actor_id}
    assert all(s.load == 0 for s in keychain_pool.slots)


def test_forks_go_to_the_same_worker_then_its_node_then_another_node_and_equal_local_forks(ray_cluster, keychain_tasks):
    task = next(t for t in keychain_tasks if len(t.solution) == 3)
    local = make_env_factory(KEYCHAIN)()
    with EnvPool(KEYCHAIN, workers=3, envs_per_worker=2) as pool:  # two workers on one node, one on the other
        env = pool()
        home = env.slot
        neighbour = next(s for s in pool.slots if s.node_id == home.node_id and s is not home)
        forks = []
        try:
            env.reset(seed=3, options={"task_id": task.id})
            local.reset(seed=3, options={"task_id": task.id})
            assert env.step(task.solution[0])[:4] == local.step(task.solution[0])[:4]
            with env.snapshot() as snap:
                forks = [env.fork(snap) for _ in range(4)]
            # Its worker while it has room, then the other worker of its node, then (the node full) the other node.
            assert [f.slot for f in forks[:3]] == [home, neighbour, neighbour]
            assert forks[3].slot.node_id != home.node_id and forks[3].turn == 1
            for fork in forks:
                local_fork = local.fork()
                try:
                    for action in task.solution[1:] + ['lookup("amber")']:
                        assert fork.step(action) == local_fork.step(action)
                finally:
                    local_fork.close()
            assert env.step(task.solution[1]) == local.step(task.solution[1])  # the source goes on as it was
        finally:
            for env_ in [env, *forks]:
                env_.close()
            local.close()


@pytest.mark.docker
def test_code_env_on_a_worker_and_its_fork_moved_to_another_node(ray_cluster, docker_ready):
    options = {"tasks": "HumanEval/[0-1]"}
    write = call_text("bash", {"command": "echo travelled > /tmp/state.txt && python3 -c 'print(6*7)'"})
    read = call_text("bash", {"command": "cat /tmp/state.txt"})
    local = make_env_factory(HUMANEVAL, options)()
    with EnvPool(HUMANEVAL, options, workers=2, envs_per_worker=1) as pool:
        env = pool()
        try:
            task = env.tasks()[0]
            observation, info = env.reset(options={"task_id": task.id})
            local.reset(options={"task_id": task.id})
            assert info["task_id"] == task.id and env.observation_space.contains(observation)
            assert "42" in env.step(write)[0]["text"]
            local.step(write)
            with env.snapshot() as snap:
                moved = env.fork(snap)  # the committed image travels to the other node's worker
            local_fork = local.fork()
            try:
                assert moved.slot.node_id != env.slot.node_id
                assert moved.step(read)[:4] == local_fork.step(read)[:4]
                assert "travelled" in moved.step(read)[0]["text"]
            finally:
                moved.close()
                local_fork.close()
        finally:
            env.close()
            local.close()


def test_memory_wrapper_over_a_remote_env(keychain_pool, keychain_tasks, tmp_path):
    from agentgym.memory.wrapper import MemoryWrapper

    task = keychain_tasks[0]
    env = MemoryWrapper(keychain_pool(), str(tmp_path / "memory.db"))
    try:
        env.reset(options={"task_id": task.id})
        with env.snapshot() as snap:
            fork = env.fork(snap)
        assert isinstance(fork, MemoryWrapper) and isinstance(fork.unwrapped, RemoteEnv)
        for action in task.solution:
            assert fork.step(action)[:4] == env.step(action)[:4]
        fork.close()
        assert len(env.bank.episode_records()) == 1  # the episode was written; its fork's was not
    finally:
        env.close()


def test_every_call_of_an_env_whose_worker_died_raises_env_worker_lost(ray_cluster, keychain_tasks):
    with EnvPool(KEYCHAIN, workers=1, envs_per_worker=2) as pool:
        env = pool()
        env.reset(options={"task_id": keychain_tasks[0].id})
        snap, old_pid = env.snapshot(), env.slot.pid
        ray.kill(env.worker, no_restart=False)
        _wait_exited(old_pid)  # ray.kill returns before the process ends: a call sent now could still reach it
        with pytest.raises(EnvWorkerLost, match="was lost"):
            env.step(keychain_tasks[0].solution[0])
        with pytest.raises(EnvWorkerLost):
            env.fork(snap)
        snap.release()
        env.close()  # quiet: the env died with its worker
        assert not pool.slots[0].live
        again = pool()  # waits for Ray to restart the worker, then places there again
        assert again.reset(options={"task_id": keychain_tasks[0].id})[1]["task_id"] == keychain_tasks[0].id
        assert pool.slots[0].live and again.slot.pid != old_pid
        again.close()


def _wait_exited(pid: int, seconds: float = 30) -> None:
    """Until process ``pid`` (a worker on this machine's local cluster) is gone."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"worker process {pid} still runs {seconds} s after ray.kill")


async def test_a_pool_with_memory_wraps_every_env_on_its_worker(ray_cluster, keychain_tasks, tmp_path):
    from agentgym.memory.bank import MemoryBank
    from agentgym.memory.config import MemoryConfig

    path = str(tmp_path / "memory.db")  # one machine: every worker opens the same store
    with EnvPool(KEYCHAIN, workers=2, envs_per_worker=2, wrap=MemoryConfig(path, k_skills=1).wrap) as pool:
        result = await Runner(_agent(keychain_tasks), pool, RunnerConfig(concurrency=4, progress=False)).run(
            [t.id for t in keychain_tasks[:4]]
        )
    assert all(r.success for r in result.records) and not result.failures
    bank = MemoryBank(path, read_only=True)
    try:
        assert sorted(e.task_id for e in bank.episode_records()) == sorted(t.id for t in keychain_tasks[:4])
    finally:
        bank.close()


@pytest.mark.docker
async def test_worker_killed_mid_run_retries_elsewhere_and_its_containers_are_reaped(ray_cluster, docker_ready):
    probe = make_env_factory(HUMANEVAL, {"tasks": "HumanEval/[0-3]"})()
    tasks = list(probe.unwrapped.tasks())
    probe.close()
    with EnvPool(HUMANEVAL, {"tasks": "HumanEval/[0-3]"}, workers=2, envs_per_worker=2) as pool:
        runner = Runner(_agent(tasks, delay=1.0), pool, RunnerConfig(concurrency=2, progress=False))
        run = asyncio.ensure_future(runner.run([t.id for t in tasks]))
        victim = await _first_busy(pool, run)
        old_pid = victim.pid
        ray.kill(victim.actor, no_restart=False)
        result = await run
        status = ray.get(victim.actor.status.remote(), timeout=60)
    assert sorted(r.task_id for r in result.records) == sorted(t.id for t in tasks)  # each once
    assert all(r.success for r in result.records)
    lost = [f for f in result.failures if "EnvWorkerLost" in f.error]
    assert lost and all(f.kind == "env" for f in result.failures)
    assert all(r.metadata.get("failures") for r in result.records if r.task_id in {f.request.task_id for f in lost})
    assert status["pid"] != old_pid and status["reaped"]["containers"]  # the new process reaped the old one's
    assert not _containers_of(old_pid)


async def test_node_removed_mid_run_every_episode_completes_once(ray_cluster, keychain_tasks):
    node = ray_cluster.add_node(num_cpus=1)
    ray_cluster.wait_for_nodes()
    try:
        with EnvPool(KEYCHAIN, workers=3, envs_per_worker=2) as pool:
            doomed = [s for s in pool.slots if s.node_id == node.node_id]
            assert doomed, "a worker on the added node"
            runner = Runner(_agent(keychain_tasks, delay=1.0), pool, RunnerConfig(concurrency=3, progress=False))
            run = asyncio.ensure_future(runner.run([t.id for t in keychain_tasks[:6]]))
            await _first_busy(pool, run, among=doomed)
            ray_cluster.remove_node(node)
            node = None
            result = await asyncio.wait_for(run, 120)
        assert sorted(r.task_id for r in result.records) == sorted(t.id for t in keychain_tasks[:6])
        assert all(r.success for r in result.records)
        assert result.failures and all("EnvWorkerLost" in f.error for f in result.failures)
        failed = {f.request.task_id for f in result.failures}
        assert all(r.metadata["failures"] for r in result.records if r.task_id in failed)
    finally:
        if node is not None:
            ray_cluster.remove_node(node)


async def _first_busy(pool: EnvPool, run: asyncio.Future, among=None):
    """The first worker (of ``among``) with an env placed, once the run has one there."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not run.done():
        busy = [s for s in (among or pool.slots) if s.handles]
        if busy:
            await asyncio.sleep(0.5)  # into the episode: reset done, the policy thinking
            return busy[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no env was placed on the workers in time")


def _containers_of(pid: int) -> list[str]:
    from agentgym.sandbox import engine, labels

    return [
        c["Id"][:12]
        for c in engine.api().containers(all=True, filters=labels.MANAGED_FILTER)
        if c["Labels"].get(labels.OWNER_PID) == str(pid)
    ]
