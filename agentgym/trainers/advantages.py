"""Advantage estimators and policy-loss math for the trainers: pure functions of rewards, tree shapes and tensors.

**Per-turn tree advantages** live with the rollout trees, in :mod:`agentgym.rollout.tree_values`
(hierarchical node values, leave-one-out sibling baseline; its docstring says why that is
unbiased and when); this module uses its baselines.

**Group advantages** (:func:`group_advantages`): the plain GRPO baseline (``tree: false``):
``r − mean(group)`` (or median), optionally divided by the group or batch std, as in TRL.
**Anchor-state step advantages** (:func:`anchor_step_advantages`): GiGPO's second level for
linear episodes, turns compared with the other turns taken from the same state.
**MC-GRPO's median pivot** (:func:`median_pivots`): with G+1 episodes per group and the median
baseline, the episode whose reward is the median is the baseline itself; it is left out of the
gradient (and of the loss's token count), so exactly G episodes are trained.

**Reflect-then-retry's credit** (R³L): :func:`pivotal_trainable` (Pivotal Credit: loss only on
the turns from the fork on), :func:`amplify_positive` (Positive Amplification: successful
sequences' advantages scaled up) and :func:`importance_weights` (the decoupled objective's
per-token weight, also what a retry sampled with a reflection in context is trained with).

**Per-turn GAE** (:func:`turn_gae`) for SAO's value baseline, **strict double-sided token
clipping** (:func:`strict_clip_policy_loss`), and its **decoupled** form for stale samples
(:func:`decoupled_policy_loss`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from agentgym.rollout.tree_values import BASELINES

__all__ = [
    "amplify_positive",
    "anchor_step_advantages",
    "decoupled_policy_loss",
    "explained_variance",
    "group_advantages",
    "importance_weights",
    "median_pivots",
    "pivotal_trainable",
    "strict_clip_policy_loss",
    "turn_gae",
]

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


def median_pivots(rewards: Sequence[float], groups: Sequence[object]) -> list[bool]:
    """MC-GRPO's pivots: per group of odd size, the one member whose reward is the group's median (the first such, in order).

    The median of an odd group is one member's reward; that member's median-baseline advantage
    is 0, and MC-GRPO samples G+1 episodes so that, with the pivot left out of the gradient,
    exactly G are trained against a baseline drawn from the group itself. An even group's
    median is the mean of two members: it has no pivot (the trainer samples odd groups; one that
    lost an episode to an env error is trained whole).
    """
    members: dict[object, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    pivots = [False] * len(rewards)
    for indices in members.values():
        if len(indices) % 2 == 0:
            continue
        median = statistics.median(rewards[i] for i in indices)
        pivots[next(i for i in indices if rewards[i] == median)] = True
    return pivots


def pivotal_trainable(turns: int, fork_turn: int) -> list[bool]:
    """Pivotal Credit: of a failed episode and its retry, only the turns from ``fork_turn`` (0-based) on get loss.

    Before the fork both share the same turns, and the outcome difference says nothing about them.
    """
    return [i >= fork_turn for i in range(turns)]


def amplify_positive(advantages: Sequence[float], successes: Sequence[bool], weight: float) -> list[float]:
    """Positive Amplification: a successful sequence's advantage times ``weight`` (R³L: failures otherwise drown the few successes)."""
    return [a * weight if ok else a for a, ok in zip(advantages, successes, strict=True)]


def importance_weights(proximal_logps, behaviour_logps, cap: float | None = None):
    """Per-token ``w = exp(proximal − behaviour)``, truncated at ``cap``, without gradient: the decoupled objective's weight."""
    import torch

    weights = torch.exp(proximal_logps - behaviour_logps).detach()
    return weights.clamp(max=cap) if cap is not None else weights


def anchor_step_advantages(
    returns: Sequence[float], anchors: Sequence[object], scale: bool = True, eps: float = 1e-4
) -> list[float]:
    """GiGPO's step-level advantages: each turn's return minus the mean return of the turns taken from the same state.

    ``anchors[i]`` names the state turn ``i`` acted from (in GiGPO, the env observation, within one
    task's group of episodes): turns from an identical state form a group, and a turn's advantage
    is its (discounted) return from that state minus the group's mean, divided by the group's std
    when ``scale``. A state visited once has no comparison: its turns get 0. The trainer adds these,
    weighted, to the episode-level group advantage (GiGPO's A = A_episode + ω · A_step).
    """
    if len(returns) != len(anchors):
        raise ValueError(f"{len(returns)} returns for {len(anchors)} anchors")
    members: dict[object, list[int]] = {}
    for i, anchor in enumerate(anchors):
        members.setdefault(anchor, []).append(i)
    advantages = [0.0] * len(returns)
    for indices in members.values():
        if len(indices) < 2:
            continue
        values = [returns[i] for i in indices]
        center = math.fsum(values) / len(values)
        std = statistics.stdev(values)
        for i in indices:
            advantages[i] = (returns[i] - center) / (std + eps) if scale else returns[i] - center
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


def decoupled_policy_loss(
    logps,
    proximal_logps,
    behaviour_logps,
    advantages,
    mask,
    epsilon_low: float,
    epsilon_high: float,
    weight_cap: float | None = None,
):
    """The decoupled objective for stale samples (AReaL's): ``(per-token loss, kept mask, importance weights)``, shape (B, T).

    A sample drawn by an older policy (the behaviour, ``behaviour_logps``) is clipped around a
    *proximal* policy instead, the learner's own weights when the batch was taken
    (``proximal_logps``): ``ratio = exp(logps − proximal_logps)`` goes through
    :func:`strict_clip_policy_loss`, and the token's loss is weighted by ``w = exp(proximal_logps −
    behaviour_logps)`` (no gradient), which corrects for the behaviour policy having drawn it.
    Clipping around the behaviour instead (what :func:`strict_clip_policy_loss` alone does) drops
    ever more tokens as samples age, since the learner has moved away from the behaviour by several
    versions before the first gradient. ``weight_cap`` truncates ``w`` (truncated importance
    sampling), bounding a rare token's variance at the cost of a little bias.
    """
    per_token, kept = strict_clip_policy_loss(logps, proximal_logps, advantages, mask, epsilon_low, epsilon_high)
    weights = importance_weights(proximal_logps, behaviour_logps, weight_cap)
    return per_token * weights, kept, weights
