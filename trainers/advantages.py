"""Advantage estimators and policy-loss math for the trainers: pure functions of rewards, tree shapes and tensors.

**Per-turn tree advantages** (:func:`tree_turn_advantages`). A rollout tree of one task has
nodes = turns; siblings are the continuations sampled at the same state ``s`` (the children of
one node, or the roots, taken from the reset state). Leaf return ``R`` = the sum of step rewards
on the root-to-leaf path. The estimator:

1. **Node value, hierarchical mean**: ``V̂(leaf) = R(leaf)``; ``V̂(n) = mean over n's children c
   of V̂(c)`` (children without any usable leaf below are left out). Not the mean over the
   leaves below ``n``: with uniform branching a path that lives longer branches more, so the
   leaf count under a child depends on its outcome, and a flat leaf mean over-weights those
   children. By induction, ``E[V̂(n) | n] = Q(s, a_n)`` whenever each node's children are
   independent draws of the policy at that state.
2. **Leave-one-out sibling baseline**: for ``n`` in a sibling group ``G`` of size ``K ≥ 2``,
   ``A(n) = V̂(n) − mean_{j∈G, j≠n} V̂(j)``. The baseline uses only the *other* siblings, which
   are independent of ``a_n``, so ``E[A(n) | s, a_n] = Q(s, a_n) − V(s)``: **unbiased for the
   turn's advantage** (the past rewards on the shared prefix cancel). This is the quantity
   ``tests/trainers/test_advantages.py`` checks by Monte Carlo on a synthetic tree.
3. **Segments**: a node that is its parent's only child has no alternative at its state; it
   inherits its parent's advantage, i.e. the chain from a branch point down to the next one is
   credited as one macro-action, whose baseline (the other siblings at the branch point) does
   not depend on it — still an unbiased policy-gradient term. A single root (no branching at
   the reset state) gets advantage 0: nothing to compare it with.

The trap this avoids: the obvious version — the sibling mean *including* the node, and/or
dividing by the sibling-group standard deviation (GRPO's per-group normalisation applied per
turn) — is biased. Including the node scales the expected advantage by (K−1)/K, a different
factor at every branch point (K varies), and the std of a group correlates with the node's own
value. ``baseline="median"`` (MC-GRPO's robust baseline) is offered for small, heavy-tailed
groups; it is *not* unbiased for ``V(s)`` (the median of the others estimates their median,
not their mean). Scaling by a batch-wide std (``scale="batch"``) multiplies every advantage
of a step by the same positive number: it changes the step size, not the direction.

Unbiasedness assumes siblings are independent on-policy draws: the ``uniform`` strategy with
``max_resample=0`` (resampling duplicates draws siblings without replacement, which tilts the
sibling mean towards rare actions) and no budget cuts (a cut leaf has no outcome and is left
out; long paths are cut more often). The adaptive strategies (``entropy``, ``contrast``) add
children where earlier outcomes or actions looked informative, so the number of siblings
depends on the draws: they trade exact unbiasedness for reward contrast.

**Group advantages** (:func:`group_advantages`): the plain GRPO baseline (``tree: false``):
``r − mean(group)`` (or median), optionally divided by the group or batch std, as in TRL.

**Per-turn GAE** (:func:`turn_gae`) for SAO's value baseline, and **strict double-sided token
clipping** (:func:`strict_clip_policy_loss`).
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

__all__ = ["explained_variance", "group_advantages", "hierarchical_values", "strict_clip_policy_loss",
           "tree_turn_advantages", "turn_gae"]

BASELINES = ("mean", "median")
SCALES = ("none", "group", "batch")


def hierarchical_values(parents: Sequence[int | None], leaf_returns: dict[int, float]) -> list[float | None]:
    """V̂ per node (module docstring, step 1); ``None`` for a node with no usable leaf below it.

    ``parents[i]`` is node ``i``'s parent (``None`` for a root); children must have higher ids
    than their parents. ``leaf_returns`` holds the returns of the usable leaves only.
    """
    children: list[list[int]] = [[] for _ in parents]
    for node, parent in enumerate(parents):
        if parent is not None:
            children[parent].append(node)
    values: list[float | None] = [None] * len(parents)
    for node in reversed(range(len(parents))):  # children before parents
        if not children[node]:
            values[node] = leaf_returns.get(node)
        else:
            known = [values[c] for c in children[node] if values[c] is not None]
            values[node] = math.fsum(known) / len(known) if known else None
    return values


def tree_turn_advantages(parents: Sequence[int | None], leaf_returns: dict[int, float],
                         baseline: str = "mean") -> list[float]:
    """A per node (module docstring, steps 1–3): leave-one-out sibling baseline, single children inherit."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    values = hierarchical_values(parents, leaf_returns)
    groups: dict[int | None, list[int]] = {}
    for node, parent in enumerate(parents):
        if values[node] is not None:
            groups.setdefault(parent, []).append(node)
    advantages = [0.0] * len(parents)
    for node, parent in enumerate(parents):  # parents before children, so inheritance sees the parent's A
        if values[node] is None:
            continue
        others = [values[j] for j in groups[parent] if j != node]
        if others:
            center = math.fsum(others) / len(others) if baseline == "mean" else statistics.median(others)
            advantages[node] = values[node] - center
        elif parent is not None:
            advantages[node] = advantages[parent]
    return advantages


def group_advantages(rewards: Sequence[float], groups: Sequence[object], baseline: str = "mean",
                     scale: str = "group", eps: float = 1e-4) -> list[float]:
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


def turn_gae(rewards: Sequence[float], values: Sequence[float], gamma: float = 1.0, lam: float = 1.0,
             bootstrap: float = 0.0) -> tuple[list[float], list[float]]:
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
