"""The branching mechanisms of issue 34 in both trainers: MC-GRPO's median pivot, TRACE allocation, and the rest.

Each mechanism's math is a pure function tested on hand-computed numbers; each gets a two-step
training run with the tiny model on CapitalEnv (one-token replies, reward for a capital letter,
so groups have mixed outcomes) — small, real trainers on CPU.
"""

from __future__ import annotations

import pytest

from agentgym.models import tiny_model_path
from agentgym.trainers.advantages import group_advantages, median_pivots
from agentgym.trainers.allocation import TaskOutcomes, allocate_budget, mixed_outcome_gain, task_sampling_weights

CAPITAL = "tests.helpers.capital:CapitalEnv"


def _tree_trainer(tmp_path, **settings):
    from agentgym.trainers.tree_grpo import TreeGRPOTrainer
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    settings = {
        "tree": False,
        "num_generations": 2,
        "per_device_train_batch_size": 2,
        "max_steps": 2,
        **settings,
    }
    args = TreeGRPOConfig(
        output_dir=str(tmp_path),
        env_id=CAPITAL,
        max_turn_tokens=1,
        beta=0.0,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        rollout_concurrency=8,
        **settings,
    )
    return TreeGRPOTrainer(str(tiny_model_path()), args)


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
    trainer = _tree_trainer(tmp_path, median_pivot=True, advantage_baseline="median", num_generations=2)
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
    trainer = _tree_trainer(
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
    trainer = _tree_trainer(
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
        _tree_trainer(tmp_path / "bad", tree=True, tree_max_leaves=4, task_allocation="trace")


def test_sao_trace_samples_tasks_by_outcome_variance(tmp_path):
    from agentgym.trainers.sao import SAOTrainer
    from agentgym.trainers.sao_config import SAOConfig

    args = SAOConfig(
        output_dir=str(tmp_path),
        env_id=CAPITAL,
        per_device_train_batch_size=2,
        max_turn_tokens=1,
        max_steps=2,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        log_kl_to_start=False,
        task_allocation="trace",
        allocation_decay=1.0,
        allocation_floor=0.0,
        rollout_concurrency=2,
    )
    trainer = SAOTrainer(str(tiny_model_path()), args)
    for i in range(8):  # every task but shout-5 always fails (p(1−p) ≈ 0.02 against 0.25 for shout-5's p = 1/2)
        for _ in range(0 if i == 5 else 50):
            trainer.outcomes.update(f"shout-{i}", False)
    draws = [trainer._next_task() for _ in range(200)]
    share = draws.count("shout-5") / len(draws)
    assert 0.5 < share < 0.85  # 0.25 / (0.25 + 7 · 0.0189) = 0.65
    trainer.train()
    assert trainer.state.global_step == 2
    assert sum(trainer.outcomes.counts.values()) == 7 * 50 + trainer.consumed  # the learner's records counted
