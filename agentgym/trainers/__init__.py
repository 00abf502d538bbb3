"""agentgym.trainers: RL trainers on TRL and Accelerate — turn-level tree GRPO and single-rollout asynchronous optimization (SAO).

Each trainer comes with its config (TRL's pairs): :class:`TreeGRPOTrainer` + :class:`TreeGRPOConfig`,
:class:`SAOTrainer` + :class:`SAOConfig`, both built on :class:`AgentgymTrainer` +
:class:`AgentgymConfig`. Advantage math is in :mod:`agentgym.trainers.advantages` (per-turn tree
advantages: :mod:`agentgym.rollout.tree_values`), SFT warm starts in
:mod:`agentgym.trainers.warm_start`.

Names are imported lazily so that ``import agentgym.trainers`` does not pull in TRL and torch
until a trainer is used.
"""

from agentgym._lazy import lazy_exports

_EXPORTS = {
    "AgentgymTrainer": "base",
    "STATE_FILE": "base",
    "default_tasks": "base",
    "task_dataset": "base",
    "AgentgymConfig": "base_config",
    "RolloutArguments": "base_config",
    "TreeGRPOTrainer": "tree_grpo",
    "tree_training_paths": "tree_grpo",
    "TreeGRPOConfig": "tree_grpo_config",
    "SAOTrainer": "sao",
    "SAOConfig": "sao_config",
    "explained_variance": "advantages",
    "group_advantages": "advantages",
    "strict_clip_policy_loss": "advantages",
    "turn_gae": "advantages",
    "rollout_env_factory": "rollouts",
    "RL_DEMO_START": "warm_start",
    "scripted_warm_start": "warm_start",
    "sft_warm_start": "warm_start",
    "success_rate": "warm_start",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(
    __name__, _EXPORTS, deprecated={"tree_turn_advantages": "agentgym.rollout.tree_values:tree_turn_advantages"}
)
