"""The short learning check (the full proof is benchmarks/learning.py): a few GRPO steps move probability towards rewarded replies.

The tiny model starts random (its next-token distribution is nearly uniform), so a sampled
success rate moves slowly and noisily in a few steps. What RL must do at once is exact and
cheap to measure: the probability, at the episode's real first prompt, that the reply's first
token is a rewarded one (here: holds a capital letter, ~10% of the vocabulary) goes up.
"""

from __future__ import annotations

import pytest

from tests.helpers.capital import capital_mass, capital_tokens, first_prompt
from tests.helpers.trainers import tree_grpo_trainer


@pytest.mark.slow
def test_grpo_steps_raise_the_probability_of_rewarded_replies(tmp_path):
    # One-token replies: the reward is then exactly "the first token is a capital one", the quantity measured.
    trainer = tree_grpo_trainer(
        tmp_path,
        env_id="tests.helpers.capital:CapitalEnv",
        tree=False,
        num_generations=8,
        per_device_train_batch_size=8,
        max_turn_tokens=1,
        max_steps=8,
        learning_rate=2e-2,
        lr_scheduler_type="constant",
        loss_type="dapo",
        rollout_concurrency=32,
    )
    capitals, prompt = capital_tokens(trainer.processing_class), first_prompt(trainer)
    before = capital_mass(trainer, prompt, capitals)
    trainer.train()
    after = capital_mass(trainer, prompt, capitals)
    print(f"P(capital first token): {before:.3f} -> {after:.3f}")
    assert after > 1.5 * before, (before, after)
