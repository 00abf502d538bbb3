"""agentgym.trainers: RL trainers on TRL and Accelerate — turn-level tree GRPO and single-rollout asynchronous optimization (SAO).

Names are imported lazily so that ``import agentgym.trainers`` does not pull in TRL and torch
until a trainer is used.
"""

from importlib import import_module

_EXPORTS = {
    "TreeGRPOTrainer": "tree_grpo",
    "TreeGRPOConfig": "tree_grpo_config",
    "SAOTrainer": "sao",
    "SAOConfig": "sao_config",
    "tree_turn_advantages": "advantages",
    "group_advantages": "advantages",
    "turn_gae": "advantages",
    "strict_clip_policy_loss": "advantages",
    "sft_warm_start": "warm_start",
    "success_rate": "warm_start",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentgym.trainers' has no attribute {name!r}")
    return getattr(import_module(f"agentgym.trainers.{module}"), name)
