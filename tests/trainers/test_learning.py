"""The short learning check (the full proof is benchmarks/learning.py): a few GRPO steps move probability towards rewarded replies.

The tiny model starts random (its next-token distribution is nearly uniform), so a sampled
success rate moves slowly and noisily in a few steps. What RL must do at once is exact and
cheap to measure: the probability, at the episode's real first prompt, that the reply's first
token is a rewarded one (here: holds a capital letter, ~10% of the vocabulary) goes up.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentgym.models import tiny_model_path
from tests.helpers.capital import CapitalEnv, capital_mass


@pytest.mark.slow
def test_grpo_steps_raise_the_probability_of_rewarded_replies(tmp_path):
    from agentgym.trainers.tree_grpo import TreeGRPOTrainer
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    # One-token replies: the reward is then exactly "the first token is a capital one", the quantity measured.
    args = TreeGRPOConfig(
        output_dir=str(tmp_path),
        env_id="tests.helpers.capital:CapitalEnv",
        tree=False,
        num_generations=8,
        per_device_train_batch_size=8,
        max_turn_tokens=1,
        max_steps=8,
        learning_rate=2e-2,
        lr_scheduler_type="constant",
        loss_type="dapo",
        beta=0.0,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        rollout_concurrency=32,
    )
    trainer = TreeGRPOTrainer(str(tiny_model_path()), args)
    tokenizer = trainer.processing_class
    capitals = torch.tensor([i for i in range(len(tokenizer)) if any(c.isupper() for c in tokenizer.decode([i]))])
    env = CapitalEnv()
    prompt = asyncio.run(trainer.agent.start(env, "shout-0")).prompt_ids  # exactly what the policy sees
    env.close()
    before = capital_mass(trainer, prompt, capitals)
    trainer.train()
    after = capital_mass(trainer, prompt, capitals)
    print(f"P(capital first token): {before:.3f} -> {after:.3f}")
    assert after > 1.5 * before, (before, after)
