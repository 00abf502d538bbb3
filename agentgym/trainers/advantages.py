"""Advantage estimators and policy-loss math for the trainers: pure functions of rewards, tree shapes and tensors.

**Per-turn tree advantages** live with the rollout trees, in :mod:`agentgym.rollout.tree_values`
(hierarchical node values, leave-one-out sibling baseline; its docstring says why that is
unbiased and when); this module uses its baselines.

**Group advantages** (:func:`group_advantages`): the plain GRPO baseline (``tree: false``):
``r − mean(group)`` (or median), optionally divided by the group or batch std, as in TRL.

**Per-turn GAE** (:func:`turn_gae`) for SAO's value baseline, and **strict double-sided token
clipping** (:func:`strict_clip_policy_loss`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from agentgym._lazy import lazy_exports
from agentgym.rollout.tree_values import BASELINES

__all__ = [
    "explained_variance",
    "group_advantages",
    "strict_clip_policy_loss",
    "turn_gae",
]

# Re-exported from here before agentgym.rollout.tree_values was their one home.
__getattr__, __dir__ = lazy_exports(
    __name__,
    deprecated={
        name: f"agentgym.rollout.tree_values:{name}" for name in ("hierarchical_values", "tree_turn_advantages")
    },
)

SCALES = ("none", "group", "batch")


def group_advantages(
    rewards: Sequence[float], groups: Sequence[object], baseline: str = "mean", scale: str = "group", eps: float = 1e-4
) -> list[float]:
    """GRPO's advantage: reward minus the group's mean (or median), divided by the group/batch std or not."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    members: dict[object, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    advantages = [0.0] * len(rewards)
    for indices in members.values():
        values = [rewards[i] for i in indices]
        center = math.fsum(values) / len(values) if baseline == "mean" else statistics.median(values)
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        for i in indices:
            advantages[i] = rewards[i] - center
            if scale == "group":
                advantages[i] /= std + eps
    if scale == "batch":
        std = statistics.stdev(rewards) if len(rewards) > 1 else 0.0
        advantages = [a / (std + eps) for a in advantages]
    return advantages


def turn_gae(
    rewards: Sequence[float], values: Sequence[float], gamma: float = 1.0, lam: float = 1.0, bootstrap: float = 0.0
) -> tuple[list[float], list[float]]:
    """Per-turn GAE: ``(advantages, returns)`` for turns with step ``rewards`` and value estimates ``values`` at each turn's state.

    ``δ_t = r_t + γ V_{t+1} − V_t`` with ``V_T = bootstrap`` (0 for a finished episode);
    ``A_t = Σ_k (γλ)^k δ_{t+k}``; the value targets are ``A_t + V_t``. ``lam=1`` gives the
    Monte Carlo return minus the value (the per-trajectory baseline when there is one turn).
    """
    if len(rewards) != len(values):
        raise ValueError(f"{len(rewards)} rewards for {len(values)} values")
    advantages = [0.0] * len(rewards)
    running, next_value = 0.0, bootstrap
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
        next_value = values[t]
    return advantages, [a + v for a, v in zip(advantages, values)]


def explained_variance(predictions: Sequence[float], targets: Sequence[float]) -> float:
    """1 − Var(targets − predictions) / Var(targets); NaN when the targets do not vary."""
    if len(targets) < 2:
        return math.nan
    variance = statistics.pvariance(targets)
    if variance == 0:
        return math.nan
    return 1.0 - statistics.pvariance([t - p for p, t in zip(predictions, targets)]) / variance


def strict_clip_policy_loss(logps, behaviour_logps, advantages, mask, epsilon_low: float, epsilon_high: float):
    """SAO's strict double-sided token clipping: ``(per-token loss, kept mask)``, tensors of shape (B, T).

    ``ratio = exp(logps − behaviour_logps)``. A token whose ratio leaves ``[1 − ε_low, 1 + ε_high]``
    gets no gradient *whatever the sign of its advantage* (PPO's clip keeps the gradient of a
    token whose ratio moved against its advantage; here it is dropped too). The remaining tokens
    get ``−ratio · A``. ``kept`` is ``mask`` with the clipped tokens zeroed.
    """
    import torch

    ratio = torch.exp(logps - behaviour_logps)
    inside = (ratio >= 1.0 - epsilon_low) & (ratio <= 1.0 + epsilon_high)
    kept = mask * inside.detach().to(mask.dtype)
    return -ratio * advantages * kept, kept
