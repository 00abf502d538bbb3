"""TrajectoryStore on real rollouts: exact JSONL and dataset round trips, fsync per append, torn-line recovery, compact size."""

import asyncio
import json
import os

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentgym.models import tiny_model_path
from agentgym.rollout import store as store_module
from agentgym.rollout.agent import Agent, AgentConfig, FoldPolicy
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.policy import SamplingParams
from agentgym.rollout.store import StoreCorruptError, TrajectoryStore, records_to_dataset
from agentgym.rollout.trajectory import RolloutTree
from tests.helpers.counter import CounterEnv
from tests.helpers.scripted import ScriptedPolicy
from tests.helpers.tool_calls import call

BAD = "no tool call here"


@pytest.fixture(scope="module")
def tiny():
    path = tiny_model_path()
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


async def run_episode(policy, task_id, config=None, max_turns=20):
    config = config or AgentConfig()
    env = CounterEnv(max_turns=max_turns)
    try:
        return await Agent(policy, config).run(env, task_id, seed=3)
    finally:
        env.close()


async def hand_built_tree() -> RolloutTree:
    """A tree of real token-mode turns: one first turn, forked into a solving and a failing branch."""
    policy = ScriptedPolicy([call("add", n=5), call("add", n=7), call("add", n=2), call("submit"), call("submit")])
    agent = Agent(policy)
    env = CounterEnv()
    root = await agent.start(env, "reach-12")
    first = await agent.step(root)
    branch = await root.fork()
    try:
        tree = RolloutTree(
            task_id="reach-12",
            env_id=env.kind,
            initial_observation=root.initial_observation,
            metadata={"strategy": "hand", "group": 7},
        )
        tree.add(None, first)
        tree.nodes[0].branched = True
        solving = tree.add(0, await agent.step(root))  # add 7
        failing = tree.add(0, await agent.step(branch))  # add 2
        solved = tree.add(solving.id, await agent.step(root))
        failed = tree.add(failing.id, await agent.step(branch))
        tree.leaf_success = {solved.id: True, failed.id: False}
        tree.leaf_errors = {failed.id: "example error"}
        tree.nodes[0].value = 0.5
    finally:
        await root.aclose()
        await branch.aclose()
    assert tree.leaf_reward(solved.id) == 1.0 and tree.leaf_reward(failed.id) == 0.0
    return tree


@pytest.fixture(scope="module")
def records(tiny):
    """Four records built once for the module (the tests only read them)."""
    return asyncio.run(build_records(tiny))


async def build_records(tiny):
    async with HFPolicy.from_model(*tiny) as policy:
        greedy = AgentConfig(sampling=SamplingParams(max_tokens=8, temperature=0.0))
        sampled = await run_episode(policy, "reach-7", AgentConfig(sampling=SamplingParams(max_tokens=8, seed=1)), 3)
        policy.update_weights(policy.model)  # a later turn from newer weights
        greedy_run = await run_episode(policy, "reach-12", greedy, 2)
    folding = ScriptedPolicy([call("add", n=1)] + [BAD] * 6 + [call("add", n=6), call("submit")])
    folded = await run_episode(
        folding,
        "reach-7",
        AgentConfig(
            context_window=900, sampling=SamplingParams(max_tokens=64), fold=FoldPolicy(keep_last=1, target=0.7)
        ),
    )
    assert any(t.folded for t in folded.turns) and folded.success
    assert greedy_run.turns[0].policy_version == 1
    return [sampled, greedy_run, folded, await hand_built_tree()]


def test_jsonl_round_trip_is_exact_and_survives_reopening(tmp_path, records):
    path = tmp_path / "runs" / "store.jsonl"
    with TrajectoryStore(path) as store:
        store.append(records[0])
        store.extend(records[1:3])
    with TrajectoryStore(path) as store:  # a later process appends to the same file
        store.append(records[3])
        assert store.read() == records
    lines = path.read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["trajectory"] * 3 + ["tree"]
    assert list(TrajectoryStore(path)) == records
    assert TrajectoryStore(tmp_path / "missing.jsonl").read() == []


def test_every_append_is_fsynced_and_extend_fsyncs_once(tmp_path, records, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(store_module.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    with TrajectoryStore(tmp_path / "s.jsonl") as store:
        store.append(records[0])
        store.append(records[1])
        assert len(synced) == 2
        store.extend(records)
        assert len(synced) == 3
        store.extend([])
        assert len(synced) == 3


def test_a_torn_last_line_is_skipped_and_cut_before_the_next_append(tmp_path, records):
    path = tmp_path / "s.jsonl"
    with TrajectoryStore(path) as store:
        store.extend(records[:2])
    line = store_module._encode(records[2]) + "\n"
    with open(path, "a") as file:  # the process died half-way through writing this line
        file.write(line[: len(line) // 2])

    with pytest.warns(RuntimeWarning, match="torn last record"):
        assert TrajectoryStore(path).read() == records[:2]
    with pytest.warns(RuntimeWarning, match="dropping a torn last record"):
        with TrajectoryStore(path) as store:
            store.append(records[3])
    assert TrajectoryStore(path).read() == [records[0], records[1], records[3]]


def test_a_corrupt_line_in_the_middle_raises_with_its_line_number(tmp_path, records):
    path = tmp_path / "s.jsonl"
    with TrajectoryStore(path) as store:
        store.extend(records[:3])
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1][:40] + "\n"
    path.write_text("".join(lines))
    store = TrajectoryStore(path)
    with pytest.raises(StoreCorruptError, match=r"s\.jsonl:2: not a valid record"):
        store.read()
    path.write_text(lines[0] + '{"kind": "unknown", "record": {}}\n')
    with pytest.raises(StoreCorruptError, match=r":2:"):
        store.read()


def test_dataset_round_trip_and_filter_columns(tmp_path, records):
    with TrajectoryStore(tmp_path / "s.jsonl") as store:
        store.extend(records)
        dataset = store.to_dataset()
    assert TrajectoryStore.from_dataset(dataset) == records
    dataset.save_to_disk(str(tmp_path / "ds"))
    from datasets import load_from_disk

    assert TrajectoryStore.from_dataset(load_from_disk(str(tmp_path / "ds"))) == records

    sampled, greedy, folded, tree = records
    rows = dataset.to_list()
    assert [r["kind"] for r in rows] == ["trajectory"] * 3 + ["tree"]
    assert [r["id"] for r in rows] == [r.id for r in records]
    assert rows[2]["reward"] == 1.0 and rows[2]["success"] and rows[2]["num_turns"] == len(folded.turns)
    assert rows[1]["policy_version_min"] == rows[1]["policy_version_max"] == 1
    assert rows[0]["num_generated_tokens"] == sampled.num_generated_tokens
    assert rows[3]["num_turns"] == 5 and rows[3]["reward"] == 0.5 and rows[3]["success"]
    assert rows[3]["error"] == "example error" and rows[3]["group"] == "7"
    solved = dataset.filter(lambda r: r["success"])
    assert TrajectoryStore.from_dataset(solved) == [folded, tree]
    assert records_to_dataset([]).num_rows == 0


def test_sequences_dataset_is_the_training_view(tmp_path, records):
    with TrajectoryStore(tmp_path / "s.jsonl") as store:
        store.extend(records)
        dataset = store.sequences_dataset()
    sampled, greedy, folded, tree = records
    paths = list(tree.paths())
    expected = [(t, s) for t in [sampled, greedy, folded, *paths] for s in t.sequences()]
    assert len(folded.sequences()) > 1 and len(paths) == 2
    assert dataset.num_rows == len(expected)
    for row, (trajectory, sequence) in zip(dataset, expected):
        assert row["input_ids"] == sequence.input_ids and row["mask"] == sequence.mask
        assert row["logprobs"] == sequence.logprobs and row["policy_versions"] == sequence.policy_versions
        assert row["reward"] == trajectory.reward and row["trajectory_id"] == trajectory.id
        assert row["task_id"] == trajectory.task_id
    assert [r["record_id"] for r in dataset][-2:] == [tree.id, tree.id]
    assert sum(sum(r["mask"]) for r in dataset.select(range(dataset.num_rows - 2))) == sum(
        t.num_generated_tokens for t in records[:3]
    )


async def test_a_long_episode_is_stored_far_smaller_than_its_full_prompts(tmp_path):
    policy = ScriptedPolicy([call("add", n=1)] * 28 + [call("add", n=2), call("submit")])
    trajectory = await run_episode(policy, "reach-30", max_turns=30)
    assert len(trajectory.turns) == 30 and trajectory.success and not any(t.folded for t in trajectory.turns)
    path = tmp_path / "s.jsonl"
    with TrajectoryStore(path) as store:
        store.append(trajectory)
    naive = json.dumps(
        {"kind": "trajectory", "record": {**trajectory.to_dict(), "turns": [t.to_dict() for t in trajectory.turns]}},
        separators=(",", ":"),
    )
    assert path.stat().st_size * 8 < len(naive), (path.stat().st_size, len(naive))
    assert TrajectoryStore(path).read() == [trajectory]
