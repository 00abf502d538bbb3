"""MemoryWrapper: memories into the first observation, one write per episode, branching (snapshot/restore/fork), failures that never break a step, and its use by the runner, the trainers' env factory and the eval harness."""

import json

import gymnasium as gym
import pytest

from agentgym.envs.tool.keychain import KeyChainEnv, demonstration, make_task
from agentgym.memory.bank import MEMORY_BEGIN, MemoryBank, split_prompt
from agentgym.memory.config import MemoryConfig
from agentgym.memory.induction import SkillDraft
from agentgym.memory.wrapper import MemoryWrapper
from agentgym.rollout.agent import Agent, AgentConfig
from agentgym.rollout.runner import EpisodeRequest, Runner, RunnerConfig
from tests.helpers.memory_policies import GOOD, Follower

CHAT = AgentConfig(system_prompt=None, native_tools=False)


@pytest.fixture
def bank(tmp_path):
    bank = MemoryBank(tmp_path / "memory.db")
    yield bank
    bank.close()


def add_good_skill(bank: MemoryBank, max_hops: int = 2) -> int:
    return bank.add_skill(
        SkillDraft(
            "solve",
            "train tasks like: Find the number stored under",
            GOOD,
            env=KeyChainEnv(max_hops=max_hops).kind,
            family="train",
        ),
        validation={"gain": 0.5, "n": 4, "mean_without": 0.0},
    )


def play(env, task_id="train-1"):
    observation, info = env.reset(options={"task_id": task_id})
    for reply in demonstration(make_task(task_id)):
        result = env.step(reply)
    return observation, info, result


def test_it_is_a_gymnasium_wrapper_that_keeps_the_agentenv_surface(bank):
    env = MemoryWrapper(KeyChainEnv(), bank)
    assert isinstance(env, gym.Wrapper) and env.unwrapped.kind == env.kind
    assert "train-0" in env.task_ids() and [t.name for t in env.tools()] == ["lookup", "submit"]
    with pytest.raises(ValueError, match="mode must be one of"):
        MemoryWrapper(KeyChainEnv(), bank, mode="write")


def test_reset_puts_skills_and_episodes_before_the_task(bank):
    env = MemoryWrapper(KeyChainEnv(), bank)
    observation, info, _ = play(env)
    assert not observation["text"].startswith(MEMORY_BEGIN)  # an empty bank adds nothing
    assert info["memory"] == {"skills": [], "episodes": [], "candidates": []}
    skill = add_good_skill(bank)
    observation, info = env.reset(options={"task_id": "train-2"})
    block, task = split_prompt(observation["text"])
    assert task == KeyChainEnv().reset(options={"task_id": "train-2"})[0]["text"]
    assert f"[skill {skill}] solve" in block and "[episode 1]" in block
    assert info["memory"]["skills"] == [skill] and info["memory"]["episodes"] == [1]
    assert info["task_id"] == "train-2"


def test_learn_mode_writes_one_episode_and_credits_the_skills(bank):
    skill = add_good_skill(bank)
    env = MemoryWrapper(KeyChainEnv(), bank)
    _, _, (observation, reward, terminated, _, info) = play(env, "train-1")
    assert terminated and reward == 1.0 and "memory_error" not in info
    env.step('submit("1")')  # after the end: nothing more is written
    [entry] = bank.store.entries(kind="episode")
    record = entry.data["record"]
    assert record["success"] and record["skills"] == [skill] and record["family"] == "train"
    assert [s["calls"][0]["name"] for s in record["steps"]] == ["lookup", "submit"]
    assert split_prompt(record["task"])[0] == ""  # the task statement, not the memory block
    assert "Outcome: success" in entry.text and entry.tags == ["success"]
    data = bank.store.get(skill).data
    assert data["uses"] == 1 and data["successes"] == 1 and data["utility"] == pytest.approx((4 * 0.5 + 1) / 5)


def test_read_mode_writes_nothing(tmp_path):
    path = tmp_path / "memory.db"
    add_good_skill(MemoryBank(path))
    env = MemoryWrapper(KeyChainEnv(), str(path), mode="read")
    observation, _, _ = play(env)
    assert MEMORY_BEGIN in observation["text"]
    assert env.bank.store.count(kind="episode") == 0 and env.bank.store.read_only


def test_failing_memory_is_reported_not_raised(bank, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(bank, "add_episode", broken)
    _, _, (_, reward, terminated, _, info) = play(MemoryWrapper(KeyChainEnv(), bank))
    assert terminated and reward == 1.0 and info["memory_error"] == "OSError: disk full"
    monkeypatch.setattr(bank, "retrieve", broken)
    observation, info = MemoryWrapper(KeyChainEnv(), bank).reset(options={"task_id": "train-1"})
    assert observation["text"].startswith("Find the number") and info["memory_error"] == "OSError: disk full"
    assert info["memory"]["skills"] == []


def test_forks_keep_the_wrapper_and_do_not_write_by_default(bank):
    task = make_task("train-3")
    env = MemoryWrapper(KeyChainEnv(), bank)
    env.reset(options={"task_id": "train-3"})
    env.step(demonstration(task)[0])
    child = env.fork()
    assert isinstance(child, MemoryWrapper) and child.bank is bank and child.turn == env.turn
    for reply in demonstration(task)[1:]:
        child.step(reply)
        env.step(reply)
    [entry] = bank.store.entries(kind="episode")  # the source wrote; the branch did not
    assert len(entry.data["record"]["steps"]) == len(demonstration(task))
    writing = MemoryWrapper(KeyChainEnv(), bank, write_forks=True)
    writing.reset(options={"task_id": "train-3"})
    branch = writing.fork()
    for reply in demonstration(task):
        branch.step(reply)
    assert bank.store.count(kind="episode") == 2
    child.close(), branch.close(), env.close(), writing.close()


def test_restore_brings_back_the_episode_context_and_writes_again(bank):
    task = make_task("train-3")
    env = MemoryWrapper(KeyChainEnv(), bank)
    env.reset(options={"task_id": "train-3"})
    env.step(demonstration(task)[0])
    with env.snapshot() as snapshot:
        for reply in demonstration(task)[1:]:
            env.step(reply)
        env.restore(snapshot)
        env.step('submit("0")')  # a second ending from the same state, this time wrong
        child = env.fork(snapshot)  # forking from a snapshot carries that snapshot's context
    records = [e.data["record"] for e in bank.store.entries(kind="episode")]
    assert [r["success"] for r in records] == [True, False]
    assert [len(r["steps"]) for r in records] == [len(demonstration(task)), 2]
    assert child._context.branch and len(child._context.steps) == 1
    child.close()


async def test_tree_style_branching_through_the_agent(bank):
    agent = Agent(Follower(fallback=None), CHAT)
    env = MemoryWrapper(KeyChainEnv(max_hops=1), bank, write_forks=True)
    episode = await agent.start(env, "train-1")
    checkpoint = await episode.checkpoint()
    branches = [await checkpoint.fork() for _ in range(2)]
    checkpoint.release()
    for live in [episode, *branches]:
        while not live.done:
            await agent.step(live)
        assert live.success
    assert bank.store.count(kind="episode") == 3
    for branch in branches:
        await branch.aclose()


async def test_runner_workers_share_one_bank(bank):
    skill = add_good_skill(bank, max_hops=1)
    agent = Agent(Follower(), CHAT)
    runner = Runner(
        agent,
        lambda: MemoryWrapper(KeyChainEnv(max_hops=1), bank, k_episodes=0),
        RunnerConfig(concurrency=4, progress=False),
    )
    result = await runner.run([EpisodeRequest(f"train-{i}", seed=i) for i in range(12)])
    assert all(r.success for r in result.records) and all(MEMORY_BEGIN in r.initial_observation for r in result.records)
    assert bank.store.count(kind="episode") == 12
    assert bank.store.get(skill).data["uses"] == 12


def test_memory_config_checks_its_section(tmp_path):
    assert MemoryConfig.from_dict({"path": str(tmp_path / "m.db")}).mode == "learn"
    with pytest.raises(ValueError, match=r"unknown keys \['k'\]"):
        MemoryConfig.from_dict({"path": "m.db", "k": 3})
    with pytest.raises(ValueError, match="read mode needs an existing store"):
        MemoryConfig(str(tmp_path / "missing.db"), mode="read")
    with pytest.raises(ValueError, match="mode must be one of"):
        MemoryConfig("m.db", mode="write")
    with pytest.raises(ValueError, match="expected a mapping"):
        MemoryConfig.from_dict(["m.db"])


def test_trainer_env_factory_wraps_envs_when_the_config_has_a_memory_section(tmp_path):
    from agentgym.trainers.base_config import RolloutArguments
    from agentgym.trainers.rollouts import rollout_env_factory

    env_id = "agentgym.envs.tool.keychain:KeyChainEnv"
    assert not isinstance(
        rollout_env_factory(RolloutArguments(env_id=env_id, env_kwargs={"max_hops": 1}))(), MemoryWrapper
    )
    memory = {"path": str(tmp_path / "m.db"), "k_skills": 1}
    factory = rollout_env_factory(RolloutArguments(env_id=env_id, env_kwargs={"max_hops": 1}, memory=memory))
    first, second = factory(), factory()
    assert isinstance(first, MemoryWrapper) and first.bank is second.bank and first.options["k_skills"] == 1
    play(first)
    assert second.bank.store.count(kind="episode") == 1
    args = RolloutArguments(memory={"path": "m.db", "mode": "sometimes"})
    with pytest.raises(ValueError, match="mode must be one of"):
        args.check_memory()


@pytest.mark.parametrize(
    "config", ["agentgym.trainers.tree_grpo_config:TreeGRPOConfig", "agentgym.trainers.sao_config:SAOConfig"]
)
def test_both_trainer_configs_take_a_memory_section(tmp_path, config):
    from agentgym.train import _load

    config_cls = _load(config)
    section = {"path": str(tmp_path / "m.db"), "k_skills": 2}
    assert config_cls(output_dir=str(tmp_path), memory=section, report_to="none").memory == section
    with pytest.raises(ValueError, match="read mode needs an existing store"):  # at config time, not mid-training
        config_cls(
            output_dir=str(tmp_path), memory={"path": str(tmp_path / "none.db"), "mode": "read"}, report_to="none"
        )


async def test_harness_with_memory_learns_from_its_episodes(tmp_path):
    from agentgym.eval.harness import evaluate
    from agentgym.eval.suites import load_suite

    suite_file = tmp_path / "keychain.jsonl"
    suite_file.write_text(
        "".join(
            json.dumps({"env": "tool.keychain-v0", "task_id": f"train-{i}", "env_kwargs": {"max_hops": 1}}) + "\n"
            for i in range(4)
        )
    )
    store = tmp_path / "memory.db"
    memory = MemoryConfig(str(store), mode="learn", k_episodes=0)
    summary = await evaluate(
        load_suite(str(suite_file)),
        Follower(fallback=None),
        out_dir=tmp_path / "run",
        memory=memory,
        progress=False,
        concurrency=2,
    )
    assert summary["metrics"]["success_rate"] == 1.0
    assert MemoryBank(store).store.count(kind="episode") == 4
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["memory"] == {"path": str(store), "mode": "learn"}
    with pytest.raises(ValueError, match="other settings"):  # the same run dir without memory is another run
        await evaluate(load_suite(str(suite_file)), Follower(fallback=None), out_dir=tmp_path / "run", progress=False)
