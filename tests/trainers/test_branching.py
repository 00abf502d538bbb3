"""The branching mechanisms of issue 34 in both trainers: MC-GRPO's median pivot, TRACE allocation, and the rest.

Each mechanism's math is a pure function tested on hand-computed numbers; each gets a two-step
training run with the tiny model on CapitalEnv (one-token replies, reward for a capital letter,
so groups have mixed outcomes) — small, real trainers on CPU.
"""

from __future__ import annotations

import pytest
import torch

from agentgym.models import tiny_model_path
from agentgym.trainers.advantages import group_advantages, median_pivots

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
