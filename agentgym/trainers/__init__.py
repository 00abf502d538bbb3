"""agentgym.trainers: RL trainers on TRL and Accelerate — turn-level tree GRPO and single-rollout asynchronous optimization (SAO).

Each trainer comes with its config (TRL's pairs): :class:`TreeGRPOTrainer` + :class:`TreeGRPOConfig`,
:class:`SAOTrainer` + :class:`SAOConfig`, both built on :class:`AgentgymTrainer` +
:class:`AgentgymConfig`. Advantage math is in :mod:`agentgym.trainers.advantages` (per-turn tree
advantages: :mod:`agentgym.rollout.tree_values`), TRACE's budget split over tasks in
:mod:`agentgym.trainers.allocation`, success replay in :mod:`agentgym.trainers.replay`
(reflect-then-retry's rollouts: :mod:`agentgym.rollout.reflect`), SFT warm starts in
:mod:`agentgym.trainers.warm_start`.

Names are imported lazily so that ``import agentgym.trainers`` does not pull in TRL and torch
until a trainer is used.
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.trainers.advantages import explained_variance, group_advantages, strict_clip_policy_loss, turn_gae
    from agentgym.trainers.base import STATE_FILE, AgentgymTrainer, default_tasks, task_dataset
    from agentgym.trainers.base_config import AgentgymConfig, RolloutArguments
    from agentgym.trainers.rollouts import rollout_env_factory
    from agentgym.trainers.sao import SAOTrainer
    from agentgym.trainers.sao_config import SAOConfig
    from agentgym.trainers.tree_grpo import TreeGRPOTrainer, tree_training_paths
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig
    from agentgym.trainers.warm_start import RL_DEMO_START, scripted_warm_start, sft_warm_start, success_rate

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

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
