"""Values and per-turn advantages on rollout trees, and the env steps a tree's shared prefixes save: pure functions of tree shapes and rewards.

**Per-turn tree advantages** (:func:`tree_turn_advantages`; :func:`turn_advantages` on a
:class:`RolloutTree`). A rollout tree of one task has nodes = turns; siblings are the
continuations sampled at the same state ``s`` (the children of one node, or the roots, taken
from the reset state). Leaf return ``R`` = the sum of step rewards on the root-to-leaf path
(:meth:`RolloutTree.leaf_reward`); a leaf with an error (a budget cut, a broken env) has no
outcome and is not usable. The estimator:

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
not their mean). Scaling by a batch-wide std (the trainers' ``advantage_scale="batch"``)
multiplies every advantage of a step by the same positive number: it changes the step size,
not the direction.

Unbiasedness assumes siblings are independent on-policy draws: the ``uniform`` strategy with
``max_resample=0`` (resampling duplicates draws siblings without replacement, which tilts the
sibling mean towards rare actions) and no budget cuts (a cut leaf has no outcome and is left
out; long paths are cut more often). The adaptive strategies (``entropy``, ``contrast``) add
children where earlier outcomes or actions looked informative, so the number of siblings
depends on the draws: they trade exact unbiasedness for reward contrast.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from agentgym.rollout.trajectory import RolloutTree

__all__ = [
    "BASELINES",
    "assign_values",
    "hierarchical_values",
    "node_values",
    "prefix_sharing_saving",
    "tree_turn_advantages",
    "turn_advantages",
    "usable_returns",
]

BASELINES = ("mean", "median")


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


def tree_turn_advantages(
    parents: Sequence[int | None], leaf_returns: dict[int, float], baseline: str = "mean"
) -> list[float]:
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


def usable_returns(tree: RolloutTree) -> dict[int, float]:
    """The returns of the tree's usable leaves, by leaf id: every leaf but those with an error (no outcome)."""
    return {leaf.id: tree.leaf_reward(leaf.id) for leaf in tree.leaves if leaf.id not in tree.leaf_errors}


def node_values(tree: RolloutTree) -> list[float | None]:
    """V̂ for every node of ``tree`` (indexed by node id, module docstring step 1); ``None`` for a node with no usable leaf below it."""
    return hierarchical_values([n.parent for n in tree.nodes], usable_returns(tree))


def assign_values(tree: RolloutTree) -> list[float | None]:
    """Write :func:`node_values` into each ``TreeNode.value``; returns them."""
    values = node_values(tree)
    for node, value in zip(tree.nodes, values):
        node.value = value
    return values


def turn_advantages(tree: RolloutTree, baseline: str = "mean") -> list[float]:
    """Each node's advantage (indexed by node id): :func:`tree_turn_advantages` on ``tree``; 0.0 for a node with no usable leaf below."""
    return tree_turn_advantages([n.parent for n in tree.nodes], usable_returns(tree), baseline)


def prefix_sharing_saving(tree: RolloutTree, weight: str = "steps") -> float:
    """The fraction of work the tree saves over running each leaf's path as its own linear episode.

    ``1 − cost(nodes) / Σ over leaves of cost(path)``: each node is one env step (``weight="steps"``)
    or its completion's token count (``weight="tokens"``), and a linear episode per leaf would
    repeat every shared prefix. 0.0 for a tree without branches (or without nodes).
    """
    if weight not in ("steps", "tokens"):
        raise ValueError(f"weight must be 'steps' or 'tokens', got {weight!r}")

    def cost(node) -> int:
        return 1 if weight == "steps" else len(node.turn.completion_ids)

    linear = sum(cost(n) for leaf in tree.leaves for n in tree.path(leaf.id))
    if linear == 0:
        return 0.0
    return 1.0 - sum(cost(n) for n in tree.nodes) / linear
