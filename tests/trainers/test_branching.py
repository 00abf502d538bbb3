"""The branching mechanisms of issue 34 in both trainers: MC-GRPO's median pivot, TRACE allocation, and the rest.

Each mechanism's math is a pure function tested on hand-computed numbers; each gets a two-step
training run with the tiny model on CapitalEnv (one-token replies, reward for a capital letter,
so groups have mixed outcomes) — small, real trainers on CPU.
"""

from __future__ import annotations

import math

import pytest
import torch

from agentgym.models import tiny_model_path
from agentgym.rollout.reflect import grader_failure_turn, insertion_span, largest_drop, parse_failure_turn, strip_span
from agentgym.rollout.trajectory import Turn
from agentgym.trainers.advantages import (
    amplify_positive,
    group_advantages,
    importance_weights,
    median_pivots,
    pivotal_trainable,
)
from agentgym.trainers.allocation import TaskOutcomes, allocate_budget, mixed_outcome_gain, task_sampling_weights
from tests.helpers.trainers import CAPITAL, capital_tree_trainer, sao_trainer


def _sao_trainer(tmp_path, **settings):
    settings = {"env_id": CAPITAL, "max_turn_tokens": 1, "log_kl_to_start": False, **settings}
    settings = {"per_device_train_batch_size": 2, "max_steps": 2, "rollout_concurrency": 2, **settings}
    return sao_trainer(tmp_path, **settings)


def _keep_batches(trainer) -> list[dict]:
    """Wrap the trainer's rollout hook so every batch it trains on is kept for the test."""
    generate, batches = trainer._generate_and_score_completions, []

    def keeping(inputs):
        batches.append(generate(inputs))
        return batches[-1]

    trainer._generate_and_score_completions = keeping
    return batches


# ---------------------------------------------------------------- MC-GRPO's median pivot
def test_median_pivot_is_the_one_member_at_the_median():
    rewards = [0.0, 1.0, 1.0, 3.0, 0.0, 2.0, 1.0]
    groups = ["a", "a", "a", "b", "b", "b", "c"]
    # a: median 1 -> the first 1 (index 1); b: [3, 0, 2] median 2 -> index 5; c: one member, itself
    assert median_pivots(rewards, groups) == [False, True, False, False, False, True, True]
    advantages = group_advantages(rewards, groups, baseline="median", scale="none")
    assert advantages == [-1.0, 0.0, 0.0, 1.0, -2.0, 0.0, 0.0]  # every pivot's advantage is 0
    # an even group (one lost to an env error) has no single median member: trained whole
    assert median_pivots([0.0, 1.0], ["a", "a"]) == [False, False]


def test_median_pivot_config_needs_linear_median_and_an_odd_group(tmp_path):
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    common = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", tree=False)
    TreeGRPOConfig(median_pivot=True, advantage_baseline="median", num_generations=4, **common)
    for bad in (
        dict(advantage_baseline="mean", num_generations=4),
        dict(advantage_baseline="median", num_generations=3),
    ):
        with pytest.raises(ValueError, match="median_pivot needs"):
            TreeGRPOConfig(median_pivot=True, **bad, **common)


def test_median_pivot_training_samples_g_plus_one_and_trains_g(tmp_path):
    trainer = capital_tree_trainer(tmp_path, median_pivot=True, advantage_baseline="median", num_generations=2)
    batches = _keep_batches(trainer)
    trainer.train()
    assert trainer.state.global_step == 2
    for batch in batches:
        trained = ((batch["completion_mask"] * batch["tool_mask"]).sum(1) > 0).sum().item()
        assert trained == 2 * 2  # 2 tasks × G trained; each task's 3rd episode, the pivot, has no loss
    assert trainer.env_steps == 2 * 2 * 3  # 2 steps × 2 tasks × G+1 one-turn episodes
    logged = [h for h in trainer.state.log_history if "groups/median_pivots" in h]
    assert logged and all(h["groups/median_pivots"] == 2 for h in logged)


# ---------------------------------------------------------------- TRACE allocation
def test_mixed_outcome_gain_on_hand_computed_numbers():
    assert mixed_outcome_gain(0.5, 1) == pytest.approx(0.5)  # P(mixed | 2 episodes) = 2 p (1 − p)
    assert mixed_outcome_gain(0.5, 2) == pytest.approx(0.25)
    assert mixed_outcome_gain(0.1, 1) == pytest.approx(0.18)
    assert mixed_outcome_gain(0.1, 2) == pytest.approx(0.09)  # 0.01·0.9 + 0.81·0.1
    assert mixed_outcome_gain(0.0, 3) == mixed_outcome_gain(1.0, 3) == 0.0
    with pytest.raises(ValueError):
        mixed_outcome_gain(0.5, 0)


def test_allocate_budget_gives_the_next_episode_to_the_largest_gain():
    # start [2, 2, 2], 3 left; gains at k=2: 0.25, 0.09, 0 -> task 0 (3; its next gain 0.125) -> task 0 (4; 0.0625)
    # -> task 1 (0.09 > 0.0625)
    assert allocate_budget([0.5, 0.1, 0.0], budget=9, minimum=2) == [4, 3, 2]
    # capped at 3: task 0 stops at 3, task 1 takes one, the last goes to task 2 (task 1 is capped too)
    assert allocate_budget([0.5, 0.1, 0.0], budget=9, minimum=2, maximum=3) == [3, 3, 3]
    assert allocate_budget([0.5, 0.5], budget=5, minimum=2) == [3, 2]  # a tie goes to the earlier task
    with pytest.raises(ValueError, match="cannot give"):
        allocate_budget([0.5, 0.5], budget=3, minimum=2)


def test_task_sampling_weights_and_online_task_rates():
    assert task_sampling_weights([0.5, 0.0], floor=0.05) == pytest.approx([6 / 7, 1 / 7])  # 0.3 and 0.05, normalised
    outcomes = TaskOutcomes(decay=0.5)
    assert outcomes.rate("unseen") == 0.5
    outcomes.update("a", True)
    outcomes.update("a", False)  # successes 0.5·1 + 0 = 0.5, count 0.5·1 + 1 = 1.5
    assert outcomes.rate("a") == pytest.approx(1.5 / 3.5)
    restored = TaskOutcomes(decay=0.5)
    restored.load(outcomes.state())
    assert restored.rate("a") == outcomes.rate("a")


def _keep_rollouts(trainer) -> list[tuple[list[str], list]]:
    rollouts, calls = trainer._rollouts, []

    def keeping(task_ids):
        calls.append((list(task_ids), rollouts(task_ids)))
        return calls[-1][1]

    trainer._rollouts = keeping
    return calls


def _failing(trainer, tasks, times=50):
    for task in tasks:
        for _ in range(times):
            trainer.outcomes.update(task, False)


def test_trace_splits_a_linear_steps_episodes_by_task(tmp_path):
    trainer = capital_tree_trainer(
        tmp_path, task_allocation="trace", allocation_decay=1.0, num_generations=4, per_device_train_batch_size=4
    )
    _failing(trainer, [f"shout-{i}" for i in range(4)])  # these four look hopeless, the other four unseen
    before = {t: trainer.outcomes.rate(t) for t in (f"shout-{i}" for i in range(8))}
    calls = _keep_rollouts(trainer)
    trainer.train()
    task_ids, records = calls[0]
    expected = allocate_budget([before[t] for t in task_ids], budget=4 * 4, minimum=2)
    per_task = [sum(r.metadata["group"] == f"0:{i}" for r in records) for i in range(len(task_ids))]
    assert per_task == expected and sum(per_task) == 16
    assert sum(trainer.outcomes.counts.values()) == 4 * 50 + 2 * 16  # every usable episode was counted


def test_trace_splits_a_tree_steps_leaves_by_task(tmp_path):
    trainer = capital_tree_trainer(
        tmp_path, tree=True, tree_strategy="contrast", tree_max_leaves=4, task_allocation="trace", allocation_decay=1.0
    )
    _failing(trainer, ["shout-0", "shout-1", "shout-2", "shout-3"])
    calls = _keep_rollouts(trainer)
    trainer.train()
    for _, trees in calls:
        budgets = [tree.metadata["budget"]["max_leaves"] for tree in trees]
        assert sum(budgets) == 2 * 4 and min(budgets) >= 2  # the step's 8 leaves, each tree at least its 2 roots
        assert all(len(tree.leaves) <= b for tree, b in zip(trees, budgets))
    with pytest.raises(ValueError, match="tree_strategy: contrast"):
        capital_tree_trainer(tmp_path / "bad", tree=True, tree_max_leaves=4, task_allocation="trace")


def test_sao_trace_samples_tasks_by_outcome_variance(tmp_path):
    trainer = _sao_trainer(tmp_path, task_allocation="trace", allocation_decay=1.0, allocation_floor=0.0)
    for i in range(8):  # every task but shout-5 always fails (p(1−p) ≈ 0.02 against 0.25 for shout-5's p = 1/2)
        for _ in range(0 if i == 5 else 50):
            trainer.outcomes.update(f"shout-{i}", False)
    draws = [trainer._next_task() for _ in range(200)]
    share = draws.count("shout-5") / len(draws)
    assert 0.5 < share < 0.85  # 0.25 / (0.25 + 7 · 0.0189) = 0.65
    trainer.train()
    assert trainer.state.global_step == 2
    assert sum(trainer.outcomes.counts.values()) == 7 * 50 + trainer.consumed  # the learner's records counted


# ---------------------------------------------------------------- reflect-then-retry (R³L)
def test_reflection_is_found_and_stripped_by_token_id():
    assert insertion_span([1, 2, 3, 4], [1, 2, 9, 9, 3, 4]) == (2, 2)
    assert insertion_span([1, 2], [1, 2, 5]) == (2, 1)  # appended
    assert insertion_span([1, 2, 3], [1, 3, 2, 3]) == (1, 1)  # removing [3] at 1 gives [1, 2, 3] back
    assert insertion_span([1, 2], [3, 1, 2, 4]) is None  # two insertions
    assert insertion_span([1, 2], [1, 2]) is None
    turn = Turn(prompt_ids=[1, 2, 9, 9, 3], completion_ids=[7], logprobs=[-0.5], prompt_mask=[0, 0, 0, 0, 0])
    stripped = strip_span(turn, (2, 2), [9, 9])
    assert (stripped.prompt_ids, stripped.prompt_mask, stripped.logprobs) == ([1, 2, 3], [0, 0, 0], [-0.5])
    with pytest.raises(ValueError, match="does not hold"):
        strip_span(turn, (1, 2), [9, 9])


def test_failure_turn_from_the_diagnosis_the_predictor_and_the_grader():
    assert parse_failure_turn("It looked up the wrong key. TURN: 3", turns=4) == 3
    assert parse_failure_turn("turn 2 was fine; TURN: 1", turns=3) == 1  # the last one named
    assert parse_failure_turn("TURN: 7", turns=4) is None and parse_failure_turn("no idea", turns=4) is None
    # P(success) before any turn, then after each: drops -0.1, 0.4, 0.1 -> turn 2
    assert largest_drop([0.5, 0.6, 0.2, 0.1]) == 2
    assert largest_drop([0.2, 0.3, 0.3]) is None
    ok, bad = Turn([], [], [], []), Turn([], [], [], [], info={"error": "unknown key"})
    assert grader_failure_turn([ok, bad, ok]) == 2 and grader_failure_turn([ok, ok]) == 2


def test_pivotal_credit_positive_amplification_and_importance_weights():
    assert pivotal_trainable(4, fork_turn=2) == [False, False, True, True]
    assert pivotal_trainable(2, fork_turn=0) == [True, True]
    assert amplify_positive([1.0, -0.5, 0.5], [True, False, True], weight=2.0) == [2.0, -0.5, 1.0]
    proximal = torch.tensor([[0.0, math.log(2.0)]])
    behaviour = torch.tensor([[math.log(2.0), 0.0]])
    assert importance_weights(proximal, behaviour)[0].tolist() == pytest.approx([0.5, 2.0])
    assert importance_weights(proximal, behaviour, cap=1.5)[0].tolist() == pytest.approx([0.5, 1.5])


def _keychain_agent(max_turns=3):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.rollout.agent import Agent, AgentConfig
    from agentgym.rollout.hf_policy import HFPolicy
    from agentgym.rollout.policy import SamplingParams

    path = str(tiny_model_path())
    policy = HFPolicy.from_model(
        AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), seed=0
    )
    return Agent(policy, AgentConfig(sampling=SamplingParams(max_tokens=8), max_turns=max_turns, mode="tokens"))


def test_reflect_retry_forks_before_the_failure_turn_and_stores_the_retry_without_the_reflection():
    import asyncio

    from agentgym.envs.tool.keychain import KeyChainEnv
    from agentgym.rollout.reflect import NOTE, ReflectConfig, ReflectRetry

    agent = _keychain_agent()
    env = KeyChainEnv()
    task = env.unwrapped.task_ids()[0]
    try:
        tree = asyncio.run(ReflectRetry(agent, ReflectConfig(locate="grader", max_tokens=8)).run(env, task))
    finally:
        env.close()
    failed, retry = tree.paths()  # the random model fails; its retry branches off
    reflection = tree.metadata["reflection"]
    assert not failed.success and reflection["located_by"] == "grader"
    fork = reflection["fork_turn"]
    assert reflection["failure_turn"] == fork + 1 == grader_failure_turn(failed.turns)
    assert retry.turns[:fork] == failed.turns[:fork]  # the shared prefix is the same nodes
    assert retry.metadata["leaf"] == reflection["retry_leaf"] and failed.metadata["leaf"] == reflection["failed_leaf"]
    tokenizer = agent.policy.chat_format.tokenizer
    note_start = NOTE.split("{")[0][:40]
    for turn in retry.turns[fork:]:
        assert note_start not in tokenizer.decode(turn.prompt_ids)  # trained without the reflection
        assert len(turn.logprobs) == len(turn.completion_ids)  # the sampling logprobs (with the reflection) kept
    assert tree.leaf_success[reflection["retry_leaf"]] == retry.success


def test_a_retry_without_a_diagnosis_restarts_from_the_failure_turn_in_the_policys_own_context():
    """``diagnose=False``: no reviewer is asked, and the retry's first turn has exactly the failed turn's prompt."""
    import asyncio

    from agentgym.envs.tool.keychain import KeyChainEnv
    from agentgym.rollout.reflect import ReflectConfig, ReflectRetry

    class Mute:
        name = "mute"

        async def generate(self, *_args, **_kwargs):
            raise AssertionError("a diagnosis was asked for")

        chat = generate

    with pytest.raises(ValueError, match="grader' or 'predictor"):
        ReflectConfig(diagnose=False)
    agent = _keychain_agent()
    env = KeyChainEnv()
    try:
        job = ReflectRetry(agent, ReflectConfig(locate="grader", diagnose=False), reviewer=Mute())
        tree = asyncio.run(job.run(env, env.unwrapped.task_ids()[0]))
    finally:
        env.close()
    failed, retry = tree.paths()
    reflection = tree.metadata["reflection"]
    assert reflection["diagnosis"] is None and reflection["reviewer"] is None and reflection["located_by"] == "grader"
    fork = reflection["fork_turn"]
    assert retry.turns[fork].prompt_ids == failed.turns[fork].prompt_ids  # the same context: no note
    assert tree.leaf_success[reflection["retry_leaf"]] == retry.success


@pytest.mark.parametrize("diagnose", [True, False], ids=["reflection", "no-diagnosis"])
def test_reflect_retry_training_adds_weighted_retries_with_pivotal_credit(tmp_path, diagnose):
    """Retries join their groups with Pivotal Credit; a retry sampled with the reflection and trained without it is
    weighted off-policy, a retry without a diagnosis (the policy's own context) is not."""
    trainer = capital_tree_trainer(
        tmp_path,
        env_id="agentgym.envs.tool.keychain:KeyChainEnv",
        max_turn_tokens=8,
        max_turns=3,
        reflect_retry=True,
        reflect_locate="grader",
        reflect_max_tokens=8,
        reflect_diagnose=diagnose,
        pivotal_credit=True,
        positive_weight=2.0,
    )
    calls = _keep_rollouts(trainer)
    rows_of, kept_rows = trainer._rows, []

    def keeping(records):
        kept_rows.append((rows_of(records), list(trainer.off_policy_rows)))
        return kept_rows[-1][0]

    trainer._rows = keeping
    trainer.train()
    assert trainer.state.global_step == 2
    for (_, records), ((rows, _), flags) in zip(calls, kept_rows):
        reflected = [r for r in records if "reflection" in r.metadata]
        assert reflected  # the random model fails: every failure is retried
        # each retry with a reflection gives at least one row, flagged off-policy; without one, none is
        assert sum(flags) >= len(reflected) if diagnose else not any(flags)
        forks = {r.metadata["reflection"]["fork_turn"] for r in reflected}
        if forks != {0}:  # with a fork after turn 1, the turns before it get no loss in either path
            assert any(not any(row.loss_mask) for row in rows)
    logged = [h for h in trainer.state.log_history if "reflect/retries" in h]
    assert logged and all(h["reflect/retries"] >= 1 for h in logged)
    if diagnose:
        assert all(h["off_policy/weight_mean"] > 0 for h in logged)
    else:
        assert not any("off_policy/weight_mean" in h for h in logged)


# ---------------------------------------------------------------- success replay (RLEP)
def test_success_replay_keeps_the_newest_verified_successes_per_task():
    import random

    from agentgym.rollout.trajectory import Trajectory
    from agentgym.trainers.replay import SuccessReplay, replay_age

    def episode(task, success=True, error=None, version=0, turns=1):
        turn = Turn([1], [2], [-0.1], [0], policy_version=version)
        return Trajectory(task, "toy", [turn] * turns, success=success, error=error)

    replay = SuccessReplay(per_task=2)
    assert not replay.add(episode("a", success=False))
    assert not replay.add(episode("a", error="env_error: broken"))  # graded, but not verified
    assert not replay.add(episode("a", turns=0))
    first, second, third = episode("a", version=1), episode("a", version=2), episode("a", version=3)
    assert replay.add(first) and replay.add(second) and replay.add(third)
    assert len(replay) == 2 and replay.newest("a") is third and replay.newest("b") is None  # the oldest went
    replay.add(episode("b"))
    drawn = replay.sample(5, random.Random(0))
    assert sorted(t.task_id for t in drawn) == ["a", "b"] and third in drawn  # distinct tasks, each its newest
    assert replay_age(third, version=7) == 4


def _scripted_success(trainer, task):
    """A real, env-graded success of ``task``: the tiny model's agent applies the reply "A" (a capital)."""
    import asyncio

    from agentgym.rollout.policy import Completion
    from tests.helpers.capital import CapitalEnv

    ids = trainer.processing_class.encode("A", add_special_tokens=False)
    env = CapitalEnv()
    try:
        episode = asyncio.run(trainer.agent.start(env, task))
        asyncio.run(trainer.agent.apply(episode, Completion("A", token_ids=ids, logprobs=[-1.0] * len(ids))))
    finally:
        env.close()
    assert episode.success
    return episode.trajectory()


def test_success_replay_fills_all_failed_groups_in_linear_grpo(tmp_path):
    trainer = capital_tree_trainer(tmp_path, success_replay=True)
    for i in range(8):
        trainer.success_replay.add(_scripted_success(trainer, f"shout-{i}"))
    trainer.train()
    logged = [h for h in trainer.state.log_history if "replay/mixed" in h]
    assert len(logged) == 2 and sum(h["replay/mixed"] for h in logged) >= 1
    for h in logged:
        if h["replay/mixed"]:  # a replayed success gave its all-failed group a gradient, weighted off-policy
            assert h["groups/zero_variance_frac"] < 1 and h["off_policy/weight_mean"] > 0
    with pytest.raises(ValueError, match="success_replay is for tree=False"):
        capital_tree_trainer(tmp_path / "bad", tree=True, success_replay=True)


def test_sao_mixes_replayed_successes_under_the_decoupled_objective(tmp_path):
    with pytest.raises(ValueError, match="off_policy_correction: decoupled"):
        _sao_trainer(tmp_path / "bad", success_replay=True)
    trainer = _sao_trainer(tmp_path, success_replay=True, off_policy_correction="decoupled", replay_per_step=1)
    trainer.success_replay.add(_scripted_success(trainer, "shout-3"))
    trainer.train()
    logged = [h for h in trainer.state.log_history if "replay/mixed" in h]
    assert [h["replay/mixed"] for h in logged] == [1.0, 1.0]
    assert all(h["off_policy/weight_mean"] > 0 for h in trainer.state.log_history if "off_policy/weight_mean" in h)


# ---------------------------------------------------------------- best-on-validation checkpoint
def test_the_best_checkpoint_on_validation_is_kept_beside_the_last(tmp_path):
    import json

    trainer = capital_tree_trainer(tmp_path, validation_tasks=["shout-0", "shout-1", "shout-2"], validation_every=1)
    trainer.train()
    report = json.loads((tmp_path / "validation.json").read_text())
    assert [e["step"] for e in report["history"]] == [1, 2]  # every step; the end (step 2) is not run twice
    assert report["last"] == report["history"][-1]
    assert report["best"]["success"] == max(e["success"] for e in report["history"])
    assert report["best"]["step"] == next(
        e["step"] for e in report["history"] if e["success"] == report["best"]["success"]
    )
    assert (tmp_path / "best-checkpoint" / "config.json").exists()
    with pytest.raises(ValueError, match="validation_tasks is empty"):
        capital_tree_trainer(tmp_path / "bad", validation_tasks=[])


def test_sao_keeps_its_best_checkpoint_on_validation_too(tmp_path):
    import json

    trainer = _sao_trainer(tmp_path, validation_tasks=["shout-0", "shout-1"], validation_every=2)
    trainer.train()
    report = json.loads((tmp_path / "validation.json").read_text())
    assert [e["step"] for e in report["history"]] == [2] and report["best"] == report["last"]
    assert (tmp_path / "best-checkpoint" / "config.json").exists()
