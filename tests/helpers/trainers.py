"""Small real trainers for tests: tree GRPO and SAO on the tiny model, on CPU, logging and saving nothing."""

from __future__ import annotations

from agentgym.models import tiny_model_path

#: A one-turn env whose one-token replies are rewarded for a capital letter (tests/helpers/capital.py).
CAPITAL = "tests.helpers.capital:CapitalEnv"


def tree_grpo_trainer(tmp_path, **settings):
    """A ``TreeGRPOTrainer`` with ``settings`` (the env, the tasks, the sizes) and no KL term, seed 0."""
    from agentgym.trainers.tree_grpo import TreeGRPOTrainer
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    args = TreeGRPOConfig(
        output_dir=str(tmp_path),
        **{"beta": 0.0, "save_strategy": "no", "report_to": "none", "use_cpu": True, "seed": 0, **settings},
    )
    return TreeGRPOTrainer(str(tiny_model_path()), args)


def sao_trainer(tmp_path, **settings):
    """An ``SAOTrainer`` with ``settings`` (the env, the sizes)."""
    from agentgym.trainers.sao import SAOTrainer
    from agentgym.trainers.sao_config import SAOConfig

    args = SAOConfig(
        output_dir=str(tmp_path), **{"save_strategy": "no", "report_to": "none", "use_cpu": True, **settings}
    )
    return SAOTrainer(str(tiny_model_path()), args)


def capital_tree_trainer(tmp_path, **settings):
    """Linear TreeGRPO on CapitalEnv (one-turn, one-token replies; mixed outcomes), two tasks a step, two steps."""
    return tree_grpo_trainer(
        tmp_path,
        **{
            "env_id": CAPITAL,
            "max_turn_tokens": 1,
            "rollout_concurrency": 8,
            "tree": False,
            "num_generations": 2,
            "per_device_train_batch_size": 2,
            "max_steps": 2,
            **settings,
        },
    )
